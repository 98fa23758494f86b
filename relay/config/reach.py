"""Which project files a hook's command can reach, so that trust fingerprints them (DESIGN §7).

A hook is trusted for the code it runs, not only for its command line: after `relay trust`
no file inside the project that the hook can run may change without trust being asked
again. What a command can reach is found in two steps:

1. `plan_reach` reads the command as `sh` would (and every `sh -c "…"`, `bash -c`, `eval`
   string inside it, down to MAX_NESTING levels): each word, with the project variables,
   `$PWD` and the hook's own `env` resolved, may name a file, a folder (all files under
   it) or a glob (the files it matches); `-m MODULE` names a module file or package; the
   `PATH` and `PYTHONPATH` of the hook's `env` name folders. Where the shell would expand
   something relay cannot know (`${X:-…}`, `$(…)`, backquotes, a variable it does not
   know, brace expansion), the command can reach any file of the project: the plan then
   holds the project's whole tree.
2. `Plan.collect` lists those folders, globs and the tree, bounded by MAX_FILES: a hook
   that reaches more cannot be trusted, and the reach says why.

Over-approximation is the rule: hashing a file the hook never runs costs time, missing
one it runs lets changed code run without review.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path

import msgspec

from relay.config.model import HookEntry
from relay.config.paths import shared_temporary

MAX_FILES = 10_000
"""A hook that can reach more files than this cannot be trusted: each check stats them all."""
MAX_NESTING = 8
"""How deep `sh -c "sh -c '…'"` strings are read."""
GIT_TIMEOUT = 10.0
"""Seconds `git ls-files` may take to list the tree before relay walks it instead."""

PROJECT_VARIABLES = ("RELAY_PROJECT_DIR", "CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR")
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})
SEARCH_PATH_VARIABLES = ("PATH", "PYTHONPATH")
"""Variables of the hook's `env` whose folders a program searches for code to run."""

_PARAMETER = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
# Brace expansion (`{a,b}`, `{1..3}`), which bash and zsh perform outside quotes.
_BRACE_EXPANSION = re.compile(r"""\{[^{}\s'"]*(?:,|\.\.)[^{}\s'"]*\}""")
_SPECIAL_PARAMETER_START = frozenset("0123456789?$#!*@-'\"([")
_DEFAULT_VALUE = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*:?[-=]([^}$`]*)\}")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_MODULE_OPTION = re.compile(r"-[A-Za-z]*m(?P<module>.*)")
_SHELL_COMMAND_OPTION = re.compile(r"[-+][A-Za-z]*c[A-Za-z]*")
_GLOB_MAGIC = re.compile(r"[*?[]")
_OUTPUT_REDIRECTION = re.compile(r"&?>[>&|]?")


class Reach(msgspec.Struct, frozen=True, kw_only=True):
    """The project files one hook can reach, as paths relative to the project root."""

    files: tuple[str, ...] = ()
    """Sorted, each once."""
    tree: tuple[str, ...] = ()
    """Why the project's whole tree is in `files`: the expansions relay cannot resolve as
    written (`${X:-a}`, `$(…)`), or a phrase ("., the project folder"); empty when it is not."""
    refusal: str | None = None
    """Why this hook cannot be trusted at all (it reaches too much); None when it can."""


class Plan(msgspec.Struct, kw_only=True):
    """What a command names, before folders, globs and the tree are listed."""

    root: str
    files: set[str] = msgspec.field(default_factory=set)
    folders: dict[str, str] = msgspec.field(default_factory=dict)
    """Folder relative to root -> the word that named it."""
    globs: list[tuple[str, str]] = msgspec.field(default_factory=list)
    """(pattern, base folder) pairs."""
    tree: list[str] = msgspec.field(default_factory=list)

    @property
    def needs_listing(self) -> bool:
        """Whether collecting the reach lists folders (it may touch many files)."""
        return bool(self.folders or self.globs or self.tree)

    def collect(self) -> Reach:
        """List the planned globs, folders and tree: the files the hook can reach."""
        root = Path(self.root)
        found = set(self.files)
        try:
            # Globs first: a match may be a folder, or the project folder itself.
            for pattern, base in self.globs:
                for match in _glob(pattern, base):
                    _add_match(self, found, root, Path(base, match), pattern)
                _check_size(found, f"the glob {pattern}")
            for folder, word in sorted(self.folders.items()):
                _add_listing(found, _folder_files(root, folder), f"the folder {word}")
            if self.tree:
                _add_listing(found, _tree_files(root), "the project's tree")
        except _TooManyFiles as exc:
            return Reach(tree=tuple(self.tree), refusal=str(exc))
        return Reach(files=tuple(sorted(found)), tree=tuple(self.tree))


class _TooManyFiles(Exception):
    """Listing went over MAX_FILES: the hook cannot be trusted."""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"it can reach more than {MAX_FILES:,} files ({where}); name the scripts it "
            f"runs in its command instead"
        )


def reach(entry: HookEntry, root: Path) -> Reach:
    """The project files this hook's command can reach."""
    return plan_reach(entry, root).collect()


def plan_reach(entry: HookEntry, root: Path) -> Plan:
    """Read the hook's command, args and env for the files, folders and globs they name."""
    root = Path(os.path.abspath(root))
    cwd = _hook_cwd(entry, root)
    known = {name: str(root) for name in PROJECT_VARIABLES}
    known["PWD"] = str(cwd)
    known.update(entry.env)  # the hook's env reaches the shell: its values are known too
    reader = _CommandReader(root, cwd, known)
    if entry.args is not None:
        # Exec form: no shell, relay replaces only the project variables in each word.
        project_only = {name: str(root) for name in PROJECT_VARIABLES}
        words = [_substitute(word, project_only) for word in [entry.command, *entry.args]]
        reader.read_words(words, depth=0)
    else:
        reader.read_command(entry.command, depth=0)
    for variable in SEARCH_PATH_VARIABLES:
        if variable in entry.env:
            reader.search_path(variable, entry.env[variable])
    return reader.plan


class _CommandReader:
    """Gathers a Plan from command strings and words."""

    def __init__(self, root: Path, cwd: Path, known: Mapping[str, str]) -> None:
        self.root = root
        self.real_root = _resolved(root) or root
        self.cwd = cwd
        self.known = known
        self.bases = [cwd, root] if cwd != root else [root]
        self.plan = Plan(root=str(root))

    def read_command(self, text: str, depth: int) -> None:
        """A string that a shell runs: its expansions, then its words."""
        if depth > MAX_NESTING:
            self._whole_tree(f"commands nested more than {MAX_NESTING} deep")
            return
        unresolved = _unresolved_expansions(text, self.known)
        for expansion in unresolved:
            self._whole_tree(expansion)
        self.read_words(_shell_words(text), depth)
        if unresolved:
            # `${X:-hooks}/x.sh`: the default is the likeliest file, hashed even when the
            # tree listing leaves it out (git-ignored).
            with_defaults = _DEFAULT_VALUE.sub(lambda match: match.group(1), text)
            if with_defaults != text:
                self.read_words(_shell_words(with_defaults), depth)

    def read_words(self, raw_words: list[str], depth: int) -> None:
        """Words after quote removal: paths, modules, nested shell strings."""
        words = [_substitute(word, self.known) for word in raw_words]
        shell_strings = False
        for index, word in enumerate(words):
            following = words[index + 1] if index + 1 < len(words) else None
            self.path_word(word)
            name, equals, value = word.partition("=")
            if equals and value and name:
                self.path_word(value)  # --config=hooks/x.json, VAR=path
            module = _module_of(word, following)
            if module is not None:
                self.module(module)
            basename = os.path.basename(word)
            if basename == "eval":
                self.read_command(" ".join(words[index + 1 :]), depth + 1)
            if basename in SHELLS:
                shell_strings = False  # a new shell: its own options decide
            elif shell_strings and not word.startswith(("-", "+")):
                # After `sh -c`, the string and what follows it: reading $0, $1 … as
                # commands too only ever adds files.
                self.read_command(raw_words[index], depth + 1)
            if _SHELL_COMMAND_OPTION.fullmatch(word) and _after_shell(words, index):
                shell_strings = True

    def path_word(self, word: str) -> None:
        """A word that may name a file, a folder, or files through a glob."""
        if not word or "\0" in word:
            return
        if word.startswith("~"):
            word = os.path.expanduser(word)
        magic = bool(_GLOB_MAGIC.search(word))
        bases = [Path("/")] if os.path.isabs(word) else self.bases
        for base in bases:
            candidate = Path(base, word)
            if magic and self._may_match_inside(Path(base), word):
                self.plan.globs.append((word, str(base)))
            if _exists(candidate):
                _add_match(self.plan, self.plan.files, self.root, candidate, word)

    def _may_match_inside(self, base: Path, pattern: str) -> bool:
        """Whether a glob can match inside the project: its fixed leading folders lie
        inside the root or hold it (`/usr/lib/*/*` cannot, and is not listed)."""
        fixed = _GLOB_MAGIC.split(pattern, maxsplit=1)[0].rpartition("/")[0]
        folder = Path(os.path.normpath(base / fixed)) if fixed else base
        return folder.is_relative_to(self.root) or self.root.is_relative_to(folder)

    def module(self, module: str) -> None:
        """`-m a.b`: a/__init__.*, a/b.* and the package a/b/, from the hook's cwd and root."""
        parts = module.split(".")
        for index in range(1, len(parts)):
            self.path_word("/".join([*parts[:index], "__init__.*"]))
        self.path_word("/".join(parts) + ".*")  # .py, and extension modules, which win
        self.path_word("/".join(parts))

    def search_path(self, variable: str, value: str) -> None:
        """PATH or PYTHONPATH from the hook's env: every project folder on it."""
        for part in value.split(os.pathsep):
            folder = Path(self.cwd, os.path.expanduser(part or "."))  # "" is the cwd
            if _is_folder(folder):
                _add_match(
                    self.plan, self.plan.files, self.root, folder, f"{part or '.'} on {variable}"
                )

    def _whole_tree(self, reason: str) -> None:
        _whole_tree_of(self.plan, reason)


def _add_match(plan: Plan, found: set[str], root: Path, path: Path, word: str) -> None:
    """Record an existing path a word or glob names: a file, or a folder to list."""
    real_root = _resolved(root) or root
    name = _name_inside(path, root, real_root)
    if name is None:
        if _is_folder(path) and _holds(path, real_root):
            _whole_tree_of(plan, f"{word}, a folder that holds the project")
        return
    if name == ".git" or name.startswith(".git/"):
        return  # git's own files change with every commit; they are not code a hook runs
    if _is_folder(path):
        if name == ".":
            _whole_tree_of(plan, f"{word}, the project folder")
        else:
            plan.folders.setdefault(name, word)
    else:
        found.add(name)


def _whole_tree_of(plan: Plan, reason: str) -> None:
    if reason not in plan.tree:
        plan.tree.append(reason)


def _add_listing(found: set[str], names: Iterable[str], where: str) -> None:
    for name in names:
        found.add(name)
        if len(found) > MAX_FILES:
            raise _TooManyFiles(where)


def _check_size(found: set[str], where: str) -> None:
    if len(found) > MAX_FILES:
        raise _TooManyFiles(where)


def _glob(pattern: str, base: str) -> list[str]:
    """sh's matches of a glob (hidden files only when named), at most MAX_FILES + 1."""
    import glob  # only for a command with a glob

    matches: list[str] = []
    try:
        for match in glob.iglob(pattern, root_dir=base):
            matches.append(match)
            if len(matches) > MAX_FILES:
                raise _TooManyFiles(f"the glob {pattern}")
    except (OSError, ValueError, RecursionError):
        pass  # an unreadable folder matches nothing, for sh as for us
    return matches


def _tree_files(root: Path) -> list[str]:
    """Every file of the project: git's tracked and untracked-but-not-ignored files when
    the project is in a git work tree, else every file under the root."""
    listed = _git_files(root)
    if listed is None:
        return _walk(root, ".")
    # git lists an untracked nested repository as "name/", a submodule as its bare path:
    # those are walked. Without .gitmodules there is no submodule, and no stat per file.
    submodules = os.path.exists(root / ".gitmodules")
    names: list[str] = []
    for name in listed:
        if name.endswith("/") or (submodules and _is_folder(root / name)):
            names.extend(_walk(root, name.rstrip("/")))
        elif "__pycache__" not in name or _is_code_cache_entry(root / name):
            names.append(name)
        if len(names) > MAX_FILES:
            raise _TooManyFiles("the project's tree")
    return names


def _folder_files(root: Path, folder: str) -> list[str]:
    """The files under one project folder: walked, or listed by git when the walk finds
    more than MAX_FILES (git leaves out what it ignores, such as node_modules)."""
    try:
        return _walk(root, folder)
    except _TooManyFiles:
        listed = _git_files(root, folder)
        if listed is None or len(listed) > MAX_FILES:
            raise
        return [
            name
            for name in listed
            if "__pycache__" not in name or _is_code_cache_entry(root / name)
        ]


def _git_files(root: Path, folder: str = ".") -> list[str] | None:
    """`git ls-files` of tracked and untracked, not ignored files under `folder`; None when
    git is missing, fails, or the project is not in a work tree."""
    if not os.path.exists(root / ".git") and not _inside_work_tree(root):
        return None
    import subprocess  # only to list a tree: its import costs a hook event 4 ms

    # Nothing of the repository's own config may run a program (core.fsmonitor names
    # one): the project is not trusted yet. GIT_DIR and friends must not point elsewhere.
    environment = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    try:
        done = subprocess.run(
            [
                "git",
                "-c",
                "core.fsmonitor=false",
                "ls-files",
                "-z",
                "--cached",
                "--others",
                "--exclude-standard",
                "--",
                folder,
            ],
            cwd=root,
            env=environment,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    names = {os.fsdecode(raw) for raw in done.stdout.split(b"\0") if raw}
    return sorted(name for name in names if not name.startswith(".git/"))


def _inside_work_tree(root: Path) -> bool:
    """Whether an ancestor of root holds `.git` (root is a folder of a larger repository);
    a shared temporary folder's does not count (as for find_project_root)."""
    return any(
        os.path.exists(parent / ".git") and not shared_temporary(parent) for parent in root.parents
    )


def _walk(root: Path, folder: str) -> list[str]:
    """Every file under `root/folder`, relative to root, without `.git`, not following
    symbolic links to folders (they are entries themselves: no loops), at most MAX_FILES."""
    names: list[str] = []
    pending = [folder]
    while pending:
        current = pending.pop()
        try:
            with os.scandir(root / current) as entries:
                listed = list(entries)
        except OSError:
            names.append(current)  # unreadable: fingerprinted as such
            continue
        for entry in listed:
            name = entry.name if current == "." else f"{current}/{entry.name}"
            if entry.name == ".git":
                continue
            try:
                is_folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_folder = False
            if is_folder:
                pending.append(name)
            elif "__pycache__" not in name or _is_code_cache_entry(Path(entry.path)):
                names.append(name)
            if len(names) > MAX_FILES:
                raise _TooManyFiles(f"the folder {folder}")
    return names


def _is_code_cache_entry(path: Path) -> bool:
    """Whether a file under `__pycache__` must be fingerprinted.

    Python writes `.pyc` files there as hooks run; one that Python checks against its
    source (by mtime and size, or by hash) runs nothing the source does not say, and
    hashing it would untrust a hook after its first run. An unchecked hash-based `.pyc`
    (flags 0b01 in its header) runs whatever it holds: that one is code to review, and
    so is anything else placed there.
    """
    if path.suffix != ".pyc":
        return True
    try:
        with open(path, "rb") as stream:
            header = stream.read(8)
    except OSError:
        return True  # fingerprinted as unreadable: it changes once it can be read
    return len(header) < 8 or int.from_bytes(header[4:8], "little") == 0b01


def _unresolved_expansions(text: str, known: Mapping[str, str]) -> list[str]:
    """The expansions in a shell string that relay cannot resolve, as written, at most 3.

    Read as sh reads quotes: nothing expands inside '…'; brace expansion happens only
    outside quotes. Parameters that `known` holds are resolved; anything else (`$HOME`,
    `${X:-a}`, `$(…)`, backquotes, `$1`, `$'…'`) is not.
    """
    found: list[str] = []
    position, end = 0, len(text)
    double_quoted = False
    while position < end and len(found) < 3:
        char = text[position]
        written: str | None = None
        taken = 1
        if char == "\\":
            taken = 2
        elif char == "'" and not double_quoted:
            close = text.find("'", position + 1)
            taken = (end if close < 0 else close + 1) - position
        elif char == '"':
            double_quoted = not double_quoted
        elif char == "`":
            written = _substitution_text(text, position)
            taken = len(written)
        elif char == "$":
            written, taken = _parameter(text, position, known)
        elif char == "{" and not double_quoted:
            brace = _BRACE_EXPANSION.match(text, position)
            if brace:
                written, taken = brace.group(), len(brace.group())
        if written is not None and written not in found:
            found.append(written)
        position += max(taken, 1)
    return found


def _parameter(text: str, position: int, known: Mapping[str, str]) -> tuple[str | None, int]:
    """At a `$`: (the expansion as written if relay cannot resolve it, characters read)."""
    following = text[position + 1 : position + 2]
    if following == "{":
        close = text.find("}", position)
        written = text[position:] if close < 0 else text[position : close + 1]
        return (None if written[2:-1] in known else written), len(written)
    if following == "(":
        written = _substitution_text(text, position)
        return written, len(written)
    if following and following in _SPECIAL_PARAMETER_START:
        return text[position : position + 2], 2
    name = _PARAMETER.match(text, position)
    if name is None:
        return None, 1  # a lone `$` is itself
    return (None if name.group(2) in known else name.group()), len(name.group())


def _substitution_text(text: str, start: int) -> str:
    """`$(…)` or `` `…` `` as written (to its first closer), for a message."""
    closer = ")" if text.startswith("$(", start) else "`"
    end = text.find(closer, start + (2 if closer == ")" else 1))
    return text[start : end + 1] if end >= 0 else text[start:]


def _shell_words(text: str) -> list[str]:
    """The words of a shell string after quote removal; an output redirection's target
    is left out (a file the hook writes is not code it runs, and would untrust it)."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # unbalanced quotes: the shell will fail too; read what we can
        tokens = text.split()
    words: list[str] = []
    skip_next = False
    for token in tokens:
        if skip_next:
            skip_next = False
            continue
        if _OUTPUT_REDIRECTION.fullmatch(token):
            skip_next = True
        words.append(token)
    return words


def _substitute(word: str, known: Mapping[str, str]) -> str:
    """Replace the known variables in one word by their values."""
    if "$" not in word:
        return word

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return known.get(name, match.group())

    return _PARAMETER.sub(replace, word)


def _module_of(word: str, following: str | None) -> str | None:
    """The module that `-m MODULE` (or `-mMODULE`, `-Im MODULE`) names, if this word is one."""
    option = _MODULE_OPTION.fullmatch(word)
    if option is None:
        return None
    module = option.group("module") or following
    return module if module is not None and _MODULE.fullmatch(module) else None


def _after_shell(words: list[str], index: int) -> bool:
    """Whether the option at `index` belongs to a shell named before it (`bash -lc`)."""
    for word in reversed(words[:index]):
        if os.path.basename(word) in SHELLS:
            return True
        if not word.startswith(("-", "+")):
            return False
    return False


def _hook_cwd(entry: HookEntry, root: Path) -> Path:
    if not entry.cwd:
        return root
    project_only = {name: str(root) for name in PROJECT_VARIABLES}
    cwd = os.path.expanduser(_substitute(entry.cwd, project_only))
    return Path(os.path.normpath(root / cwd))  # an absolute cwd replaces root


def _name_inside(candidate: Path, root: Path, real_root: Path) -> str | None:
    """The candidate's path relative to root, if it lies inside root (as written or
    resolved); "." for the root itself."""
    lexical = Path(os.path.normpath(candidate))
    if lexical.is_relative_to(root):
        return lexical.relative_to(root).as_posix()
    real = _resolved(candidate)
    if real is None or not real.is_relative_to(real_root):
        return None
    return real.relative_to(real_root).as_posix()


def _holds(folder: Path, real_root: Path) -> bool:
    """Whether `folder` is an ancestor of the project root."""
    real = _resolved(folder)
    return real is not None and real != real_root and real_root.is_relative_to(real)


def _resolved(path: Path) -> Path | None:
    try:
        return path.resolve()
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL byte
        return None


def _exists(path: Path) -> bool:
    try:
        return os.path.lexists(path)
    except (OSError, ValueError):  # a name too long, or with a NUL byte
        return False


def _is_folder(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False

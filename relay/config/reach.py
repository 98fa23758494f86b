"""Which project files a hook's command can reach, so that trust fingerprints them (DESIGN §7).

A hook is trusted for the code it runs, not only for its command line: after `relay trust`
no file inside the project that the hook can run may change without trust being asked
again. What a command can reach is found in two steps:

1. `plan_reach` reads the command as `sh` would (and every `sh -c "…"`, `bash -c`, `eval`
   string inside it, down to MAX_NESTING levels): each word, with the project variables,
   `$PWD` and the hook's own `env` resolved, may name a file, a folder (all files under
   it) or a glob (the files it matches). Where the shell would expand something relay
   cannot know (`${X:-…}`, `$(…)`, backquotes, a variable it does not know, brace
   expansion), the command can reach any file of the project: the plan then holds the
   project's whole tree.

   Then what the programs it starts load by themselves, from two tables: PROGRAMS (what
   each interpreter or tool loads: the script it runs, its `-c`/`-e` code, the modules
   its options preload, the Makefile or package.json it reads) and ENVIRONMENT (variables
   that make a shell or runtime load code: `BASH_ENV`, `NODE_OPTIONS`, `LD_PRELOAD` …).
   Each script, code string and manifest found is read by its language's reader
   (LANGUAGES, in `relay.config.sources`), and what it loads is resolved the same way:
   imports beside a Python script, relative requires of a Node script, sourced files of a
   shell script, recipes of a make target, scripts of an npm command.
2. `Plan.collect` lists those folders, globs and the tree, bounded by MAX_FILES: a hook
   that reaches more cannot be trusted, and the reach says why.

What relay cannot resolve (`import_module(name)`, `. "$LIB/x.sh"`, a git-ignored file an
expansion may name) makes the hook *unpinned*: it cannot be trusted until its `reach`
field names the folders it loads code from, which are then fingerprinted whole. What an
interpreter would open by path after the check (a file a shell script sources, a
code-loading variable naming a project file, a `-c` string's imports: the `by_path`
fields of the tables) makes it untrustable whatever its `reach` (`Reach.by_path`).

Over-approximation is the rule: hashing a file the hook never runs costs time, missing
one it runs lets changed code run without review.
"""

from __future__ import annotations

import os
import re
import shlex
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import msgspec

from relay.config import looks, sources
from relay.config.filecache import RACY_SECONDS, Identity, identity_of
from relay.config.model import HookEntry
from relay.config.paths import shared_temporary

MAX_FILES = 10_000
"""A hook that can reach more files than this cannot be trusted: each check stats them all."""
MAX_NESTING = 8
"""How deep `sh -c "sh -c '…'"` strings (and scripts that name scripts) are read."""
GIT_TIMEOUT = 10.0
"""Seconds `git ls-files` may take to list the tree before relay walks it instead."""

PROJECT_VARIABLES = ("RELAY_PROJECT_DIR", "CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR")
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})


# --- the rule tables ---------------------------------------------------------------------


class Language(msgspec.Struct, frozen=True, kw_only=True):
    """How to read one language's files for what they load (relay.config.sources)."""

    read: Callable[[str, str | None, Mapping[str, str]], sources.Loads]
    suffixes: tuple[str, ...]
    interpreters: tuple[str, ...]
    """Program names a `#!` line names for it."""
    module_folders: str = ""
    """Where its `modules` are looked up: "script" (the script's folder and the search
    path: Python), "node_modules" (node_modules of the file's folder and its parents)."""
    by_path: str | None = None
    """Why relay cannot run the project files a file of this language loads as checked
    (its interpreter opens them by path when it reaches them), with how to make the hook
    pinnable; a trusted hook may not load any. None: Python and JavaScript load them from
    a private snapshot of the checked files (relay.config.snapshot); what Perl and Ruby
    load, read from any quoted string that names a file (data files too), stays by path
    (protocol §9 says so)."""


LANGUAGES: Mapping[str, Language] = {
    "python": Language(
        read=sources.python_loads,
        suffixes=(".py", ".pyw"),
        interpreters=("python", "pypy"),
        module_folders="script",
    ),
    "javascript": Language(
        read=lambda text, file, known: sources.javascript_loads(text, file),
        suffixes=(".js", ".mjs", ".cjs", ".ts", ".mts", ".cts", ".jsx", ".tsx"),
        interpreters=("node", "nodejs", "bun", "deno", "tsx", "ts-node"),
        module_folders="node_modules",
    ),
    "shell": Language(
        read=sources.shell_loads,
        suffixes=(".sh", ".bash", ".zsh", ".ksh"),
        interpreters=tuple(sorted(SHELLS)),
        by_path=(
            "the shell reads a file it sources by path when it gets there (to pin it: put "
            "the sourced file's text in the script)"
        ),
    ),
    "perl": Language(
        read=lambda text, file, known: sources.literal_loads(text, file),
        suffixes=(".pl", ".pm"),
        interpreters=("perl",),
    ),
    "ruby": Language(
        read=lambda text, file, known: sources.literal_loads(text, file),
        suffixes=(".rb",),
        interpreters=("ruby",),
    ),
}
"""What each language's files load, and where their module names are looked up."""


class Program(msgspec.Struct, frozen=True, kw_only=True):
    """What one interpreter or tool loads by itself, and from where."""

    names: tuple[str, ...]
    """Its program names; a version after the name (`python3.12`, `perl5.36`) matches too."""
    language: str | None = None
    """The language of the script it runs (its first operand) and of its code strings."""
    code_options: tuple[str, ...] = ()
    """The next word (or the rest of the word: `-cCODE`) is code to run."""
    load_options: tuple[str, ...] = ()
    """The next word is a file or module it loads before the script (`node -r ./x`)."""
    module_options: tuple[str, ...] = ()
    """The next word is a module to run (`python -m a.b`): looked up from the working
    directory; nothing after it is an option."""
    value_options: tuple[str, ...] = ()
    """Options that take the next word as a value that is not code."""
    environment_options: tuple[str, ...] = ()
    """The next word is a file of `NAME=value` lines it sets (`node --env-file .env`),
    each read as ENVIRONMENT says."""
    tool: str | None = None
    """A tool that reads a manifest: "make" (a Makefile's recipes), "npm" (package.json
    scripts), "npx" (a program of node_modules/.bin)."""
    by_path: str | None = None
    """Why relay cannot run what this tool opens from the project as checked (it reads
    its manifest, or the script, by path itself), and how to make the hook pinnable: a
    trusted hook's command may not run it on a project file (DESIGN §7). None: relay
    feeds the checked bytes (relay.engine.interpreters)."""


PROGRAMS: tuple[Program, ...] = (
    Program(
        names=("python", "python3", "pypy", "pypy3"),
        language="python",
        code_options=("-c",),
        module_options=("-m",),
        value_options=("-W", "-X", "--check-hash-based-pycs"),
    ),
    Program(
        names=("node", "nodejs", "bun", "tsx", "ts-node"),
        language="javascript",
        code_options=("-e", "--eval", "-p", "--print"),
        load_options=("-r", "--require", "--import", "--loader", "--experimental-loader"),
        value_options=("--input-type", "--title", "--conditions", "-C"),
        environment_options=("--env-file",),
    ),
    Program(
        names=tuple(sorted(SHELLS)),
        language="shell",
        code_options=("-c",),
        load_options=("--rcfile", "--init-file"),
        value_options=("-o", "+o", "-O", "+O"),
    ),
    Program(names=(".", "source"), language="shell"),
    Program(
        names=("perl",),
        language="perl",
        code_options=("-e", "-E"),
        load_options=("-I",),
    ),
    Program(names=("ruby",), language="ruby", code_options=("-e",), load_options=("-r", "-I")),
    Program(
        names=("make", "gmake"),
        tool="make",
        by_path=(
            "make reads its Makefile, and its recipes run scripts, by path (to pin it: put "
            "the recipe's command, or the script it runs, in the hook's command)"
        ),
    ),
    Program(
        names=("npm", "pnpm", "yarn"),
        tool="npm",
        by_path=(
            "the package tool reads package.json and runs its scripts and node_modules "
            "programs by path (to pin it: put the script's command in the hook's command, "
            "`node scripts/x.js`)"
        ),
    ),
    Program(
        names=("npx", "pnpx", "bunx"),
        tool="npx",
        by_path=(
            "the package tool runs node_modules programs by path (to pin it: run the "
            "program's script with its interpreter, `node node_modules/x/cli.js`)"
        ),
    ),
    Program(
        names=("uv", "uvx", "poetry", "pipenv", "pdm", "pipx"),
        by_path=(
            "the runner opens the script by path (to pin it: run the script with the "
            "environment's interpreter, `.venv/bin/python hooks/x.py`)"
        ),
    ),
    Program(
        names=("xargs", "find"),
        by_path=(
            "it runs what it reads or finds by path (to pin it: name each script in the "
            "hook's command)"
        ),
    ),
)
"""What each interpreter and tool loads: its script, code strings, preloads, manifest."""


class EnvironmentRule(msgspec.Struct, frozen=True, kw_only=True):
    """What one environment variable makes a program load."""

    kind: str
    """"files" (paths separated by `:` or spaces), "folders" (a search path: every file
    under each folder), "options" (command-line options, read as a program's would)."""
    language: str | None = None
    """The language of the files, or of the program whose options these are."""
    search: bool = False
    """Its folders are also where that language's module names are looked up."""
    by_path: bool = True
    """A project file or folder it names makes the hook unpinnable: the program loads it
    by path (PATH is the engine's to judge: a program found there may be pinned)."""


ENVIRONMENT: Mapping[str, EnvironmentRule] = {
    "BASH_ENV": EnvironmentRule(kind="files", language="shell"),
    "ENV": EnvironmentRule(kind="files", language="shell"),
    "ZDOTDIR": EnvironmentRule(kind="folders"),
    "PATH": EnvironmentRule(kind="folders", by_path=False),
    "PYTHONPATH": EnvironmentRule(kind="folders", language="python", search=True),
    "PYTHONSTARTUP": EnvironmentRule(kind="files", language="python"),
    "PYTHONHOME": EnvironmentRule(kind="folders"),
    "PYTHONUSERBASE": EnvironmentRule(kind="folders"),
    "NODE_OPTIONS": EnvironmentRule(kind="options", language="javascript"),
    "NODE_PATH": EnvironmentRule(kind="folders", language="javascript", search=True),
    "PERL5OPT": EnvironmentRule(kind="options", language="perl"),
    "PERL5LIB": EnvironmentRule(kind="folders"),
    "PERLLIB": EnvironmentRule(kind="folders"),
    "RUBYOPT": EnvironmentRule(kind="options", language="ruby"),
    "RUBYLIB": EnvironmentRule(kind="folders"),
    "LD_PRELOAD": EnvironmentRule(kind="files"),
    "LD_AUDIT": EnvironmentRule(kind="files"),
    "LD_LIBRARY_PATH": EnvironmentRule(kind="folders"),
    "MAKEFILES": EnvironmentRule(kind="files"),
    "JAVA_TOOL_OPTIONS": EnvironmentRule(kind="options"),
}
"""Variables (of the hook's `env`, or set on its command line) that make a shell or
runtime load code, and what their value names."""

WRAPPERS: Mapping[str, tuple[tuple[str, ...], int]] = {
    "env": (("-u", "--unset", "-C", "--chdir"), 0),
    "exec": (("-a",), 0),
    "command": ((), 0),
    "nohup": ((), 0),
    "setsid": ((), 0),
    "time": ((), 0),
    "nice": (("-n", "--adjustment"), 0),
    "timeout": (("-s", "--signal", "-k", "--kill-after"), 1),
    "stdbuf": (("-i", "-o", "-e"), 0),
    "xargs": (("-I", "-n", "-P", "-d", "-L", "-s", "-E"), 0),
    "uv": (("--with", "--python", "-p", "--project", "--directory", "--extra", "--group"), 1),
    "poetry": (("-C", "--directory", "-P", "--project"), 1),
    "pipenv": ((), 1),
    "pdm": (("-p", "--project"), 1),
}
"""Programs that run the command after them: (their options that take a value, how many
operands come before the command: `timeout 5 CMD`, `uv run CMD`)."""

_OPERATORS = frozenset({"&&", "||", ";", "|", "&", "|&", ";;", "(", ")", "{", "}", "!"})
_KEYWORDS = frozenset({"if", "then", "else", "elif", "do", "while", "until", "time", "!"})
_SOURCE_CACHE: dict[str, tuple[Identity, str | None]] = {}
_LOADS_CACHE: dict[tuple[str, str, tuple[tuple[str, str], ...]], tuple[str, sources.Loads]] = {}
_MANIFESTS = ("GNUmakefile", "makefile", "Makefile")
_NPM_RUN = frozenset({"run", "run-script", "rum", "urn"})
_NPM_EXEC = frozenset({"exec", "x"})
_NPM_FILES = (".npmrc", ".yarnrc", ".yarnrc.yml", ".pnpmfile.cjs", "bunfig.toml")
"""Files beside a package.json that make its tool load code (`node-options=`, `yarnPath:`,
pnpm's hooks, bun's `preload`)."""

_CODE_STRING_BY_PATH = (
    "the interpreter loads the project files its code string imports by path (to pin it: "
    "put the code in a script the hook runs, `python3 hooks/x.py`)"
)

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
_ASSIGNMENT_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_FLAG_CLUSTER = re.compile(r"-[A-Za-z]{2,}")


class Unpinned(msgspec.Struct, frozen=True, kw_only=True):
    """Something a hook loads that relay cannot resolve to files."""

    place: str
    """Where it is written: "hooks/x.py:3", "the command", "NODE_OPTIONS in env"."""
    what: str
    """What relay cannot resolve, and why."""
    folder: str
    """The folder to name in the hook's `reach` to pin it (relative to the root)."""


class ByPath(msgspec.Struct, frozen=True, kw_only=True):
    """A project file a hook loads that its interpreter would open by path: relay cannot
    run it as checked, so the hook cannot be trusted."""

    place: str
    """Where it is loaded: "hooks/x.sh:3", "BASH_ENV in env"."""
    what: str
    why: str
    """Why relay cannot pin it, and how to make the hook pinnable."""


class Reach(msgspec.Struct, frozen=True, kw_only=True):
    """The project files one hook can reach, as paths relative to the project root."""

    files: tuple[str, ...] = ()
    """Sorted, each once."""
    tree: tuple[str, ...] = ()
    """Why the project's whole tree is in `files`: the expansions relay cannot resolve as
    written (`${X:-a}`, `$(…)`), or a phrase ("., the project folder"); empty when it is not."""
    unpinned: tuple[Unpinned, ...] = ()
    """What it loads that relay cannot resolve; the hook is trusted only when `pinned_by`."""
    pinned_by: tuple[str, ...] = ()
    """The hook's `reach` field: paths the user named, fingerprinted whole."""
    by_path: tuple[ByPath, ...] = ()
    """Project files it loads by path: the hook cannot be trusted (`refusal`)."""
    refusal: str | None = None
    """Why this hook cannot be trusted at all (it reaches too much, or cannot be pinned);
    None when it can."""


class Plan(msgspec.Struct, kw_only=True):
    """What a command names, before folders, globs and the tree are listed."""

    root: str
    files: set[str] = msgspec.field(default_factory=set)
    folders: dict[str, str] = msgspec.field(default_factory=dict)
    """Folder relative to root -> the word that named it."""
    globs: list[tuple[str, str]] = msgspec.field(default_factory=list)
    """(pattern, base folder) pairs."""
    tree: list[str] = msgspec.field(default_factory=list)
    unpinned: list[Unpinned] = msgspec.field(default_factory=list)
    pinned_by: list[str] = msgspec.field(default_factory=list)
    by_path: list[ByPath] = msgspec.field(default_factory=list)

    @property
    def needs_listing(self) -> bool:
        """Whether collecting the reach lists folders (it may touch many files)."""
        return bool(self.folders or self.globs or self.tree)

    def collect(self) -> Reach:
        """List the planned globs, folders and tree: the files the hook can reach."""
        root = Path(self.root)
        found = set(self.files)
        unpinned = list(self.unpinned)
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
                unpinned.extend(_ignored_reach(root, self.tree))
        except _TooManyFiles as exc:
            return Reach(tree=tuple(self.tree), refusal=str(exc))
        refusal = None
        if self.by_path:
            refusal = by_path_refusal(self.by_path)
        elif unpinned and not self.pinned_by:
            refusal = unpinned_refusal(unpinned)
        return Reach(
            files=tuple(sorted(found)),
            tree=tuple(self.tree),
            unpinned=tuple(unpinned),
            pinned_by=tuple(self.pinned_by),
            by_path=tuple(self.by_path),
            refusal=refusal,
        )


def unpinned_refusal(unpinned: Iterable[Unpinned]) -> str:
    """Why an unpinned hook cannot be trusted, and how to pin it."""
    listed = list(unpinned)
    places = "; ".join(f"{item.place}: {item.what}" for item in listed[:3])
    more = f" (and {len(listed) - 3} more)" if len(listed) > 3 else ""
    folders = sorted({item.folder for item in listed})
    example = ", ".join(msgspec.json.encode(folder).decode() for folder in folders[:3])
    return (
        f"relay cannot pin what it loads: {places}{more}; name the folders it loads code "
        f'from in the hook\'s "reach" field ("reach": [{example}]) to have them fingerprinted'
    )


def by_path_refusal(by_path: Iterable[ByPath]) -> str:
    """Why a hook that loads project files by path cannot be trusted, and how to pin it."""
    listed = list(by_path)
    places = "; ".join(f"{item.place}: {item.what}: {item.why}" for item in listed[:3])
    more = f" (and {len(listed) - 3} more)" if len(listed) > 3 else ""
    return f"relay cannot run it as checked, it loads project files by path: {places}{more}"


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
    """Read the hook's command, args and env for the files, folders and globs they name,
    and what the programs it starts load by themselves."""
    root = Path(os.path.abspath(root))
    cwd = _hook_cwd(entry, root)
    known = {name: str(root) for name in PROJECT_VARIABLES}
    known["PWD"] = str(cwd)
    known.update(entry.env)  # the hook's env reaches the shell: its values are known too
    state = _ReachState(root, known)
    reader = _CommandReader(state, cwd)
    for variable, value in entry.env.items():
        reader.environment(variable, value, f"{variable} in env")
    if entry.args is not None:
        # Exec form: no shell, relay replaces only the project variables in each word.
        project_only = {name: str(root) for name in PROJECT_VARIABLES}
        words = [_substitute(word, project_only) for word in [entry.command, *entry.args]]
        reader.read_words(words, depth=0)
    else:
        reader.read_command(entry.command, depth=0)
    for path in entry.reach:
        # The user's own pin: every file under each path, from the project root.
        pinned = _substitute(path, {name: str(root) for name in PROJECT_VARIABLES})
        _CommandReader(state, root).path_word(pinned, code=False)
        state.plan.pinned_by.append(path)
    return state.plan


class _ReachState:
    """What every reader of one hook shares: the plan, the sources already read, and the
    module names and folders looked up so far."""

    def __init__(self, root: Path, known: Mapping[str, str]) -> None:
        self.root = root
        self.real_root = _resolved(root) or root
        self.known = known
        self.plan = Plan(root=str(root))
        self.read: set[tuple[str, str]] = set()
        self.modules: dict[str, set[str]] = {}
        """Language -> top-level module names its sources import."""
        self.module_folders: dict[str, list[Path]] = {}
        """Language -> folders those names are looked up in."""
        self.looked_up: set[tuple[str, str, str]] = set()
        self.listings: dict[str, list[tuple[str, bool]]] = {}

    def inside(self, path: Path) -> str | None:
        """The path relative to the root, if it lies in the project."""
        return _name_inside(path, self.root, self.real_root)

    def unpinned(self, place: str, what: str, folder: str) -> None:
        item = Unpinned(place=place, what=what, folder=folder or ".")
        if item not in self.plan.unpinned:
            self.plan.unpinned.append(item)

    def by_path(self, place: str, what: str, why: str) -> None:
        item = ByPath(place=place, what=what, why=why)
        if item not in self.plan.by_path and len(self.plan.by_path) < MAX_NESTING:
            self.plan.by_path.append(item)


class _CommandReader:
    """Gathers a Plan from command strings and words run in one working directory."""

    def __init__(self, state: _ReachState, cwd: Path, extra_bases: Iterable[Path] = ()) -> None:
        self.state = state
        self.root = state.root
        self.cwd = cwd
        self.known = {**state.known, "PWD": str(cwd)}
        self.bases = [cwd, state.root] if cwd != state.root else [state.root]
        self.bases.extend(extra_bases)
        self.plan = state.plan

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
        """Words after quote removal: paths, modules, nested shell strings, then what each
        program they start loads (PROGRAMS)."""
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
        reader = self
        for command in _simple_commands(words):
            if command[0] == "cd" and len(command) == 2:
                # `cd hooks && python3 x.py`: what follows runs there.
                reader = _CommandReader(self.state, Path(os.path.normpath(reader.cwd / command[1])))
            reader.simple_command(command, depth)

    def path_word(self, word: str, *, code: bool = True) -> None:
        """A word that may name a file, a folder, or files through a glob; a file in a
        language relay reads (by its suffix or `#!` line) is read for what it loads."""
        if not word or "\0" in word:
            return
        if word.startswith("~"):
            word = _home(word)
        magic = bool(_GLOB_MAGIC.search(word))
        bases = [Path("/")] if os.path.isabs(word) else self.bases
        for base in bases:
            candidate = Path(base, word)
            if magic and self._may_match_inside(Path(base), word):
                self.plan.globs.append((word, str(base)))
            if _exists(candidate):
                _add_match(self.plan, self.plan.files, self.root, candidate, word)
                if code and not _is_folder(candidate):
                    self.source_file(candidate, None, depth=0, script=True)

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

    # -- what programs load by themselves (PROGRAMS, ENVIRONMENT, LANGUAGES) ---------------

    def simple_command(self, words: list[str], depth: int) -> None:
        """One command of a list or pipeline: its assignments, wrappers and program."""
        index = 0
        while index < len(words):
            word = words[index]
            if word in _KEYWORDS:
                index += 1
            elif _ASSIGNMENT_WORD.match(word):
                name, _, value = word.partition("=")
                self.environment(name, value, f"{name} on the command line")
                index += 1
            elif os.path.basename(word) in WRAPPERS:
                options, leading = WRAPPERS[os.path.basename(word)]
                index = _skip_options(words, index + 1, options)
                for _ in range(leading):  # `timeout 5`, `uv run`, options on either side
                    index = _skip_options(words, index + 1, options)
            else:
                break
        if index >= len(words):
            return
        program = _program(words[index])
        if program is None:
            return
        operands = words[index + 1 :]
        if program.tool is None and program.language is None:
            return  # a runner relay does not read (`find`): the engine refuses it on a project file
        if program.tool == "make":
            self.make(operands, depth)
        elif program.tool in ("npm", "npx"):
            self.npm(os.path.basename(words[index]), program.tool, operands, depth)
        else:
            self.interpreter(program, operands, depth)

    def interpreter(self, program: Program, operands: list[str], depth: int) -> None:
        """An interpreter's options and script, as its PROGRAMS rule says."""
        language = program.language
        index = 0
        while index < len(operands):
            word = operands[index]
            following = operands[index + 1] if index + 1 < len(operands) else None
            if _FLAG_CLUSTER.fullmatch(word) and f"-{word[-1]}" in (
                *program.code_options,
                *program.module_options,
            ):
                word = f"-{word[-1]}"  # `python3 -Bc CODE`, `perl -ne CODE`, `python3 -Im a`
            code = _option_value(word, following, program.code_options)
            if code is not None:
                if language == "shell":
                    return  # `sh -c`: its string was read as a command (read_words)
                loads = self.code_string(code, language, depth)
                if loads is not None and self._loads_from_project(loads, self.cwd, language):
                    what = f"{word} {code if len(code) <= 40 else code[:39] + '…'}"
                    self.state.by_path("the command", what, _CODE_STRING_BY_PATH)
                return  # what follows is the code's own arguments
            module = _option_value(word, following, program.module_options)
            if module is not None:
                if language is not None:
                    # Pinned or refused by the engine, which sees how the command runs.
                    self.add_module_folder(language, self.cwd)
                    self.add_module(language, module.partition(".")[0])
                return
            load = _option_value(word, following, program.load_options)
            if load is not None:
                self.load(load, language, "the command")
                index += 1 if load == following else 0
            elif word in program.value_options:
                index += 1
            elif variables := _option_value(word, following, program.environment_options):
                self.environment_file(variables)
                index += 1 if variables == following else 0
            elif word == "--":
                if following is not None:
                    self.script(following, language)
                return
            elif not word.startswith("-") or word == "-":
                self.script(word, language)
                return
            index += 1

    def script(self, word: str, language: str | None) -> None:
        """The script an interpreter runs: read in that language."""
        if word == "-" or not word or "\0" in word:
            return  # stdin: relay writes the event there, not code
        bases = [Path("/")] if os.path.isabs(word) else self.bases
        for base in bases:
            candidate = Path(base, _home(word))
            if _exists(candidate) and not _is_folder(candidate):
                self.source_file(candidate, language, depth=0, script=True)

    def load(self, specifier: str, language: str | None, place: str) -> None:
        """A module or file an option or variable preloads (`node -r ./x`, `-I lib`)."""
        if language == "javascript" and not specifier.startswith(("./", "../", "/")):
            self.add_module_folder(language, self.cwd / "node_modules")
            self.add_module(language, specifier.partition("/")[0])
            return
        self.path_word(specifier, code=False)
        candidate = Path(self.cwd, specifier)
        if _exists(candidate) and not _is_folder(candidate):
            self.source_file(candidate, language, depth=0)
        else:
            self.look_up(candidate.parent, candidate.name, language)

    def code_string(self, code: str, language: str | None, depth: int) -> sources.Loads | None:
        """A `-c`/`-e` string: what it loads, from the working directory."""
        rule = LANGUAGES.get(language or "")
        if rule is None:
            return None
        if rule.module_folders == "script":
            self.add_module_folder(language or "", self.cwd)  # sys.path[0] is "" for -c
        loads = rule.read(code, None, self.known)
        self.resolve(loads, language, self.cwd, "the command", depth)
        return loads

    def _loads_from_project(self, loads: sources.Loads, folder: Path, language: str | None) -> bool:
        """Whether what a code string loads names a project file: a module of its working
        directory, a relative or literal path, a computed folder, inside the project."""
        if any(self._module_here(folder, module) for module in loads.modules):
            return True
        if language == "javascript" and loads.modules:
            parents = [parent for parent in [folder, *folder.parents] if self.state.inside(parent)]
            if any(_exists(parent / "node_modules") for parent in parents):
                return True  # a bare require may load a package of the project's node_modules
        named = [Path(folder, relative) for relative in loads.relative]
        named += [Path(folder, path) for path in loads.paths]
        named += [Path(folder, path) for _, path in [*loads.folders, *loads.relative_folders]]
        return any(self.state.inside(Path(os.path.normpath(path))) is not None for path in named)

    def _module_here(self, folder: Path, name: str) -> bool:
        """Whether a top-level module name finds an entry in a project folder."""
        inside = self.state.inside(folder)
        if inside is None:
            return False
        return any(
            entry == name or entry.startswith(name + ".")
            for entry, _ in self._listing(folder, inside)
        )

    def source_file(
        self, path: Path, language: str | None, depth: int, *, script: bool = False
    ) -> None:
        """Read one file for what it loads, in `language` or the one its name or `#!`
        line says; each file is read once per language. A `script` is one a program
        runs (not a module it imports): Python puts its folder on the module path."""
        name = self.state.inside(path)
        if name is None or depth > MAX_NESTING:
            return
        text = _source_text(path)
        if text is None:
            return  # unreadable or binary: hashed as it is, nothing to read
        language = language or _language_of(path.name, text)
        if language is None or (name, language) in self.state.read:
            return
        self.state.read.add((name, language))
        if len(self.state.read) > MAX_FILES:
            return  # bounded: the listing refuses such a hook anyway
        if len(text) > sources.READ_LIMIT:
            self.state.unpinned(name, "too large for relay to read", os.path.dirname(name))
            return
        rule = LANGUAGES[language]
        folder = Path(os.path.dirname(looks.look(looks.real_path, str(path))))
        if script and rule.module_folders == "script":
            self.add_module_folder(language, folder)  # a script's folder is on sys.path
        loads = _read_source(rule, language, text, path, self.known)
        self.resolve(loads, language, folder, name, depth)

    def resolve(
        self, loads: sources.Loads, language: str | None, folder: Path, place: str, depth: int
    ) -> None:
        """Find the files of what one source loads, and read them in turn."""
        inside = self.state.inside(folder) or "."
        for line, what in loads.unpinned:
            self.state.unpinned(f"{place}:{line}" if line else place, what, inside)
        rule = LANGUAGES.get(language or "")
        if rule is not None and rule.by_path is not None:
            self._loaded_by_path(loads, folder, place, rule.by_path)
            for line, what in loads.unpinned:  # `. "$LIB/x.sh"`: by path, wherever it is
                self.state.by_path(f"{place}:{line}" if line else place, what, rule.by_path)
        if language is not None and rule is not None:
            if rule.module_folders == "node_modules":
                for parent in [folder, *folder.parents]:
                    if self.state.inside(parent) is None:
                        break
                    modules = parent / "node_modules"
                    self.add_module_folder(language, modules)
                    for scoped in loads.modules:
                        if scoped.startswith("@"):  # @scope/name: node_modules/@scope/name
                            self.add_module_folder(language, modules / scoped.partition("/")[0])
            for search in loads.search:
                self.add_module_folder(language, Path(self.cwd, search))
            for module in loads.modules:
                self.add_module(language, module)
        for relative in loads.relative:
            target = Path(os.path.normpath(folder / relative))
            self.look_up(target.parent, target.name, language, depth=depth + 1)
        for path in loads.paths:
            for base in [Path("/")] if os.path.isabs(path) else self.bases:
                target = Path(os.path.normpath(base / path))
                if _exists(target) and self.state.inside(target) is not None:
                    _add_match(self.plan, self.plan.files, self.root, target, path)
                    if not _is_folder(target):
                        sourced = language if language == "shell" else None
                        self.source_file(target, sourced, depth + 1)
        computed = [(line, Path(self.cwd, path)) for line, path in loads.folders]
        computed += [(line, folder / relative) for line, relative in loads.relative_folders]
        for line, target in computed:
            where = f"{place}:{line}" if line else place
            self.computed_folder(Path(os.path.normpath(target)), language, where, depth)
        for command in loads.commands:
            self.read_command(command, depth + 1)

    def _named(self) -> tuple[int, int, int]:
        """How much of the project the plan names so far: a change says a step named some."""
        return (len(self.plan.files), len(self.plan.folders), len(self.plan.globs))

    def _loaded_by_path(self, loads: sources.Loads, folder: Path, place: str, why: str) -> None:
        """Each project file (or folder) a source of a language whose interpreter opens
        what it loads by path names: the hook cannot be trusted (Language.by_path)."""
        named = [Path(folder, relative) for relative in loads.relative]
        named += [Path(folder, relative) for _, relative in loads.relative_folders]
        for path in [*loads.paths, *(path for _, path in loads.folders)]:
            bases = [Path("/")] if os.path.isabs(path) else self.bases
            named += [Path(base, path) for base in bases]
        for target in named:
            inside = self.state.inside(Path(os.path.normpath(target)))
            if inside is not None:
                self.state.by_path(place, f"loads {inside}", why)

    def computed_folder(self, folder: Path, language: str | None, place: str, depth: int) -> None:
        """A folder a source loads a computed name from (`"plugins/" + name`): all its
        files, each read; the project folder itself, or one outside it, cannot pin it."""
        inside = self.state.inside(folder)
        if inside is None or inside == ".":
            where = "the project folder" if inside == "." else f"{folder}, outside the project"
            self.state.unpinned(place, f"loads a name relay cannot compute from {where}", ".")
            return
        self.plan.globs.append((glob_escape(inside), str(self.root)))  # one that appears later
        if not _is_folder(folder):
            return
        rule = LANGUAGES.get(language or "")
        try:
            listed = _walk(self.root, inside)
        except _TooManyFiles:
            return  # the folder's listing refuses the hook
        for file in listed:
            if rule is not None and file.endswith(rule.suffixes):
                self.source_file(self.root / file, language, depth + 1)

    def add_module(self, language: str, name: str) -> None:
        """A top-level module name a source of `language` imports: looked up in every
        folder that language searches (`@scope/name`: `name` in the scope's folders)."""
        name = name.rpartition("/")[2]
        names = self.state.modules.setdefault(language, set())
        if name in names:
            return
        names.add(name)
        for folder in list(self.state.module_folders.get(language, [])):
            self.look_up(folder, name, language)

    def add_module_folder(self, language: str, folder: Path) -> None:
        """A folder where `language` looks module names up (a script's folder, PYTHONPATH)."""
        folders = self.state.module_folders.setdefault(language, [])
        folder = Path(os.path.normpath(folder))
        if folder in folders:
            return
        folders.append(folder)
        for name in sorted(self.state.modules.get(language, set())):
            self.look_up(folder, name, language)

    def look_up(self, folder: Path, name: str, language: str | None, depth: int = 0) -> None:
        """What `name` can load in `folder`: the entry of that name, or `name.*` (a module
        file, an extension module), or a package folder (all its files, each read). Looked
        up again on every check, so a module that appears later changes the fingerprint."""
        inside = self.state.inside(folder)
        if inside is None or not name or name in (".", ".."):
            return
        key = (inside, name, language or "")
        if key in self.state.looked_up:
            return
        self.state.looked_up.add(key)
        for entry, is_folder in self._listing(folder, inside):
            if entry != name and not entry.startswith(name + "."):
                continue
            path = folder / entry
            _add_match(self.plan, self.plan.files, self.root, path, f"{inside}/{entry}")
            if not is_folder:
                self.source_file(path, None, depth)
                continue
            rule = LANGUAGES.get(language or "")
            if "node_modules" in Path(inside).parts:
                continue  # an installed package: fingerprinted whole, its own requires not read
            try:
                listed = _walk(self.root, f"{inside}/{entry}" if inside != "." else entry)
            except _TooManyFiles:
                continue  # the folder's listing refuses the hook
            for file in listed:
                if rule is not None and file.endswith(rule.suffixes):
                    self.source_file(self.root / file, language, depth)

    def _listing(self, folder: Path, inside: str) -> list[tuple[str, bool]]:
        listing = self.state.listings.get(inside)
        if listing is None:
            listed = looks.look(looks.listing, str(folder), True)
            listing = list(listed) if isinstance(listed, tuple) else []
            self.state.listings[inside] = listing
        return listing

    def environment(self, name: str, value: str, place: str) -> None:
        """A variable set for the hook (its `env`, or `NAME=value` on the command line)
        that makes a program load code (ENVIRONMENT)."""
        rule = ENVIRONMENT.get(name)
        if rule is None or not value:
            return
        before = self._named()
        self._environment(rule, name, value, place)
        if rule.by_path and self._named() != before:
            why = (
                f"{name} makes the program load it by path (to pin it: load it from the "
                f"script the hook runs, or leave {name} out)"
            )
            self.state.by_path(place, f"{name}={value}", why)

    def _environment(self, rule: EnvironmentRule, name: str, value: str, place: str) -> None:
        if rule.kind == "folders":
            for part in value.split(os.pathsep):
                folder = Path(self.cwd, _home(part or "."))  # "" is the cwd
                if _is_folder(folder):
                    _add_match(
                        self.plan, self.plan.files, self.root, folder, f"{part or '.'} on {name}"
                    )
                    if rule.search and rule.language is not None:
                        self.add_module_folder(rule.language, folder)
        elif rule.kind == "files":
            for part in re.split(r"[:\s]+", value):
                if part:
                    self.path_word(part, code=False)
                    candidate = Path(self.cwd, _home(part))
                    if _exists(candidate) and not _is_folder(candidate):
                        self.source_file(candidate, rule.language, depth=0)
        else:
            self.options(value, rule.language, place)

    def environment_file(self, word: str) -> None:
        """A file of `NAME=value` lines a program sets: hashed, and each variable read."""
        self.path_word(word, code=False)
        text = _source_text(Path(self.cwd, word))
        for line in (text or "").splitlines():
            name, equals, value = line.strip().removeprefix("export ").partition("=")
            if equals:
                place = f"{name.strip()} in {word}"
                self.environment(name.strip(), value.strip().strip("\"'"), place)

    def options(self, value: str, language: str | None, place: str) -> None:
        """Options a runtime reads from a variable (`NODE_OPTIONS=--require ./x.js`)."""
        try:
            words = shlex.split(value)
        except ValueError:
            words = value.split()
        program = next((rule for rule in PROGRAMS if rule.language == language), None)
        load_options = program.load_options if program is not None else ()
        for index, word in enumerate(words):
            following = words[index + 1] if index + 1 < len(words) else None
            self.path_word(word, code=False)
            option, equals, attached = word.partition("=")
            if equals and option.startswith("-"):
                self.path_word(attached, code=False)
            elif word.startswith("-") and not word.startswith("--") and len(word) > 2:
                self.path_word(word[2:], code=False)  # -Ilib, -rfile
            load = _option_value(word, following, load_options)
            if load is not None:
                self.load(load, language, place)

    def make(self, operands: list[str], depth: int) -> None:
        """`make [-C dir] [-f file] [NAME=value] [goal…]`: the Makefile (and what it
        includes), and the recipes its goals run, with what they need first."""
        folder, makefiles, goals, overrides = self.cwd, [], [], {}
        index = 0
        while index < len(operands):
            word = operands[index]
            following = operands[index + 1] if index + 1 < len(operands) else None
            directory = _option_value(word, following, ("-C", "--directory"))
            file = _option_value(word, following, ("-f", "--file", "--makefile"))
            if directory is not None:
                folder = Path(folder, directory)
                index += 1 if directory == following else 0
            elif file is not None:
                makefiles.append(file)
                index += 1 if file == following else 0
            elif word in ("-I", "--include-dir", "-o", "-W", "-l", "--old-file", "--what-if"):
                index += 1
            elif word.startswith("-"):
                pass
            elif "=" in word:
                name, _, value = word.partition("=")
                overrides[name] = value
            else:
                goals.append(word)
            index += 1
        reader = _CommandReader(self.state, folder)
        if not makefiles:
            for name in _MANIFESTS:  # one that appears later changes the fingerprint
                reader.plan.globs.append((glob_escape(name), str(folder)))
            makefiles = [name for name in _MANIFESTS if _exists(folder / name)][:1]
        builtins = {
            **self.known,
            **sources.MAKE_BUILTINS,
            "CURDIR": str(folder),
            "MAKECMDGOALS": " ".join(goals),
        }
        makefile = sources.Makefile()
        pending = list(makefiles)
        seen: set[str] = set()
        while pending and len(seen) < MAX_NESTING * 4:
            name = pending.pop(0)
            path = Path(folder, name)
            if name in seen:
                continue
            seen.add(name)
            reader.path_word(name, code=False)
            text = _source_text(path)
            if text is None:
                continue
            sources.read_makefile(text, makefile)
            for include in makefile.includes:
                expanded = sources.make_expand(include, {**builtins, **makefile.variables})
                if "$" in expanded:
                    where = self.state.inside(path) or name
                    what = f"include {include}: a file relay cannot name"
                    self.state.unpinned(where, what, self.state.inside(folder) or ".")
                else:
                    pending.append(expanded)
            makefile.includes.clear()
        for value in makefile.assignment_words:
            for word in value.split():
                reader.path_word(word, code=False)  # SHELL = ./my-shell
        commands, files, missing = sources.make_commands(
            makefile, goals, {**builtins, **makefile.variables, **overrides}
        )
        for file in files:
            reader.path_word(file)
        variables = {**builtins, **makefile.variables, **overrides}
        for command in makefile.commands:  # `$(shell …)`, `X != …`: run as make reads
            reader.read_command(sources.make_expand(command, variables), depth + 1)
        for command in commands:  # expanded already
            reader.read_command(command, depth + 1)
        place = self.state.inside(folder / (makefiles[0] if makefiles else "Makefile")) or "make"
        for goal in missing:
            if not (goal in files or _exists(folder / goal)):
                self.state.unpinned(
                    place,
                    f"make {goal}: no rule for it (make would use a pattern or built-in rule)",
                    self.state.inside(folder) or ".",
                )

    def npm(self, program: str, tool: str | None, operands: list[str], depth: int) -> None:
        """`npm run x`, `npm test`, `yarn x`, `npx tool` …: the package.json (and the files
        beside it that make npm load code), and the scripts or program that command runs."""
        folder: Path | None = None
        words: list[str] = []
        index = 0
        while index < len(operands):
            word = operands[index]
            following = operands[index + 1] if index + 1 < len(operands) else None
            prefix = _option_value(word, following, ("--prefix", "-C", "--cwd", "--dir"))
            if prefix is not None:
                folder = Path(self.cwd, prefix)
                index += 1 if prefix == following else 0
            elif word == "--":
                words.extend(operands[index:])
                break
            elif not word.startswith("-"):
                words.append(word)
            index += 1
        package = folder or _package_folder(self.cwd, self.state)
        bins = [
            parent / "node_modules" / ".bin"
            for parent in [package, *package.parents]
            if self.state.inside(parent) is not None
        ]
        reader = _CommandReader(self.state, package, extra_bases=bins)
        reader.plan.globs.append(("package.json", str(package)))
        for name in _NPM_FILES:
            for base in {package, self.root}:
                reader.plan.globs.append((glob_escape(name), str(base)))
                self._npm_file(base / name, reader)
        commands: list[str] = []
        program_name: str | None = words[0] if words else None
        if tool != "npx":
            commands, program_name = self._npm_command(program, words, package)
        if program_name is not None:
            for folder_of_bins in bins:
                reader.path_word(str(folder_of_bins / program_name))
        for command in commands:
            reader.read_command(command, depth + 1)

    def _npm_command(
        self, program: str, words: list[str], package: Path
    ) -> tuple[list[str], str | None]:
        """The package.json scripts an npm, pnpm or yarn command runs, and the program of
        node_modules/.bin it runs (`npm exec x`); ([], None) for other commands."""
        text = _source_text(package / "package.json") or "{}"
        subcommand = words[0] if words else ("install" if program == "yarn" else "")
        script: str | None = None
        if subcommand in _NPM_RUN:
            script = words[1] if len(words) > 1 else None
        elif subcommand in _NPM_EXEC:
            return [], words[1] if len(words) > 1 else None
        elif subcommand in sources.NPM_SCRIPTS:
            commands = sources.package_scripts(text, sources.NPM_SCRIPTS[subcommand])
            if subcommand == "start" and not commands:
                commands = ["node server.js"]  # npm's default start
            return commands, None
        elif program != "npm" and subcommand:
            script = subcommand  # `yarn build`, `pnpm lint`: a script when one has that name
        if script is None:
            return [], None
        names = (f"pre{script}", script, f"post{script}")
        return sources.package_scripts(text, names), script if program != "npm" else None

    def _npm_file(self, path: Path, reader: _CommandReader) -> None:
        """A file beside package.json that makes the tool load code: its code-loading
        settings (`node-options=`, `yarnPath:`, `preload = […]`) are read as such."""
        text = _source_text(path)
        if text is None:
            return
        if path.name == ".pnpmfile.cjs":
            reader.source_file(path, "javascript", depth=0)
            return
        for line in text.splitlines():
            key, separator, value = line.partition("=" if path.suffix != ".yml" else ":")
            key, value = key.strip(), value.strip().strip("\"'")
            if not separator or not value:
                continue
            if key == "node-options":
                reader.options(value, "javascript", self.state.inside(path) or path.name)
            elif key in ("yarnPath", "script-shell", "preload", "shell"):
                for word in re.findall(r"[^\s\[\]\"',]+", value):
                    reader.path_word(word)

    def _whole_tree(self, reason: str) -> None:
        _whole_tree_of(self.plan, reason)


def glob_escape(name: str) -> str:
    """A file name as a glob that matches only it."""
    return re.sub(r"([*?[])", r"[\1]", name)


def _program(word: str) -> Program | None:
    """The PROGRAMS rule for a command word (`python3.12` is `python`)."""
    basename = os.path.basename(word) or word
    for candidate in (basename, _unversioned(basename)):
        for program in PROGRAMS:
            if candidate in program.names:
                return program
    return None


def _unversioned(name: str) -> str:
    """A program name without the version after it (`python3.12`, `perl5.36`)."""
    return name.rstrip("0123456789.") or name


def _option_value(word: str, following: str | None, options: Iterable[str]) -> str | None:
    """The value of one of `options` at this word: the next word (`-c CODE`), or attached
    (`-cCODE`, `--eval=CODE`); None when the word is none of them."""
    for option in options:
        if word == option:
            return following if following is not None else None
        if option.startswith("--") and word.startswith(option + "="):
            return word[len(option) + 1 :]
        if not option.startswith("--") and len(option) == 2 and word.startswith(option):
            return word[2:] or following
    return None


def _skip_options(words: list[str], index: int, valued: tuple[str, ...]) -> int:
    """The index of the first word after a wrapper's options (`env -u X`); its
    assignments (`env NAME=value`) are read by the caller."""
    while index < len(words):
        word = words[index]
        if word in valued:
            index += 2
        elif word.startswith("-"):
            index += 1
        else:
            break
    return index


def _simple_commands(words: list[str]) -> list[list[str]]:
    """The words split at shell operators (`&&`, `;`, `|` …): one list per command."""
    commands: list[list[str]] = [[]]
    for word in words:
        if word in _OPERATORS:
            commands.append([])
        else:
            commands[-1].append(word)
    return [command for command in commands if command]


def _language_of(name: str, text: str) -> str | None:
    """A file's language by its suffix, else by its `#!` line; None when relay reads
    neither."""
    for language, rule in LANGUAGES.items():
        if name.endswith(rule.suffixes):
            return language
    if not text.startswith("#!"):
        return None
    words = text[2:].partition("\n")[0].split()
    if words and os.path.basename(words[0]) == "env":
        words = [word for word in words[1:] if not word.startswith("-")]
    if not words:
        return None
    interpreter = _unversioned(os.path.basename(words[0]))
    for language, rule in LANGUAGES.items():
        if interpreter in rule.interpreters or os.path.basename(words[0]) in rule.interpreters:
            return language
    return None


def _source_text(path: Path) -> str | None:
    """A file's text, for reading what it loads (kept while the file's identity stays the
    same); None when it is not a regular file, cannot be read, or is binary. Opened
    without blocking: a FIFO put there never hangs relay."""
    import stat

    name = str(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, ValueError) as exc:
        looks.noted(looks.identity, (name,), looks.failure(exc))  # absent, or unreadable
        return None
    try:
        status = os.fstat(descriptor)
        looks.noted(looks.identity, (name,), looks.of_status(status))  # the file read
        if not stat.S_ISREG(status.st_mode):
            return None
        identity = identity_of(status)
        cached = _SOURCE_CACHE.get(str(path))
        if cached is not None and cached[0] == identity:
            return cached[1]
        chunks: list[bytes] = []
        size = 0
        while size <= sources.READ_LIMIT and (chunk := os.read(descriptor, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        looks.unkeepable("a file it read could not be read whole")
        return None
    finally:
        os.close(descriptor)
    data = b"".join(chunks)
    text = None if b"\0" in data[:8192] else data.decode("utf-8", "replace")
    if time.time() - max(status.st_mtime_ns, status.st_ctime_ns) / 1e9 >= RACY_SECONDS:
        if len(_SOURCE_CACHE) >= 1024:
            _SOURCE_CACHE.clear()  # bounded: a server must not grow without end
        _SOURCE_CACHE[str(path)] = (identity, text)
    return text


def _read_source(
    rule: Language, language: str, text: str, path: Path, known: Mapping[str, str]
) -> sources.Loads:
    """What a file loads, kept with its text: a server reads each version of a script once."""
    key = (str(path), language, tuple(sorted(known.items())))  # what a variable names
    cached = _LOADS_CACHE.get(key)
    if cached is not None and cached[0] is text:
        return cached[1]  # the very text _source_text kept: the file is the same
    loads = rule.read(text, str(path), known)
    if _SOURCE_CACHE.get(str(path), (None, None))[1] is text:
        if len(_LOADS_CACHE) >= 1024:
            _LOADS_CACHE.clear()  # bounded: a server must not grow without end
        _LOADS_CACHE[key] = (text, loads)
    return loads


def _package_folder(cwd: Path, state: _ReachState) -> Path:
    """The folder of the package.json npm uses from `cwd`: the nearest one up to the root."""
    for folder in [cwd, *cwd.parents]:
        if state.inside(folder) is None:
            break
        if _exists(folder / "package.json"):
            return folder
    return cwd


def _ignored_reach(root: Path, tree: Iterable[str]) -> list[Unpinned]:
    """When the reach is the project's tree in a git work tree: the git-ignored files an
    expansion may name, which the tree leaves out (Python's checked bytecode caches
    aside). Each makes the hook unpinned."""
    listed = _git_files(root, ignored=True)
    if not listed:
        return []
    ignored = [name for name in listed if not _only_checked_caches(root, name)]
    if not ignored:
        return []
    shown = ", ".join(ignored[:3]) + (f" and {len(ignored) - 3} more" if len(ignored) > 3 else "")
    expansions = ", ".join(tree)
    return [
        Unpinned(
            place="the command",
            what=(
                f"{expansions} may name a git-ignored file, which the project's tree "
                f"leaves out ({shown})"
            ),
            folder=ignored[0].rstrip("/"),
        )
    ]


def _only_checked_caches(root: Path, name: str) -> bool:
    """Whether an ignored entry is a `__pycache__` folder of checked `.pyc` files only
    (Python rewrites them as hooks run; they run nothing their source does not say)."""
    if os.path.basename(name.rstrip("/")) != "__pycache__":
        return False
    folder = os.path.join(root, name)
    listed = looks.look(looks.listing, folder, False)
    if not isinstance(listed, tuple):
        return False
    return not any(_is_code_cache_entry(Path(folder, entry)) for entry, _ in listed)


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


def _glob(pattern: str, base: str) -> tuple[str, ...]:
    """sh's matches of a glob (hidden files only when named), at most MAX_FILES."""
    matches = looks.look(_glob_matches, pattern, base)
    if len(matches) > MAX_FILES:
        raise _TooManyFiles(f"the glob {pattern}")
    return matches


def _glob_matches(pattern: str, base: str) -> tuple[str, ...]:
    """A glob's matches (at most MAX_FILES + 1), in the order found: a look (relay.config.looks)."""
    import glob  # only for a command with a glob

    matches: list[str] = []
    try:
        for match in glob.iglob(pattern, root_dir=base):
            matches.append(match)
            if len(matches) > MAX_FILES:
                break
    except (OSError, ValueError, RecursionError):
        pass  # an unreadable folder matches nothing, for sh as for us
    return tuple(matches)


def _tree_files(root: Path) -> list[str]:
    """Every file of the project: git's tracked and untracked-but-not-ignored files when
    the project is in a git work tree, else every file under the root."""
    listed = _git_files(root)
    if listed is None:
        return _walk(root, ".")
    # git lists an untracked nested repository as "name/", a submodule as its bare path:
    # those are walked. Without .gitmodules there is no submodule, and no stat per file.
    submodules = isinstance(looks.look(looks.identity, str(root / ".gitmodules")), tuple)
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


def _git_files(root: Path, folder: str = ".", *, ignored: bool = False) -> list[str] | None:
    """`git ls-files` of tracked and untracked, not ignored files under `folder` (with
    `ignored`: the ignored ones instead, a wholly ignored folder as "name/"); None when
    git is missing, fails, or the project is not in a work tree."""
    if not isinstance(looks.look(looks.identity, str(root / ".git")), tuple) and not (
        _inside_work_tree(root)
    ):
        return None
    # git's listing is not looked again cheaply: a check that makes it is not kept.
    looks.unkeepable("it lists files with git")
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
                *(["--ignored", "--directory"] if ignored else ["--cached"]),
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
        isinstance(looks.look(looks.identity, str(parent / ".git")), tuple)
        and not looks.look(shared_temporary, str(parent))
        for parent in root.parents
    )


def _walk(root: Path, folder: str) -> list[str]:
    """Every file under `root/folder`, relative to root, without `.git`, not following
    symbolic links to folders (they are entries themselves: no loops), at most MAX_FILES."""
    names: list[str] = []
    pending = [folder]
    while pending:
        current = pending.pop()
        listed = looks.look(looks.listing, os.path.join(root, current), False)
        if not isinstance(listed, tuple):
            names.append(current)  # unreadable: fingerprinted as such
            continue
        for entry, is_folder in listed:
            name = entry if current == "." else f"{current}/{entry}"
            if entry == ".git":
                continue
            if is_folder:
                pending.append(name)
            elif "__pycache__" not in name or _is_code_cache_entry(Path(root, name)):
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
    return looks.look(_unchecked_code_cache, str(path))


def _unchecked_code_cache(path: str) -> bool:
    """Whether a `.pyc` file is one Python runs unchecked (or cannot be read): a look."""
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
    cwd = _home(_substitute(entry.cwd, project_only))
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


# Every look at the filesystem above goes through relay.config.looks (a kept trust check is
# used only while each gives the same answer again); tests/test_trust_looks.py checks that
# this module makes no other.


def _home(word: str) -> str:
    """`~` and `~user` expanded (the user database is looked at: a look)."""
    return looks.look(os.path.expanduser, word) if word.startswith("~") else word


def _resolved(path: Path) -> Path | None:
    """Where `path` leads (None: a symlink loop, a NUL byte)."""
    real = looks.look(looks.resolved, str(path))
    return Path(real) if real is not None else None


def _exists(path: Path) -> bool:
    return looks.look(looks.exists, str(path))


def _is_folder(path: Path) -> bool:
    return looks.look(looks.is_folder, str(path))

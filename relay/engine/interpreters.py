"""How a trusted project hook's script reaches its interpreter as the bytes trust checked
(DESIGN §7: no gap between check and exec). Pure: no I/O but a package.json lookup.

Trust reads a hook's entry script once, from a descriptor it opened, and hashes what it
read (relay.config.trust.CheckedScript). Executing the script by its path afterwards
would let another process rename a different file over it in between, so relay hands the
checked text to the interpreter itself, under the script's own name, and the script sees
what it sees when run by path:

- POSIX shells: `sh -c TEXT PATH ARGS…`, so `$0` is PATH. bash leaves `${BASH_SOURCE[0]}`
  empty under `-c` and ignores assignments to it (it names a file only when bash opens
  that file by name, which is the gap this module closes), so a bash script's own
  `${BASH_SOURCE[0]}` is read as `$0` (`bash_source_as_zero`);
- Python: `python -c BOOTSTRAP COPY PATH ARGS…`: the bootstrap reads TEXT from COPY (a
  sealed memfd the runner creates), compiles it under PATH and runs it as `__main__`,
  with `__file__`, `sys.argv` and `sys.path[0]` as a run by path sets them;
- Node, CommonJS: `node -e BOOTSTRAP -- COPY PATH ARGS…`: the same, in a `Module` whose
  filename is PATH (`__filename`, `__dirname`, relative `require`, `require.main`);
- Node, an ES module: `node --import HOOKS PATH ARGS…`, where HOOKS registers a load hook
  that answers for PATH's URL with TEXT (`import.meta.url`, relative imports).

A script these rules do not cover (perl, ruby and other interpreters, a binary, a shell
script holding a NUL byte or longer than one argument may be) runs from a sealed copy
itself: the checked bytes still, but the script sees its name as /dev/fd/N (or
/proc/self/fd/N when run directly). An ES module too long for an argument is not run.

A command that runs under `sh -c` has a script per simple command: relay reads the text
exactly (relay.engine.shellwords; a hook with a form it cannot read is not trusted), and
writes the same words just before each script's word, quoted for sh, leaving the rest of
the text as it is (`shell_plan`, `_shell_template`).

What a pinned Python or Node script imports from the project comes from a private
snapshot of the checked files (relay.config.snapshot; `Modules`): a finder put first on
`sys.meta_path`, `require`'s loaders and an ES module load hook serve those files from it
under their project names. `python -m MODULE` as the whole command runs the same way
(`ModulePin`), and a plain `make` reads its checked Makefile from a sealed copy
(`MakePin`). What would still run by path is named, with why and how to make it
pinnable (`runs_by_path`): relay refuses to trust such a hook.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Literal, NamedTuple

import msgspec

from relay.config import looks, reach
from relay.config.model import HookEntry
from relay.engine import shellwords
from relay.engine.command import PROJECT_VARS, Launch, prepare_launch, substitute_project_vars

Family = Literal["shell", "python", "node", "other"]
"""How the checked text is fed: "other" interpreters read it from a sealed copy."""

ARGUMENT_LIMIT = 128 * 1024 - 1
"""The longest single argument Linux passes to a program (MAX_ARG_STRLEN, with its NUL)."""
SEALED_COPY = "/dev/fd/SEALED"
"""The word the runner replaces by the path of the sealed copy's descriptor."""

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_SHELL_STRING = re.compile(r"[-+][A-Za-z]*c[A-Za-z]*")
_SHEBANG_LIMIT = 256  # the kernel reads no more of a #! line (BINPRM_BUF_SIZE)
_FAMILIES: dict[str, Family] = {
    **dict.fromkeys(("sh", "bash", "dash", "ash", "ksh", "mksh", "zsh"), "shell"),
    "python": "python",
    "node": "node",
    "nodejs": "node",
    **dict.fromkeys(("perl", "ruby", "php", "lua", "tclsh", "Rscript"), "other"),
}
"""By program name without a version suffix (python3.11, lua5.4)."""
# Options that take the next word as their value, per family: the script is the first
# word that is neither an option nor such a value.
_VALUED_OPTIONS: dict[Family, frozenset[str]] = {
    "shell": frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}),
    "python": frozenset({"-W", "-X", "--check-hash-based-pycs"}),
    "node": frozenset(
        {
            "-r",
            "--require",
            "--import",
            "--loader",
            "--experimental-loader",
            "-C",
            "--conditions",
            "--env-file",
            "--title",
            "--input-type",
            "--inspect-port",
            "--stack-size",
        }
    ),
    "other": frozenset(),
}
# Options after which the interpreter runs no script file (a string, a module, stdin).
_NO_SCRIPT_LETTERS: dict[Family, str] = {
    "shell": "cs",
    "python": "cm",
    "node": "epi",
    "other": "eEr",
}
_NO_SCRIPT_LONG: dict[Family, frozenset[str]] = {
    "shell": frozenset(),
    "python": frozenset(),
    "node": frozenset({"--eval", "--print", "--interactive", "--test"}),
    "other": frozenset(),
}

# Python: run TEXT as __main__ under PATH, as `python PATH ARGS…` would. Everything lives in
# a function deleted before the script runs: its globals are a run by path's globals.
PYTHON_BOOTSTRAP = """\
def _relay_pinned():
    import os, sys
    from importlib.machinery import SourceFileLoader
    if hasattr(sys, "orig_argv"):  # 3.10+: as a run by path has it, without -c BOOTSTRAP COPY
        first = len(sys.orig_argv) - len(sys.argv) - 1
        del sys.orig_argv[first : first + 3]
    copy = sys.argv.pop(1)
    with open(copy, "rb") as stream:
        text = stream.read()
    os.close(int(copy.rpartition("/")[2]))
    path = sys.argv[0] = sys.argv.pop(1)
    full = path if os.path.isabs(path) else os.path.join(os.getcwd(), path)
    if not getattr(sys.flags, "safe_path", False):  # -P, -I (3.11+): no script folder
        sys.path[0] = os.path.dirname(os.path.realpath(path))
    main = sys.modules["__main__"].__dict__
    main.update(__file__=full, __cached__=None, __loader__=SourceFileLoader("__main__", full))
    return compile(text, full, "exec"), main
exec(*globals().pop("_relay_pinned")())
"""

# Python, a trusted hook whose modules are pinned: put first, it serves every import that
# would come from a folder of the project (the script's own, `sys.path.insert`ed ones)
# from the snapshot of the checked modules (relay.config.snapshot), as the same folder of
# the snapshot; a module found there now but not checked is not imported.
PYTHON_PINNED_IMPORTS = """\
def _relay_imports(roots, snapshot):
    import os, sys
    from importlib.machinery import FrozenImporter, PathFinder, SourceFileLoader
    from importlib.util import spec_from_file_location
    def copy_of(entry):
        if not isinstance(entry, str):
            return None
        full = os.path.abspath(entry or os.curdir)
        for root in roots:
            if full == root or full.startswith(root + os.sep):
                return snapshot + full[len(root):]
        return None
    def original(copy):
        return roots[0] + copy[len(snapshot):]
    class PinnedSource(SourceFileLoader):
        # Compiled from the checked copy (its bytecode cached beside it, in the snapshot),
        # named as the project's file.
        def __init__(self, name, path, copy):
            super().__init__(name, path)
            self.copy = copy
        def get_code(self, fullname):
            import _imp
            code = SourceFileLoader(fullname, self.copy).get_code(fullname)
            _imp._fix_co_filename(code, self.path)
            return code
        def get_data(self, path):
            return super().get_data(self.copy if path == self.path else path)
    class RelayPinnedImports:
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name in sys.builtin_module_names or FrozenImporter.find_spec(name):
                return None  # found before any path, as without this finder
            entries, inside = [], []
            for entry in sys.path if path is None else path:
                copy = copy_of(entry)
                entries.append(entry if copy is None else copy)
                if copy is not None:
                    inside.append(entry)
            if not inside:
                return None
            spec = PathFinder.find_spec(name, entries, target)
            if spec is None:
                if PathFinder.find_spec(name, inside, target) is not None:
                    raise ModuleNotFoundError(
                        f"No module named {name!r} among the files relay trust checked", name=name
                    )
                return None
            origin = spec.origin or ""
            if not origin.startswith(snapshot + os.sep):
                return spec  # not a project file
            locations = spec.submodule_search_locations
            if type(spec.loader) is SourceFileLoader:
                spec = spec_from_file_location(
                    name,
                    original(origin),
                    loader=PinnedSource(name, original(origin), origin),
                    submodule_search_locations=None if locations is None else [],
                )
            if locations is not None:  # a package: its own imports come back here
                spec.submodule_search_locations[:] = [original(entry) for entry in locations]
            return spec
    sys.meta_path.insert(0, RelayPinnedImports)
globals().pop("_relay_imports")(%(roots)r, %(snapshot)r)
"""

# Node: run TEXT as the main CommonJS module under PATH, as `node PATH ARGS…` would.
NODE_BOOTSTRAP = """\
(() => {
  const Module = require("module"), path = require("path"), fs = require("fs");
  const copy = process.argv.splice(1, 1)[0];
  // What a run by path has: fork() passes execArgv on to the child.
  process.execArgv.splice(process.execArgv.lastIndexOf("-e"), 2);
  let text = fs.readFileSync(copy, "utf8");
  fs.closeSync(Number(copy.split("/").pop()));
  let file = path.resolve(process.argv[1]);
  try { file = fs.realpathSync(file); } catch {}
  process.argv[1] = file;
  if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
  const main = new Module(".", null);
  main.filename = file;
  main.paths = Module._nodeModulePaths(path.dirname(file));
  process.mainModule = main;
  Module._cache[file] = main;
  main._compile(text, file);
  main.loaded = true;
})();
"""

# Node, CommonJS, a trusted hook whose modules are pinned: put first, every file of the
# project that `require` loads (resolved as usual, so `__filename` and relative requires
# are the project's) is compiled from the snapshot of the checked files; one that is not
# there (it appeared after the check) is not loaded.
NODE_PINNED_REQUIRES = """\
((roots, snapshot) => {
  const Module = require("module"), path = require("path"), fs = require("fs");
  const copyOf = (file) => {
    for (const root of roots)
      if (file === root || file.startsWith(root + path.sep)) return snapshot + file.slice(root.length);
    return null;
  };
  for (const extension of Object.keys(Module._extensions)) {
    const load = Module._extensions[extension];
    Module._extensions[extension] = function (module, filename) {
      const copy = copyOf(filename);
      if (copy === null) return load(module, filename);
      if (!fs.existsSync(copy))
        throw new Error(`Cannot load ${filename}: it is not among the files relay trust checked`);
      if (extension === ".node") return process.dlopen(module, copy);
      let text = fs.readFileSync(copy, "utf8");
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
      if (extension === ".json") module.exports = JSON.parse(text);
      else module._compile(text, filename);
    };
  }
})(%(roots)s, %(snapshot)s);
"""

# Node, an ES module: a module loaded by `--import` registers a load hook that answers for
# PATH's URL with TEXT, so `node PATH ARGS…` runs TEXT as the main module without reading
# the file (its URL, import.meta and relative imports are PATH's).
NODE_MODULE_HOOKS = """\
import { existsSync, readFileSync } from "node:fs";
import { sep } from "node:path";
import { fileURLToPath } from "node:url";
let target, source, roots = [], snapshot = null;
export async function initialize(data) { ({ url: target, source, roots, snapshot } = data); }
const copyOf = (url) => {
  if (snapshot === null || !url.startsWith("file:")) return null;
  const file = fileURLToPath(url);
  for (const root of roots)
    if (file === root || file.startsWith(root + sep)) return snapshot + file.slice(root.length);
  return null;
};
export async function load(url, context, nextLoad) {
  if (url === target) return { format: "module", source, shortCircuit: true };
  const copy = copyOf(url);
  if (copy === null) return nextLoad(url, context);
  if (!existsSync(copy))
    throw new Error(`Cannot load ${url}: it is not among the files relay trust checked`);
  const loaded = await nextLoad(url, context);  // the format, as Node decides it
  // CommonJS goes through require's loader, pinned in the main thread.
  if (loaded.format === "commonjs" || loaded.format === "builtin") return loaded;
  return { ...loaded, source: readFileSync(copy), shortCircuit: true };
}
"""
NODE_MODULE_BOOTSTRAP = """\
import { createRequire, register } from "node:module";
import { pathToFileURL } from "node:url";
import { realpathSync } from "node:fs";
let file = %(path)s;
try { file = realpathSync(file); } catch {}
process.execArgv.splice(process.execArgv.lastIndexOf("--import"), 2);  // fork() passes it on
const pinned = %(modules)s;
register(%(hooks)s, {
  data: { url: pathToFileURL(file).href, source: %(source)s, roots: pinned[0], snapshot: pinned[1] },
});
// What CommonJS files it loads, through require's loader of the main thread.
if (pinned[1] !== null) new Function("require", %(requires)s)(createRequire(file));
"""


def family_of(program: str) -> Family | None:
    """The interpreter family of a program name or path (`/usr/bin/python3.11`: python)."""
    name = os.path.basename(program)
    if name.startswith("python2"):
        return "other"  # the bootstrap is Python 3
    return _FAMILIES.get(name) or _FAMILIES.get(name.rstrip("0123456789."))


class Pin(msgspec.Struct, frozen=True, kw_only=True):
    """A trusted hook's entry script as trust checked it: which word of the launch names
    it, where that is, and the bytes read."""

    word: int
    path: str
    """Absolute and normalised, as the word names it from the hook's working directory."""
    text: bytes
    executable: bool = True
    program: int = 0
    """The word that starts the script's interpreter, after wrappers such as `timeout 5`
    (`word` itself when the script is executed)."""
    modules: Modules | None = None
    """Where its checked modules are (Python imports from the project come from there)."""


class Modules(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of a trusted hook's checked modules (relay.config.snapshot), and the
    project folder it mirrors (as written and resolved)."""

    snapshot: str
    roots: tuple[str, ...]


class EntryScript(NamedTuple):
    """The word of a launch that names the script it runs, that script, and the word that
    starts its interpreter (Pin)."""

    word: int
    path: str
    program: int


def entry_script(entry: HookEntry, root: Path) -> EntryScript | None:
    """The word of a hook's launch that names the script file it runs, with that file's
    path: a project file executed directly, or the operand of a known interpreter
    (`python3 -u hooks/x.py`), after wrappers (`timeout 5`, `env X=1`); None for a command
    run by sh, a program found on PATH, `python3 -c …`. The launch and working directory
    are the Executor's."""
    project = str(root)
    project_vars = dict.fromkeys(PROJECT_VARS, project)
    launch = prepare_launch(entry.command, entry.args, project_vars)
    return script_of(launch, _working_directory(entry, project, project_vars), project)


def _working_directory(entry: HookEntry, project: str, project_vars: Mapping[str, str]) -> str:
    if not entry.cwd:
        return project
    cwd = substitute_project_vars(entry.cwd, project_vars)
    cwd = looks.look(os.path.expanduser, cwd) if cwd.startswith("~") else cwd
    return str(Path(project, cwd))


def script_of(launch: Launch, cwd: str, root: str) -> EntryScript | None:
    """entry_script for a launch run in `cwd`."""
    argv = launch.argv
    if launch.mode == "shell" or not argv:
        return None
    program = after_wrappers(argv)
    if program is None or program >= len(argv):
        return None
    first = argv[program]
    if "/" in first:
        path = os.path.abspath(os.path.join(cwd, first))
        if path.startswith(os.path.join(os.path.abspath(root), "")):
            return EntryScript(program, path, program)
    family = family_of(first)
    index = _operand(argv[program:], 1, family) if family is not None else None
    if index is None:
        return None
    return EntryScript(
        program + index, os.path.abspath(os.path.join(cwd, argv[program + index])), program
    )


def after_wrappers(words: Sequence[str | None]) -> int | None:
    """The index of the program a command's words run after wrappers that run the rest
    as a command (`timeout 5`, `env X=1`, `nice -n 5`); None when relay cannot tell (a
    word that expands, None here; a wrapper option that changes what runs or where)."""
    index = 0
    while index < len(words) and (words[index] or "") in _WRAPPERS:
        valued, leading = _WRAPPERS[words[index] or ""]
        index += 1
        for round_ in range(leading + 1):
            while index < len(words):
                value = words[index]
                if value is None or value in _WRAPPER_STOPS:
                    return None
                if value in valued:
                    index += 2
                elif value.startswith("-") or _ASSIGNMENT.match(value):
                    index += 1
                else:
                    break
            if round_ < leading:
                index += 1  # `timeout 5`: the duration
    return index


def pinned_launch(launch: Launch, pin: Pin | ShellPin | ModulePin | MakePin, cwd: str) -> Launch:
    """The launch that runs the pinned text under the script's name as written, with the
    words after it as its arguments (a shell command: each pinned script so)."""
    if isinstance(pin, ShellPin):
        return _pinned_shell_launch(launch, pin, cwd)
    if isinstance(pin, ModulePin):
        return _pinned_module_launch(launch, pin)
    if isinstance(pin, MakePin):
        return _pinned_make_launch(launch, pin, cwd)
    key = (launch, pin, cwd)
    made = _PINNED.get(key) if len(pin.text) <= _PINNED_TEXT else None
    if made is not None:
        # Made before from equal inputs, these very bytes among them: this call's bytes
        # go into the sealed copy (the argv holds them only as equal text).
        return made if made.sealed is None else msgspec.structs.replace(made, sealed=pin.text)
    made, pure = _pinned_script_launch(launch, pin, cwd)
    if pure and len(pin.text) <= _PINNED_TEXT:
        if len(_PINNED) >= _PINNED_ENTRIES:
            _PINNED.clear()  # bounded: a server must not grow without end
        _PINNED[key] = made
    return made


_PINNED: dict[tuple[Launch, Pin, str], Launch] = {}
"""Pinned launches of entry scripts made before, by what they were made from (a resident
server's: its calls pin the same script from newly read, equal bytes)."""
_PINNED_ENTRIES = 256
_PINNED_TEXT = 64 * 1024
"""A script longer than this has its launch made anew each time (not kept)."""


def _pinned_script_launch(launch: Launch, pin: Pin, cwd: str) -> tuple[Launch, bool]:
    """pinned_launch of an entry script, and whether it came from its arguments alone
    (False: it looked at the filesystem, as for a Node script's package.json)."""
    index = pin.word
    if index >= len(launch.argv) or (
        os.path.abspath(os.path.join(cwd, launch.argv[index])) != pin.path
    ):
        # Checked for another command or folder: run nothing rather than an unchecked file.
        return Launch(argv=launch.argv, mode="pinned", refusal=_NOT_CHECKED), True
    word = launch.argv[index]
    arguments = launch.argv[index + 1 :]
    feed = _feed(launch.argv[pin.program : index], pin, word, inline=ARGUMENT_LIMIT)
    pure = not feed.looked and os.path.isabs(cwd)
    if feed.refusal is not None:
        return Launch(argv=launch.argv, mode="pinned", refusal=feed.refusal), pure
    if feed.replaced:
        # The copy itself is run (index 0: executed, argv[0] kept) or read as the script.
        made = Launch(argv=launch.argv, mode="pinned", sealed=pin.text, sealed_word=index)
        return made, pure
    argv = (*launch.argv[:index], *feed.words, word, *arguments)
    if SEALED_COPY in feed.words:
        sealed_word = index + feed.words.index(SEALED_COPY)
        made = Launch(argv=argv, mode="pinned", sealed=pin.text, sealed_word=sealed_word)
        return made, pure
    return Launch(argv=argv, mode="pinned"), pure


_NOT_CHECKED = "not started: its checked script is not the file this command runs"


class _Feed(NamedTuple):
    """How a pinned script's checked text reaches its interpreter: words put before the
    script's word (SEALED_COPY among them names the sealed copy), or the script's word
    itself replaced by the sealed copy; or why it must not start."""

    words: tuple[str, ...] = ()
    replaced: bool = False
    refusal: str | None = None
    looked: bool = False
    """Whether the feed depends on a file besides the text (a Node script's package.json)."""


def _feed(program: Sequence[str], pin: Pin, word: str, *, inline: int) -> _Feed:
    """The feed for a script run by `program` (the words before it; none: it is executed
    directly), with at most `inline` bytes of text in one argument."""
    text = pin.text
    if not program and not pin.executable:
        # As exec would refuse it; running its text anyway would hide the mistake.
        return _Feed(
            refusal=f"permission denied: {word} is not executable (to fix: chmod +x {shlex.quote(word)})"
        )
    if not program:
        command, first = _interpreter_of(text)
        before: tuple[str, ...] = command
    else:
        command, first, before = tuple(program), 0, ()
    family = family_of(command[first]) if command else None
    if family == "python" or (family == "node" and not _is_module(pin.path)):
        # The text from a sealed copy, its descriptor's path in place of the word
        # `SEALED_COPY` (no size limit, and the text is not in the process's argv).
        bootstrap = (
            ("-c", _python_bootstrap(pin.modules))
            if family == "python"
            else ("-e", _node_bootstrap(pin.modules), "--")
        )
        return _Feed(words=(*before, *bootstrap, SEALED_COPY), looked=family == "node")
    if family in (None, "other"):
        return _Feed(replaced=True)
    if family == "node":
        import json  # only for an ES module

        module = _data_url(
            NODE_MODULE_BOOTSTRAP
            % {
                "path": json.dumps(pin.path),
                "hooks": json.dumps(_data_url(NODE_MODULE_HOOKS)),
                "source": json.dumps(text.decode("utf-8", "replace")),  # as Node reads it
                "modules": json.dumps(
                    [list(pin.modules.roots), pin.modules.snapshot] if pin.modules else [[], None]
                ),
                "requires": json.dumps(_node_requires(pin.modules)),
            }
        )
        if len(module) > inline:
            # Node reads a sealed copy as CommonJS (it has no .mjs name): refuse, clearly.
            return _Feed(
                looked=True,
                refusal=(
                    f"not started: {word} is an ES module of {len(text):,} bytes; relay runs a "
                    f"trusted module as checked only up to about {ARGUMENT_LIMIT * 3 // 4 // 1024} KiB"
                ),
            )
        return _Feed(words=(*before, "--import", module), looked=True)
    if os.path.basename(command[first]) == "bash":
        text = bash_source_as_zero(text)
    if len(text) > inline or b"\0" in text:
        return _Feed(replaced=True)
    return _Feed(words=(*before, "-c", os.fsdecode(text)))


# ---- scripts that a shell command line runs --------------------------------------------


class ShellScript(msgspec.Struct, frozen=True, kw_only=True):
    """A project script that one simple command of a shell command line runs: the words
    of the text that name its program and it, and where it is."""

    words: tuple[str, ...]
    """The interpreter and options, then the script's word, after quote removal (only
    the script's word: it is executed)."""
    start: int
    end: int
    """The script's word in the text."""
    path: str


class ShellPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What pinning makes of a shell command line: the scripts it rewrites, and what
    stays run by path, with why."""

    command: str
    """The text `sh -c` runs (project variables expanded)."""
    cwd: str
    argv: tuple[str, ...] = ()
    """The launch it was planned for, whose word `word` is `command`: `sh -c COMMAND`, or
    a direct or exec-form `bash -c COMMAND …` (none for a nested string)."""
    word: int = 2
    scripts: tuple[ShellScript, ...] = ()
    nested: tuple[NestedCommand, ...] = ()
    """The `sh -c '…'` strings in it whose scripts are pinned in turn."""
    by_path: tuple[tuple[str, str], ...] = ()
    """(what, why): scripts and runners the command runs that are not pinned."""

    def paths(self) -> list[str]:
        """The scripts it pins, nested strings' included."""
        found = [script.path for script in self.scripts]
        for nested in self.nested:
            found.extend(nested.plan.paths())
        return found


class NestedCommand(msgspec.Struct, frozen=True, kw_only=True):
    """A command string given to `sh -c`, `bash -c` or `dash -c` in the text: where its
    word is, and its own plan (its text is the word after quote removal)."""

    start: int
    end: int
    plan: ShellPlan


class ModulePin(msgspec.Struct, frozen=True, kw_only=True):
    """A trusted `python -m MODULE` of a project module: run by a bootstrap that imports
    it, and what it imports from the project, from the snapshot of checked modules."""

    word: int
    """The word `-m` of the launch; MODULE follows it."""
    module: str
    modules: Modules | None = None


class ModuleRun(NamedTuple):
    """Where a launch's `-m MODULE` is, for a module of the project."""

    word: int
    module: str


def module_run(entry: HookEntry, root: Path) -> ModuleRun | None:
    """`python [options] -m MODULE …` run directly (after wrappers), MODULE found in the
    project folder it runs in; None for any other launch."""
    project = os.path.abspath(root)
    project_vars = dict.fromkeys(PROJECT_VARS, project)
    launch = prepare_launch(entry.command, entry.args, project_vars)
    if launch.mode == "shell":
        return None
    return _module_run(launch.argv, _working_directory(entry, project, project_vars), project)


def _module_run(argv: Sequence[str], cwd: str, root: str) -> ModuleRun | None:
    program = after_wrappers(argv)
    if program is None or program >= len(argv) or family_of(argv[program]) != "python":
        return None
    index = program + 1
    while index < len(argv) and argv[index].startswith("-") and argv[index] != "-m":
        word = argv[index]
        if word == "--" or word.startswith("--") or any(letter in "cm" for letter in word[1:]):
            return None  # `-c`, attached `-mMODULE`, `-Im`: not the form relay pins
        index += 2 if word in ("-W", "-X") else 1
    if index + 1 >= len(argv) or argv[index] != "-m":
        return None
    module = argv[index + 1]
    top = module.partition(".")[0]
    entries = looks.look(looks.names, cwd)
    if isinstance(entries, str):
        return None  # cannot be listed
    inside = os.path.join(os.path.abspath(cwd), "").startswith(os.path.join(root, ""))
    if not inside or not any(entry == top or entry.startswith(top + ".") for entry in entries):
        return None  # not a module of the project (`-m pytest`): nothing of it to pin
    return ModuleRun(word=index, module=module)


def _runs_project_module(words: Sequence[str], cwd: str | None, root: str) -> bool:
    """Whether `python … -m MODULE` (also `-mMODULE`, `-Im MODULE`) may run a module of
    the project: MODULE is found in the working directory, or relay cannot tell where."""
    for index, word in enumerate(words[1:], start=1):
        option = re.fullmatch(r"-[A-Za-z]*m(.*)", word)
        if option is None:
            if not word.startswith("-"):
                return False  # a script, or `-c`'s string: not a module run
            continue
        module = option.group(1) or (words[index + 1] if index + 1 < len(words) else "")
        if cwd is None:
            return True
        folder = os.path.abspath(cwd)
        if not os.path.join(folder, "").startswith(root):
            return False
        top = module.partition(".")[0]
        entries = looks.look(looks.names, folder)
        return not isinstance(entries, str) and any(
            entry == top or entry.startswith(top + ".") for entry in entries
        )
    return False


class MakeRun(NamedTuple):
    """`make [options] [goals]` run directly, reading the makefile at `path` by default."""

    word: int
    """The word that starts make."""
    path: str


class MakePin(msgspec.Struct, frozen=True, kw_only=True):
    """A trusted `make`: its makefile as the check read it, given to make as `-f` from a
    sealed copy."""

    word: int
    path: str
    text: bytes
    modules: Modules | None = None
    """Unused: make loads no modules (kept so every pin takes a snapshot alike)."""


_MAKEFILES = ("GNUmakefile", "makefile", "Makefile")
"""What make reads without -f, the first that exists, in its working directory."""
_MAKE_FILE_OPTIONS = ("-f", "--file", "--makefile", "-C", "--directory", "-I", "--include-dir")
_MAKE_BY_PATH = re.compile(rb"\$[({]MAKE(?:FILE_LIST)?[)}]|^\s*-?s?include\s", re.MULTILINE)
"""What makes make read a makefile again by path: `$(MAKE)` (a recursive make),
`$(MAKEFILE_LIST)` (a recipe that reads it), `include`."""


def make_run(entry: HookEntry, root: Path) -> MakeRun | None:
    """`make [options] [goals]` run directly (after wrappers) with its default makefile,
    which exists; None for any other launch (`-f`, `-C`, a shell command)."""
    project = os.path.abspath(root)
    project_vars = dict.fromkeys(PROJECT_VARS, project)
    launch = prepare_launch(entry.command, entry.args, project_vars)
    if launch.mode == "shell":
        return None
    return _make_run(launch.argv, _working_directory(entry, project, project_vars), project)


def _make_run(argv: Sequence[str], cwd: str, root: str) -> MakeRun | None:
    program = after_wrappers(argv)
    if program is None or program >= len(argv):
        return None
    if os.path.basename(argv[program]) not in ("make", "gmake"):
        return None
    for word in argv[program + 1 :]:
        if word.startswith(_MAKE_FILE_OPTIONS):
            return None  # it names its makefile or folder: relay does not pin that form
    for name in _MAKEFILES:
        path = os.path.abspath(os.path.join(cwd, name))
        if looks.look(looks.exists, path):
            inside = path.startswith(os.path.join(root, ""))
            return MakeRun(word=program, path=path) if inside else None
    return None


def _pinnable_make(make: MakeRun, reached: Collection[str], root: str) -> bool:
    """Whether relay pins this make whole: the makefile is the only project file the hook
    reaches (its recipes run no project file by path) and it makes make read no makefile
    again (no `$(MAKE)`, `$(MAKEFILE_LIST)`, `include`)."""
    name = os.path.relpath(make.path, root)
    if set(reached) - {name}:
        return False
    return looks.look(_reads_no_makefile_again, make.path)


def _reads_no_makefile_again(path: str) -> bool:
    """Whether a makefile can be read and makes make read no makefile again: a look
    (relay.config.looks)."""
    try:
        with open(path, "rb") as stream:
            text = stream.read(1 << 20)
    except OSError:
        return False
    return _MAKE_BY_PATH.search(text) is None


def _pinned_make_launch(launch: Launch, pin: MakePin, cwd: str) -> Launch:
    """`make -f /dev/fd/N [options] [goals]`: the checked makefile from a sealed copy."""
    argv = launch.argv
    made = _make_run(argv, cwd, os.path.dirname(pin.path))
    if made is None or made.word != pin.word or made.path != pin.path:
        return Launch(argv=argv, mode="pinned", refusal=_NOT_CHECKED)
    if _MAKE_BY_PATH.search(pin.text):
        return Launch(argv=argv, mode="pinned", refusal=_NOT_CHECKED)
    word = pin.word + 1
    return Launch(
        argv=(*argv[:word], "-f", SEALED_COPY, *argv[word:]),
        mode="pinned",
        sealed=pin.text,
        sealed_word=word + 1,
    )


PYTHON_MODULE_BOOTSTRAP = """\
def _relay_module():
    import runpy, sys
    runpy._run_module_as_main(sys.argv.pop(1))
globals().pop("_relay_module")()
"""


def _pinned_module_launch(launch: Launch, pin: ModulePin) -> Launch:
    """`python [options] -c BOOTSTRAP MODULE ARGS…` in place of `-m MODULE ARGS…`."""
    argv = launch.argv
    if argv[pin.word : pin.word + 2] != ("-m", pin.module):
        return Launch(argv=argv, mode="pinned", refusal=_NOT_CHECKED)
    bootstrap = _python_imports(pin.modules) + PYTHON_MODULE_BOOTSTRAP
    return Launch(
        argv=(*argv[: pin.word], "-c", bootstrap, pin.module, *argv[pin.word + 2 :]),
        mode="pinned",
    )


class ShellPin(msgspec.Struct, frozen=True, kw_only=True):
    """A trusted shell command's scripts as its trust check read them."""

    plan: ShellPlan
    texts: dict[str, tuple[bytes, bool]]
    """Path -> the bytes read and whether the file is executable, for each script of the
    plan that the check read (one it did not read runs by path)."""
    modules: Modules | None = None


# Programs that run the command after them, as a shell runs them: their options that take
# a value, and how many operands come before the command (`timeout 5 CMD`). Runners that
# close inherited descriptors or resolve the script themselves are not here (RUNNERS).
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "env": (frozenset({"-u", "--unset"}), 0),
    "exec": (frozenset(), 0),
    "command": (frozenset(), 0),
    "nohup": (frozenset(), 0),
    "setsid": (frozenset(), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
}
# Wrapper options after which relay cannot tell what runs, or where.
_WRAPPER_STOPS = frozenset({"-S", "--split-string", "-C", "--chdir", "-a", "-v", "-V", "-p"})
RUNNERS: dict[str, str] = {
    name: program.by_path for program in reach.PROGRAMS if program.by_path for name in program.names
}
"""Programs found on PATH that open project files themselves, from the table of what each
program loads (relay.config.reach.PROGRAMS): what they run cannot be pinned (protocol §9)."""
_CHANGES_MEANING = frozenset({".", "source", "eval", "alias", "unalias", "hash", "enable"})
"""Builtins after which relay cannot tell what the command's later words run."""
_CHANGES_DIRECTORY = frozenset({"cd", "pushd", "popd", "chdir"})
_LOWEST_COPY = 10
"""A shell command's sealed copies get descriptors from 10 up: `sh` redirections name 0-9."""


def shell_plan(entry: HookEntry, root: Path) -> ShellPlan | None:
    """For a hook whose command runs under `sh -c`: which project scripts it runs, and
    which of them pinning can feed from their checked bytes. None for other launches."""
    project = str(root)
    project_vars = dict.fromkeys(PROJECT_VARS, project)
    launch = prepare_launch(entry.command, entry.args, project_vars)
    cwd = os.path.abspath(_working_directory(entry, project, project_vars))
    argv = launch.argv
    if launch.mode == "shell":
        plan = plan_shell_command(argv[2], cwd, os.path.abspath(project))
        return msgspec.structs.replace(plan, argv=argv)
    # Executed directly: `bash -c STRING …`, after wrappers, has a command line too.
    program = after_wrappers(argv)
    if program is None or program >= len(argv) or family_of(argv[program]) != "shell":
        return None
    words = [shellwords.Word(start=0, end=0, value=word) for word in argv[program:]]
    string = _command_string(words)
    if string is None or os.path.basename(argv[program]) not in _NESTED_SHELLS:
        return None
    plan = plan_shell_command(argv[program + string], cwd, os.path.abspath(project))
    return msgspec.structs.replace(plan, argv=argv, word=program + string)


def runs_by_path(
    entry: HookEntry,
    root: Path,
    plan: ShellPlan | None = None,
    reached: Collection[str] | None = None,
) -> list[tuple[str, str]]:
    """(what, why) for each thing a hook's command runs by path that pinning does not
    cover: a command relay cannot read exactly, a script after a cd it cannot follow,
    a runner that opens project files itself (`make`, `npx`, `uv run`), a sourced file.
    `reached`: the project files of the hook's fingerprint (relative to the root), which
    a pinned `make` may not go beyond (None: relay does not pin make)."""
    plan = plan or shell_plan(entry, root)
    env_path = []
    if _names_project_folder(entry.env.get("PATH", "/"), os.path.join(os.path.abspath(root), "")):
        env_path.append(("PATH in env", _PATH_WHY))
    if plan is not None:
        return [*env_path, *plan.by_path]
    project = os.path.abspath(root)
    project_vars = dict.fromkeys(PROJECT_VARS, project)
    launch = prepare_launch(entry.command, entry.args, project_vars)
    cwd = _working_directory(entry, project, project_vars)
    if script_of(launch, cwd, project) is not None or _module_run(launch.argv, cwd, project):
        return env_path
    make = _make_run(launch.argv, cwd, project)
    if make is not None and reached is not None and _pinnable_make(make, reached, project):
        return env_path
    planner = _ShellPlanner(project)
    words = tuple(shellwords.Word(start=0, end=0, value=word) for word in launch.argv)
    planner.simple(shellwords.Simple(assignments=(), words=words, redirections=(), after=""), cwd)
    return [*env_path, *planner.by_path]


def refusal_of(by_path: Sequence[tuple[str, str]]) -> str:
    """The reason a hook that runs these by path cannot be trusted."""
    listed = "; ".join(f"{what}: {why}" for what, why in by_path[:3])
    more = f" (and {len(by_path) - 3} more)" if len(by_path) > 3 else ""
    return f"relay cannot run it as checked, it runs project files by path: {listed}{more}"


def plan_shell_command(command: str, cwd: str, root: str) -> ShellPlan:
    """shell_plan for the text `sh -c` runs in `cwd`."""
    try:
        commands = shellwords.read(command)
    except shellwords.UnreadableCommand as exc:
        why = f"relay cannot rewrite this command soundly ({exc}); the scripts it names run by path{_INTO_SCRIPT}"
        return ShellPlan(command=command, cwd=cwd, by_path=(("the command", why),))
    planner = _ShellPlanner(root, command)
    planner.read(commands, cwd)
    if planner.high_descriptor:
        why = (
            f"it redirects descriptor {planner.high_descriptor} (relay's copies use 10 and up); "
            f"the scripts it names run by path{_INTO_SCRIPT}"
        )
        return ShellPlan(command=command, cwd=cwd, by_path=(("the command", why),))
    return ShellPlan(
        command=command,
        cwd=cwd,
        scripts=tuple(sorted(planner.scripts, key=lambda script: script.start)),
        nested=tuple(planner.nested),
        by_path=tuple(planner.by_path),
    )


class _ShellPlanner:
    """Walks the simple commands of a shell command line for the scripts they run."""

    def __init__(self, root: str, text: str = "", *, depth: int = 0) -> None:
        self.root = os.path.join(root, "")
        self.text = text
        """The command line the words' spans are in ("": words built from argv)."""
        self.depth = depth
        """How deep in `sh -c` strings this command line is."""
        self.nested: list[NestedCommand] = []
        self.scripts: list[ShellScript] = []
        self.by_path: list[tuple[str, str]] = []
        self.known = True
        """False once a builtin may have changed what later words mean (`. x`, `eval`)."""
        self.high_descriptor = 0
        self.path_noted = False

    def read(self, commands: Sequence[shellwords.Simple], cwd: str | None) -> None:
        """`cwd`: where these commands start (None: relay cannot know)."""
        changed_to: str | None = None  # `cd DIR &&`: DIR, for the rest of its && chain
        for simple in commands:
            here = changed_to or cwd
            for redirection in simple.redirections:
                if redirection.number is not None and redirection.number >= _LOWEST_COPY:
                    self.high_descriptor = redirection.number
            for word in (
                *simple.assignments,
                *simple.words,
                *(redirection.target for redirection in simple.redirections),
            ):
                for substitution in word.substitutions:
                    self.read(substitution, here)  # a subshell: its cd stays inside
            program = self.simple(simple, here)
            if program in _CHANGES_MEANING:
                self.known = False
            if changed_to is not None and simple.after not in ("&&", "|"):
                # `cd D && a; b`: b runs in D only if the cd succeeded.
                changed_to, cwd = None, None
            if program in _CHANGES_DIRECTORY:
                target = _cd_target(simple)
                folder = None
                if target is not None and here is not None:
                    folder = os.path.normpath(os.path.join(here, target))
                if folder is not None and folder == here:
                    pass  # `cd "$CLAUDE_PROJECT_DIR"` from the root: here either way
                elif folder is not None and simple.after == "&&":
                    changed_to = folder
                else:
                    changed_to, cwd = None, None

    def simple(self, simple: shellwords.Simple, cwd: str | None) -> str | None:
        """Plan one simple command; its program's name (None when not literal)."""
        words = simple.words
        for word in (*simple.assignments, *words):
            raw = self.text[word.start : word.end] if self.text else (word.value or "")
            if (
                raw.startswith("PATH=")
                and not self.path_noted
                and (word.value is None or _names_project_folder(word.value[5:], self.root))
            ):
                self.path_noted = True
                self.by_path.append((raw if len(raw) <= 60 else "PATH=…", _PATH_WHY))
        index = after_wrappers([word.value for word in words])
        if index is None:
            return None
        if index >= len(words) or words[index].value is None:
            return None
        program = words[index]
        value = program.value
        assert value is not None
        name = os.path.basename(value)
        if name in RUNNERS:
            self.by_path.append((self._shown(words[index:]), RUNNERS[name]))
            return name
        if name in _CHANGES_MEANING:
            sourced = [word.value for word in words[index + 1 : index + 2]]
            if name in (".", "source") and sourced:
                what = f"{value} {sourced[0] if sourced[0] is not None else '…'}"
                why = "a file the command sources is read by path (to pin it: put its text in the command, or run it as a script)"
                self.by_path.append((what, why))
            return name
        script: int | None = None
        if "/" in value and (
            (cwd is None and not os.path.isabs(value))
            or os.path.abspath(os.path.join(cwd or "/", value)).startswith(self.root)
        ):
            script = index  # a project file, executed
        else:
            family = family_of(value)
            literal = []
            for word in words[index:]:
                if word.value is None:
                    break
                literal.append(word.value)
            operand = _operand(literal, 1, family) if family is not None else None
            if operand is not None:
                script = index + operand
            elif family == "shell":
                self.shell_string(words[index:], cwd)
            elif family == "python" and _runs_project_module(literal, cwd, self.root):
                self.by_path.append((self._shown(words[index:]), _MODULE_WHY))
        if script is None:
            return name
        word = words[script]
        assert word.value is not None
        if cwd is None and not os.path.isabs(word.value):
            why = (
                "it comes after a cd relay cannot follow: relay cannot tell which file it names "
                "(to pin it: `cd` to an absolute folder, or one starting with `.`, joined by `&&`)"
            )
            self.by_path.append((word.value, why))
            return name
        path = os.path.abspath(os.path.join(cwd or "/", word.value))
        if not path.startswith(self.root):
            return name
        if not self.known:
            why = (
                f"after `.`, `source`, `eval` or `alias`, relay cannot tell what runs{_INTO_SCRIPT}"
            )
            self.by_path.append((word.value, why))
            return name
        if not looks.look(looks.exists, path):
            # `test -x hooks/opt.sh && ./hooks/opt.sh`: nothing to pin (nor in the
            # fingerprint); a file that appears later untrusts the hook at its next check.
            why = "it does not exist when checked (to pin it: create it, or take it out of the command)"
            self.by_path.append((word.value, why))
            return name
        self.scripts.append(
            ShellScript(
                words=tuple(item.value or "" for item in words[index : script + 1]),
                start=word.start,
                end=word.end,
                path=path,
            )
        )
        return name

    def shell_string(self, words: Sequence[shellwords.Word], cwd: str | None) -> None:
        """`sh -c STRING …` (bash, dash too): STRING is read as a command line of its own
        and its scripts pinned in turn, the word rewritten as one single-quoted word."""
        at = _command_string(words)
        if at is None:
            return
        string = words[at]
        shell = os.path.basename(words[0].value or "")
        why = None
        if string.value is None:
            why = (
                f"the scripts a nested shell string that expands runs are run by path{_INTO_SCRIPT}"
            )
        elif shell not in _NESTED_SHELLS:
            why = (
                f"the scripts a {shell} -c string runs are run by path (to pin it: give the "
                f"string to sh -c or bash -c, or run the script directly)"
            )
        elif self.depth >= _NESTED_LIMIT:
            why = f"shell strings nested more than {_NESTED_LIMIT} deep run their scripts by path{_INTO_SCRIPT}"
        if why is not None:
            self.by_path.append((self._shown(words), why))
            return
        assert string.value is not None
        try:
            commands = shellwords.read(string.value)
        except shellwords.UnreadableCommand as exc:
            why = f"relay cannot rewrite its shell string soundly ({exc}); its scripts run by path{_INTO_SCRIPT}"
            self.by_path.append((self._shown(words), why))
            return
        inner = _ShellPlanner(self.root.rstrip("/") or "/", string.value, depth=self.depth + 1)
        inner.known = self.known
        inner.read(commands, cwd)
        self.by_path.extend(inner.by_path)
        if inner.high_descriptor:
            why = f"its shell string redirects descriptor {inner.high_descriptor}; run by path{_INTO_SCRIPT}"
            self.by_path.append((self._shown(words), why))
            return
        if inner.scripts or inner.nested:
            plan = ShellPlan(
                command=string.value,
                cwd=cwd or "",
                scripts=tuple(sorted(inner.scripts, key=lambda script: script.start)),
                nested=tuple(inner.nested),
                by_path=tuple(inner.by_path),
            )
            self.nested.append(NestedCommand(start=string.start, end=string.end, plan=plan))

    @staticmethod
    def _shown(words: Sequence[shellwords.Word]) -> str:
        return " ".join(word.value if word.value is not None else "…" for word in words[:3])


_NESTED_SHELLS = frozenset({"sh", "bash", "dash"})
"""Shells whose `-c` string relay reads as it reads the command (zsh, ksh differ)."""
_NESTED_LIMIT = 4
_SHELL_VALUED = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


def _command_string(words: Sequence[shellwords.Word]) -> int | None:
    """Which word is the command string of `SHELL [options] -c [options] STRING …`; None
    when the shell is not given -c (its options must be literal)."""
    given = False
    index = 1
    while index < len(words):
        value = words[index].value
        if value is None:
            return None
        if value == "--":
            index += 1
            break
        if not value.startswith(("-", "+")) or value in ("-", "+"):
            break
        if _SHELL_STRING.fullmatch(value):
            given = True
        index += 2 if value in _SHELL_VALUED else 1
    if not given or index >= len(words):
        return None
    return index


_PATH_WHY = (
    "programs found on the PATH it sets are run by path (a project folder on it) (to pin "
    "it: name the program by its path, `hooks/bin/x`, and keep the project off PATH)"
)
_MODULE_WHY = (
    "the interpreter finds a module by path inside a shell command (to pin it: make "
    "`python3 -m MODULE` the whole command, or run its file as a script)"
)
_INTO_SCRIPT = " (to pin it: move the command into a script the hook runs, `./hooks/x.sh`)"


def _names_project_folder(search_path: str, root: str) -> bool:
    """Whether a PATH value may name a folder of the project (`root` ends with /): a
    relative or empty entry (from the working directory), or one under the root."""
    return any(
        not entry.startswith("/") or os.path.join(entry, "").startswith(root)
        for entry in search_path.split(":")
    )


def _cd_target(simple: shellwords.Simple) -> str | None:
    """The folder of `cd DIR` when relay knows where it goes: DIR literal and absolute or
    starting with `.` (a bare name may go through CDPATH); no options, no redirections."""
    words = simple.words
    if len(words) != 2 or simple.redirections or simple.assignments or words[0].value != "cd":
        return None
    target = words[1].value
    if target is None or not (
        os.path.isabs(target) or target in (".", "..") or target.startswith(("./", "../"))
    ):
        return None
    return target


def _pinned_shell_launch(launch: Launch, pin: ShellPin, cwd: str) -> Launch:
    """`sh -c` with a command whose pinned scripts' words are fed their checked text: the
    words relay adds are quoted as sh reads them, and the rest of the text is as written."""
    plan = pin.plan
    if launch.argv != plan.argv or os.path.abspath(cwd) != plan.cwd:
        return Launch(argv=launch.argv, mode="pinned", refusal=_NOT_CHECKED)
    for inline in (ARGUMENT_LIMIT, 0):
        copies: list[bytes] = []
        numbers: dict[str, int] = {}  # one copy per file, however often the command names it
        try:
            template = _shell_template(
                plan, pin.texts, copies, numbers, inline=inline, modules=pin.modules
            )
        except _Refused as exc:
            return Launch(argv=launch.argv, mode="pinned", refusal=str(exc))
        # Each copy's path is at most /dev/fd/ and 10 digits.
        length = sum(len(part) if isinstance(part, str) else 18 for part in template)
        if length <= ARGUMENT_LIMIT:
            shown = "".join(part if isinstance(part, str) else SEALED_COPY for part in template)
            argv = list(launch.argv)
            argv[plan.word] = shown
            return Launch(
                argv=tuple(argv),
                mode="pinned",
                copies=tuple(copies),
                template=tuple(template),
                template_word=plan.word,
            )
    refusal = (
        f"not started: its command with its scripts' checked text is over {ARGUMENT_LIMIT:,} bytes"
    )
    return Launch(argv=launch.argv, mode="pinned", refusal=refusal)


class _Refused(Exception):
    """A pinned script that must not start (the message says why)."""


def _shell_template(
    plan: ShellPlan,
    texts: Mapping[str, tuple[bytes, bool]],
    copies: list[bytes],
    numbers: dict[str, int],
    *,
    inline: int,
    modules: Modules | None = None,
) -> list[str | int]:
    """The pinned command as text and copy numbers (an int is a copy's `/dev/fd/N`),
    adding to `copies`; raises _Refused."""
    text = plan.command
    # The scripts and nested strings of this line, in the order of the text.
    pieces: list[ShellScript | NestedCommand] = [
        *(script for script in plan.scripts if script.path in texts),
        *plan.nested,
    ]
    pieces.sort(key=lambda piece: piece.start)
    parts: list[str | int] = []
    done = 0
    for piece in pieces:
        parts.append(text[done : piece.start])
        done = piece.start
        if isinstance(piece, NestedCommand):
            inner = _shell_template(
                piece.plan, texts, copies, numbers, inline=inline, modules=modules
            )
            parts.extend(_single_quoted(inner))
            done = piece.end
            continue
        data, executable = texts[piece.path]
        pin = Pin(
            word=len(piece.words) - 1,
            path=piece.path,
            text=data,
            executable=executable,
            modules=modules,
        )
        feed = _feed(piece.words[:-1], pin, piece.words[-1], inline=inline)
        if feed.refusal is not None:
            raise _Refused(feed.refusal)
        # What relay adds goes before the script's word (an executed script's own
        # interpreter, or an interpreter's bootstrap); the words before stay as written.
        if (feed.replaced or SEALED_COPY in feed.words) and pin.path not in numbers:
            numbers[pin.path] = len(copies)
            copies.append(pin.text)
        for added in feed.words:
            parts.append(numbers[pin.path] if added == SEALED_COPY else shlex.quote(added))
            parts.append(" ")
        if feed.replaced:
            parts.append(numbers[pin.path])
            done = piece.end
    parts.append(text[done:])
    return [part for part in parts if part != ""]


def _single_quoted(parts: Sequence[str | int]) -> list[str | int]:
    """Parts that sh reads as one word whose value is the parts joined: each text in
    '…' (a ' as '\\''), each copy's /dev/fd/N (digits and /) inside the quotes."""
    quoted: list[str | int] = ["'"]
    for part in parts:
        quoted.append(part.replace("'", "'\\''") if isinstance(part, str) else part)
    quoted.append("'")
    return quoted


_BASH_SOURCE_BRACED = re.compile(rb"\$\{BASH_SOURCE(?:\[0\])?(?![\w\[])")
_BASH_SOURCE_BARE = re.compile(rb"\$BASH_SOURCE(?!\w)")


def bash_source_as_zero(text: bytes) -> bytes:
    """A bash script's text with its own `${BASH_SOURCE[0]}` (also `${BASH_SOURCE}`,
    `$BASH_SOURCE` and their `${…%/*}`-style forms) read as `$0`. Under `bash -c TEXT
    PATH`, `$0` is PATH, as `${BASH_SOURCE[0]}` is when bash runs the file by path, but
    bash leaves BASH_SOURCE empty and ignores assignments to it; so the common
    `cd "$(dirname "${BASH_SOURCE[0]}")"` works as run by path. A file the script sources
    is read by bash and has its own BASH_SOURCE; deeper entries (`[1]`, `[@]`) are left."""
    if b"BASH_SOURCE" not in text:
        return text
    return _BASH_SOURCE_BARE.sub(b"$0", _BASH_SOURCE_BRACED.sub(b"${0", text))


def _operand(argv: Sequence[str], start: int, family: Family) -> int | None:
    """The index of the first operand after an interpreter's options, or None."""
    index = start
    while index < len(argv):
        word = argv[index]
        if word == "--":
            return index + 1 if index + 1 < len(argv) else None
        if word == "-" or not word.startswith(("-", "+")) or (family != "shell" and word[0] == "+"):
            return None if word == "-" else index
        name = word.split("=", 1)[0]
        if name in _NO_SCRIPT_LONG[family]:
            return None
        if not word.startswith("--") and any(
            letter in _NO_SCRIPT_LETTERS[family] for letter in word[1:]
        ):
            return None
        if word in _VALUED_OPTIONS[family] or (
            family == "python" and len(word) == 2 and word[1] in "WX"
        ):
            index += 1
        index += 1
    return None


def _interpreter_of(text: bytes) -> tuple[tuple[str, ...], int]:
    """What the kernel runs for a script with this text, and which of those words is the
    interpreter: its #! line's program and argument (`env`'s words split as `env -S`
    splits them), /bin/sh without a #! line (relay's runner does so, as sh does); no words
    for a binary or a #! line relay cannot read."""
    if not text.startswith(b"#!"):
        return ((), 0) if text.startswith(b"\x7fELF") else (("/bin/sh",), 0)
    line = text[2:_SHEBANG_LIMIT].split(b"\n", 1)[0].strip(b" \t\r")
    if not line:
        return (), 0
    program, *rest = line.split(None, 1)
    words = [os.fsdecode(program)]
    if rest:
        words.append(os.fsdecode(rest[0]))  # the kernel passes the rest as one argument
    if os.path.basename(words[0]) != "env" or len(words) == 1:
        return tuple(words), 0
    split = words[1].split()
    if split[0] == "-S":
        split = split[1:]
    elif split[0].startswith("-S"):
        split[0] = split[0][2:]
    elif len(split) > 1:
        return tuple(words), 1  # env gets "python3 -u" as one name: it fails as it would
    if not split or split[0].startswith("-") or "=" in split[0]:
        return (), 0  # env's own options or assignments: no rule, a sealed copy runs
    return (words[0], *split), 1


def _python_bootstrap(modules: Modules | None) -> str:
    """The bootstrap for a pinned Python script: with its imports from the project
    served from the snapshot of checked modules when there is one."""
    return _python_imports(modules) + PYTHON_BOOTSTRAP


def _python_imports(modules: Modules | None) -> str:
    """The code that serves imports from the project from the snapshot ("" without one)."""
    if modules is None:
        return ""
    return PYTHON_PINNED_IMPORTS % {"roots": modules.roots, "snapshot": modules.snapshot}


def _node_bootstrap(modules: Modules | None) -> str:
    """The bootstrap for a pinned CommonJS script: with what it requires from the project
    compiled from the snapshot of checked files when there is one."""
    return _node_requires(modules) + NODE_BOOTSTRAP


def _node_requires(modules: Modules | None) -> str:
    """The code that pins what `require` loads from the project ("" without a snapshot)."""
    if modules is None:
        return ""
    import json

    return NODE_PINNED_REQUIRES % {
        "roots": json.dumps(list(modules.roots)),
        "snapshot": json.dumps(modules.snapshot),
    }


def _data_url(code: str) -> str:
    import base64

    return "data:text/javascript;base64," + base64.b64encode(code.encode()).decode()


def _is_module(path: str) -> bool:
    """Whether Node loads this script as an ES module (the CommonJS bootstrap cannot run it)."""
    if path.endswith((".mjs", ".mts")):
        return True
    if not path.endswith(".js"):
        return False
    folder = os.path.dirname(path)
    while True:
        try:
            with open(os.path.join(folder, "package.json"), "rb") as stream:
                manifest = stream.read(1 << 20)
        except OSError:
            parent = os.path.dirname(folder)
            if parent == folder:
                return False
            folder = parent
            continue
        # A choice of feeding only: either way just the checked bytes run.
        import re  # only for a Node script in a .js file

        return re.search(rb'"type"\s*:\s*"module"', manifest) is not None

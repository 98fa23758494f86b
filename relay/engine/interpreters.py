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
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import msgspec

from relay.config.model import HookEntry
from relay.engine.command import PROJECT_VARS, Launch, prepare_launch, substitute_project_vars

Family = Literal["shell", "python", "node", "other"]
"""How the checked text is fed: "other" interpreters read it from a sealed copy."""

ARGUMENT_LIMIT = 128 * 1024 - 1
"""The longest single argument Linux passes to a program (MAX_ARG_STRLEN, with its NUL)."""
SEALED_COPY = "/dev/fd/SEALED"
"""The word the runner replaces by the path of the sealed copy's descriptor."""

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

# Node, an ES module: a module loaded by `--import` registers a load hook that answers for
# PATH's URL with TEXT, so `node PATH ARGS…` runs TEXT as the main module without reading
# the file (its URL, import.meta and relative imports are PATH's).
NODE_MODULE_HOOKS = """\
let target, source;
export async function initialize(data) { ({ url: target, source } = data); }
export async function load(url, context, nextLoad) {
  if (url === target) return { format: "module", source, shortCircuit: true };
  return nextLoad(url, context);
}
"""
NODE_MODULE_BOOTSTRAP = """\
import { register } from "node:module";
import { pathToFileURL } from "node:url";
import { realpathSync } from "node:fs";
let file = %(path)s;
try { file = realpathSync(file); } catch {}
process.execArgv.splice(process.execArgv.lastIndexOf("--import"), 2);  // fork() passes it on
register(%(hooks)s, { data: { url: pathToFileURL(file).href, source: %(source)s } });
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


def entry_script(entry: HookEntry, root: Path) -> tuple[int, str] | None:
    """The word of a hook's launch that names the script file it runs, with that file's
    path: a project file executed directly, or the operand of a known interpreter
    (`python3 -u hooks/x.py`); None for a command run by sh, a program found on PATH,
    `python3 -c …`. The launch and working directory are the Executor's."""
    project = str(root)
    project_vars = dict.fromkeys(PROJECT_VARS, project)
    launch = prepare_launch(entry.command, entry.args, project_vars)
    cwd = project
    if entry.cwd:
        cwd = str(
            Path(project, os.path.expanduser(substitute_project_vars(entry.cwd, project_vars)))
        )
    return script_of(launch, cwd, project)


def script_of(launch: Launch, cwd: str, root: str) -> tuple[int, str] | None:
    """entry_script for a launch run in `cwd`."""
    argv = launch.argv
    if launch.mode == "shell" or not argv:
        return None
    if "/" in argv[0]:
        path = os.path.abspath(os.path.join(cwd, argv[0]))
        if path.startswith(os.path.join(os.path.abspath(root), "")):
            return 0, path
    family = family_of(argv[0])
    index = _operand(argv, 1, family) if family is not None else None
    if index is None:
        return None
    return index, os.path.abspath(os.path.join(cwd, argv[index]))


def pinned_launch(launch: Launch, pin: Pin, cwd: str) -> Launch:
    """The launch that runs the pinned text under the script's name as written, with the
    words after it as its arguments."""
    index = pin.word
    if index >= len(launch.argv) or (
        os.path.abspath(os.path.join(cwd, launch.argv[index])) != pin.path
    ):
        # Checked for another command or folder: run nothing rather than an unchecked file.
        refusal = "not started: its checked script is not the file this command runs"
        return Launch(argv=launch.argv, mode="pinned", refusal=refusal)
    text = pin.text
    path = pin.path
    word = launch.argv[index]
    if index == 0 and not pin.executable:
        # As exec would refuse it; running its text anyway would hide the mistake.
        refusal = (
            f"permission denied: {word} is not executable (to fix: chmod +x {shlex.quote(word)})"
        )
        return Launch(argv=launch.argv, mode="pinned", refusal=refusal)
    arguments = launch.argv[index + 1 :]
    if index == 0:
        command, program = _interpreter_of(text)
    else:
        command, program = launch.argv[:index], 0
    family = family_of(command[program]) if command else None
    if family == "python" or (family == "node" and not _is_module(path)):
        # The text from a sealed copy, its descriptor's path in place of the word
        # `SEALED_COPY` (no size limit, and the text is not in the process's argv).
        bootstrap = ("-c", PYTHON_BOOTSTRAP) if family == "python" else ("-e", NODE_BOOTSTRAP, "--")
        argv = (*command, *bootstrap, SEALED_COPY, word, *arguments)
        return Launch(argv=argv, mode="pinned", sealed=text, sealed_word=argv.index(SEALED_COPY))
    sealed = Launch(argv=launch.argv, mode="pinned", sealed=text, sealed_word=index)
    if family in (None, "other"):
        return sealed
    if family == "node":
        import json  # only for an ES module

        module = _data_url(
            NODE_MODULE_BOOTSTRAP
            % {
                "path": json.dumps(path),
                "hooks": json.dumps(_data_url(NODE_MODULE_HOOKS)),
                "source": json.dumps(text.decode("utf-8", "replace")),  # as Node reads it
            }
        )
        if len(module) > ARGUMENT_LIMIT:
            # Node reads a sealed copy as CommonJS (it has no .mjs name): refuse, clearly.
            refusal = (
                f"not started: {word} is an ES module of {len(text):,} bytes; relay runs a "
                f"trusted module as checked only up to about {ARGUMENT_LIMIT * 3 // 4 // 1024} KiB"
            )
            return Launch(argv=launch.argv, mode="pinned", refusal=refusal)
        return Launch(argv=(*command, "--import", module, word, *arguments), mode="pinned")
    if os.path.basename(command[program]) == "bash":
        text = bash_source_as_zero(text)
    if not _fits_an_argument(text):
        return sealed
    return Launch(argv=(*command, "-c", os.fsdecode(text), word, *arguments), mode="pinned")


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


def _fits_an_argument(text: bytes) -> bool:
    return len(text) <= ARGUMENT_LIMIT and b"\0" not in text


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

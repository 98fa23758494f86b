"""What a piece of code loads by itself, read from its text without running it (DESIGN §7).

Trust fingerprints the files a hook's command names; the interpreters that command starts
load more on their own: a Python script imports the modules beside it, a Node script
requires `./lib`, a shell script sources `lib.sh`, `make` runs the recipes of a Makefile,
`npm run` the scripts of a package.json. Each reader here takes the text of one file (or
one `-c`/`-e` string) and says, as written, what it loads: `Loads`. `reach` resolves
those names against the project and fingerprints what they find.

What a reader cannot resolve from the text (`import_module(name)`, `require(path)`,
`. "$LIB/x.sh"`) is returned as `unpinned`, never dropped: the hook cannot be trusted
until the user names the folders it loads from.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping

import msgspec

READ_LIMIT = 512 * 1024
"""Source files over this size are not read for what they load: the hook is unpinned."""


class Loads(msgspec.Struct, kw_only=True):
    """What one file or code string loads, as written in it."""

    modules: list[str] = msgspec.field(default_factory=list)
    """Top-level names looked up on a module search path: Python imports, Node bare
    specifiers (`lodash`, `@scope`)."""
    relative: list[str] = msgspec.field(default_factory=list)
    """Paths relative to the file's own folder (`require("./lib")`, `. "$(dirname "$0")/x"`,
    Python's `from . import x` as "x", `from .. import x` as "../x")."""
    paths: list[str] = msgspec.field(default_factory=list)
    """Paths relative to the working directory (`. lib.sh`, `runpy.run_path("x.py")`)."""
    folders: list[tuple[int, str]] = msgspec.field(default_factory=list)
    """(line, folder) it loads a computed name from (`"plugins/" + name`): each
    fingerprinted whole, as a path from the working directory (or absolute)."""
    relative_folders: list[tuple[int, str]] = msgspec.field(default_factory=list)
    """The same, as paths from the file's own folder (`require("./plugins/" + name)`)."""
    search: list[str] = msgspec.field(default_factory=list)
    """Folders put on the module search path (`sys.path.insert(0, "lib")`), as paths."""
    commands: list[str] = msgspec.field(default_factory=list)
    """Shell command strings it runs (a `python -c` string's `exec` code is read in place)."""
    unpinned: list[tuple[int, str]] = msgspec.field(default_factory=list)
    """(line, what relay cannot resolve): a dynamic import, a computed path."""

    def extend(self, other: Loads) -> None:
        """Add what another reading found."""
        self.modules.extend(other.modules)
        self.relative.extend(other.relative)
        self.paths.extend(other.paths)
        self.search.extend(other.search)
        self.folders.extend(other.folders)
        self.relative_folders.extend(other.relative_folders)
        self.commands.extend(other.commands)
        self.unpinned.extend(other.unpinned)


# --- Python ---------------------------------------------------------------------------------

PYTHON_LOADERS: Mapping[str, tuple[int, str]] = {
    "import_module": (0, "module"),
    "__import__": (0, "module"),
    "run_module": (0, "module"),
    "run_path": (0, "path"),
    "spec_from_file_location": (1, "path"),
    "SourceFileLoader": (1, "path"),
    "SourcelessFileLoader": (1, "path"),
    "exec": (0, "code"),
    "compile": (0, "code"),
    "CDLL": (0, "path"),
    "LoadLibrary": (0, "path"),
    "addsitedir": (0, "search"),
}
"""Python calls that load code: call name -> (which argument, what it names)."""
_PYTHON_PATH_CHANGES = {"insert": 1, "append": 0}
"""`sys.path.insert(i, folder)`, `sys.path.append(folder)`: the folder's argument."""
_PYTHON_CALL_HINTS = re.compile(
    r"(?:\b(?:" + "|".join(map(re.escape, PYTHON_LOADERS)) + r")|path\.(?:insert|append))\s*\("
)
"""Text that a loading call needs: without it, only import statements are looked for."""


def python_loads(text: str, file: str | None, known: Mapping[str, str] | None = None) -> Loads:
    """What Python code loads: its imports, and calls that load code (PYTHON_LOADERS).

    `file`: the file's path (for `__file__`); None for a `-c` string. `known`: the
    environment variables relay knows (the project folder, the hook's `env`)."""
    import ast  # only for a hook that runs Python

    loads = Loads()
    calls = bool(_PYTHON_CALL_HINTS.search(text))
    if not calls and "import" not in text:
        return loads  # nothing that can load: no parse
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = getattr(exc, "lineno", None) or 0
        loads.unpinned.append((line, f"relay cannot read it as Python ({exc.__class__.__name__})"))
        return loads
    try:
        _python_nodes(tree, file, loads, calls=calls, known=known or {})
    except RecursionError:  # an expression nested deeper than relay reads
        loads.unpinned.append((0, "nested too deeply for relay to read"))
    return loads


def _python_nodes(
    tree: object, file: str | None, loads: Loads, *, calls: bool, known: Mapping[str, str]
) -> None:
    """Imports and (with `calls`) loading calls anywhere in the tree; without, only the
    statements are walked (imports are statements), not every expression: faster."""
    import ast

    assert isinstance(tree, ast.AST)
    for node in ast.walk(tree) if calls else _statements(tree):
        if isinstance(node, ast.Import):
            loads.modules.extend(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                loads.modules.append(node.module.partition(".")[0])
            elif node.level:
                up = "../" * (node.level - 1)
                if node.module:
                    loads.relative.append(up + node.module.partition(".")[0])
                else:
                    loads.relative.extend(up + alias.name for alias in node.names)
        elif isinstance(node, ast.Call):
            _python_call(node, file, loads, known)


def _statements(tree: object) -> list[object]:
    """Every statement of a module, in nested blocks too (no expressions)."""
    import ast

    found: list[object] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        found.append(node)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, field, None)
            if isinstance(children, list):
                pending.extend(child for child in children if isinstance(child, ast.AST))
    return found


def _python_call(node: object, file: str | None, loads: Loads, known: Mapping[str, str]) -> None:
    import ast

    assert isinstance(node, ast.Call)
    function = node.func
    name = (
        function.id
        if isinstance(function, ast.Name)
        else function.attr
        if isinstance(function, ast.Attribute)
        else None
    )
    if name is None:
        return
    line = node.lineno
    if name in _PYTHON_PATH_CHANGES and isinstance(function, ast.Attribute):
        if ast.unparse(function.value) not in ("sys.path", "path"):
            return  # list.insert of some other list
        index = _PYTHON_PATH_CHANGES[name]
        kind = "search"
    elif name in PYTHON_LOADERS:
        if name in ("exec", "compile") and not isinstance(function, ast.Name):
            return  # re.compile, cursor.exec…: not Python's own
        index, kind = PYTHON_LOADERS[name]
    else:
        return
    if index >= len(node.args):
        if node.keywords:
            loads.unpinned.append((line, f"{name}(…) with keyword arguments"))
        return
    argument = node.args[index]
    value = _python_path_value(argument, file, known)
    if value is None:
        prefix = _python_prefix(argument, file, known)
        if kind == "module" and "." in prefix.lstrip("."):
            if not prefix.startswith("."):  # relay.hosts.{name}: inside the package relay
                loads.modules.append(prefix.partition(".")[0])
                return
        elif kind in ("path", "search") and os.path.dirname(prefix):
            loads.folders.append((line, os.path.dirname(prefix)))  # plugins/{name}.py
            return
        shown = ast.unparse(node)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        loads.unpinned.append((line, f"{shown}: a {_KIND_WORDS[kind]} relay cannot compute"))
    elif kind == "module":
        if value.startswith("."):
            loads.unpinned.append((line, f"{name}({value!r}): a relative name"))
        else:
            loads.modules.append(value.partition(".")[0])
    elif kind == "code":
        inner = python_loads(value, file, known)
        loads.extend(inner)
    elif kind == "search":
        loads.search.append(value)
    else:
        loads.paths.append(value)


_KIND_WORDS = {"module": "module name", "path": "path", "search": "folder", "code": "code string"}


def _python_prefix(node: object, file: str | None, known: Mapping[str, str]) -> str:
    """The known start of a string relay cannot compute whole: `f"relay.hosts.{name}"` and
    `"plugins/" + name` start with "relay.hosts." and "plugins/"; "" when nothing is known."""
    import ast
    import os

    if isinstance(node, ast.JoinedStr):
        prefix = ""
        for part in node.values:
            inner = part.value if isinstance(part, ast.FormattedValue) else part
            value = _python_path_value(inner, file, known)
            if value is None:
                break
            prefix += value
        return prefix
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Div)):
        left = _python_path_value(node.left, file, known)
        if left is None:
            return _python_prefix(node.left, file, known)
        return os.path.join(left, "") if isinstance(node.op, ast.Div) else left
    if isinstance(node, ast.Call) and node.args and not node.keywords:
        function = node.func
        name = function.attr if isinstance(function, ast.Attribute) else ""
        if name == "join":  # os.path.join(HERE, "plugins", name)
            known_parts: list[str] = []
            for argument in node.args:
                value = _python_path_value(argument, file, known)
                if value is None:
                    break
                known_parts.append(value)
            return os.path.join(*known_parts, "") if known_parts else ""
    return ""


def _python_path_value(node: object, file: str | None, known: Mapping[str, str]) -> str | None:
    """The string an expression evaluates to, for the forms scripts use to name their own
    folder (`os.path.join(os.path.dirname(__file__), "lib")`, `Path(__file__).parent / "lib"`)
    or the project's (`os.environ["CLAUDE_PROJECT_DIR"]`, `os.getenv(…)`, with `known`);
    None for anything else."""
    import ast
    import os

    def value(node: object) -> str | None:
        return _python_path_value(node, file, known)

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id == "__file__" and file is not None:
        return file
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.Add)):
        left, right = value(node.left), value(node.right)
        if left is None or right is None:
            return None
        return os.path.join(left, right) if isinstance(node.op, ast.Div) else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [
            value(part.value) if isinstance(part, ast.FormattedValue) else value(part)
            for part in node.values
        ]
        return None if any(part is None for part in parts) else "".join(map(str, parts))
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        inner = value(node.value)
        return None if inner is None else os.path.dirname(inner)
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("os.environ", "environ"):
        key = value(node.slice)
        return None if key is None else known.get(key)
    if not isinstance(node, ast.Call):
        return None
    function = node.func
    name = (
        function.id
        if isinstance(function, ast.Name)
        else function.attr
        if isinstance(function, ast.Attribute)
        else ""
    )
    if isinstance(function, ast.Attribute) and name in ("resolve", "absolute") and not node.args:
        return value(function.value)
    values = [value(argument) for argument in node.args]
    if node.keywords or not values or values[0] is None:
        return None
    if name in ("getenv", "get") and (
        name == "getenv" or ast.unparse(function).endswith("environ.get")
    ):
        return known.get(values[0])  # one relay does not know may name anything
    if any(part is None for part in values):
        return None
    strings = [part for part in values if part is not None]
    if name == "join":
        return os.path.join(*strings)
    if len(strings) != 1:
        return None
    if name == "dirname":
        return os.path.dirname(strings[0])
    if name in ("abspath", "realpath", "normpath", "Path", "PurePath", "str", "fspath"):
        return strings[0]
    return None


# --- JavaScript -----------------------------------------------------------------------------

_JS_STATEMENT = re.compile(r"""(?:\bfrom\s*|(?<![\w.$])import\s*)(['"])([^'"\n]+)\1""")
"""`import … from "x"`, `export … from "x"`, `import "x"`."""
_JS_CALL = re.compile(r"""(?<![\w.$])(require|import)\s*\(""")
"""`require(…)`, `import(…)`: the argument runs to the first `)` (at most 200 characters)."""
_JS_LITERAL = re.compile(r"""(['"])([^'"\n]*)\1|`([^`$\n]*)`""")
_JS_PREFIX = re.compile(r"""(?:['"]|`)(\.{1,2}/[^'"`$\n]*)(?:['"]\s*\+|\$\{)""")
"""The known start of a computed relative specifier: `"./plugins/" + name`, `` `./p/${n}` ``."""
_JS_DIRNAME = re.compile(
    r"""(?<![\w.$])(?:require|import)\s*\(\s*(?:path\.(?:join|resolve)\s*\(\s*__dirname\s*,\s*"""
    r"""(['"])([^'"\n]+)\1\s*\)|__dirname\s*\+\s*(['"])(/[^'"\n]+)\3)\s*\)"""
)
"""`require(path.join(__dirname, "lib"))`, `require(__dirname + "/lib")`: beside the file."""


def javascript_loads(text: str, file: str | None) -> Loads:
    """What JavaScript code loads: `require("…")`, `import … from "…"`, `import("…")`,
    and `require(path.join(__dirname, "…"))`; a computed specifier whose known start
    names a folder (`require("./plugins/" + name)`) loads from that folder."""
    loads = Loads()
    resolved: set[int] = set()
    for match in _JS_DIRNAME.finditer(text):
        resolved.add(match.start())
        loads.relative.append("./" + (match.group(2) or match.group(4)).lstrip("/"))
    for match in _JS_STATEMENT.finditer(text):
        _javascript_specifier(match.group(2), loads)
    for match in _JS_CALL.finditer(text):
        close = text.find(")", match.end(), match.end() + 200)
        if match.start() in resolved or close < 0:
            continue  # no `)` near: not a call relay reads (nor, mostly, one at all)
        argument = text[match.end() : close].strip()
        if "\n" in argument:
            continue
        literal = _JS_LITERAL.fullmatch(argument)
        if literal:
            _javascript_specifier(literal.group(2) or literal.group(3) or "", loads)
            continue
        prefix = _JS_PREFIX.match(argument)
        line = text.count("\n", 0, match.start()) + 1
        if prefix and "/" in prefix.group(1):
            loads.relative_folders.append((line, prefix.group(1).rpartition("/")[0] or "."))
            continue
        shown = argument if len(argument) <= 60 else argument[:57] + "..."
        what = f"{match.group(1)}({shown}): a specifier relay cannot compute"
        loads.unpinned.append((line, what))
    return loads


def _javascript_specifier(specifier: str, loads: Loads) -> None:
    if specifier.startswith(("./", "../")) or specifier in (".", ".."):
        loads.relative.append(specifier)
    elif specifier.startswith("/"):
        loads.paths.append(specifier)
    elif specifier and not specifier.startswith(("node:", "data:", "http:", "https:")):
        parts = specifier.split("/")
        loads.modules.append("/".join(parts[:2]) if specifier.startswith("@") else parts[0])


# --- shell ----------------------------------------------------------------------------------

_SOURCE = re.compile(r"(?:^|[;&|({]|\bthen|\bdo|\belse)\s*(?:source|\.)\s+([^;&|)\n]+)", re.M)
_SCRIPT_FOLDER_FORMS = (
    '$(dirname "${BASH_SOURCE[0]}")',
    '$(dirname "$BASH_SOURCE")',
    "$(dirname ${BASH_SOURCE[0]})",
    '$(dirname "$0")',
    "$(dirname $0)",
    '$(cd "$(dirname "$0")" && pwd)',
    '$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)',
    "${BASH_SOURCE[0]%/*}",
    "${BASH_SOURCE%/*}",
    "${0%/*}",
)
"""How shell scripts name their own folder; a variable set to one of these is that folder.
Longest first: one form holds another."""
_SCRIPT_FOLDER = "\0script-folder\0"
_ASSIGNMENT = re.compile(r"^\s*(?:export\s+|readonly\s+|local\s+)?([A-Za-z_]\w*)=(.*)$", re.M)
_SHELL_PARAMETER = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")


def shell_loads(text: str, file: str | None, known: Mapping[str, str]) -> Loads:
    """What a shell script sources (`. file`, `source file`) with a path relay can read:
    literal, a variable the hook sets, or the script's own folder (`$(dirname "$0")`)."""
    loads = Loads()
    if "source" not in text and ". " not in text:
        return loads
    text = _replace_script_folder(text)
    folders = {
        match.group(1)
        for match in _ASSIGNMENT.finditer(text)
        if _unquoted(match.group(2).strip()) == _SCRIPT_FOLDER
    }
    for match in _SOURCE.finditer(text):
        written = match.group(1)[:4096].split("#", 1)[0].strip()  # shlex is slow: bounded
        line = text.count("\n", 0, match.start(1)) + 1
        try:
            words = shlex.split(written)
        except ValueError:
            words = written.split()
        if not words:
            continue
        word = _SHELL_PARAMETER.sub(
            lambda found: (
                _SCRIPT_FOLDER
                if (found.group(1) or found.group(2)) in folders
                else known.get(found.group(1) or found.group(2), found.group())
            ),
            words[0],
        )
        if "$" in word or "`" in word:
            known_part = re.split(r"[$`]", word, maxsplit=1)[0]
            folder = known_part.rpartition("/")[0] if "/" in known_part else ""
            if folder.startswith(_SCRIPT_FOLDER):
                loads.relative_folders.append((line, "." + folder[len(_SCRIPT_FOLDER) :]))
            elif folder:
                loads.folders.append((line, folder))  # . lib/$name.sh: the folder lib
            else:
                shown = written.replace(_SCRIPT_FOLDER, "$(dirname $0)")
                loads.unpinned.append((line, f". {shown}: a path relay cannot compute"))
        elif word.startswith(_SCRIPT_FOLDER):
            loads.relative.append("." + word[len(_SCRIPT_FOLDER) :])
        else:
            loads.paths.append(word)
    return loads


def _replace_script_folder(text: str) -> str:
    for form in sorted(_SCRIPT_FOLDER_FORMS, key=len, reverse=True):
        text = text.replace(form, _SCRIPT_FOLDER)
    return text


def _unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


# --- other languages ------------------------------------------------------------------------

_QUOTED = re.compile(r"""(['"])([^'"\n]{1,300})\1""")
_LOADING_CALL = re.compile(r"""\b(require|require_relative|load|do|use)\s*\(?\s*([$@][\w:]+)""")


def literal_loads(text: str, file: str | None) -> Loads:
    """Perl and Ruby: every quoted string may name a file it loads (from the working
    directory or beside the file); `require $x`, `load $x` cannot be resolved."""
    loads = Loads()
    for match in _QUOTED.finditer(text):
        loads.paths.append(match.group(2))
        loads.relative.append("./" + match.group(2))
    for match in _LOADING_CALL.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        loads.unpinned.append(
            (line, f"{match.group(1)} {match.group(2)}: a path relay cannot compute")
        )
    return loads


# --- tools: make, npm -----------------------------------------------------------------------

_MAKE_ASSIGNMENT = re.compile(
    r"^(?:override\s+|export\s+)?([A-Za-z_.][\w.]*)\s*(?P<operator>::=|:=|\?=|\+=|!=|=)\s*(.*)$"
)
_MAKE_SHELL = re.compile(r"\$[({]shell\s+((?:[^()]|\([^()]*\))*)[)}]")
"""`$(shell CMD)`: make runs CMD wherever the reference is expanded, even in a variable."""
_MAKE_RULE = re.compile(r"^([^:=#\t][^:=#]*)::?(?!=)(.*)$")
"""`targets: prerequisites`; greedy, so a long line costs one pass (no backtracking)."""
_MAKE_INCLUDE = re.compile(r"^-?(?:include|sinclude)\s+(.+)$")
_MAKE_REFERENCE = re.compile(r"\$(?:\(([^()$]*)\)|\{([^{}$]*)\}|([^({]))")
"""`$(NAME)`, `${NAME}`, or one character (`$@`, `$$`)."""
MAKE_BUILTINS: Mapping[str, str] = {
    "MAKE": "make",
    "SHELL": "/bin/sh",
    "CC": "cc",
    "CXX": "g++",
    "RM": "rm -f",
    "MAKEFLAGS": "",
    "MFLAGS": "",
}
"""Variables make sets itself, as it sets them (`$(MAKE) -C sub` is read as `make -C sub`)."""
MAKE_DEPTH = 16
"""How deeply make variables that name variables, and targets that need targets, are read."""


class Makefile(msgspec.Struct, kw_only=True):
    """A Makefile's variables, rules and included files, as written."""

    variables: dict[str, str] = msgspec.field(default_factory=dict)
    rules: dict[str, tuple[list[str], list[list[str]]]] = msgspec.field(default_factory=dict)
    """Target -> (prerequisites, the recipes of its rules, each a list of lines)."""
    first: str | None = None
    """The default goal: the first target that is not special (`.PHONY`) or a pattern."""
    includes: list[str] = msgspec.field(default_factory=list)
    assignment_words: list[str] = msgspec.field(default_factory=list)
    """The values of every variable (SHELL = ./my-shell): read as words too."""
    commands: list[str] = msgspec.field(default_factory=list)
    """Shell commands make runs while it reads the file (`$(shell …)`, `X != …`)."""


def read_makefile(text: str, into: Makefile | None = None) -> Makefile:
    """Variables, rules and includes of one makefile (added to `into` for included ones)."""
    makefile = into or Makefile()
    makefile.commands.extend(match.group(1) for match in _MAKE_SHELL.finditer(text))
    recipe: list[str] | None = None
    for line in text.replace("\\\n", " ").splitlines():
        if line.startswith("\t"):
            if recipe is not None:
                recipe.append(line[1:])
            continue
        stripped = line.split("#", 1)[0].strip()
        recipe = None
        if not stripped:
            continue
        include = _MAKE_INCLUDE.match(stripped)
        assignment = _MAKE_ASSIGNMENT.match(stripped)
        rule = _MAKE_RULE.match(stripped)
        if include:
            makefile.includes.extend(include.group(1).split())
        elif assignment:
            name, value = assignment.group(1), assignment.group(3).strip()
            operator = assignment.group("operator")
            if operator == "!=":
                makefile.commands.append(value)  # `X != cmd` runs cmd as make reads it
            if operator.startswith("+="):
                value = f"{makefile.variables.get(name, '')} {value}".strip()
            if not operator.startswith("?=") or name not in makefile.variables:
                makefile.variables[name] = value
            makefile.assignment_words.append(value)
        elif rule:
            prerequisites, _, inline = rule.group(2).partition(";")
            recipe = [inline] if inline.strip() else []
            for target in rule.group(1).split():
                known = makefile.rules.setdefault(target, ([], []))
                known[0].extend(prerequisites.split())
                known[1].append(recipe)  # shared: the lines below belong to every target
                if makefile.first is None and not target.startswith(".") and "%" not in target:
                    makefile.first = target
    return makefile


def make_commands(
    makefile: Makefile, goals: list[str], overrides: Mapping[str, str]
) -> tuple[list[str], list[str], list[str]]:
    """The recipe lines `make GOALS` runs, with make's variables expanded where the
    Makefile (or the command line) sets them; the prerequisites that are files; goals
    without a rule. A reference relay cannot expand stays as `$(…)`, which the shell
    reading then treats as an expansion it cannot resolve."""
    variables = {**makefile.variables, **overrides}
    commands: list[str] = []
    files: list[str] = []
    missing: list[str] = []
    seen: set[str] = set()
    pending = [(goal, 0) for goal in (goals or ([makefile.first] if makefile.first else []))]
    while pending:
        target, depth = pending.pop()
        if target in seen or depth > MAKE_DEPTH:
            continue
        seen.add(target)
        rule = makefile.rules.get(target)
        if rule is None:
            missing.append(target)
            continue
        prerequisites, recipes = rule
        expanded_prerequisites = make_expand(" ".join(prerequisites), variables, {}).split()
        automatic = {
            "@": target,
            "<": expanded_prerequisites[0] if expanded_prerequisites else "",
            "^": " ".join(expanded_prerequisites),
            "+": " ".join(expanded_prerequisites),
        }
        for prerequisite in expanded_prerequisites:
            if prerequisite in makefile.rules:
                pending.append((prerequisite, depth + 1))
            else:
                files.append(prerequisite)
        for line in (line for recipe in recipes for line in recipe):
            command = make_expand(line.lstrip().lstrip("@-+"), variables, automatic)
            commands.append(command)
    return commands, files, missing


def make_expand(
    text: str, variables: Mapping[str, str], automatic: Mapping[str, str] | None = None
) -> str:
    """Expand make references that relay knows; leave the rest as `$(…)`."""

    def expand(value: str, depth: int) -> str:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1) if match.group(1) is not None else match.group(2)
            single = match.group(3)
            if single is not None:
                if single == "$":
                    return "$"
                if automatic and single in automatic:
                    return automatic[single]
                return f"$({single})"
            if name is None:
                return match.group()
            if name in variables and depth < MAKE_DEPTH:
                return expand(variables[name], depth + 1)
            return f"$({name})"

        return _MAKE_REFERENCE.sub(replace, value)

    return expand(text, 0)


NPM_SCRIPTS: Mapping[str, tuple[str, ...]] = {
    "test": ("pretest", "test", "posttest"),
    "t": ("pretest", "test", "posttest"),
    "start": ("prestart", "start", "poststart"),
    "stop": ("prestop", "stop", "poststop"),
    "restart": (
        "prerestart",
        "restart",
        "postrestart",
        "prestop",
        "stop",
        "poststop",
        "prestart",
        "start",
        "poststart",
    ),
    "install": ("preinstall", "install", "postinstall", "preprepare", "prepare", "postprepare"),
    "i": ("preinstall", "install", "postinstall", "preprepare", "prepare", "postprepare"),
    "ci": ("preinstall", "install", "postinstall", "preprepare", "prepare", "postprepare"),
}
"""npm commands that run package.json scripts of their own name, and which."""


def package_scripts(text: str, names: tuple[str, ...]) -> list[str]:
    """The package.json scripts of these names that exist, in order."""
    try:
        manifest = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return []  # npm fails on it too: nothing runs
    scripts = manifest.get("scripts") if isinstance(manifest, dict) else None
    if not isinstance(scripts, dict):
        return []
    return [scripts[name] for name in names if isinstance(scripts.get(name), str)]

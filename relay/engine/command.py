"""From a hook's command string to the argv that runs it (DESIGN §5, §6). Pure: no I/O.

A command string is run by `sh -c`, except when, after the project variables are
expanded, it holds no shell syntax: then it is split into words here and executed
directly, which saves the shell's start-up on every hook (DESIGN §9: "every hook paying
for a `bash -c`"). `command` + `args` (exec form) never involves a shell.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

import msgspec

PROJECT_VARS = ("RELAY_PROJECT_DIR", "CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR")
"""The variables relay expands itself in a command string, so a path with spaces survives."""

SHELL = "/bin/sh"

LaunchMode = Literal["shell", "direct", "exec", "pinned"]


class Launch(msgspec.Struct, frozen=True, kw_only=True):
    """What to execute for one command hook, and how it was derived ("pinned": a trusted
    hook's checked script handed to its interpreter, relay.engine.interpreters)."""

    argv: tuple[str, ...]
    mode: LaunchMode
    sealed: bytes | None = None
    """Bytes the runner puts in a sealed memfd for this process: word `sealed_word` of
    argv is then read from it (0: the memfd is executed, argv[0] kept as its name)."""
    sealed_word: int = 0
    copies: tuple[bytes, ...] = ()
    """A pinned shell command's sealed copies: the runner creates a memfd for each."""
    template: tuple[str | int, ...] = ()
    """A pinned shell command's text (argv word `template_word`), joined at spawn: an int
    i stands for the path of copy i's descriptor (`/dev/fd/N`); argv shows it as
    `/dev/fd/SEALED`."""
    template_word: int = 2
    refusal: str | None = None
    """Why this launch must not start (the runner reports it as a spawn failure)."""


# Parameter expansion: `$NAME` takes the longest name, `${NAME}` exactly one.
_PARAMETER = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
# Special parameters ($$, $?, $1 ...): `$$RELAY_PROJECT_DIR` is the pid, then plain text.
_SPECIAL_PARAMETER = re.compile(r"\$[$?#!*@0-9-]")
# Everything up to the next character that can change how sh reads what follows.
_PLAIN_RUN = re.compile(r"[^\\'\"`$()#]+")
_DOUBLE_QUOTE_ESCAPES = frozenset('$`"\\\n')
_WORD_START_AFTER = " \t\n;&|()<>"

# One word part of a command that needs no shell: a single-quoted string, a double-quoted
# string with nothing sh would expand or unescape, an unquoted run free of shell syntax,
# or blanks between words.
_DIRECT_PART = re.compile(
    r"""'(?P<single>[^']*)'"""
    r'''|"(?P<double>[^"$`\\]*)"'''
    r"""|(?P<bare>[^\s'"|&;<>()$`\\*?\[\]~#{}]+)"""
    r"""|(?P<blank>[ \t]+)"""
)
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# Words sh must see: reserved words, and builtins that act on the shell itself or differ
# from the program of that name (dash's `echo` interprets backslashes, `pwd` prints the
# logical path). A word list reads better here than a 70-line literal.
_NEEDS_SHELL = frozenset(
    (  # noqa: SIM905
        "! { } [[ ]] case do done elif else esac fi for function if in select then time "
        "until while "
        ". : [ alias bg break builtin cd chdir command continue declare echo eval exec exit "
        "export false fc fg getopts hash jobs kill let local printf pwd read readonly return "
        "set shift shopt source test times trap true type typeset ulimit umask unalias unset "
        "wait"
    ).split()
)


def expand_project_vars(command: str, values: Mapping[str, str]) -> str:
    """$RELAY_PROJECT_DIR, $CLAUDE_PROJECT_DIR, $GEMINI_PROJECT_DIR and their ${…} forms, expanded as sh would see them."""
    if "$" not in command or not values:
        return command
    out: list[str] = []
    # Open contexts: '"' double quotes, '(' a subshell or $( ), '`' backquotes. Quoting
    # starts afresh inside $( ) and backquotes, even within double quotes.
    contexts: list[str] = []
    position, end = 0, len(command)
    while position < end:
        plain = _PLAIN_RUN.match(command, position)
        if plain:
            out.append(plain.group())
            position = plain.end()
            continue
        quoted = bool(contexts) and contexts[-1] == '"'
        char = command[position]
        if char == "\\":
            following = command[position + 1 : position + 2]
            # Inside "…" a backslash escapes only $ ` " \ and newline.
            taken = 1 if quoted and following not in _DOUBLE_QUOTE_ESCAPES else 2
            out.append(command[position : position + taken])
            position += taken
        elif char == "'" and not quoted:
            close = command.find("'", position + 1)
            taken_to = end if close < 0 else close + 1
            out.append(command[position:taken_to])  # '…' is literal: no expansion
            position = taken_to
        elif char == "#":
            newline = command.find("\n", position)
            is_comment = not quoted and _at_word_start(command, position)
            # A comment runs to the end of the line: quotes in it mean nothing.
            taken_to = (end if newline < 0 else newline) if is_comment else position + 1
            out.append(command[position:taken_to])
            position = taken_to
        elif char == '"':
            if quoted:
                contexts.pop()
            else:
                contexts.append('"')
            out.append(char)
            position += 1
        elif char == "`":
            if contexts and contexts[-1] == "`":
                contexts.pop()
            else:
                contexts.append("`")
            out.append(char)
            position += 1
        elif char == "(":
            if not quoted:
                contexts.append("(")
            out.append(char)
            position += 1
        elif char == ")":
            if contexts and contexts[-1] == "(":
                contexts.pop()
            out.append(char)
            position += 1
        elif command.startswith("$(", position):
            contexts.append("(")
            out.append("$(")
            position += 2
        else:  # "$"
            special = _SPECIAL_PARAMETER.match(command, position)
            parameter = _PARAMETER.match(command, position)
            if special:
                out.append(special.group())
                position = special.end()
            elif parameter and (name := parameter.group(1) or parameter.group(2)) in values:
                out.append(_quote_value(values[name], double_quoted=quoted))
                position = parameter.end()
            else:
                out.append(char)
                position += 1
    return "".join(out)


def prepare_launch(
    command: str, args: Sequence[str] | None, project_vars: Mapping[str, str]
) -> Launch:
    """The argv for a hook: exec form, a direct split of a plain command, or `sh -c`."""
    if args is not None:
        argv = (command, *args)
        return Launch(
            argv=tuple(substitute_project_vars(word, project_vars) for word in argv), mode="exec"
        )
    expanded = expand_project_vars(command, project_vars)
    words = direct_words(expanded)
    if words is None:
        return Launch(argv=(SHELL, "-c", expanded), mode="shell")
    return Launch(argv=tuple(words), mode="direct")


def direct_words(command: str) -> list[str] | None:
    """The words sh would execute for `command`, or None when it needs sh to run."""
    if not command.strip():
        return None
    words: list[str] = []
    current: list[str] = []
    in_word = False
    first_part: str | None = None
    position, end = 0, len(command)
    while position < end:
        part = _DIRECT_PART.match(command, position)
        if part is None:
            return None
        position = part.end()
        if part.lastgroup == "blank":
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
            continue
        if first_part is None:
            first_part = part.group() if part.lastgroup == "bare" else ""
        current.append(part.group(part.lastgroup or 0))
        in_word = True
    if in_word:
        words.append("".join(current))
    if first_part and _ASSIGNMENT.match(first_part):
        return None  # `VAR=value command` sets the variable for the command: sh does that
    if words[0] in _NEEDS_SHELL:
        return None
    return words


def _quote_value(value: str, *, double_quoted: bool) -> str:
    if double_quoted:
        return "".join("\\" + char if char in '\\"$`' else char for char in value)
    return "'" + value.replace("'", "'\\''") + "'"


def _at_word_start(command: str, position: int) -> bool:
    return position == 0 or command[position - 1] in _WORD_START_AFTER


def substitute_project_vars(word: str, values: Mapping[str, str]) -> str:
    """Replace the project variables in one word by their raw values (no quoting: not for sh)."""
    if "$" not in word:
        return word

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return values.get(name, match.group())

    return _PARAMETER.sub(replace, word)

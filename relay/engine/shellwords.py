"""A shell command line read exactly, in the forms relay can rewrite soundly. Pure: no I/O.

A trusted hook whose command needs `sh` runs the scripts it names from pinned copies of
their checked bytes (relay.engine.interpreters): the command's text is rewritten to hand
each script's interpreter those bytes. Rewriting is sound only where relay reads the text
as `sh` does, to the character; so this reader knows a subset of the POSIX grammar and
reports everything else as unreadable, and such a command runs as written.

Read: simple commands joined by `&&`, `||`, `;`, `&`, `|` and newlines; words made of
plain characters, '…', "…" and backslash escapes (not a backslash-newline, which sh
removes before it reads tokens); parameter expansions `$NAME`, `$1`,
`${NAME}`, `${NAME:-word}` (without quotes or expansions inside); command substitution
`$(…)`, whose commands are read in turn; redirections `[n]<`, `>`, `>>`, `>|`, `<>`,
`<&`, `>&` with their target word; comments. Unreadable: compound commands (`if`, `for`,
`{ …; }`, `( … )`), function definitions, here-documents, backquotes, `$'…'`, `$"…"`,
arithmetic, and the bash-only `&>`, `|&`, `<(…)`, `;&`.
"""

from __future__ import annotations

import re

import msgspec

RESERVED = frozenset(
    (  # noqa: SIM905 (a word list reads better than a 22-item literal)
        "! { } [[ ]] case coproc do done elif else esac fi for function if in select then "
        "time until while"
    ).split()
)
"""Words that open a compound command (or `time`, `!`) where a command starts."""

_METACHARACTERS = frozenset(" \t\n;&|<>()")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IO_NUMBER = re.compile(r"[0-9]+(?=[<>])")
_REDIRECTION = re.compile(r"<>|<&|>>|>\||>&|<|>")
_DOUBLE_QUOTE_ESCAPES = frozenset('$`"\\\n')
_SPECIAL_PARAMETERS = frozenset("0123456789@*#?$!-")


class Word(msgspec.Struct, frozen=True, kw_only=True):
    """One word as written: where it is in the text, and what it is after quote removal."""

    start: int
    end: int
    value: str | None
    """The word after quote removal when nothing in it expands (no parameter, command
    substitution, glob, brace or tilde); None otherwise."""
    substitutions: tuple[tuple[Simple, ...], ...] = ()
    """The commands of each `$(…)` in it."""


class Redirection(msgspec.Struct, frozen=True, kw_only=True):
    number: int | None
    operator: str
    target: Word


class Simple(msgspec.Struct, frozen=True, kw_only=True):
    """One simple command, and the operator after it ("" at the end of its list)."""

    assignments: tuple[Word, ...]
    words: tuple[Word, ...]
    redirections: tuple[Redirection, ...]
    after: str


class UnreadableCommand(Exception):
    """The command uses a form this reader does not read (the message names it)."""


def read(text: str) -> tuple[Simple, ...]:
    """The simple commands of a command line, in order; raises UnreadableCommand."""
    return _Reader(text).command_list(nested=False)


MAX_NESTING = 16
"""`$(` inside `$(` deeper than this is not read (a hostile command cannot exhaust the stack)."""


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.position = 0
        self.depth = 0

    def command_list(self, *, nested: bool) -> tuple[Simple, ...]:
        """Commands up to the end of the text, or (nested: inside `$(`) its `)`."""
        self.depth += 1
        try:
            return self._command_list(nested=nested)
        finally:
            self.depth -= 1

    def _command_list(self, *, nested: bool) -> tuple[Simple, ...]:
        if self.depth > MAX_NESTING:
            raise UnreadableCommand(f"$( … ) nested more than {MAX_NESTING} deep")
        text, end = self.text, len(self.text)
        commands: list[Simple] = []
        assignments: list[Word] = []
        words: list[Word] = []
        redirections: list[Redirection] = []
        previous = ""

        def finish(operator: str) -> None:
            nonlocal assignments, words, redirections, previous
            empty = not (assignments or words or redirections)
            if empty:
                # `; x`, `a && && b`, `a |` at the end: sh refuses these.
                if operator not in ("\n", "") or previous in ("&&", "||", "|"):
                    raise UnreadableCommand(f"an empty command before {operator or 'the end'!r}")
                return
            if words and not assignments:
                first = words[0]
                if text[first.start : first.end] in RESERVED:
                    raise UnreadableCommand(
                        f"the compound command {text[first.start : first.end]!r}"
                    )
            commands.append(
                Simple(
                    assignments=tuple(assignments),
                    words=tuple(words),
                    redirections=tuple(redirections),
                    after=operator,
                )
            )
            assignments, words, redirections = [], [], []
            previous = operator

        while True:
            self._skip_blanks()
            if self.position >= end:
                if nested:
                    raise UnreadableCommand("a $( without its )")
                finish("")
                return tuple(commands)
            char = text[self.position]
            if char == "#":  # at a word's start: a comment to the end of the line
                newline = text.find("\n", self.position)
                self.position = end if newline < 0 else newline
            elif char == ")":
                if not nested:
                    raise UnreadableCommand("a ) without its (")
                self.position += 1
                finish("")
                return tuple(commands)
            elif char == "(":
                raise UnreadableCommand("a subshell or function, ( … )")
            elif char in "\n;&|":
                finish(self._operator())
            elif char in "<>" or _IO_NUMBER.match(text, self.position):
                redirections.append(self._redirection())
            else:
                word = self._word()
                raw = text[word.start : word.end]
                if not words and _ASSIGNMENT.match(raw):
                    assignments.append(word)
                else:
                    words.append(word)

    def _skip_blanks(self) -> None:
        text, end = self.text, len(self.text)
        while self.position < end and text[self.position] in " \t":
            self.position += 1

    def _operator(self) -> str:
        text, position = self.text, self.position
        pair = text[position : position + 2]
        if pair in ("&&", "||"):
            self.position += 2
            return pair
        if pair in ("&>", "|&", ";;", ";&"):
            raise UnreadableCommand(f"the operator {pair!r}")
        self.position += 1
        return text[position]

    def _redirection(self) -> Redirection:
        text = self.text
        number = _IO_NUMBER.match(text, self.position)
        if number:
            self.position = number.end()
        if text.startswith("<<", self.position):
            raise UnreadableCommand("a here-document")
        operator = _REDIRECTION.match(text, self.position)
        assert operator is not None  # at < or >
        self.position = operator.end()
        self._skip_blanks()
        if self.position >= len(text) or text[self.position] in _METACHARACTERS:
            raise UnreadableCommand(f"a redirection {operator.group()!r} without its target")
        return Redirection(
            number=int(number.group()) if number else None,
            operator=operator.group(),
            target=self._word(),
        )

    def _word(self) -> Word:
        text, end = self.text, len(self.text)
        start = self.position
        value: list[str] = []
        literal = True
        substitutions: list[tuple[Simple, ...]] = []
        while self.position < end and text[self.position] not in _METACHARACTERS:
            char = text[self.position]
            if char == "'":
                close = text.find("'", self.position + 1)
                if close < 0:
                    raise UnreadableCommand("a ' without its closing '")
                value.append(text[self.position + 1 : close])
                self.position = close + 1
            elif char == '"':
                literal &= self._double_quoted(value, substitutions)
            elif char == "\\":
                following = text[self.position + 1 : self.position + 2]
                if not following:
                    raise UnreadableCommand("a \\ at the end")
                if following == "\n":
                    # sh removes it before it reads tokens (`$\<newline>$` is `$$`).
                    raise UnreadableCommand("a line continuation")
                value.append(following)
                self.position += 2
            elif char == "$":
                literal &= self._dollar(value, substitutions, quoted=False)
            elif char == "`":
                raise UnreadableCommand("a backquoted command")
            else:
                if char in "*?[{}" or (char == "~" and self.position == start):
                    literal = False  # a glob, brace expansion or tilde: sh changes it
                value.append(char)
                self.position += 1
        return Word(
            start=start,
            end=self.position,
            value="".join(value) if literal else None,
            substitutions=tuple(substitutions),
        )

    def _double_quoted(self, value: list[str], substitutions: list[tuple[Simple, ...]]) -> bool:
        text, end = self.text, len(self.text)
        self.position += 1
        literal = True
        while True:
            if self.position >= end:
                raise UnreadableCommand('a " without its closing "')
            char = text[self.position]
            if char == '"':
                self.position += 1
                return literal
            if char == "\\":
                following = text[self.position + 1 : self.position + 2]
                if following == "\n":
                    raise UnreadableCommand("a line continuation")
                if following in _DOUBLE_QUOTE_ESCAPES and following:
                    value.append(following)
                    self.position += 2
                    continue
                value.append(char)
                self.position += 1
            elif char == "$":
                literal &= self._dollar(value, substitutions, quoted=True)
            elif char == "`":
                raise UnreadableCommand("a backquoted command")
            else:
                value.append(char)
                self.position += 1

    def _dollar(
        self, value: list[str], substitutions: list[tuple[Simple, ...]], *, quoted: bool
    ) -> bool:
        """At a `$`: read what it starts; whether the word stays literal."""
        text = self.text
        following = text[self.position + 1 : self.position + 2]
        if following == "(":
            if text.startswith("$((", self.position):
                raise UnreadableCommand("arithmetic, $(( … ))")
            self.position += 2
            substitutions.append(self.command_list(nested=True))
            return False
        if following == "{":
            close = text.find("}", self.position)
            inside = text[self.position + 2 : close] if close >= 0 else ""
            if close < 0 or not inside or any(char in inside for char in "'\"`$\\{\n"):
                raise UnreadableCommand("a ${…} form relay does not read")
            self.position = close + 1
            return False
        if following in ("'", '"') and not quoted:
            raise UnreadableCommand(f"the quoting ${following}…{following}")
        if following == "[":
            raise UnreadableCommand("arithmetic, $[ … ]")
        if following and following in _SPECIAL_PARAMETERS:
            self.position += 2
            return False
        name = _NAME.match(text, self.position + 1)
        if name:
            self.position = name.end()
            return False
        value.append("$")  # a lone `$` is itself
        self.position += 1
        return True

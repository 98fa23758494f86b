"""Directives in agent output: `@namespace:target message` lines (DESIGN §8, spec/directives.md).

The scanner reads the agent's raw terminal stream. Most output holds no `@` at all, so
it never splits the stream into lines in Python: it finds candidate bytes (`@`, fence
backticks, backspaces) with bytes.find and a compiled pattern over the whole chunk, and
only for those lines looks back to the line start, strips escapes and checks the
grammar. What is carried between chunks is the unfinished last line, and the fence and
body state; every decision is taken on complete lines, so chunking never changes it.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from typing import NamedTuple

import msgspec

from relay.session.lines import (
    LEFT_MOVE,
    MAX_LINE_BYTES,
    LineSplitter,
    PendingLine,
    bound_line,
    clean_line,
    first_drawn,
)
from relay.session.voices import BLANKS, PLAIN, Speaking, Voice

__all__ = [
    "BODY_TRUNCATED",
    "BODY_UNTERMINATED",
    "MAX_BODY_LINES",
    "Directive",
    "DirectiveScanner",
    "LineSplitter",
    "ScreenLine",
    "clean_line",
    "unescape",
]

MAX_BODY_LINES = 30
BODY_TRUNCATED = "…[truncated by relay: body over {limit} lines]"
"""The last line of a body's message when no `>>>` came within the limit."""
BODY_UNTERMINATED = "…[truncated by relay: output ended before >>>]"
"""The last line of a body's message when the stream ended inside the body."""

PREFIX_CHARS = ">$%#•●⏺✦│⎿*-"
"""Prompt, bullet and box characters a directive-looking line may start with. The grammar
reads past them; whether the line is the agent's own words is the Voice's decision
(relay.session.voices): only an assistant marker (Claude Code `●`, Gemini `✦`) passes."""
_BLANK = "[ \t\u00a0]"  # no-break space: TUIs print it where a space must not wrap
_PREFIX = f"{_BLANK}*(?:[{re.escape(PREFIX_CHARS)}]{_BLANK}*)*"
_NAMESPACE = "[a-z][a-z0-9_-]*"

_DIRECTIVE = re.compile(
    f"(?P<prefix>{_PREFIX})@(?P<namespace>{_NAMESPACE}):(?P<target>\\S*)"
    f"(?:{_BLANK}+(?P<message>.*))?\\Z"
)
_FENCE = re.compile(f"(?P<prefix>{_PREFIX})(?P<ticks>```+)(?P<info>.*)\\Z")
_CLOSER = re.compile(f"{_PREFIX}?>>>{_BLANK}*\\Z")  # lazy: the prefix must not eat `>>>`
_REFUSED_KEPT = 20
_ESCAPED = re.compile(f"\\\\(\\\\*@{_NAMESPACE}:)")


def _byte_alternatives(chars: str) -> bytes:
    return b"|".join(re.escape(char.encode()) for char in chars)


_BLANK_BYTES = rb"(?:[ \t]|\xc2\xa0)"
_PLAIN_HEAD = re.compile(
    _BLANK_BYTES
    + b"*(?:(?:"
    + _byte_alternatives(PREFIX_CHARS)
    + b")"
    + _BLANK_BYTES
    + rb"*)*(?:@[a-z][a-z0-9_-]*:|```)"
)
"""On a line free of control bytes: could it be a directive or a fence at all?"""
_STATE_HEAD = re.compile(_BLANK_BYTES + b"*" + rb"\xe2")
"""Could this line start with a voice's marker or tool-output character (all are U+2xxx)?"""


def _state_pattern(voice: Voice) -> re.Pattern[bytes] | None:
    """The bytes of the characters that open or close the assistant's text, for a voice
    that follows blocks."""
    if not voice.follows_blocks:
        return None
    return re.compile(_byte_alternatives(voice.state_chars))


_CONTROL_BYTES = re.compile(rb"[\x00-\x08\x0a-\x0c\x0e-\x1f\x7f]|\r(?!\Z)|\xc2[\x80-\x9f]")
"""Bytes that clean_line removes or acts on (bar the CR of CRLF): a line without them
shows as it is."""
_FENCE_HINT = re.compile(rb"`[`\x00-\x09\x0b-\x1f\x7f]")
"""A backtick that may start a fence: followed by one, or by an escape or control byte."""


class Directive(msgspec.Struct, frozen=True, kw_only=True):
    """One directive found in the output, in stream order."""

    namespace: str
    target: str  # may be empty: `@relay: hi`
    message: str  # "" when absent; for a `<<<` body, its lines joined with "\n"
    line: str  # the directive's (first) line as the terminal shows it
    index: int  # 0, 1, 2, … in stream order


class ScreenLine(NamedTuple):
    """A row of a full-screen agent's display, read by DirectiveScanner.screen_lines."""

    text: str
    fresh: bool
    """Not read before: a directive on it counts (the others only give context)."""
    displayed: bool = False
    """Drawn as displayed content (a code block's colour at the text's own indent)."""


class _Body(msgspec.Struct):
    """A `@ns:target <<<` directive whose body lines are still arriving."""

    namespace: str
    target: str
    line: str
    lines: list[str]
    fresh: bool = True  # opened on a fresh screen row (or in a stream)


class DirectiveScanner:
    """Find directives in a terminal byte stream fed in chunks split anywhere."""

    def __init__(
        self,
        *,
        voice: Voice = PLAIN,
        max_body_lines: int = MAX_BODY_LINES,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        if max_body_lines < 0:
            raise ValueError(f"max_body_lines must be >= 0, got {max_body_lines}")
        self._max_body_lines = max_body_lines
        self._speaking = Speaking(voice)
        self._state = _state_pattern(voice)
        self.refused: list[str] = []
        """Directive-looking lines that were not the agent's own words (newest last, a
        few kept): displayed content, quotes, tool output."""
        self._limit = max_line_bytes
        self._pending = PendingLine(max_line_bytes)
        self._fence = 0  # backticks of the open fence; 0: outside a fence
        self._body: _Body | None = None
        self._count = 0
        self._muted = False  # reading a screen row that was read before (screen_lines)

    def feed(self, chunk: bytes) -> list[Directive]:
        """The directives completed by this chunk."""
        found: list[Directive] = []
        end = chunk.rfind(b"\n")
        if end < 0:
            self._pending.add(chunk)
            return found
        if self._pending.size:
            # A held line that was bounded is bounded again by _raw_line if still too long;
            # within the limit, bounding only dropped text a redraw hid (see bound_line).
            held, _ = self._pending.take()
            self._scan(held + chunk, 0, end + len(held), found)
        else:
            self._scan(chunk, 0, end, found)
        self._pending.add(chunk[end + 1 :])
        return found

    def close(self) -> list[Directive]:
        """End of stream: the last line counts even without a newline; an open body ends."""
        found: list[Directive] = []
        held, _ = self._pending.take()
        if held:
            self._raw_line(held, found)
        if self._body is not None:
            body, self._body = self._body, None
            self._emit_body(body, BODY_UNTERMINATED, found)
        self._fence = 0
        return found

    def screen_lines(self, lines: Iterable[ScreenLine]) -> list[Directive]:
        """The directives on the fresh rows of a run of screen rows, read top to bottom
        (relay.session.screen). The rows read before give context (the marker line that a
        continuation line belongs to); each run starts outside any block, fence or body,
        and a body still open at its end ends there."""
        found: list[Directive] = []
        self._speaking = Speaking(self._speaking.voice)
        self._fence = 0
        self._body = None
        for line in lines:
            self._muted = not line.fresh
            if line.displayed and self._body is None:
                if line.fresh and _DIRECTIVE.match(line.text) is not None:
                    self._refuse(line.text)
                continue
            self._text_line(line.text, found)
        self._muted = False
        if self._body is not None:
            body, self._body = self._body, None
            self._emit_body(body, BODY_UNTERMINATED, found)
        return found

    def _scan(self, data: bytes, pos: int, end: int, found: list[Directive]) -> None:
        """Scan the complete lines of data[pos:end + 1]; data[end] is a newline."""
        find = data.find
        never = end + 1
        at = tick = backspace = mark = -1  # next candidate of each kind; kept until passed
        state = self._state
        while pos <= end:
            if self._body is not None:
                # Inside a body every line counts, but a body is at most a few lines.
                stop = find(b"\n", pos)
                self._raw_line(data[pos:stop], found)
                pos = stop + 1
                continue
            if at < pos:
                at = find(b"@", pos, end)
                if at < 0:
                    at = never
            if tick < pos:
                match = _FENCE_HINT.search(data, pos, end)
                tick = never if match is None else match.start()
            if backspace < pos:
                backspace = find(b"\b", pos, end)
                if backspace < 0:
                    backspace = never
            if mark < pos:
                match = None if state is None else state.search(data, pos, end)
                mark = never if match is None else match.start()
            hit = min(at, tick, backspace, mark)
            if hit == never:
                return
            stop = find(b"\n", hit)
            if (
                hit == at
                and tick > stop
                and backspace > stop
                and mark > stop
                and find(b":", at, stop) < 0
            ):
                # No `:` after the line's first `@` and no fence hint: no directive and no
                # fence can be in it (`@property`, `Author: A <a@b.c>`, `npm … @scope/pkg`).
                pos = stop + 1
                continue
            start = data.rfind(b"\n", pos, hit) + 1
            if start == 0:
                start = pos
            self._raw_line(data[start:stop], found)
            pos = stop + 1

    def _raw_line(self, raw: bytes, found: list[Directive]) -> None:
        if len(raw) > self._limit:
            raw = bound_line(raw, self._limit)
        if (
            self._body is None
            and _CONTROL_BYTES.search(raw) is None
            and _PLAIN_HEAD.match(raw) is None
            and (self._state is None or _STATE_HEAD.match(raw) is None)
        ):
            return  # the common decoy: an e-mail address, a decorator, `npm … @scope/pkg`
        text = clean_line(raw)
        if (
            self._state is not None
            and self._body is None
            and self._may_speak(text)
            and LEFT_MOVE.search(raw) is not None
        ):
            # Redrawn: a row that began as tool output stays tool output, wherever later
            # bytes move the cursor (`  ⎿  out` + `\r● @deploy:prod go`).
            began = first_drawn(raw)
            if began is not None and self._speaking.voice.displayed_lead(*began):
                self._displayed_line(text, began)
                return
        self._text_line(text, found)

    def _may_speak(self, text: str) -> bool:
        """Whether where a line began can matter: it reads as a directive, a fence, or a
        marker or tool-output line (which open and close the assistant's text)."""
        body = text.lstrip(BLANKS)
        # Only a marker, a tool-output character or a blank lead can put a directive or a
        # fence where the agent speaks (Speaking.speaks); `@` and "`" start the rest.
        return bool(body) and (body[0] in self._speaking.voice.state_chars or body[0] in "@`")

    def _displayed_line(self, text: str, began: tuple[int, str]) -> None:
        """A line that began as displayed content: never a directive, nor a fence."""
        column, char = began
        self._speaking.observe(" " * column + char)  # tool output closes the assistant's text
        if not self._fence and not self._muted and _DIRECTIVE.match(text) is not None:
            self._refuse(text)

    def _text_line(self, text: str, found: list[Directive]) -> None:
        body = self._body
        if body is not None:
            if _CLOSER.match(text) is not None:
                self._body = None
                self._emit_body(body, None, found)
                return
            if len(body.lines) < self._max_body_lines:
                body.lines.append(text)
                return
            # Over the limit: the body ends here, and this line is ordinary output again.
            self._body = None
            self._emit_body(body, BODY_TRUNCATED.format(limit=self._max_body_lines), found)
        speaking = self._speaking
        speaking.observe(text)
        fence = _FENCE.match(text)
        if fence is not None and speaking.speaks(fence.group("prefix")):
            ticks, info = fence.group("ticks"), fence.group("info")
            if not self._fence:
                if "`" not in info:  # ```a``` is inline code, not a fence (CommonMark)
                    self._fence = len(ticks)
            elif len(ticks) >= self._fence and not info.strip():
                self._fence = 0
            return
        if self._fence:
            return
        match = _DIRECTIVE.match(text)
        if match is None:
            return
        if not speaking.speaks(match.group("prefix")):
            # Not where the agent speaks: a quote, tool output, a file it displays.
            if not self._muted:
                self._refuse(text)
            return
        namespace, target = match.group("namespace"), match.group("target")
        message = (match.group("message") or "").rstrip()
        line = text.rstrip()  # a TUI pads lines with blanks to its width
        if message == "<<<":
            self._body = _Body(namespace, target, line, [], fresh=not self._muted)
            return
        if not self._muted:
            self._emit(namespace, target, message, line, found)

    def _refuse(self, text: str) -> None:
        self.refused.append(text.rstrip())
        del self.refused[:-_REFUSED_KEPT]

    def _emit_body(self, body: _Body, marker: str | None, found: list[Directive]) -> None:
        if not body.fresh:
            return
        message = body_message(body.lines)
        if marker is not None:
            message = f"{message}\n{marker}" if message else marker
        self._emit(body.namespace, body.target, message, body.line, found)

    def _emit(
        self, namespace: str, target: str, message: str, line: str, found: list[Directive]
    ) -> None:
        found.append(
            Directive(
                namespace=namespace, target=target, message=message, line=line, index=self._count
            )
        )
        self._count += 1


def body_message(lines: list[str]) -> str:
    """A body's message: common indentation removed, blank edges trimmed."""
    text = textwrap.dedent("\n".join(line.rstrip() for line in lines))
    return text.strip("\n")


def unescape(text: str) -> str:
    """The display form of output text: one backslash fewer before each `@ns:`."""
    if "\\@" not in text:
        return text
    return _ESCAPED.sub(r"\1", text)

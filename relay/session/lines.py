"""Lines of terminal output: complete lines from a byte stream, and the text each one shows.

A PTY stream arrives in chunks cut anywhere: inside an escape sequence, inside a UTF-8
character, between `\\r` and `\\n`. Everything here works on complete lines (split on
`\\n` only), so no decision ever depends on where a chunk ended. See spec/directives.md.
"""

from __future__ import annotations

import collections
import re

MAX_LINE_BYTES = 1 << 20
"""A longer line is cut (see `bound_line`): full-screen TUIs may never print a newline."""

_LINE_RESET = re.compile(rb"\x1b\[[01]?G")
"""Cursor to column 1: on screen it acts as a carriage return. (An erase of the line,
`ESC [ 2 K`, does not: the cursor stays where it is; see _draw_cursor_moves.)"""

_AFTER_ESC = (
    rb"(?:\[[0-?]*[ -/]*(?:[@-~]|\Z|(?=\n))"  # CSI: colours, cursor moves (or cut off at line end)
    rb"|[\]PX^_][^\x07\x1b\n]*(?:\x07|\x1b\\)?"  # OSC, DCS, SOS, PM, APC: to BEL or ST
    rb"|[ -/]+[0-~]?"  # nF: charset selects such as ESC ( B
    rb"|[0-~]?)"  # ESC x (ESC 7, ESC =, ESC M, ST), or a lone ESC
)
_ESCAPE = re.compile(rb"\x1b" + _AFTER_ESC)  # the ESC first: a search jumps from one to the next
# A string sequence runs over a \r, as on a terminal (which draws nothing until its BEL or
# ST: `ESC ] 0 ; x \r text BEL` shows no text). No escape spans a \n, so a batch of lines
# joined by \n is cleaned as each line would be.

_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f]")
"""Control characters left after escapes and redraws are applied (tab is text)."""


def clean_line(raw: bytes) -> str:
    """The text a terminal shows for one raw line: escapes stripped, redraws applied."""
    return _finish(_strip_escapes(raw).decode("utf-8", "replace"))


def _strip_escapes(raw: bytes) -> bytes:
    if b"\x1b" not in raw:
        return raw
    # Colours and the like go in one pass; line resets and column moves, which change the
    # text and are rarer, are left for a second pass over the few escapes left. A regex
    # pass costs most at each ESC it stops at, and coloured output has one every ~50 bytes.
    raw = _OTHER_ESCAPE.sub(b"", raw)
    if b"\x1b" in raw:
        raw = _LINE_RESET.sub(b"\r", raw)
        if b"K" in raw:
            raw = _ERASE_AFTER_REDRAW.sub(b"", _ERASE_BEFORE_REDRAW.sub(b"", raw))
            raw = _ERASES.sub(b"\x1b[2K", raw)
        if _COLUMN_MOVE.search(raw) is not None:
            raw = _draw_cursor_moves(raw)
        raw = _ESCAPE.sub(b"", raw)
    return raw


_ERASE_BEFORE_REDRAW = re.compile(rb"\x1b\[[12]K(?:\x1b\[[12]K)*(?=\r(?!\n|\Z))")
_ERASE_AFTER_REDRAW = re.compile(rb"\x1b\[[12]K(?<=[\r\n]\x1b\[[12]K)(?:\x1b\[[12]K)*")
"""Erases of the line that change no text: a redraw right after (not the \r of \r\n),
or nothing drawn since the line's last redraw (Gemini CLI erases row after row). Taken
out at once, in C, they cost _draw_cursor_moves nothing. Both start with the ESC: a
search jumps from one to the next."""
_ERASES = re.compile(rb"\x1b\[[12]K(?:\x1b\[[12]K)+")
"""A run of erases of the line, which erase as one does."""
_COLUMN_MOVE = re.compile(rb"\x1b\[([0-9]{0,4})([CDG])|\x1b\[[12]K")
"""Cursor forward (CUF, `ESC [ n C`) and cursor to column n (CHA, `ESC [ n G`, n >= 2):
TUIs draw the blanks between words with them. Cursor back (CUB, `ESC [ n D`). And an
erase of the line, or of its start (`ESC [ 2 K`, `ESC [ 1 K`), which leaves the cursor
where it was."""
_OTHER_ESCAPE = re.compile(rb"\x1b(?!\[[0-9]{0,4}[CDGK])" + _AFTER_ESC)
"""Any escape but a line reset, a column move or an erase in line (`ESC [ n C|D|G|K`):
removing those first leaves the text each line shows unchanged: the only escapes that
hold an ESC past their first byte end with it (ST, `ESC \\`), so none spans one of them."""
_MAX_JUMP = 512


def _draw_cursor_moves(raw: bytes) -> bytes:
    """Column moves replaced by the blanks they leave on a fresh line, so that `●` +
    `ESC[3G` + `text` reads `● text`, not `●text`. A move left (CHA to a column the text
    already passed) cuts the text there: what follows is drawn over it. An erase of the
    line turns the text drawn so far into blanks: what follows is drawn after them, where
    the cursor is (`text ESC[2K ● x` shows `     ● x`, not `● x` at column 0)."""
    out = bytearray()
    pos = 0
    for move in _COLUMN_MOVE.finditer(raw):
        out += raw[pos : move.start()]
        pos = move.end()
        kind = move.group(2)
        if kind == b"C":
            out += b" " * min(int(move.group(1) or 1), _MAX_JUMP)
            continue
        start = max(out.rfind(b"\r"), out.rfind(b"\n")) + 1  # since the line's last redraw
        if kind is None:  # an erase
            if start < len(out):
                shown = _ESCAPE.sub(b"", bytes(out[start:])).decode("utf-8", "replace")
                out[start:] = b"\r" + b" " * len(shown)  # the \r hides what was erased
            continue
        count = min(int(move.group(1) or 1), _MAX_JUMP)
        shown = _ESCAPE.sub(b"", bytes(out[start:])).decode("utf-8", "replace")
        if kind == b"D":  # back: as a move to the column it reaches
            count = max(1, len(shown) - count + 1)
        if len(shown) < count - 1:
            out += b" " * (count - 1 - len(shown))
        elif len(shown) > count - 1:
            out[start:] = shown[: count - 1].encode()
    out += raw[pos:]
    return bytes(out)


LEFT_MOVE = re.compile(rb"\r(?!\Z)|\x08|\x1b\[[0-9]{0,4}[GD]")
"""What may move the cursor left on its row: a carriage return (but the one of \r\n), a
backspace, cursor to a column (CHA) or back (CUB). Only these, and the row's line feed,
are in a line's raw bytes; cursor addressing by row sends the stream to the screen model."""


def first_drawn(raw: bytes) -> tuple[int, str] | None:
    """Where a raw line first drew a non-blank character, and which, before the cursor
    moved left over it (None: nothing was drawn). However later bytes redraw the row, it
    began there: `  ⎿  out` + `\r● x` began as tool output at column 2."""
    column = 0
    at = 0
    for move in (*LEFT_MOVE.finditer(raw), None):
        end = len(raw) if move is None else move.start()
        # Between two left moves only escapes, blanks and moves forward change the
        # column; an erase does not (erased characters were drawn all the same).
        drawn = _ESCAPE.sub(b"", _CURSOR_FORWARD.sub(_forward_blanks, raw[at:end]))
        text = drawn.decode("utf-8", "replace")
        if _CONTROL.search(text) is not None:
            text = _CONTROL.sub("", text)
        body = text.lstrip(" \t\u00a0")
        if body:
            return column + len(text) - len(body), body[0]
        if move is None:
            return None
        column += len(text)
        at = move.end()
        token = move.group()
        if token == b"\r":
            column = 0
        elif token == b"\x08":
            column = max(0, column - 1)
        else:  # ESC [ n G (to column n) or ESC [ n D (n back)
            count = int(token[2:-1] or 1)
            column = count - 1 if token.endswith(b"G") else max(0, column - count)
    return None


_CURSOR_FORWARD = re.compile(rb"\x1b\[([0-9]{0,4})C")


def _forward_blanks(move: re.Match[bytes]) -> bytes:
    return b" " * min(int(move.group(1) or 1), _MAX_JUMP)


def _finish(text: str) -> str:
    """Redraws, backspaces and stray control characters of one decoded line."""
    if "\r" in text:
        text = text.rstrip("\r")  # the \r of \r\n, or a redraw nothing followed
        text = text[text.rfind("\r") + 1 :]  # a redraw: the text after the last \r wins
    if "\b" in text:
        text = _apply_backspaces(text)
    if _CONTROL.search(text) is not None:
        text = _CONTROL.sub("", text)
    return text


_CONTROLS_TO_CR = bytes(
    byte if byte in (0x09, 0x0A) or 0x20 <= byte < 0x7F or byte >= 0x80 else 0x0D
    for byte in range(256)
)
"""A translation table: every C0 control byte and DEL to \r, but tab and \n; with it a
bytes.find for \r finds each byte that _finish acts on at memchr speed."""
_C1_CONTROL = re.compile(rb"\xc2[\x80-\x9f]")
"""A C1 control character (U+0080-U+009F) in UTF-8, which _finish acts on too."""


def clean_block(raws: list[bytes]) -> str:
    """clean_line of each line of a batch, joined by newlines: escapes stripped and text
    decoded once for all, and per-line work only for the rare lines with redraws or
    controls (per-line work is what limits passthrough throughput)."""
    # A terminal line ends in \r\n (\r\r\n from a program that wrote \r\n itself): those
    # \r are no redraw (_finish strips them), and left in, every line would need _finish.
    joined = b"\n".join(raws).replace(b"\r\r\n", b"\n").replace(b"\r\n", b"\n").rstrip(b"\r")
    data = _strip_escapes(joined)
    # The lines that need _finish are found in the bytes, before decoding: a regex search
    # for a character class over the decoded text cost more than the rest of the cleaning.
    # No UTF-8 sequence holds a \n, so each part decodes as the whole would.
    marked = data.translate(_CONTROLS_TO_CR)
    never = len(data) + 1
    control = marked.find(b"\r")
    c1 = _C1_CONTROL.search(data)
    c1_at = never if c1 is None else c1.start()
    if control < 0:
        if c1 is None:
            return data.decode("utf-8", "replace")
        control = never
    parts: list[str] = []
    done = 0
    while (hit := min(control, c1_at)) != never:
        start = data.rfind(b"\n", 0, hit) + 1
        end = data.find(b"\n", hit)
        end = len(data) if end < 0 else end
        parts += (
            data[done:start].decode("utf-8", "replace"),
            _finish(data[start:end].decode("utf-8", "replace")),
        )
        done = end
        if control < end:
            control = marked.find(b"\r", end)
            control = never if control < 0 else control
        if c1_at < end:
            c1 = _C1_CONTROL.search(data, end)
            c1_at = never if c1 is None else c1.start()
    parts.append(data[done:].decode("utf-8", "replace"))
    return "".join(parts)


def clean_lines(raws: list[bytes]) -> list[str]:
    """clean_line for a batch of lines (see clean_block)."""
    return clean_block(raws).split("\n")


def _apply_backspaces(text: str) -> str:
    # Each backspace takes back the character before it, as overstrike output intends.
    shown: list[str] = []
    for char in text:
        if char != "\b":
            shown.append(char)
        elif shown:
            shown.pop()
    return "".join(shown)


def bound_line(line: bytes, limit: int = MAX_LINE_BYTES) -> bytes:
    """An over-long raw line cut to what matters: from its last redraw, at most `limit` bytes.

    Dropping the bytes before the last carriage return that text follows never changes
    `clean_line`'s result; the cut at `limit` does, by design. A trailing `\\r` is kept
    (as one), so the line can still grow by redraws: bounding a line's first part and
    then the whole gives what bounding the whole once gives.
    """
    text = line.rstrip(b"\r")
    redraw = _last_redraw(text)
    if redraw > 0:
        text = text[redraw:]
    trailing = b"\r" if line.endswith(b"\r") else b""
    return text[: max(limit, 2)] + trailing  # 2: room for the redraw \r and one character


_STRING_OPENER = re.compile(rb"\x1b[\]PX^_]")


def _last_redraw(text: bytes) -> int:
    """Where the last carriage return outside a string sequence is (-1: none). A \r
    inside one (`ESC ] 0 ; x \r … BEL`) redraws nothing: the string runs over it."""
    end = len(text)
    while (redraw := text.rfind(b"\r", 0, end)) >= 0:
        openers = _STRING_OPENER.finditer(text, max(0, redraw - _MAX_STRING_SEARCH), redraw)
        opener = collections.deque(openers, maxlen=1)  # the last string opened before it
        if not opener or _STRING_END.search(text, opener[0].end(), redraw) is not None:
            return redraw
        end = opener[0].start()
    return -1


_MAX_STRING_SEARCH = 1 << 16
"""How far before a \r a string sequence that holds it is looked for; a longer one is
taken as ended (a bound: bound_line runs on lines of megabytes)."""
_STRING_END = re.compile(rb"[\x07\x1b]")
"""What ends a string sequence in clean_line: BEL, or any ESC (ST, or a new sequence)."""


class PendingLine:
    """The unfinished last line of a stream, kept within a byte limit."""

    __slots__ = ("cut", "limit", "parts", "size")

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0
        self.cut = False  # bounded already: the completed line is bounded again

    def add(self, data: bytes) -> None:
        """Hold more of the line (data holds no newline)."""
        if not data:
            return
        self.parts.append(data)
        self.size += len(data)
        if self.size > 2 * self.limit:
            # A spinner redrawn with \r for hours, or a TUI that never prints \n: bounded.
            # At twice the limit, so that each bounding pays for the bytes since the last.
            line = bound_line(b"".join(self.parts), self.limit)
            self.parts, self.size, self.cut = [line], len(line), True

    def take(self) -> tuple[bytes, bool]:
        """What is held, and whether it was cut; the line starts over empty."""
        held, cut = b"".join(self.parts), self.cut
        self.parts, self.size, self.cut = [], 0, False
        return held, cut


class LineSplitter:
    """Complete raw lines (without the `\\n`) from chunks of a byte stream."""

    def __init__(self, *, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._limit = max_line_bytes
        self._pending = PendingLine(max_line_bytes)

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines this chunk completes; a line longer than the limit is bounded."""
        if b"\n" not in chunk:
            self._pending.add(chunk)
            return []
        lines = chunk.split(b"\n")
        self._pending.add(lines[0])
        first, cut = self._pending.take()
        lines[0] = bound_line(first, self._limit) if cut else first
        self._pending.add(lines.pop())
        if len(chunk) > self._limit or len(first) > self._limit:
            lines = [
                bound_line(line, self._limit) if len(line) > self._limit else line for line in lines
            ]
        return lines

    def skip(self, chunk: bytes) -> None:
        """Go past a chunk whose lines nobody wants: only the line it leaves open is kept."""
        end = chunk.rfind(b"\n")
        if end < 0:
            self._pending.add(chunk)
            return
        self._pending.take()
        self._pending.add(chunk[end + 1 :])

    def close(self) -> list[bytes]:
        """The final line, when the stream did not end with a newline."""
        line, cut = self._pending.take()
        if not line:
            return []
        return [bound_line(line, self._limit) if cut or len(line) > self._limit else line]


class RecentOutput:
    """The last complete lines of a byte stream (at most `count`), kept as the raw tail of
    the stream and split only when asked: output that nobody reads line by line costs a
    copy of its tail, not a split. A line longer than TAIL_BYTES is not among them."""

    TAIL_BYTES = 256 * 1024

    def __init__(self, count: int) -> None:
        self._count = count
        self._parts: list[bytes] = []
        self._size = 0
        self._cut = False
        """Whether bytes before the tail were dropped (its first line may be partial)."""
        self._ended = False

    def add(self, chunk: bytes) -> None:
        """More of the stream."""
        self._parts.append(chunk)
        self._size += len(chunk)
        if self._size > 2 * self.TAIL_BYTES:
            tail = b"".join(self._parts)[-self.TAIL_BYTES :]
            self._parts, self._size, self._cut = [tail], len(tail), True

    def end(self) -> None:
        """The stream ended: a last line without a newline counts as complete."""
        self._ended = True

    def lines(self) -> list[bytes]:
        """The last complete lines, oldest first (without their `\\n`)."""
        data = b"".join(self._parts)
        cut = self._cut or len(data) > self.TAIL_BYTES
        data = data[-self.TAIL_BYTES :]
        if self._ended and data and not data.endswith(b"\n"):
            data += b"\n"
        end = data.rfind(b"\n")
        if end < 0:
            return []
        lines = data[:end].split(b"\n")
        if cut:
            lines = lines[1:]  # began before the tail
        return lines[-self._count :]

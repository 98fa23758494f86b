"""A model of a full-screen agent's display, read for directives once its rows are final.

Claude Code and Gemini CLI draw with cursor addressing: they move the cursor between
rows, draw only the cells that change, and redraw a live area many times while an answer
streams. Their byte stream has no lines to read (DESIGN §8). Once an agent's output moves
the cursor up or to a row, relay keeps a model of its screen (pyte, a VT100 emulator) fed
with each chunk after the chunk has been passed to the user, and reads rows only when
they are final:

- a row that leaves the top of the screen (scrolled off, or moved up and off by a redraw)
  is final: the agent has drawn on past it;
- the rows on the screen are final once the agent has drawn nothing for SETTLE_SECONDS
  and neither its screen (Voice.busy, its interrupt hint) nor the last turn state it
  announced (Voice.turn_state, Codex's OSC 7501) says that it is still answering: a
  half-streamed line (`✦ @deploy:stagin`) is drawn, and redrawn, only while it says so;
- an erase of the whole display or a switch of screens ends a run of rows: what was on
  the screen then is not read (it is drawn again if it was final), what left it before is.

What has been read is kept as a document of rows. Each run of final rows is aligned with
it (difflib, in order), so that rows drawn again (a repaint, a redraw after scrolling, the
same screen read at the next pause) are not read twice, while a new row with the same text
as an old one is. Rows are handed to the DirectiveScanner with the voice's rules (which rows
are the agent's own words) and the row's colour (Claude Code's code blocks). See
spec/directives.md §3.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from difflib import SequenceMatcher
from typing import Any, NamedTuple

import pyte
from pyte.screens import Margins

from relay.session.directives import Directive, DirectiveScanner, ScreenLine
from relay.session.voices import BLANKS, Voice

__all__ = ["SETTLE_SECONDS", "Row", "ScreenReader", "draws_screen"]

SETTLE_SECONDS = 0.5
"""How long the agent draws nothing before the rows on its screen are read."""
KEPT_ROWS = 10_000
"""Rows of the document kept for alignment, and rows held between reads (oldest dropped)."""
CONTEXT_ROWS = 400
"""Document rows before a run that are read again (unfreshly) for the voice's context:
the marker line a continuation line belongs to."""
KEPT_MOVED = 1_000
"""Texts of rows drawn over from displayed content that are remembered (oldest dropped)."""
_ALTERNATE_SCREENS = frozenset({47, 1047, 1049})
_SYNCHRONIZED = 2026
"""Synchronized output: the rows drawn between its set and reset are one frame."""
_FRAME_FEEDS = 64
"""Feeds after which a frame never closed is compared anyway."""

_ADDRESSING = re.compile(rb"\x1b\[(?:[0-9;]*+[ABHfdr]|\?(?:47|1047|1049)h)")
"""Cursor moves up, down or to a row, a scroll region, or the alternate screen. The
quantifier is possessive: at each colour code (`ESC[1;31m`) the search fails at once,
not after backtracking digit by digit; half the cost on coloured output."""
_DIRECTIVE_HEAD = re.compile(r"@[a-z][a-z0-9_-]*:")
_STRING_START = re.compile(rb"\x1b[P_^X]")
_STRING_END = re.compile(rb"\x1b\\|\x07")
_MAX_STRING = 1 << 16
_STATE_TAIL = 64
"""Bytes of a chunk kept to find a turn state announcement cut by the next read."""


def draws_screen(data: bytes) -> bool:
    """Whether output addresses the cursor by row (a full-screen program), as opposed to
    lines that only move within themselves (`\\r`, column moves, `ESC[K`)."""
    return b"\x1b[" in data and _ADDRESSING.search(data) is not None


class Row(NamedTuple):
    """One row of the display as relay reads it."""

    text: str  # without trailing blanks
    colour: str  # foreground of its first non-blank cell (pyte's form), "" when blank


BLANK_ROW = Row("", "")


_MOVED = "relay_moved"
"""The attribute a pyte line gets when the row began as displayed content and bytes then
drew over its start: the column they drew at."""


class _Display(pyte.Screen):
    """pyte's Screen following a stream it must not answer, telling what leaves it.

    relay never answers the agent's terminal queries (the user's terminal does), private
    SGR forms (`ESC[>4;?m`, which pyte 0.8.2 would fail on) change nothing, and the
    alternate screen is a fresh display (pyte keeps one buffer).

    It keeps the provenance of rows (issue 29): a visit is the drawing the cursor does
    on one row before it draws on another. A row whose visit began as displayed content
    (the voice's tool output, or deeper than its text) stays displayed content when the
    same visit moves the cursor back over its start (a carriage return, a backspace,
    cursor to column 1 on the same row) and draws there: `  ⎿  out` + `\r● @deploy`
    is no marker row. Its text is told (`moved`), so that the same text drawn again by a
    repaint is displayed content too. A later visit that draws over its start afresh (a
    repaint) ends that."""

    def __init__(
        self,
        columns: int,
        lines: int,
        departed: Callable[[Row], None],
        ended: Callable[[bool], None],
        framed: Callable[[bool], None],
        *,
        voice: Voice,
        moved: Callable[[str], None],
    ) -> None:
        super().__init__(columns, lines)
        self._departed = departed
        self._ended = ended
        self._framed = framed
        self._voice = voice
        self._moved = moved
        self._tracks = voice.follows_blocks  # only those voices tell tool output apart
        self._last_line: object = None  # the line the last draw was on
        self._last_x = 0
        self._visit_lead: tuple[int, str] | None = None
        """Where the current visit drew its first non-blank character, and which."""

    def row(self, y: int) -> Row:
        line = self.buffer[y]
        text = "".join([line[x].data for x in range(self.columns)]).rstrip()
        if not text:
            return BLANK_ROW
        if getattr(line, _MOVED, None) is not None:
            self._moved(text)
        lead = len(text) - len(text.lstrip(BLANKS))
        return Row(text, line[lead].fg)

    def draw(self, data: str) -> None:
        if not self._tracks:
            super().draw(data)
            return
        cursor = self.cursor
        y = cursor.y
        line = self.buffer[y]
        # Most draws go on where the last one ended: they cost two comparisons.
        if line is not self._last_line:
            self._visit_lead = None
            if getattr(line, _MOVED, None) is not None:
                self._drawn_afresh(line, data)
        elif cursor.x < self._last_x:
            self._drawn_back(line, data)
        if self._visit_lead is None:
            body = data.lstrip(BLANKS)
            if body:
                self._visit_lead = self._row_lead(line, cursor.x) or (
                    cursor.x + len(data) - len(body),
                    body[0],
                )
        super().draw(data)
        self._last_line = line if cursor.y == y else self.buffer[cursor.y]
        self._last_x = cursor.x

    @staticmethod
    def _row_lead(line: Any, before: int) -> tuple[int, str] | None:
        """The row's first non-blank cell left of column `before`: a visit that draws on
        after it goes on with that row (a renderer that draws only the cells that changed,
        as Codex's does, draws a streamed word in the middle of its row)."""
        for x in range(before):
            char = line[x].data
            if char not in BLANKS:
                return (x, char)
        return None

    def _drawn_afresh(self, line: Any, data: str) -> None:
        """A new visit to a row drawn over: drawing over its start again ends that."""
        body = data.lstrip(BLANKS)
        if body and self.cursor.x + len(data) - len(body) <= getattr(line, _MOVED):
            self._tell(line)  # a repaint: its text goes, told first
            delattr(line, _MOVED)

    def _drawn_back(self, line: Any, data: str) -> None:
        """The visit draws again left of where it was: over the row's start, a row that
        began as displayed content is drawn over."""
        lead = self._visit_lead
        body = data.lstrip(BLANKS)
        if lead is None or not body:
            return
        at = self.cursor.x + len(data) - len(body)
        if at <= lead[0] and self._voice.displayed_lead(*lead):
            began = getattr(line, _MOVED, None)
            setattr(line, _MOVED, at if began is None else min(at, began))

    def _tell(self, line: Any) -> None:
        text = "".join([line[x].data for x in range(self.columns)]).rstrip()
        if text:
            self._moved(text)

    def erase_in_line(self, how: int = 0, *args: Any, **kwargs: Any) -> None:
        line = self.buffer[self.cursor.y]
        if getattr(line, _MOVED, None) is not None:
            self._tell(line)  # its text goes: told first
        super().erase_in_line(how, *args, **kwargs)

    def select_graphic_rendition(self, *attrs: int, **kwargs: Any) -> None:
        if kwargs.get("private"):
            return
        super().select_graphic_rendition(*attrs)

    def write_process_input(self, data: str) -> None:
        """Replies to queries: the user's terminal gives them, relay must not."""

    def index(self) -> None:
        top, bottom = self.margins or Margins(0, self.lines - 1)
        if self.cursor.y == bottom and top == 0:
            self._departed(self.row(0))
        super().index()

    def erase_in_display(self, how: int = 0, *args: Any, **kwargs: Any) -> None:
        if how in (2, 3):
            self._ended(False)
        for y in range(self.lines):
            line = self.buffer.get(y)
            if line is not None and getattr(line, _MOVED, None) is not None:
                self._tell(line)  # its text goes: told first
        super().erase_in_display(how, *args, **kwargs)

    def set_mode(self, *modes: int, **kwargs: Any) -> None:
        if not (kwargs.get("private") and self._private_mode(modes, on=True)):
            super().set_mode(*modes, **kwargs)

    def reset_mode(self, *modes: int, **kwargs: Any) -> None:
        if not (kwargs.get("private") and self._private_mode(modes, on=False)):
            super().reset_mode(*modes, **kwargs)

    def _private_mode(self, modes: tuple[int, ...], *, on: bool) -> bool:
        """A screen switch (a fresh display; True: handled) or a synchronized frame's
        start or end (told, then left to pyte)."""
        if _ALTERNATE_SCREENS.intersection(modes):
            self._ended(True)
            self.reset()
            return True
        if _SYNCHRONIZED in modes:
            self._framed(on)
        return False


class ScreenReader:
    """Reads a full-screen agent's display for directives (see the module's docstring)."""

    def __init__(self, voice: Voice, scanner: DirectiveScanner, rows: int, cols: int) -> None:
        self.voice = voice
        self._scanner = scanner
        self._moved_texts: dict[str, None] = {}
        """Texts of rows that began as displayed content and were drawn over (oldest
        first, at most KEPT_MOVED): displayed content wherever they are drawn."""
        self._display = _Display(
            cols,
            rows,
            self._depart,
            self._end_run,
            self._frame,
            voice=voice,
            moved=self._drawn_over,
        )
        self._stream = pyte.ByteStream(self._display)
        self._rows: list[Row] = [BLANK_ROW] * rows
        self._checkpoint = self._rows  # the rows when the screen was last whole (a frame's end)
        self._framing = 0  # feeds since a synchronized frame opened; 0: none is open
        self._departed: list[Row] = []  # rows that left the screen in the current run
        self._runs: list[list[Row]] = []  # finished runs not read yet
        self._held = 0  # rows in _departed and _runs
        self._moved = False  # rows left by index() or a run ended since the checkpoint
        self._document: list[Row] = []  # the non-blank rows read, oldest first
        self._string = b""  # an unfinished DCS/APC/PM/SOS string
        self._working = False  # the agent's last announced turn state said it works
        self._state_tail = b""  # the end of the last chunk: an announcement may span two
        self.dropped = 0
        """Held rows dropped unread because more than KEPT_ROWS waited (a long repaint)."""

    # -- the stream ----------------------------------------------------------------------

    def feed(self, data: bytes, size: tuple[int, int] | None = None) -> None:
        """The agent's next output (already shown to the user)."""
        display = self._display
        if size is not None and size != (display.lines, display.columns):
            self._end_run(False)
            display.resize(*size)
            self._rows = self._checkpoint = [BLANK_ROW] * display.lines
            display.dirty.update(range(display.lines))
        if self.voice.turn_state is not None:
            self._announced(data)
        data = self._without_strings(data)
        if not data:
            return
        self._stream.feed(data)
        if self._framing:
            self._framing += 1
            if self._framing <= _FRAME_FEEDS:
                return
            self._framing = 1
        self._whole()

    def _announced(self, data: bytes) -> None:
        """Follow the turn state the agent announces (Voice.turn_state), the last one wins."""
        pattern = self.voice.turn_state
        assert pattern is not None
        text = self._state_tail + data
        self._state_tail = text[-_STATE_TAIL:]
        if b"\x1b]" not in text:
            return
        states = pattern.findall(text)
        if states:
            self._working = states[-1] == b"working"

    @property
    def working(self) -> bool:
        """Whether the last turn state the agent announced (Voice.turn_state) says that it
        is working on a turn. Codex says so from a turn's start to its end: also while its
        answer streams (its busy hint gone) and while it draws nothing."""
        return self._working

    def _busy(self, rows: list[Row]) -> bool:
        """Whether the agent says that it is still answering: its last announced turn
        state, or its screen (an interrupt hint on a row)."""
        if self._working:
            return True
        busy = self.voice.busy
        return busy is not None and any(busy.search(row.text) for row in rows)

    def _frame(self, opening: bool) -> None:
        """A synchronized frame opens or closes: the screen is whole at both points."""
        self._whole()
        self._framing = 1 if opening else 0

    def _whole(self) -> None:
        """The screen is whole (not half drawn): bring the rows up to date and see whether a
        redraw moved rows up and off since it last was."""
        display = self._display
        if display.dirty:
            rows = list(self._rows)
            for y in display.dirty:
                if y < len(rows):
                    rows[y] = display.row(y)
            display.dirty.clear()
            self._rows = rows
        before, rows = self._checkpoint, self._rows
        if not self._moved and rows[0] != before[0]:
            self._redrawn_upwards(before, rows)
        self._moved = False
        self._checkpoint = rows

    def settle(self, *, final: bool = False) -> list[Directive]:
        """Read what is final: the runs that ended and the rows on the screen, unless the
        agent's screen says it is still answering (and the stream has not ended: `final`)."""
        self._whole()
        if not final and self._busy(self._rows):
            return []
        runs = [*self._runs, [*self._departed, *self._rows]]
        self._runs, self._departed, self._held = [], [], 0
        found: list[Directive] = []
        for run in runs:
            found += self._read(run)
        return found

    def screen(self) -> list[str]:
        """The rows on the screen now (for tests and debugging)."""
        return [row.text for row in self._rows]

    def _drawn_over(self, text: str) -> None:
        texts = self._moved_texts
        if text not in texts:
            texts[text] = None
            if len(texts) > KEPT_MOVED:
                del texts[next(iter(texts))]

    # -- what leaves the screen ----------------------------------------------------------

    def _depart(self, row: Row) -> None:
        self._moved = True
        self._departed.append(row)
        self._hold(1)

    def _end_run(self, keep_screen: bool) -> None:
        """The display is erased or replaced: rows that left it are a finished run. Its own
        rows are kept only when the agent leaves a screen it is not answering on."""
        self._moved = True
        if keep_screen:
            display = self._display
            rows = [display.row(y) for y in range(display.lines)]
            if not self._busy(rows):
                kept = [row for row in rows if row.text]
                self._departed.extend(kept)
                self._hold(len(kept))
        if self._departed:
            self._runs.append(self._departed)
            self._departed = []

    def _redrawn_upwards(self, before: list[Row], after: list[Row]) -> None:
        """A redraw that moved the screen's content up (Claude Code's full-screen renderer
        scrolls by drawing every row again): the rows above the moved block left. Only
        rows with text are matched (blank rows match anywhere)."""
        old = [(y, row) for y, row in enumerate(before) if row.text]
        new = [(y, row) for y, row in enumerate(after) if row.text]
        match = SequenceMatcher(
            None, [row for _, row in old], [row for _, row in new], autojunk=False
        ).find_longest_match(0, len(old), 0, len(new))
        if match.size < 2:
            return
        shift = old[match.a][0] - new[match.b][0]
        if shift > 0:
            gone = [row for y, row in old if y < shift]
            self._departed.extend(gone)
            self._hold(len(gone))

    def _hold(self, count: int) -> None:
        self._held += count
        while self._held > KEPT_ROWS and (self._runs or self._departed):
            oldest = self._runs[0] if self._runs else self._departed
            drop = min(len(oldest), self._held - KEPT_ROWS)
            del oldest[:drop]
            if self._runs and not self._runs[0]:
                del self._runs[0]
            self._held -= drop
            self.dropped += drop

    # -- reading -------------------------------------------------------------------------

    def _read(self, run: list[Row]) -> list[Directive]:
        """The directives on the rows of a run not read before."""
        places = [y for y, row in enumerate(run) if row.text]
        rows = [run[y] for y in places]
        if not rows:
            return []
        document = self._document
        window = max(0, len(document) - 2 * len(rows) - CONTEXT_ROWS)
        matcher = SequenceMatcher(None, document[window:], rows, autojunk=False)
        blocks = [block for block in matcher.get_matching_blocks() if block.size]
        seen = [False] * len(rows)
        for block in blocks:
            seen[block.b : block.b + block.size] = [True] * block.size
        if blocks:
            anchor = window + blocks[0].a
            context = document[max(0, anchor - CONTEXT_ROWS) : anchor] if blocks[0].b == 0 else []
            del document[anchor:]
        else:
            context = document[-CONTEXT_ROWS:]
        document.extend(rows)
        if len(document) > KEPT_ROWS:
            del document[: len(document) - KEPT_ROWS]
        if all(seen):
            return []
        colours = self.voice.code_colours
        lines = [ScreenLine(row.text, False) for row in context]
        k = 0
        while k < len(rows):
            row, text = rows[k], rows[k].text
            k += 1
            if "@" in text:  # a directive wrapped by the host goes on on the next rows
                start = self._text_column(text)
                while k < len(rows) and places[k] == places[k - 1] + 1:
                    more = self._wrapped(rows[k - 1].text, rows[k].text, start)
                    if more is None:
                        break
                    text = f"{text} {more}"
                    k += 1
            displayed = (row.colour in colours and text[0] in BLANKS) or (
                row.text in self._moved_texts
            )
            lines.append(ScreenLine(text, not seen[k - 1], displayed=displayed))
        return self._scanner.screen_lines(lines)

    def _text_column(self, text: str) -> int:
        """The column a row's words start at (after the voice's marker, if any)."""
        body = text.lstrip(BLANKS)
        start = len(text) - len(body)
        if body[:1] and body[:1] in self.voice.markers:
            start += len(body) - len(body[1:].lstrip(BLANKS))
        return start

    def _wrapped(self, text: str, following: str, start: int) -> str | None:
        """The text of row `following` when it goes on with row `text`, wrapped there by
        the host: it starts at column `start` (where the words above start), and its first
        word would not have fitted on the row above (a host wraps at word boundaries). A
        row that starts with a directive starts one of its own."""
        rest = following.lstrip(BLANKS)
        if not rest or len(following) - len(rest) != start or _DIRECTIVE_HEAD.match(rest):
            return None
        word = rest.split(maxsplit=1)[0]
        if len(text) + 1 + len(word) <= self._display.columns:
            return None
        return rest

    def _without_strings(self, data: bytes) -> bytes:
        """The output without DCS, APC, PM and SOS strings (pyte would draw their text:
        a kitty graphics query is `ESC _ G… ESC \\`); one may span chunks."""
        if self._string:
            data = self._string + data
            self._string = b""
        if b"\x1b" not in data:
            return data
        kept: list[bytes] = []
        at = 0
        while (start := _STRING_START.search(data, at)) is not None:
            kept.append(data[at : start.start()])
            end = _STRING_END.search(data, start.end())
            if end is None:
                tail = data[start.start() :]
                self._string = tail if len(tail) <= _MAX_STRING else b""
                return b"".join(kept)
            at = end.end()
        kept.append(data[at:])
        return b"".join(kept)

"""Typing text into the wrapped agent without trampling the human (DESIGN §9).

Earlier wrappers typed over what the human was writing, typed before the agent was
ready, and lost or doubled messages. The Injector delivers a FIFO queue one text at a
time, and only when the agent's output has been quiet for `quiet_ms` (it has drawn its
prompt and is waiting) and the human has no half-typed line. It never erases the
human's line to make room: it waits until the human submits or clears it.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Literal

import anyio

from relay.session.keys import legacy

PASTE_START = b"\x1b[200~"
PASTE_END = b"\x1b[201~"

# DECSET / DECRST with any parameter list (ESC [ ? 2004 h, ESC [ ? 1049 ; 2004 l), or
# a full reset (ESC c), which turns every mode off. The quantifier is possessive (*+): at
# each colour code the search fails without backtracking digit by digit.
_PRIVATE_MODE = re.compile(rb"\x1b\[\?([0-9;]*+)([hl])|\x1bc")
# The start of a private mode sequence that the next chunk may complete.
_PRIVATE_MODE_PREFIX = re.compile(rb"\x1b(?:\[(?:\?[0-9;]*)?)?\Z")
_PREFIX_LIMIT = 64  # longer than any real mode list; bounds the carried tail
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# C0 controls except tab and line breaks, DEL, C1 controls: an injected ESC could end a
# bracketed paste early and turn the rest of the text into keystrokes.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# What an input box draws around its text: prompt marks and borders, at either end.
_BOX_EDGE = re.compile(r"^[\s>\u203a\u276f\u2502|*]+|[\s\u2502|]+$")
_STRING_LIMIT = 512  # a terminal's string reply is far shorter
_MIN_CHUNK = len(PASTE_END) + 4  # a marker and the longest UTF-8 character fit

Exclusive = Callable[[], AbstractAsyncContextManager[object]]


Admit = Callable[[], Awaitable[bool]]
Screen = Callable[[], "list[str] | None"]
"""The rows a full-screen agent shows now, or None while it draws no screen."""
Busy = Callable[[], bool]
"""Whether the agent says it is working on a turn (its interrupt hint on the screen, or
the turn state it announced)."""
Foreground = Callable[[], "bool | None"]
"""Whether the agent's own process group has its terminal now (False while a job of its
own has it), or None when that cannot be told."""
Outcome = Literal["submitted", "left", "typed"]
"""What became of a delivered text (see Submission in the Injector's docstring)."""

DRAW_SECONDS = 0.1
"""The agent drew nothing for this long after drawing the paste: the Enter may follow
(Gemini CLI takes an Enter read within 40 ms of a paste, or 30 ms of a key, for a newline)."""
DRAW_LIMIT = 5.0
"""Seconds to wait for the agent to draw what was typed before the Enter is sent anyway."""
SETTLED_SECONDS = 0.3
"""After an Enter, the screen holds the same for this long: it is the agent's answer to it."""
CONFIRM_LIMIT = 15.0
"""Seconds to wait for the agent to take an Enter in (it may be busy, or stopped)."""
ENTER_RETRIES = 2
"""Enters sent again when the first was taken for a newline (each alone, after a pause)."""
REACTION_SECONDS = 5.0
"""After the human submits a line: how long to wait for the agent to react to it."""
TURN_START_SECONDS = 10.0
"""After an agent that shows its turns (a busy hint) took the human's line in: how long
after the Enter to wait for its turn to show before the line counts as not starting one."""
BUSY_LIMIT = 120.0
"""An agent whose busy hint stays up with no output for this long is not waited for."""
BUSY_ROWS = 12
"""The bottom rows of the screen where an agent's busy hint is looked for."""
_POLL = 0.02


@dataclass(frozen=True)
class _HumanEnter:
    """The human submitted a line: when, the output count then, the start of its text,
    and the screen's rows that showed it then (its input box)."""

    at: float
    outputs: int
    needle: str
    box: set[tuple[int, str]]
    taken: bool = False
    """The agent has taken the line in (drawn it out of its input box)."""


@dataclass(eq=False)  # queued texts are told apart by identity: two may be alike
class _Message:
    text: str
    key: str | None
    admit: Admit | None = None


class Injector:
    """Types queued texts into the agent, one at a time, when the agent and the human are both idle.

    Feed it what the agent prints (`observe_output`) and what the human types
    (`observe_input`); `submit` texts; keep `run` running in a task.

    Readiness: the agent has printed something (unless `await_first_output` is False:
    an agent is not ready before it draws its prompt), then nothing for `quiet_ms`, and
    no partial human line is pending. A delivery counts as activity too, so the next
    text waits another `quiet_ms`, for the agent's reaction.

    Delivery: with bracketed paste on (see Paste mode), ESC[200~ + text + ESC[201~, line
    breaks sent as CR like a terminal's paste; without it, every line
    break (CRLF, CR or LF) becomes one space, so the text is one line that one Enter
    submits and no line of it can be submitted early; tabs become spaces too (a tab
    would trigger completion). Control characters are removed from the text in both
    modes, and trailing line breaks dropped. Then, after `enter_delay_ms`, `enter` in a
    write of its own: agents that detect pastes by timing would otherwise take it for
    a newline inside the paste. Bytes are written in chunks of at most `chunk_size`
    (never splitting a UTF-8 character or a paste marker), `pace_ms` apart.

    With `exclusive` (for example `AgentPty.exclusive_input`), the whole delivery holds
    the agent's input, so keys the human types meanwhile arrive after the Enter instead
    of inside the text; readiness is checked again once it is held.

    Paste mode: a paste is typed only into an agent that asked for one itself and can
    take it. relay sees bytes, not who wrote them: a file the agent shows, by a tool that
    writes to the same terminal (`cat`) or printed by the agent itself, can hold
    ESC[?2004h and ESC[?2004l as well. Two things tell them apart. Who has the terminal
    when the chunk is read (`foreground`, for example `AgentPty.owns_terminal`): a mode
    sequence counts only while the agent's own process group is the terminal's
    foreground group, so a job the agent runs in a group of its own (a shell's `cat`,
    an editor) changes nothing, either way. And whether the agent takes pastes at all:
    an agent that takes them turns the mode on as it starts (Claude Code, Gemini CLI and
    Codex do), before it is given any input (a key of the human's that is not an escape
    sequence or a terminal's reply, or a text relay typed), when it has shown no file
    yet. So ESC[?2004h counts before the first input; after it, only from an agent that
    turned the mode on during its start-up (one that turns it off and on again around a
    child it runs, or an editor it opens, gets pastes again), never from one that did
    not, whatever its output holds later. ESC[?2004l and ESC c (a full reset) turn the
    mode off. Without `foreground`, or when it cannot tell (None), every sequence is
    taken for the agent's except ESC[?2004h after the first input. A paste is typed only
    while the agent's own group has the terminal (a job of its own reads it otherwise)
    and, by `line_mode` (for example `AgentPty.line_mode`), reads it key by key: in line
    mode the terminal driver would submit each line of a paste. Neither is asked when
    the mode sequence arrives but when the text is typed: relay reads a chunk after the
    agent wrote it, and agents turn the mode on just before raw mode (crossterm's
    EnableBracketedPaste, then enable_raw_mode).

    Admission: a text submitted with `admit` is typed only once `admit()` returns True
    (awaited when the text is next and the agent ready); on False it is dropped and its
    key forgotten. A session hands a message over while its claim in the mailbox is
    still under way, and the claim decides. `withdraw(key)` takes a queued text back at
    once (not one being typed), its key forgotten too.

    Submission (with `screen`, once the agent draws a full screen): a text counts as
    submitted only on evidence from the agent's screen, never on its echo in the input
    box. Before the Enter, relay waits until the agent has drawn what was typed and then
    drawn nothing for DRAW_SECONDS (an Enter read together with a paste, or right after
    it, is a newline to Gemini CLI), at most DRAW_LIMIT. The rows the typing added to the
    screen are its input box. After the Enter: the box's rows gone from where they were,
    and the screen settled that way, is `submitted`; the box still there once the agent
    has drawn its answer to the Enter and gone quiet means the Enter was taken for a
    newline, and one more Enter is sent alone (at most ENTER_RETRIES times: an Enter
    into an input box holding the text submits it once, and an Enter into an empty box
    submits nothing, so the text is never submitted twice). A text still in the box
    after that is `left`, and nothing more is typed while it is there (the next text
    would join it in the box, unsent). Without a screen, or when the typing added no row the screen
    model can tell, the outcome is `typed` (the caller looks for other evidence).

    The human's line: after the human submits a line, a text waits until the agent has
    reacted to it (drawn something, for at most REACTION_SECONDS) and gone quiet again,
    and while `busy()` says the agent is working on a turn (for at most BUSY_LIMIT
    without output), so the human's line gets its own answer before relay types. With
    `shows_turns` (the agent shows a busy hint while a turn runs), a line it has taken in
    is waited on until its turn shows (at most TURN_START_SECONDS after the Enter): an
    agent slowed down may go quiet between taking the line and drawing its hint.

    Bookkeeping: `delivered` lists the texts as sent, in order, and `on_delivered(text,
    key, outcome)` is called once its Enter is written and the outcome known (for the
    transcript, or to acknowledge a message only once the agent has it). A delivery that fails or is cancelled before
    its first write returned stays queued; one that fails or is cancelled later is
    dropped, neither retried nor reported: part of it was typed, and typing it again
    would double it.
    """

    def __init__(
        self,
        write: Callable[[bytes], Awaitable[None]],
        *,
        quiet_ms: int = 500,
        chunk_size: int = 512,
        pace_ms: int = 10,
        enter: bytes = b"\r",
        enter_delay_ms: int = 100,
        await_first_output: bool = True,
        exclusive: Exclusive | None = None,
        on_delivered: Callable[[str, str | None, Outcome], None] | None = None,
        line_mode: Callable[[], bool] | None = None,
        on_waiting: Callable[[bool], None] | None = None,
        screen: Screen | None = None,
        busy: Busy | None = None,
        shows_turns: bool = False,
        foreground: Foreground | None = None,
    ) -> None:
        """An injector writing through `write` (typically `AgentPty.write`); `on_waiting`
        is told when a text starts, and stops, waiting for the human to finish a line."""
        if chunk_size < _MIN_CHUNK:
            raise ValueError(f"chunk_size must be at least {_MIN_CHUNK} bytes, got {chunk_size}")
        self._write = write
        self._on_waiting = on_waiting
        self._waiting_on_human = False
        self._quiet = quiet_ms / 1000
        self._chunk_size = chunk_size
        self._pace = pace_ms / 1000
        self._enter = enter
        self._enter_delay = enter_delay_ms / 1000
        self._exclusive = exclusive
        self._on_delivered = on_delivered
        self._line_mode = line_mode
        self._screen = screen
        self._busy = busy
        self._shows_turns = shows_turns and busy is not None
        self._foreground = foreground
        self.delivered: list[str] = []
        self.enters = 0
        """Enters written (a retry after a newline counts again)."""
        self._outputs = 0  # chunks of output seen
        self._last_output = time.monotonic()
        self._stuck: list[tuple[int, str]] = []
        """The input box of a text left in it: nothing more is typed while it is there."""
        self._human_enter: _HumanEnter | None = None
        """A line the human submitted that the agent has not reacted to yet."""
        self._queue: deque[_Message] = deque()
        self._keys: set[str] = set()
        self._last_activity = time.monotonic()
        self._output_seen = not await_first_output
        self._bracketed_paste = False
        self._given_input = False  # the agent's start-up is over (see Paste mode)
        self._takes_pastes = False  # it turned the mode on itself during its start-up
        self._output_tail = b""
        self._line = _HumanLine(line_mode)
        self._changed: anyio.Event | None = None
        self._running = False
        self._typing: _Message | None = None

    # ---- what relay sees

    def observe_output(self, data: bytes, *, modes: bool = True) -> None:
        """Agent output seen: restart the quiet timer; track bracketed paste mode.
        `modes=False`: the caller found no mode sequence in `data` (escapes.acted_on), so
        only one begun at the end of the last chunk is looked for."""
        if not data:
            return
        self._last_activity = self._last_output = time.monotonic()
        self._outputs += 1
        first = not self._output_seen
        self._output_seen = True
        self._scan_modes(data, search=modes)
        if first and self._queue:
            # Only the first output changes what a waiting text waits for. Later output
            # moves the end of the quiet period, which the waiting text's timer re-checks
            # when it fires: a wake-up per chunk would cost a fast writer's throughput.
            self._notify()

    def observe_input(self, data: bytes) -> None:
        """The human's keys, as relay passes them to the agent: track whether a partial line is pending."""
        if data:
            lines = self._line.submitted
            self._line.feed(data)
            if self._line.submitted != lines:
                rows = self._rows()
                needle = " ".join(self._line.last.split())[:12]
                box = {(y, row) for y, row in enumerate(rows) if needle in row} if rows else set()
                self._human_enter = _HumanEnter(time.monotonic(), self._outputs, needle, box)
            if self._line.keyed:
                self._given_input = True
            if self._queue:
                self._notify()

    @property
    def bracketed_paste(self) -> bool:
        """Whether the agent turned bracketed paste on itself (see Paste mode), has its
        terminal and reads it key by key now: a paste is typed only then."""
        return (
            self._bracketed_paste
            and not self._reads_lines()
            and (self._foreground is None or self._foreground() is not False)
        )

    def _reads_lines(self) -> bool:
        return self._line_mode is not None and self._line_mode()

    @property
    def human_line_pending(self) -> bool:
        """Whether the human has typed part of a line and not yet submitted or cleared it."""
        return self._line.pending

    # ---- the queue

    def submit(self, text: str, *, key: str | None = None, admit: Admit | None = None) -> bool:
        """Queue `text` (FIFO); False, and nothing queued, for an empty text or a key seen before.

        A key is remembered for the injector's lifetime: a message delivered once is
        not typed again when it is submitted again. `admit`: see Admission in the class
        docstring.
        """
        if not text:
            return False
        if key is not None:
            if key in self._keys:
                return False
            self._keys.add(key)
        self._queue.append(_Message(text, key, admit))
        self._notify()
        return True

    def withdraw(self, key: str) -> bool:
        """Take back the queued text with this key before it is typed, and forget the key
        (it may be submitted again); False when none is queued, or it is being typed."""
        for message in self._queue:
            if message.key == key:
                if message is self._typing:
                    return False
                self._drop(message)
                return True
        return False

    def _drop(self, message: _Message) -> None:
        self._queue.remove(message)
        if message.key is not None:
            self._keys.discard(message.key)
        self._notify()

    @property
    def pending(self) -> int:
        """Texts not yet fully delivered (the one being typed included)."""
        return len(self._queue)

    async def drained(self) -> None:
        """Wait until every submitted text is delivered."""
        while self._queue:
            await self._next_change()

    async def run(self) -> None:
        """Deliver queued texts in order, one at a time, each when the agent and the human are idle; runs until cancelled."""
        if self._running:
            raise RuntimeError("Injector.run is already running: two would double deliveries")
        self._running = True
        try:
            await self._run()
        finally:
            self._running = False
            self._tell_waiting(False)

    async def _run(self) -> None:
        while True:
            self._tell_waiting(bool(self._queue) and self._line.pending and self._output_seen)
            if not self._queue:
                await self._next_change()
                continue
            wait = self._time_to_ready()
            if wait is None or wait > 0:
                with anyio.move_on_after(wait if wait is not None else float("inf")):
                    await self._next_change()
                continue
            head = self._queue[0]
            if head.admit is not None:
                admitted = await head.admit()
                head.admit = None
                if not admitted and head in self._queue:
                    self._drop(head)
                continue  # time has passed: readiness is checked again
            async with self._hold():
                # Keys may have arrived, or the text been withdrawn, while the input was
                # being acquired.
                if self._time_to_ready() != 0 or not self._queue or self._queue[0] is not head:
                    continue
                self._typing = head
                try:
                    await self._deliver(head)
                finally:
                    self._typing = None
            self._queue.remove(head)
            self._last_activity = time.monotonic()
            self._notify()

    def _tell_waiting(self, waiting: bool) -> None:
        if waiting != self._waiting_on_human:
            self._waiting_on_human = waiting
            if self._on_waiting is not None:
                self._on_waiting(waiting)

    # ---- delivery

    def _time_to_ready(self) -> float | None:
        """0 when ready, seconds until it may be, or None while waiting on the human or the first output."""
        if self._line.pending or not self._output_seen:
            return None
        now = time.monotonic()
        enter = self._human_enter
        if enter is not None and not enter.taken:
            reacted = self._reacted(enter)
            if not reacted and now - enter.at < REACTION_SECONDS:
                return min(0.1, enter.at + REACTION_SECONDS - now)
            # Taken (or nothing shows it: not waited for longer).
            enter = self._human_enter = replace(enter, taken=True) if reacted else None
        if enter is not None:
            if not self._shows_turns or self._agent_busy():
                self._human_enter = None  # its turn shows: the busy wait below holds the text
            elif now - enter.at < TURN_START_SECONDS:
                return 0.1  # taken, its turn not shown yet
            else:
                self._human_enter = None  # no turn came of it (a command of the agent's own)
        if self._stuck:
            rows = self._rows()
            if rows is not None and _in_box(rows, self._stuck, ENTER_RETRIES):
                return 0.1  # a text left in the box: more would pile up in it
            self._stuck = []
        wait = max(0.0, self._last_activity + self._quiet - now)
        if wait == 0 and self._agent_busy() and now - self._last_output < BUSY_LIMIT:
            return 0.1  # its turn runs (the hint is on screen): looked at again shortly
        return wait

    def _reacted(self, enter: _HumanEnter) -> bool:
        """Whether the agent has taken the human's line in: it drew since, and, on a
        full screen, shows the line on a row other than its input box had then (a turn
        sent: Codex empties its box at once, and shows the turn only once it starts)."""
        if self._outputs == enter.outputs:
            return False
        rows = self._rows()
        if rows is None or not enter.needle:
            return True
        return any(enter.needle in row and (y, row) not in enter.box for y, row in enumerate(rows))

    def _agent_busy(self) -> bool:
        return self._busy is not None and self._busy()

    @contextlib.asynccontextmanager
    async def _hold(self) -> AsyncIterator[None]:
        if self._exclusive is None:
            yield
            return
        async with self._exclusive():
            yield

    async def _deliver(self, message: _Message) -> None:
        payload = self.encode(message.text, bracketed_paste=self.bracketed_paste)
        before = self._rows()
        started = False
        try:
            for index, chunk in enumerate(_chunks(payload, self._chunk_size)):
                if index:
                    await anyio.sleep(self._pace)
                self._given_input = True  # before the write: the agent may answer at once
                await self._write(chunk)
                started = True
            written = self._outputs
            await anyio.sleep(max(self._enter_delay, self._pace))
            if before is not None:
                await self._drawn(written)
            box = _box(before, self._rows(), message.text)
            outcome: Outcome = "typed"
            if box:
                outcome = await self._confirm(box)
            else:
                await self._enter_key()
        except BaseException:
            if started:
                # Partly typed: typing it again would double it, so it is dropped.
                self._queue.remove(message)
                self._notify()
            raise
        self.delivered.append(message.text)
        if self._on_delivered is not None:
            self._on_delivered(message.text, message.key, outcome)

    def _rows(self) -> list[str] | None:
        return self._screen() if self._screen is not None else None

    async def _enter_key(self) -> None:
        await self._write(self._enter)
        self.enters += 1

    async def _drawn(self, written: int) -> None:
        """Wait until the agent has drawn something since `written` and then nothing for
        DRAW_SECONDS (at most DRAW_LIMIT)."""
        deadline = time.monotonic() + DRAW_LIMIT
        while time.monotonic() < deadline:
            if self._outputs > written and time.monotonic() - self._last_output >= DRAW_SECONDS:
                return
            await anyio.sleep(_POLL)

    async def _confirm(self, box: list[tuple[int, str]]) -> Outcome:
        """Send the Enter: `submitted` once the input box's rows are gone; the Enter sent
        again (alone) while they stay; `left` when they are still there after that."""
        for attempt in range(ENTER_RETRIES + 1):
            written = self._outputs
            await self._enter_key()
            if await self._taken(box, written, attempt):
                return "submitted"
        self._stuck = box
        return "left"

    async def _taken(self, box: list[tuple[int, str]], written: int, newlines: int) -> bool:
        """Whether the agent took the text in: its box rows gone and the screen settled
        so (True), or still there with the agent quiet after drawing (False)."""
        deadline = time.monotonic() + CONFIRM_LIMIT
        gone_since: float | None = None
        while True:
            await anyio.sleep(_POLL)
            now = time.monotonic()
            rows = self._rows()
            if rows is None:
                return True  # the agent left its screen: the text went with it
            held = _in_box(rows, box, newlines)
            if held:
                gone_since = None
                quiet = now - self._last_output >= SETTLED_SECONDS
                if (self._outputs > written and quiet) or now >= deadline:
                    return False
            else:
                gone_since = gone_since if gone_since is not None else now
                if now - gone_since >= SETTLED_SECONDS or now >= deadline:
                    return True

    @staticmethod
    def encode(text: str, *, bracketed_paste: bool) -> bytes:
        """The bytes typed for `text`, without the Enter (see the class docstring)."""
        text = _CONTROL.sub("", text).rstrip("\r\n")
        if bracketed_paste:
            return PASTE_START + _LINE_BREAK.sub("\r", text).encode() + PASTE_END
        return _LINE_BREAK.sub(" ", text).replace("\t", " ").encode()

    # ---- wake-ups

    async def _next_change(self) -> None:
        """Wait for the next observe, submit or delivery."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def _scan_modes(self, data: bytes, *, search: bool = True) -> None:
        """Follow ESC[?2004h / ESC[?2004l / ESC c as written by the agent itself (see Paste
        mode), even when a sequence is split across chunks."""
        buffer = self._output_tail + data if self._output_tail else data
        # Only ESC[?…h/l and ESC c change anything here. One search first, as most output
        # has none: it stops only at ESC, half the cost of two substring tests on output
        # full of colour codes (tests/perf/bench_session.py).
        first = _PRIVATE_MODE.search(buffer) if search or self._output_tail else None
        matches = list(_PRIVATE_MODE.finditer(buffer, first.start())) if first else []
        writer: bool | None = None  # asked once per chunk, and only for a paste mode
        asked = False
        for match in matches:
            if match.group(2) is not None and b"2004" not in match.group(1).split(b";"):
                continue  # another private mode
            if not asked:
                writer, asked = self._agent_has_terminal(), True
            if writer is False:
                continue  # a job of the agent's own has the terminal: its bytes, not the agent's
            if match.group(2) != b"h":  # ESC[?2004l, or ESC c
                self._bracketed_paste = False
            elif not self._given_input:
                self._bracketed_paste = self._takes_pastes = True
            elif writer and self._takes_pastes:
                # After the first input an enable may be a file the agent shows; one the
                # agent's own group wrote to an agent that took pastes from its start is
                # the agent's again (after a child it ran, an editor, a suspend).
                self._bracketed_paste = True
        start = buffer.rfind(b"\x1b", max(0, len(buffer) - _PREFIX_LIMIT))
        if start >= 0 and _PRIVATE_MODE_PREFIX.match(buffer, start):
            self._output_tail = buffer[start:]
        else:
            self._output_tail = b""

    def _agent_has_terminal(self) -> bool | None:
        return None if self._foreground is None else self._foreground()


def _box(before: list[str] | None, after: list[str] | None, text: str) -> list[tuple[int, str]]:
    """The rows the typing added to the screen that show part of `text`, as (row, text):
    the input box holding it (rows that were on the screen before, anywhere, and rows
    of the agent's own, a hint or a counter, are not counted)."""
    if before is None or after is None:
        return []
    shown = {row.rstrip() for row in before}
    typed = " ".join(text.split())
    return [
        (y, row.rstrip())
        for y, row in enumerate(after)
        if row.strip() and row.rstrip() not in shown and _shows_part(row, typed)
    ]


def _shows_part(row: str, typed: str) -> bool:
    """Whether a row shows a piece of the typed text: its words, after the box's prompt
    or border characters, start with at least 6 characters of it (or all of a shorter one)."""
    words = " ".join(_BOX_EDGE.sub(" ", row).split())
    if not words:
        return False
    return words[: min(len(words), 12)] in typed and min(len(words), 12) >= min(6, len(typed))


def _in_box(rows: list[str], box: list[tuple[int, str]], newlines: int) -> bool:
    """Whether a row of the input box is still on the screen where it was: at most one
    row lower, or higher by the rows the Enters taken for newlines added to the box."""
    for y, text in box:
        for near in range(max(0, y - 1 - newlines), min(len(rows), y + 2)):
            if rows[near].rstrip() == text:
                return True
    return False


def _chunks(payload: bytes, size: int) -> Iterator[bytes]:
    """`payload` in pieces of at most `size` bytes, never inside a UTF-8 character or the closing paste marker."""
    marker_at = len(payload) - len(PASTE_END) if payload.endswith(PASTE_END) else len(payload)
    start = 0
    while start < len(payload):
        end = min(start + size, len(payload))
        if end < len(payload):
            end = min(end, marker_at)
            while end > start + 1 and payload[end] & 0xC0 == 0x80:  # a continuation byte
                end -= 1
        yield payload[start:end]
        start = end


class _HumanLine:
    """What the human has typed since the last Enter, as far as the keys tell.

    A model, not an emulator: printable keys add to the line, Backspace removes a
    character, Ctrl-W (or Alt+Backspace) a word, Ctrl-U and Ctrl-C clear it, CR or LF
    submits it (outside a bracketed paste: pasted line breaks do not submit). Keys sent
    as the kitty keyboard protocol's `CSI … u` or xterm's `CSI 27 ; … ~` count as the
    same keys in legacy bytes (`keys.legacy`: `ESC[117;5u` is Ctrl-U, `ESC[13u` Enter).
    LF (Ctrl-J) submits only while the agent reads its terminal a line at a time (`line_mode`
    says so): to an agent reading key by key it is Ctrl-J, a line break in the input box
    of Claude Code, Gemini CLI and Codex, and the line goes on (taking it for a submit
    would type a message into the human's unsent text).
    Other escape sequences (arrows, function keys) leave it as it is, and so do the
    terminal's answers to an agent's
    queries, which arrive on the same input: CSI reports (cursor position, device
    attributes) and the string sequences DCS, OSC, APC, PM and SOS (`ESC P >|tmux 3.3a
    ESC \\`, a colour reply `ESC ] 11 ; rgb:… BEL`) up to their ST or BEL.
    """

    def __init__(self, line_mode: Callable[[], bool] | None = None) -> None:
        self._line_mode = line_mode
        self._text = bytearray()
        self._escape = b""  # an escape sequence in progress
        self._in_string = False  # inside a DCS/OSC/APC/PM/SOS string, up to ST or BEL
        self._string = bytearray()  # its bytes: typing after all, if it never ends
        self._in_paste = False
        self.submitted = 0
        """Lines the human submitted (an Enter after typing something)."""
        self.last = ""
        """The last line the human submitted, as far as the keys tell."""
        self.keyed = False
        """Whether a key has been fed that is not an escape sequence (a terminal's reply,
        an arrow, a focus report): the agent has been given input."""

    @property
    def pending(self) -> bool:
        return bool(self._text) or self._in_paste

    def feed(self, data: bytes) -> None:
        for byte in data:
            if self._in_string:
                self._string_byte(byte)
            elif self._escape:
                self._escape += bytes((byte,))
                self._end_escape()
            elif byte == 0x1B:
                self._escape = b"\x1b"
            else:
                self.keyed = True
                self._key(byte)

    def _key(self, byte: int) -> None:
        if self._in_paste:
            self._text.append(byte)
        elif byte == 0x0A and self._line_mode is not None and not self._line_mode():
            if self._text:
                self._text.append(byte)  # Ctrl-J to an agent reading keys: a line break
        elif byte in (0x0D, 0x0A, 0x03, 0x15):  # Enter, Ctrl-C, Ctrl-U
            if byte in (0x0D, 0x0A) and self._text:
                self.submitted += 1
                self.last = self._text.decode(errors="replace")
            self._text.clear()
        elif byte in (0x7F, 0x08):  # Backspace: one character, UTF-8 aware
            while self._text and self._text.pop() & 0xC0 == 0x80:
                pass
        elif byte == 0x17:  # Ctrl-W: trailing spaces, then a word
            while self._text and self._text[-1] in b" \t":
                self._text.pop()
            while self._text and self._text[-1] not in b" \t":
                self._text.pop()
        elif byte >= 0x20 or byte == 0x09:
            self._text.append(byte)

    def _string_byte(self, byte: int) -> None:
        ended = byte == 0x07 or (byte == 0x5C and self._string[-1:] == b"\x1b")  # BEL, ST
        if ended:
            self._in_string = False
            self._string.clear()
            return
        if byte in (0x0D, 0x0A) or len(self._string) >= _STRING_LIMIT:
            # No reply holds a line break or runs this long: it was the human's keys
            # (Alt+Shift+P, then typing), which count as typed after all.
            held = bytes(self._string) + bytes((byte,))
            self._in_string = False
            self._string.clear()
            self.feed(held)
            return
        self._string.append(byte)

    def _end_escape(self) -> None:
        sequence = self._escape
        if len(sequence) == 2:
            if sequence[1:] in (b"[", b"O"):
                return  # CSI or SS3: more to come
            if sequence[1:] in (b"P", b"]", b"_", b"^", b"X"):
                self._escape, self._in_string = b"", True  # a terminal's string reply
                return
            self._escape = b""  # Alt+key
            self.keyed = True
            if sequence[1] in (0x7F, 0x08) and not self._in_paste:
                self._key(0x17)  # Alt+Backspace deletes a word, as Ctrl-W
            return
        if sequence[1:2] == b"O" or 0x40 <= sequence[-1] <= 0x7E:
            self._escape = b""
            if sequence == PASTE_START:
                self._in_paste = True
            elif sequence == PASTE_END:
                self._in_paste = False
            elif sequence[-1] in b"u~" and sequence[1:2] == b"[" and not self._in_paste:
                keys = legacy(sequence[2:-1], sequence[-1])  # the kitty protocol, xterm's form
                if keys is not None:
                    self.keyed = True
                    for byte in keys:
                        self._key(byte)
        elif len(sequence) > _PREFIX_LIMIT:
            self._escape = b""  # not a sequence after all


_ANY_BUSY = re.compile(r"\besc to (?:interrupt|cancel)\b")
"""The interrupt hints of Claude Code, Codex and Gemini CLI, for a voice that has none."""


def busy_hint(rows: list[str], pattern: re.Pattern[str] | None) -> bool:
    """Whether the bottom rows of a screen show an agent's busy hint (`pattern`, else
    any known agent's)."""
    hint = pattern or _ANY_BUSY
    return any(hint.search(row) for row in rows[-BUSY_ROWS:])

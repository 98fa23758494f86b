"""The Injector: typing into the agent only when it and the human are idle (DESIGN §9)."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from relay.session.injector import PASTE_END, PASTE_START, Injector
from relay.session.keys import legacy
from relay.session.pty import AgentPty
from relay.session.terminal import passthrough

pytestmark = pytest.mark.anyio

RESOURCES = Path(__file__).parent / "resources" / "session"
QUIET = 0.12  # quiet_ms of the timing tests, in seconds


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Recorder:
    """A fake agent input: records every write with its time."""

    def __init__(self) -> None:
        self.writes: list[tuple[float, bytes]] = []

    async def __call__(self, data: bytes) -> None:
        self.writes.append((time.monotonic(), data))

    @property
    def data(self) -> bytes:
        return b"".join(chunk for _, chunk in self.writes)

    @property
    def chunks(self) -> list[bytes]:
        return [chunk for _, chunk in self.writes]


def make(recorder: Recorder, **options: object) -> Injector:
    settings: dict[str, object] = {"quiet_ms": int(QUIET * 1000), "pace_ms": 1, "enter_delay_ms": 5}
    settings.update(options)
    return Injector(recorder, **settings)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def running(injector: Injector) -> AsyncIterator[None]:
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(injector.run)
        yield
        tasks.cancel_scope.cancel()


async def drained(injector: Injector, timeout: float = 3.0) -> None:
    with anyio.fail_after(timeout):
        await injector.drained()


# ---- readiness


async def test_nothing_is_written_while_output_keeps_arriving() -> None:
    recorder = Recorder()
    quiet = 0.3  # ten times the output interval: scheduling delays cannot fake a quiet period
    injector = make(recorder, quiet_ms=int(quiet * 1000))
    injector.submit("hello")
    async with running(injector):
        for _ in range(16):  # 0.48 s of output, never `quiet` apart
            injector.observe_output(b"working...\r\n")
            last_output = time.monotonic()
            await anyio.sleep(0.03)
        assert recorder.writes == []
        await drained(injector)
    assert recorder.chunks == [b"hello", b"\r"]
    assert recorder.writes[0][0] - last_output >= quiet - 0.01


async def test_nothing_is_written_before_the_agent_printed_anything() -> None:
    recorder = Recorder()
    injector = make(recorder)
    injector.submit("hello")
    async with running(injector):
        await anyio.sleep(QUIET * 3)
        assert recorder.writes == []
        injector.observe_output(b"> ")
        await drained(injector)
    assert recorder.data == b"hello\r"


async def test_await_first_output_can_be_turned_off() -> None:
    recorder = Recorder()
    injector = make(recorder, await_first_output=False)
    injector.submit("hello")
    async with running(injector):
        await drained(injector)
    assert recorder.data == b"hello\r"


@pytest.mark.parametrize(
    ("finish", "name"),
    [
        (b"\r", "Enter"),
        (b"\n", "LF"),
        (b"\x15", "Ctrl-U"),
        (b"\x03", "Ctrl-C"),
        (b"\x7f" * 5, "Backspaces"),
        # The kitty keyboard protocol (an agent turned it on: Codex does) and xterm's
        # modifyOtherKeys send these keys as escape sequences:
        (b"\x1b[117;5u", "CSI-u Ctrl-U"),
        (b"\x1b[99;5u", "CSI-u Ctrl-C"),
        (b"\x1b[13u", "CSI-u Enter (flag 8: every key as an escape code)"),
        (b"\x1b[13;1:1u\x1b[13;1:3u", "CSI-u Enter press and release (flag 2)"),
        (b"\x1b[127u" * 5, "CSI-u Backspaces"),
        (b"\x1b[104;5u" * 5, "CSI-u Ctrl-H"),
        (b"\x1b[127;5u", "CSI-u Ctrl-Backspace: a word"),
        (b"\x1b[1091::117;5u", "Ctrl-U on a Cyrillic layout (flag 4: its base key)"),
        (b"\x1b[27;5;117~", "xterm modifyOtherKeys Ctrl-U"),
    ],
)
async def test_a_partial_human_line_blocks_until_submitted_or_cleared(
    finish: bytes, name: str
) -> None:
    recorder = Recorder()
    injector = make(recorder)
    injector.observe_output(b"> ")
    injector.observe_input(b"hel")
    injector.observe_input(b"lo")
    injector.submit("message")
    async with running(injector):
        await anyio.sleep(QUIET * 3)
        assert recorder.writes == [], name
        assert injector.pending == 1
        injector.observe_input(finish)
        injector.observe_output(b"\r\n> ")  # the agent takes the line (or the clearing)
        await drained(injector)
    # Nothing erased the human's line: the message is all that was written.
    assert recorder.data == b"message\r"


@pytest.mark.parametrize(
    ("keys", "pending"),
    [
        ([b"abc"], True),
        ([b"abc\r"], False),
        ([b"ab\x7f"], True),
        ([b"ab\x7f\x7f"], False),
        ([b"ab\x7f\x7f\x7f\x7f"], False),
        (["hé".encode(), b"\x7f\x7f"], False),  # one Backspace per character, not per byte
        ([b"one two\x17"], True),
        ([b"one two\x17\x17"], False),  # Ctrl-W erases a word
        ([b"ab\x1b[D\x1b[D"], True),  # arrows move, they do not erase
        ([b"\x1b[A"], False),  # history recall is not typing
        ([b"ab\x1b", b"[", b"D"], True),  # an escape sequence split across reads
        ([b"\x1b[200~line1\rline2\x1b[201~"], True),  # a pasted line break does not submit
        ([b"\x1b[200~line1", b"\rline2"], True),  # still inside the paste
        ([b"\x1b[200~line1\rline2\x1b[2", b"01~\r"], False),
        ([b"x\x1b\r"], True),  # Alt-Enter: a newline in the input box, not a submit
        ([b"\t"], True),
        ([b"\x01\x05"], False),  # Ctrl-A / Ctrl-E alone type nothing
        # The outer terminal answering an agent's start-up queries is not typing:
        ([b"\x1bP>|tmux 3.3a\x1b\\"], False),  # XTVERSION (DCS … ST)
        ([b"\x1b]11;rgb:0000/0000/0000\x07"], False),  # a colour reply (OSC … BEL)
        ([b"\x1b]10;rgb:ffff/ff", b"ff/ffff\x1b\\"], False),  # split across reads
        ([b"\x1b[12;40R\x1b[?62;22c"], False),  # cursor position, device attributes
        ([b"\x1bP>|tmux 3.3a\x1b\\ab"], True),  # keys after the reply do count
        ([b"\x1bPab"], False),  # Alt+Shift+P and keys: held as a possible reply…
        ([b"\x1bPab", b"c" * 600], True),  # … which no reply is this long: typing
        ([b"x\x1bPab\r"], False),  # … nor holds an Enter: replayed, and submitted
        ([b"one two\x1b\x7f"], True),  # Alt+Backspace erases a word, as Ctrl-W…
        ([b"one two\x1b\x7f\x1b\x7f"], False),  # … as Codex's input box does
        # Keys as the kitty keyboard protocol sends them (CSI key ; mods:event ; text u):
        ([b"ab\x1b[117;5u"], False),  # Ctrl-U
        ([b"ab\x1b[117;", b"5u"], False),  # split across reads
        ([b"ab\x1b[117;69u"], False),  # Ctrl-U with Caps Lock on (64 + 4 + 1)
        ([b"ab\x1b[117;5:2u"], False),  # a repeat counts as a press
        ([b"ab\x1b[117;5:3u"], True),  # a release is no key
        ([b"ab\x1b[117;7u"], True),  # Ctrl-Alt-U is no Ctrl-U
        ([b"ab\x1b[117;6u"], True),  # nor is Ctrl-Shift-U
        ([b"one two\x1b[119;5u"], True),  # Ctrl-W: a word
        ([b"one two\x1b[119;5u\x1b[119;5u"], False),
        ([b"one two\x1b[127;3u\x1b[127;3u"], False),  # Alt+Backspace: a word each
        ([b"ab\x1b[127u\x1b[127u"], False),  # Backspace
        ([b"ab\x1b[127;2u\x1b[127;1:3u\x1b[127u"], False),  # Shift+Backspace; a release
        ([b"ab\x1b[13;2u"], True),  # Shift+Enter: a line break in the box, no submit
        ([b"ab\x1b[13;3u"], True),  # Alt+Enter too
        ([b"ab\x1b[106;5u\x1b[109;5u"], True),  # and Ctrl-J, Ctrl-M (Codex)
        ([b"ab\x1b[57414u"], False),  # the keypad's Enter
        ([b"\x1b[97u"], True),  # flag 8: a letter, as an escape code
        ([b"\x1b[97u\x1b[97;1:3u\x1b[127u"], False),  # its release types nothing more
        ([b"\x1b[97;2u\x1b[97:65;2u"], True),  # Shift+a, reported alone and with "A"
        ([b"\x1b[0;;229u"], True),  # flag 16: a text event ("å")
        ([b"\x1b[57399u"], True),  # the keypad's 0
        ([b"\x1b[27u"], False),  # Escape types nothing
        ([b"\x1b[57441;2u\x1b[57441;1:3u"], False),  # Shift alone
        ([b"\x1b[97;3u\x1b[115;9u"], False),  # Alt-a, Super-s: shortcuts
        ([b"\x1b[9u"], True),  # Tab
        ([b"\x1b[?1u"], False),  # the terminal's answer to CSI ? u is not typing
        ([b"ab\x1b[u"], True),  # no key code: not a key
        ([b"ab\x1b[27;5;117~"], False),  # xterm's modifyOtherKeys: Ctrl-U
        ([b"ab\x1b[3~"], True),  # Delete, a legacy function key: moves nothing here
        ([b"\x1b[200~a\x1b[13u\x1b[201~"], True),  # inside a paste, no key counts
    ],
)
async def test_human_line_tracking(keys: list[bytes], pending: bool) -> None:
    injector = make(Recorder())
    for chunk in keys:
        injector.observe_input(chunk)
    assert injector.human_line_pending is pending


@pytest.mark.parametrize(
    ("reads_lines", "keys", "pending"),
    [
        (False, [b"draft", b"\n"], True),  # Ctrl-J to an agent reading keys: a line break
        (False, [b"draft", b"\n", b"more", b"\r"], False),  # its Enter submits
        (False, [b"\n"], False),  # a line break into an empty box types nothing
        (True, [b"draft", b"\n"], False),  # its terminal driver ends the line at LF
        (None, [b"draft", b"\n"], False),  # unknown: as before, LF submits
    ],
)
async def test_lf_submits_only_an_agent_that_reads_lines(
    reads_lines: bool | None, keys: list[bytes], pending: bool
) -> None:
    """Claude Code, Gemini CLI and Codex read Ctrl-J as a line break in their input box: a
    message typed then would land in the human's unsent text."""
    options = {} if reads_lines is None else {"line_mode": lambda: reads_lines}
    injector = make(Recorder(), **options)
    for chunk in keys:
        injector.observe_input(chunk)
    assert injector.human_line_pending is pending


@pytest.mark.parametrize(
    ("sequence", "key"),
    [
        # The kitty keyboard protocol: CSI key[:shifted[:base]] ; mods[:event] ; text u
        (b"\x1b[117;5u", b"\x15"),  # Ctrl-U
        (b"\x1b[99;5u", b"\x03"),  # Ctrl-C
        (b"\x1b[119;5u", b"\x17"),  # Ctrl-W
        (b"\x1b[106;5u", b""),  # Ctrl-J: a line break in Codex's box, not LF's submit
        (b"\x1b[109;5u", b""),  # Ctrl-M, told apart from Enter
        (b"\x1b[13u", b"\r"),  # Enter (flag 8)
        (b"\x1b[13;1:1u", b"\r"),  # its press (flag 2)
        (b"\x1b[13;1:2u", b"\r"),  # a repeat counts as a press
        (b"\x1b[13;1:3u", None),  # a release is no key
        (b"\x1b[13;2u", b""),  # Shift+Enter: a line break in the box
        (b"\x1b[57414u", b"\r"),  # the keypad's Enter
        (b"\x1b[127u", b"\x7f"),  # Backspace (flag 8)
        (b"\x1b[127;3u", b"\x17"),  # Alt+Backspace: a word
        (b"\x1b[9u", b"\t"),  # Tab
        (b"\x1b[9;2u", b""),  # Shift+Tab
        (b"\x1b[27u", b""),  # Escape
        (b"\x1b[97u", b"a"),  # flag 8: a letter
        (b"\x1b[97;2u", b"A"),  # Shift+a, without flag 4
        (b"\x1b[97:65;2u", b"A"),  # with its shifted key (flag 4)
        (b"\x1b[52:36;2u", b"$"),
        (b"\x1b[97;65u", b"A"),  # Caps Lock on
        (b"\x1b[97;2;65u", b"A"),  # the spec's text example: shift+a, text 'A' (flag 16)
        (b"\x1b[0;;229u", "å".encode()),  # the spec's text event: alt+a on a Mac
        (b"\x1b[97;;97:10:98u", b"ab"),  # no control character in a text
        (b"\x1b[105;6u", b""),  # the spec's ctrl+shift+i: a shortcut
        (b"\x1b[97;3u", b""),  # Alt+a
        (b"\x1b[1089::99;5u", b"\x03"),  # Ctrl+es (U+0441) on a Cyrillic layout: base key c
        (b"\x1b[57399u", b"0"),  # the keypad's 0
        (b"\x1b[57376u", b""),  # F13
        (b"\x1b[57441;2u", None),  # Shift alone
        (b"\x1b[?7u", None),  # the terminal's answer to CSI ? u
        (b"\x1b[>1u", None),  # (an agent's request, were it ever echoed)
        (b"\x1b[u", None),  # no key code
        (b"\x1b[1114112u", None),  # past Unicode
        (b"\x1b[99999999999u", None),
        (b"\x1b[1;2;3;4u", None),
        (b"\x1b[97;1:1:1u", None),
        (b"\x1b[97:99999999;2u", b"A"),  # a shifted key past Unicode is left out
        (b"\x1b[97:55296;2u", b"A"),  # and a surrogate
        (b"\x1b[0;;55296:98u", b"b"),
        # xterm's modifyOtherKeys: CSI 27 ; mods ; key ~
        (b"\x1b[27;5;117~", b"\x15"),
        (b"\x1b[27;2;13~", b""),  # Shift+Enter
        (b"\x1b[3~", None),  # Delete: a legacy function key
        (b"\x1b[200~", None),  # a paste marker
        (b"\x1b[2;5H", None),  # not a key sequence at all
    ],
)
def test_keys_sent_as_escape_sequences_are_read_as_their_legacy_bytes(
    sequence: bytes, key: bytes | None
) -> None:
    assert legacy(sequence[2:-1], sequence[-1]) == key


def test_any_key_sequence_is_read_without_error() -> None:
    """Garbled or hostile parameters give a key or None, never an exception."""
    numbers = [b"", b"0", b"1", b"2", b"3", b"5", b"13", b"27", b"65", b"97", b"127", b"57414"]
    numbers += [b"1114111", b"1114112", b"55296", b"99999999", b"999999999", b"?1", b"-1", b"1_0"]
    generator = random.Random(32)

    def joined(separator: bytes, count: int, part: Callable[[], bytes]) -> bytes:
        return separator.join(part() for _ in range(generator.randrange(1, count + 1)))

    for _ in range(20000):
        params = joined(b";", 4, lambda: joined(b":", 4, lambda: generator.choice(numbers)))
        key = legacy(params, generator.choice(b"u~"))
        assert key is None or isinstance(key, bytes)


# ---- what is typed


async def test_bracketed_paste_only_when_the_agent_enabled_it_as_it_started() -> None:
    """Issue 29: the mode counts when the agent turns it on before its first input; after
    that an enable may be a file it shows (`cat`), so only turning it off is followed."""
    recorder = Recorder()
    injector = make(recorder)
    injector.observe_output(b"\x1b[?1049h\x1b[?20")  # the enable sequence split in two
    assert not injector.bracketed_paste
    injector.observe_output(b"04h\x1b[2J> ")
    assert injector.bracketed_paste
    injector.submit("pasted\nmulti-line")
    async with running(injector):
        await drained(injector)
        injector.observe_output(b"README:\r\n\x1b[?2004h\r\n> ")  # shown again: no change
        assert injector.bracketed_paste
        injector.observe_output(b"\x1b[?2004l")
        assert not injector.bracketed_paste
        injector.submit("plain\nmulti-line")
        await drained(injector)
        injector.observe_output(b"cat README: \x1b[?2004h\r\n> ")
        assert not injector.bracketed_paste  # after the first input: not the agent's for sure
        injector.submit("two\nlines")
        await drained(injector)
    assert recorder.chunks == [
        PASTE_START + b"pasted\rmulti-line" + PASTE_END,
        b"\r",
        b"plain multi-line",
        b"\r",
        b"two lines",
        b"\r",
    ]


class Foreground:
    """Who has the agent's terminal, as `AgentPty.owns_terminal` says, and how often it was asked."""

    def __init__(self) -> None:
        self.agent: bool | None = True
        self.asked = 0

    def __call__(self) -> bool | None:
        self.asked += 1
        return self.agent


def test_paste_mode_follows_only_what_the_agents_own_group_wrote() -> None:
    """Issue 29, point 10: a mode sequence counts only while the agent's own process group
    has the terminal (a job of its own, a shell's `cat`, changes nothing either way);
    after the first input an enable counts from an agent that took pastes from its start;
    a paste is typed only while the agent has the terminal. The foreground group is asked
    once per chunk that holds a paste mode sequence, and for no other chunk."""
    foreground = Foreground()
    injector = make(Recorder(), foreground=foreground)
    injector.observe_output(b"\x1b[1;32mhello\x1b[0m\x1b[?25l\x1b[?1049h> ")
    assert foreground.asked == 0  # no paste mode sequence: nothing asked
    injector.observe_output(b"\x1b[?2004h")
    assert injector.bracketed_paste
    injector.observe_input(b"x\r")  # the start-up is over
    foreground.agent = False  # a job of the agent's own has the terminal
    asked = foreground.asked
    injector.observe_output(b"\x1b[?2004l\x1bc\x1b[?2004l")
    assert foreground.asked == asked + 1  # once for the chunk
    assert not injector.bracketed_paste  # the job reads: it gets no paste
    foreground.agent = True
    assert injector.bracketed_paste  # the agent's own mode stands
    injector.observe_output(b"\x1b[?2004l")
    assert not injector.bracketed_paste
    foreground.agent = False
    injector.observe_output(b"\x1b[?2004h")
    foreground.agent = True
    assert not injector.bracketed_paste
    injector.observe_output(b"\x1b[?20")  # its own enable, split across chunks
    injector.observe_output(b"04h")
    assert injector.bracketed_paste
    foreground.agent = None  # cannot be told: an enable after the first input does not count
    injector.observe_output(b"\x1b[?2004l\x1b[?2004h")
    assert not injector.bracketed_paste


def test_an_agent_that_did_not_take_pastes_as_it_started_never_gets_one() -> None:
    """Issue 29, point 10: an enable from the agent's own group after its first input does
    not count for an agent that did not turn the mode on during its start-up: a file it
    shows, by a child in its group or itself, reads the same."""
    foreground = Foreground()
    injector = make(Recorder(), foreground=foreground)
    injector.observe_output(b"> ")
    injector.observe_input(b"go\r")
    injector.observe_output(b"README: \x1b[?2004h")
    assert not injector.bracketed_paste


@pytest.mark.parametrize(
    ("keys", "started"),
    [
        (b"x", False),
        (b"\r", False),
        (b"\x03", False),  # Ctrl-C
        (b"\x04", False),  # Ctrl-D
        (b"\x1bx", False),  # Alt+x
        (b"\x1b[200~text\x1b[201~", False),  # the human pasted
        (b"\x1b[?62;22c", True),  # the terminal's answers to the agent's queries
        (b"\x1b[12;1R", True),
        (b"\x1bP>|xterm(380)\x1b\\", True),
        (b"\x1b]11;rgb:0000/0000/0000\x1b\\", True),
        (b"\x1b[I\x1b[O", True),  # focus reports
        (b"\x1b[A", True),  # an arrow gives the agent nothing to act on
        (b"\x1b[99;5u", False),  # Ctrl-C as the kitty keyboard protocol sends it
        (b"\x1b[27u", False),  # Escape, so sent
        (b"\x1b[?1u", True),  # the terminal's answer to the agent's CSI ? u
        (b"\x1b[57441;2u", True),  # Shift alone (flag 8): no legacy key either
    ],
)
def test_the_first_key_ends_the_agents_start_up(keys: bytes, started: bool) -> None:
    """A key of the human's is input (an enable after it does not count); a terminal's
    reply to the agent's queries, which comes on the same input, is not."""
    injector = make(Recorder())
    injector.observe_output(b"> ")
    injector.observe_input(keys)
    injector.observe_output(b"\x1b[?2004h")
    assert injector.bracketed_paste is started


async def test_paste_mode_only_for_an_agent_that_reads_key_by_key() -> None:
    """Paste mode is used only while the agent reads its terminal key by key. An enable
    printed just before the agent leaves line mode counts (crossterm's order: the enable,
    then raw mode)."""
    reads_lines = True
    recorder = Recorder()
    injector = make(recorder, line_mode=lambda: reads_lines)
    injector.observe_output(b"\x1b[?2004h")
    assert not injector.bracketed_paste
    reads_lines = False
    assert injector.bracketed_paste
    reads_lines = True  # it runs a line-mode child now
    assert not injector.bracketed_paste
    injector.observe_output(b"> ")
    injector.submit("two\nlines")
    async with running(injector):
        await drained(injector)
    assert recorder.chunks == [b"two lines", b"\r"]


@pytest.mark.parametrize(
    ("chunks", "on"),
    [
        ([b"\x1b[?2004h"], True),
        ([b"\x1b", b"[?2004h"], True),
        ([b"\x1b[", b"?2004", b"h"], True),
        ([b"\x1b[?1049;2004h"], True),  # several modes in one sequence
        ([b"\x1b[?2004h", b"\x1b[?2004l"], False),
        ([b"\x1b[?2004h\x1b[?1049l"], True),  # another mode off
        ([b"\x1b[?20044h"], False),
        ([b"\x1b[2004h"], False),  # not a private mode
        ([b"\x1b[?2004h", b"\x1bc"], False),  # a full reset
        ([b"\x1b[?2004h\x1b", b"c"], False),
        ([b"\x1b[?2004h\x1bc", b"\x1b[?2004h"], True),  # a reset while it starts, then on
    ],
)
async def test_bracketed_paste_detection(chunks: list[bytes], on: bool) -> None:
    injector = make(Recorder())
    for chunk in chunks:
        injector.observe_output(chunk)
    assert injector.bracketed_paste is on


def test_encoding_of_line_breaks_and_controls() -> None:
    text = "line1\nline2\r\nline3\rtab\there \x1b[201~esc\x07bell\n\n"
    assert (
        Injector.encode(text, bracketed_paste=False) == b"line1 line2 line3 tab here [201~escbell"
    )
    assert Injector.encode(text, bracketed_paste=True) == (
        PASTE_START + b"line1\rline2\rline3\rtab\there [201~escbell" + PASTE_END
    )
    assert (
        Injector.encode("h\u00e9\u0085", bracketed_paste=False) == "hé".encode()
    )  # C1 NEL removed


@pytest.mark.parametrize("bracketed", [False, True])
async def test_long_texts_go_in_paced_chunks_of_at_most_chunk_size(bracketed: bool) -> None:
    recorder = Recorder()
    injector = make(recorder, chunk_size=512, pace_ms=5)
    if bracketed:
        injector.observe_output(b"\x1b[?2004h")
    injector.observe_output(b"> ")
    rng = random.Random(7)
    text = "".join(rng.choice("ab é✓ \n") for _ in range(3000))
    injector.submit(text)
    async with running(injector):
        await drained(injector)
    *chunks, enter = recorder.chunks
    assert enter == b"\r"
    assert len(chunks) >= 7
    assert all(len(chunk) <= 512 for chunk in chunks)
    assert b"".join(chunks) == Injector.encode(text, bracketed_paste=bracketed)
    for chunk in chunks:
        chunk.decode()  # no UTF-8 character split across writes
        assert PASTE_END not in chunk[1:-1] and chunk.count(b"\x1b") <= 2  # markers whole
    times = [when for when, _ in recorder.writes]
    assert all(later - earlier >= 0.004 for earlier, later in itertools.pairwise(times))


async def test_enter_is_a_separate_write_after_the_enter_delay() -> None:
    recorder = Recorder()
    injector = make(recorder, enter_delay_ms=60)
    injector.observe_output(b"> ")
    injector.submit("text")
    async with running(injector):
        await drained(injector)
    (text_at, text), (enter_at, enter) = recorder.writes
    assert (text, enter) == (b"text", b"\r")
    assert enter_at - text_at >= 0.055


# ---- the queue


async def test_fifo_and_dedup_by_key() -> None:
    recorder = Recorder()
    delivered: list[tuple[str, str | None]] = []
    injector = make(recorder, on_delivered=lambda text, key, outcome: delivered.append((text, key)))
    injector.observe_output(b"> ")
    assert injector.submit("first")
    assert injector.submit("second", key="msg-1")
    assert injector.submit("third")
    assert not injector.submit("second again", key="msg-1")  # queued already
    assert not injector.submit("")
    assert injector.pending == 3
    async with running(injector):
        await drained(injector)
        assert not injector.submit("second once more", key="msg-1")  # delivered already
        assert injector.pending == 0
    assert recorder.data == b"first\rsecond\rthird\r"
    assert injector.delivered == ["first", "second", "third"]
    assert delivered == [("first", None), ("second", "msg-1"), ("third", None)]


async def test_a_text_waits_for_its_admission_and_is_dropped_when_refused() -> None:
    recorder = Recorder()
    injector = make(recorder)
    injector.observe_output(b"> ")
    decisions = {"claimed": anyio.Event(), "taken elsewhere": anyio.Event()}
    verdict = {"claimed": True, "taken elsewhere": False}

    def admission(name: str) -> Callable[[], Any]:
        async def admit() -> bool:
            await decisions[name].wait()
            return verdict[name]

        return admit

    assert injector.submit("refused", key="m-1", admit=admission("taken elsewhere"))
    assert injector.submit("admitted", key="m-2", admit=admission("claimed"))
    assert injector.submit("plain")
    async with running(injector):
        await anyio.sleep(QUIET * 3)  # ready long since: the head waits for its admission
        assert recorder.data == b"" and injector.pending == 3
        decisions["taken elsewhere"].set()
        await anyio.sleep(QUIET * 3)  # dropped; the next one waits for its own
        assert recorder.data == b"" and injector.pending == 2
        decisions["claimed"].set()
        await drained(injector)
        # A refused key is forgotten: the message may come back and be typed then.
        assert injector.submit("refused, then claimed", key="m-1")
        await drained(injector)
    assert recorder.data == b"admitted\rplain\rrefused, then claimed\r"


async def test_withdraw_takes_a_queued_text_back_but_never_one_being_typed() -> None:
    recorder = Recorder()
    injector = make(recorder, pace_ms=50, chunk_size=16)
    injector.observe_output(b"> ")
    assert injector.submit("a long first text, typed in several chunks", key="m-1")
    assert injector.submit("second", key="m-2")
    assert injector.withdraw("m-2") and injector.pending == 1
    assert not injector.withdraw("m-2") and not injector.withdraw("unknown")
    assert injector.submit("second, again", key="m-2")  # its key was forgotten
    async with running(injector):
        with anyio.fail_after(5):
            while not recorder.writes:  # the first is being typed now
                await anyio.sleep(0.01)
        assert not injector.withdraw("m-1")
        await drained(injector)
    assert recorder.data == b"a long first text, typed in several chunks\rsecond, again\r"


async def test_each_text_waits_for_quiet_after_the_previous_delivery() -> None:
    recorder = Recorder()
    injector = make(recorder)
    injector.observe_output(b"> ")
    injector.submit("one")
    injector.submit("two")
    async with running(injector):
        await drained(injector)
    (_, _), (first_enter_at, _), (second_at, _), _ = recorder.writes
    assert second_at - first_enter_at >= QUIET - 0.01


async def test_many_interleaved_submissions_none_lost_none_doubled() -> None:
    recorder = Recorder()
    injector = make(recorder, quiet_ms=15, pace_ms=0, enter_delay_ms=0)
    rng = random.Random(1)
    accepted: list[str] = []

    async def submitter(name: str) -> None:
        for index in range(15):
            key = f"{name}-{index % 12}"  # three repeats per submitter
            text = f"{name} says {index}"
            if injector.submit(text, key=key):
                accepted.append(text)
            await anyio.sleep(rng.uniform(0, 0.02))

    async def agent_and_human() -> None:
        for _ in range(40):
            injector.observe_output(b"output\r\n")
            if rng.random() < 0.3:
                injector.observe_input(b"typing")
                await anyio.sleep(rng.uniform(0, 0.03))
                injector.observe_input(rng.choice([b"\r", b"\x15"]))
            await anyio.sleep(rng.uniform(0, 0.02))

    async with running(injector):
        async with anyio.create_task_group() as tasks:
            for name in ("a", "b", "c"):
                tasks.start_soon(submitter, name)
            tasks.start_soon(agent_and_human)
        await drained(injector, timeout=10)
    assert len(accepted) == 36
    assert injector.delivered == accepted
    assert recorder.data == b"".join(text.encode() + b"\r" for text in accepted)


async def test_drained_and_pending() -> None:
    injector = make(Recorder())
    with anyio.fail_after(1):
        await injector.drained()  # nothing queued: returns at once
    injector.submit("x")
    assert injector.pending == 1
    with anyio.move_on_after(QUIET) as scope:
        await injector.drained()  # no run(): never drains
    assert scope.cancelled_caught


async def test_a_delivery_cancelled_midway_is_not_retried() -> None:
    writes: list[bytes] = []
    stuck = anyio.Event()

    async def write(data: bytes) -> None:
        writes.append(data)
        if len(writes) == 2:
            stuck.set()
            await anyio.sleep_forever()

    injector = Injector(write, quiet_ms=10, chunk_size=16, pace_ms=0)
    injector.observe_output(b"> ")
    injector.submit("a" * 40)
    injector.submit("next")
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(injector.run)
        with anyio.fail_after(2):
            await stuck.wait()
        tasks.cancel_scope.cancel()
    assert injector.pending == 1  # "next" is still queued; the half-typed one is gone
    assert injector.delivered == []


async def test_a_delivery_that_never_wrote_stays_queued() -> None:
    attempts: list[bytes] = []

    async def write(data: bytes) -> None:
        attempts.append(data)
        if len(attempts) == 1:
            raise OSError("agent input unavailable")

    injector = Injector(write, quiet_ms=10, pace_ms=0, enter_delay_ms=0)
    injector.observe_output(b"> ")
    injector.submit("kept")
    with pytest.raises(OSError), anyio.fail_after(2):
        await injector.run()
    assert injector.pending == 1
    with anyio.fail_after(2):
        async with running(injector):
            await injector.drained()
    assert attempts == [b"kept", b"kept", b"\r"]
    assert injector.delivered == ["kept"]


async def test_readiness_is_checked_again_once_the_input_is_held() -> None:
    recorder = Recorder()
    injector = make(recorder)
    holds: list[str] = []

    @contextlib.asynccontextmanager
    async def exclusive() -> AsyncIterator[None]:
        holds.append("held")
        if len(holds) == 1:
            injector.observe_input(b"the human got there first")
        yield
        holds.append("released")

    injector = make(recorder, exclusive=exclusive)
    injector.observe_output(b"> ")
    injector.submit("message")
    async with running(injector):
        await anyio.sleep(QUIET * 3)
        assert recorder.writes == []
        injector.observe_input(b"\r")
        injector.observe_output(b"\r\n> ")  # the agent takes the human's line
        await drained(injector)
    assert recorder.data == b"message\r"
    assert holds == ["held", "released", "held", "released"]


async def test_run_twice_at_once_is_refused() -> None:
    injector = make(Recorder())
    async with running(injector):
        await anyio.sleep(0.01)
        with pytest.raises(RuntimeError, match="already running"):
            await injector.run()


def test_chunk_size_must_fit_a_marker() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        Injector(Recorder(), chunk_size=4)


# ---- end to end: a real agent in a PTY, a human typing through passthrough


@pytest.mark.parametrize("bracketed", [False, True], ids=["typed", "bracketed-paste"])
async def test_injection_into_a_real_agent_never_mixes_with_the_human_line(
    tmp_path: Path, bracketed: bool
) -> None:
    record = tmp_path / "lines"
    argv = [sys.executable, str(RESOURCES / "echo_agent.py"), "--record", str(record)]
    if bracketed:
        argv.append("--bracketed-paste")
    agent = AgentPty.spawn(argv)
    waiting: list[bool] = []
    injector = Injector(
        agent.write,
        quiet_ms=150,
        pace_ms=2,
        enter_delay_ms=20,
        exclusive=agent.exclusive_input,
        on_waiting=waiting.append,
    )
    seen = bytearray()

    def on_output(data: bytes) -> None:
        seen.extend(data)
        injector.observe_output(data)

    keys_read, keys_write = os.pipe()

    async def type_keys(keys: bytes) -> None:
        for key in keys:
            os.write(keys_write, bytes([key]))
            await anyio.sleep(0.005)

    async def until(condition: Callable[[], bool]) -> None:
        with anyio.fail_after(5):
            while not condition():
                await anyio.sleep(0.01)

    def recorded() -> list[str]:
        return record.read_text().splitlines() if record.exists() else []

    async def human_and_relay() -> None:
        await until(lambda: b"READY" in seen)
        await type_keys(b"partial")
        await until(lambda: injector.human_line_pending)
        for index in (1, 2, 3):
            injector.submit(f"message {index}", key=f"m{index}")
        injector.submit("message 2 again", key="m2")
        await anyio.sleep(0.6)  # four quiet periods
        assert recorded() == []
        assert injector.pending == 3
        assert waiting == [True]  # the human is told, once, that texts wait for the line
        await type_keys(b" line\r")
        with anyio.fail_after(5):
            await injector.drained()
        await until(lambda: len(recorded()) == 4)
        await type_keys(b"exit 5\r")

    with open(tmp_path / "screen", "wb") as screen, contextlib.ExitStack() as cleanup:
        cleanup.callback(os.close, keys_read)
        cleanup.callback(os.close, keys_write)
        cleanup.callback(agent.close)
        with anyio.fail_after(15):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(injector.run)
                tasks.start_soon(human_and_relay)
                code = await passthrough(
                    agent,
                    stdin_fd=keys_read,
                    stdout_fd=screen.fileno(),
                    on_output=on_output,
                    on_input=injector.observe_input,
                )
                tasks.cancel_scope.cancel()
    assert code == 5
    assert recorded() == ["partial line", "message 1", "message 2", "message 3", "exit 5"]
    assert injector.delivered == ["message 1", "message 2", "message 3"]
    assert waiting == [True, False]


# ---- submission on a full screen (DESIGN §12: delivered means submitted)


class BoxAgent:
    """A full-screen agent as relay's screen model shows it: six rows, its input box on
    the fifth. It draws a paste into the box at once, or after `draw_after` seconds (a
    busy agent); an Enter is a newline `newlines` times (the box grows, its text moves up
    a row), then submits (the text moves to the history row, the box empties)."""

    def __init__(self, *, newlines: int = 0, draw_after: float = 0.0) -> None:
        self.rows = ["", "", "", "", " > ", ""]
        self.newlines = newlines
        self.draw_after = draw_after
        self.writes: list[tuple[float, bytes]] = []
        self.drawn_at: float | None = None
        self.injector: Injector | None = None
        self.text = ""

    def screen(self) -> list[str]:
        return list(self.rows)

    def draw(self, rows: list[str]) -> None:
        assert self.injector is not None
        self.rows = rows
        self.injector.observe_output(b"\x1b[3;1H(drawn)")

    async def write(self, data: bytes) -> None:
        self.writes.append((time.monotonic(), data))
        if data.startswith(PASTE_START):
            self.text = data[len(PASTE_START) : -len(PASTE_END)].decode()
            if self.draw_after:
                await anyio.sleep(self.draw_after)
            self.drawn_at = time.monotonic()
            self.draw(["", "", "", "", f" > {self.text}", ""])
        elif data == b"\r" and self.text:
            if self.newlines:
                self.newlines -= 1
                self.draw([*self.rows[1:5], "   ", ""])
            else:
                self.draw([f"> {self.text}", "", "", "", " > ", ""])
                self.text = ""

    @property
    def enters(self) -> list[float]:
        return [at for at, data in self.writes if data == b"\r"]


def box_injector(agent: BoxAgent, outcomes: list[tuple[str, str]], **options: Any) -> Injector:
    injector = make(
        agent.write,  # type: ignore[arg-type]
        screen=agent.screen,
        on_delivered=lambda text, key, outcome: outcomes.append((text, outcome)),
        **options,
    )
    agent.injector = injector
    injector.observe_output(b"\x1b[?2004h\x1b[5;1H > ")
    return injector


async def test_a_text_submitted_on_screen_is_delivered_as_submitted() -> None:
    agent, outcomes = BoxAgent(), []
    injector = box_injector(agent, outcomes)
    injector.submit("hello there [abcd1234]")
    async with running(injector):
        await drained(injector, timeout=10)
    assert outcomes == [("hello there [abcd1234]", "submitted")]
    assert len(agent.enters) == 1


async def test_the_enter_waits_until_a_busy_agent_has_drawn_the_paste() -> None:
    """A frozen agent reads the paste late: the Enter follows only after it drew it, so
    the two are never read together (Gemini CLI would take that Enter for a newline)."""
    agent, outcomes = BoxAgent(draw_after=0.6), []
    injector = box_injector(agent, outcomes)
    injector.submit("hello there")
    async with running(injector):
        await drained(injector, timeout=10)
    assert agent.drawn_at is not None
    assert agent.enters[0] >= agent.drawn_at + 0.09
    assert outcomes == [("hello there", "submitted")]


async def test_an_enter_taken_for_a_newline_is_sent_again_alone_and_the_text_typed_once() -> None:
    agent, outcomes = BoxAgent(newlines=1), []
    injector = box_injector(agent, outcomes)
    injector.submit("hello there")
    async with running(injector):
        await drained(injector, timeout=10)
    assert outcomes == [("hello there", "submitted")]
    assert len(agent.enters) == 2
    assert [data for _, data in agent.writes].count(b"\x1b[200~hello there\x1b[201~") == 1


async def test_a_text_the_agent_keeps_in_its_box_is_left_not_submitted() -> None:
    agent, outcomes = BoxAgent(newlines=99), []
    injector = box_injector(agent, outcomes)
    injector.submit("hello there")
    async with running(injector):
        await drained(injector, timeout=15)
    assert outcomes == [("hello there", "left")]
    assert len(agent.enters) == 3  # the first and two more, each alone


async def test_nothing_more_is_typed_into_a_box_holding_a_text_left_in_it() -> None:
    """Later texts do not pile up in an unsent box: they wait until it is submitted or
    cleared (by the human)."""
    agent, outcomes = BoxAgent(newlines=3), []
    injector = box_injector(agent, outcomes)
    injector.submit("hello there")
    injector.submit("second text")
    async with running(injector):
        await until_true(lambda: len(outcomes) == 1, 15)
        await anyio.sleep(QUIET * 5)
        assert outcomes == [("hello there", "left")]
        assert b"second" not in b"".join(data for _, data in agent.writes)
        agent.text = ""
        agent.draw(["", "", "", "", " > ", ""])  # the human cleared the box
        await drained(injector, timeout=10)
    assert outcomes == [("hello there", "left"), ("second text", "submitted")]


async def until_true(condition: Callable[[], bool], timeout: float) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.01)


@pytest.mark.parametrize(
    "enter", [b"\r", b"\x1b[13u", b"\x1b[13;1:1u\x1b[13;1:3u"], ids=["CR", "CSI-u", "CSI-u-events"]
)
async def test_after_the_humans_enter_a_text_waits_for_the_agent_to_take_the_line(
    enter: bytes,
) -> None:
    """The human submits a line while a text waits: the text is typed only once the
    agent shows the line as sent and its busy hint is gone (never 0.1 s after the Enter).
    An Enter the terminal sends as the kitty keyboard protocol's CSI 13 u is one too."""
    agent, outcomes = BoxAgent(), []
    busy = [False]
    injector = box_injector(agent, outcomes, busy=lambda: busy[0])
    injector.observe_input(b"my question")
    agent.draw(["", "", "", "", " > my question", ""])
    injector.submit("a message")
    async with running(injector):
        await anyio.sleep(QUIET * 3)
        assert agent.writes == []  # held by the human's line
        injector.observe_input(enter)
        agent.draw(["", "", "", "", " > ", ""])  # the box emptied, the turn not started yet
        await anyio.sleep(QUIET * 4)
        assert agent.writes == [], "typed before the agent took the human's line"
        await turn_then_answer(agent, injector, busy, "working (esc to interrupt)")
    assert outcomes == [("a message", "submitted")]


async def turn_then_answer(
    agent: BoxAgent, injector: Injector, busy: list[bool], hint: str
) -> None:
    """The agent's turn on "my question" shows (`hint`, `busy`) and the text still waits;
    then its answer ends the turn and the text is typed."""
    busy[0] = True
    agent.draw(["> my question", hint, "", "", " > ", ""])
    await anyio.sleep(QUIET * 4)
    assert agent.writes == [], "typed while the agent answered the human's line"
    busy[0] = False
    agent.draw(["> my question", "an answer", "", "", " > ", ""])
    await drained(injector, timeout=10)


async def test_an_agent_that_shows_its_turns_is_waited_on_until_its_turn_shows() -> None:
    """A slowed-down agent takes the human's line in (draws it above its box), then draws
    nothing for a while before its busy hint: the text waits for the turn to show, then
    for it to end (Gemini CLI, on a machine at load 12, had a message typed into its box
    while it thought: it went quiet before its hint came up)."""
    agent, outcomes = BoxAgent(), []
    busy = [False]
    injector = box_injector(agent, outcomes, busy=lambda: busy[0], shows_turns=True)
    injector.observe_input(b"my question")
    agent.draw(["", "", "", "", " > my question", ""])
    injector.submit("a message")
    async with running(injector):
        injector.observe_input(b"\r")
        agent.draw(["> my question", "", "", "", " > ", ""])  # taken in, no hint yet
        await anyio.sleep(QUIET * 8)
        assert agent.writes == [], "typed before the agent's turn showed"
        await turn_then_answer(agent, injector, busy, "thinking (esc to cancel)")
    assert outcomes == [("a message", "submitted")]


async def test_a_human_line_that_starts_no_turn_holds_a_text_for_a_while_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A line the agent takes in but answers with no turn (a command of its own): the
    text is typed once TURN_START_SECONDS have passed since the Enter."""
    from relay.session import injector as module

    monkeypatch.setattr(module, "TURN_START_SECONDS", QUIET * 10)
    agent, outcomes = BoxAgent(), []
    injector = box_injector(agent, outcomes, busy=lambda: False, shows_turns=True)
    injector.observe_input(b"/help")
    agent.draw(["", "", "", "", " > /help", ""])
    injector.submit("a message")
    async with running(injector):
        entered = time.monotonic()
        injector.observe_input(b"\r")
        agent.draw(["> /help", "the agent's help", "", "", " > ", ""])
        await drained(injector, timeout=10)
        assert time.monotonic() - entered >= QUIET * 10
    assert outcomes == [("a message", "submitted")]

"""The human's terminal in TTY mode: raw mode that is always undone, its size, and the byte pump.

`passthrough` copies keystrokes to the agent and the agent's output to the terminal
byte for byte, writing each chunk before anyone else sees it (DESIGN §8: TTY
passthrough never alters or delays the terminal bytes); scanning happens after, on a
copy. It reads and writes the terminal through file descriptions of its own (the loop
reads keys from a non-blocking one; the output pump's thread writes to a blocking one),
so the loop never blocks on a slow terminal and O_NONBLOCK never leaks into the shell
that shares the terminal's original description.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import math
import os
import signal
import termios
import threading
import tty
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

import anyio

from relay.session.pty import AgentExitedError, AgentPty
from relay.session.pump import OutputPump

_DEFAULT_SIZE = (24, 80)
_READ_SIZE = 1 << 16
_EXIT_DRAIN = 0.5  # seconds to take the agent's last output once it has exited
# Signals whose default action would end relay with the terminal still raw. SIGINT is
# not here: raw mode turns Ctrl-C into a byte for the agent, and a SIGINT sent by
# kill raises KeyboardInterrupt, which unwinds through raw_terminal's `finally`.
_RESTORING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)

_TermAttrs = list[Any]  # what termios.tcgetattr returns
_SignalHandler = Callable[[int, FrameType | None], object] | int | None


@dataclass(eq=False)  # levels are told apart by identity
class _RawLevel:
    """One active raw_terminal: the modes it found and the raw modes it set."""

    fd: int
    before: _TermAttrs
    raw: _TermAttrs


_levels: list[_RawLevel] = []  # active raw_terminal calls, outermost first
_previous_handlers: dict[int, _SignalHandler] = {}


def exit_request(group: BaseExceptionGroup[BaseException]) -> SystemExit | None:
    """The SystemExit (or Ctrl-C, as exit 130) inside an exception group, if any.

    A signal handler's SystemExit raised inside an anyio task reaches the caller wrapped
    in a group, which Python would report as a crash with exit code 1.
    """
    matched, _ = group.split((SystemExit, KeyboardInterrupt))
    found: BaseException | None = matched
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    if isinstance(found, SystemExit):
        return found
    if isinstance(found, KeyboardInterrupt):
        return SystemExit(130)
    return None


@contextlib.contextmanager
def raw_terminal(fd: int = 0) -> Iterator[None]:
    """Put the terminal on `fd` in raw mode for the block, and always restore it.

    Restored on a normal exit, an exception, KeyboardInterrupt, and SIGTERM or SIGHUP
    to relay (the handler restores the terminal first, then exits with 128+N, or calls
    the handler that was there before and goes back to raw mode if that one returns).
    Nested calls restore what they found, so the outermost restores the original. Not
    a terminal: nothing to do.
    """
    if not os.isatty(fd):
        yield
        return
    before = termios.tcgetattr(fd)
    outermost = not _levels
    if outermost:
        _install_signal_handlers()
    level = _RawLevel(fd, before, before)
    _levels.append(level)
    try:
        # TCSANOW keeps keys typed before the switch: they reach the agent.
        tty.setraw(fd, termios.TCSANOW)
        level.raw = termios.tcgetattr(fd)
        yield
    finally:
        _levels.remove(level)
        with contextlib.suppress(termios.error, OSError):  # the terminal may be gone (SIGHUP)
            termios.tcsetattr(fd, termios.TCSADRAIN, before)
        if outermost:
            _remove_signal_handlers()


def terminal_size(fd: int = 0) -> tuple[int, int]:
    """The terminal's (rows, cols); 24x80 when `fd` is not a terminal or reports no size."""
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return _DEFAULT_SIZE
    if size.lines <= 0 or size.columns <= 0:
        return _DEFAULT_SIZE
    return size.lines, size.columns


async def forward_window_size(agent: AgentPty, fd: int = 0) -> None:
    """Give the agent the terminal's size now and on every SIGWINCH, until cancelled.

    Needs the main thread (signal handlers); elsewhere it sets the size once and returns.
    """
    try:
        with anyio.open_signal_receiver(signal.SIGWINCH) as window_changes:
            agent.resize(*terminal_size(fd))  # after the receiver: no change is missed
            async for _ in window_changes:
                agent.resize(*terminal_size(fd))
    except (RuntimeError, ValueError):  # not the main thread
        agent.resize(*terminal_size(fd))


async def passthrough(
    agent: AgentPty,
    *,
    stdin_fd: int = 0,
    stdout_fd: int = 1,
    on_output: Callable[[bytes], None],
    on_input: Callable[[bytes], None] | None = None,
    intercept: Callable[[bytes], bytes] | None = None,
) -> int:
    """Connect the human's terminal to the agent until the agent exits; its exit code.

    Keys go to the agent as typed (`on_input` sees them first, so an Injector knows
    what is pending before the agent does); output goes to `stdout_fd` unaltered, then
    to `on_output`. Window size changes reach the agent. Once the agent has exited, its
    last output is taken for up to 0.5 s (descendants may hold the PTY open). If the
    terminal goes away, output still reaches `on_output`. `intercept` sees the keys
    before anyone and returns what goes on (relay's own questions take their answers from
    it). Does not set raw mode: wrap it in `raw_terminal`.
    """
    output_done = anyio.Event()

    async def pump_output(pump: OutputPump) -> None:
        try:
            await pump.deliver(on_output)
        finally:
            output_done.set()

    def take_keys(data: bytes) -> bytes:
        """What of the human's keys goes to the agent, once relay has seen them."""
        if intercept is not None and not (data := intercept(data)):
            return b""
        if on_input is not None:
            on_input(data)
        return data

    async def pump_input(user_in: int) -> None:
        loop = asyncio.get_running_loop()
        send, receive = anyio.create_memory_object_stream[bytes](math.inf)
        waiting = 0  # keys sent to `receive` and not yet written: later keys queue behind
        failure: list[BaseException] = []

        def readable() -> None:
            # Straight from the loop's poll: a key reaches the agent without a task switch.
            nonlocal waiting
            try:
                data = os.read(user_in, _READ_SIZE)
            except BlockingIOError:
                return
            except OSError as exc:
                data = b""
                if exc.errno != errno.EIO:  # EIO: the terminal hung up
                    failure.append(exc)
            try:
                keys = take_keys(data) if data else b""
            except Exception as exc:
                failure.append(exc)
                data = b""
            if not data:
                loop.remove_reader(user_in)
                send.close()
                return
            if keys and not waiting:
                keys = keys[agent.write_nowait(keys) :]
            if keys:
                waiting += 1
                send.send_nowait(keys)

        try:
            loop.add_reader(user_in, readable)
        except PermissionError:  # a regular file or /dev/null: never waits, cannot be polled
            send.close()
            receive.close()
            while data := await _read(user_in):
                if keys := take_keys(data):
                    try:
                        await agent.write(keys)
                    except AgentExitedError:
                        return
            return
        try:
            async with receive:
                async for keys in receive:
                    try:
                        await agent.write(keys)
                    except AgentExitedError:
                        return
                    finally:
                        waiting -= 1
        finally:
            loop.remove_reader(user_in)
            send.close()
        if failure:
            raise failure[0]

    size_fd = next((fd for fd in (stdout_fd, stdin_fd) if os.isatty(fd)), None)
    with (
        _own_description(stdin_fd, os.O_RDONLY) as user_in,
        # Written by the pump's thread alone, so blocking: one write(2) per chunk, as
        # `script` does, not a partial write and a poll per terminal buffer's worth.
        _own_description(stdout_fd, os.O_WRONLY, blocking=True) as user_out,
    ):
        pump = OutputPump(agent, user_out)
        pump.start()
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(pump_output, pump)
                tasks.start_soon(pump_input, user_in)
                if size_fd is not None:
                    tasks.start_soon(forward_window_size, agent, size_fd)
                exit_code = await agent.wait()
                with anyio.move_on_after(_EXIT_DRAIN):
                    await output_done.wait()
                tasks.cancel_scope.cancel()
        finally:
            pump.stop()
    return exit_code


# ---- signals


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers belong to the main thread; the finally still restores
    for signum in _RESTORING_SIGNALS:
        previous = signal.getsignal(signum)
        if previous == signal.SIG_IGN:
            continue  # relay was told to ignore it: keep ignoring
        _previous_handlers[signum] = previous
        signal.signal(signum, _restore_then_exit)


def _remove_signal_handlers() -> None:
    for signum, previous in list(_previous_handlers.items()):
        del _previous_handlers[signum]
        # Someone replaced ours meanwhile (an event loop's handler): leave theirs alone.
        if signal.getsignal(signum) is _restore_then_exit:
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)


def _restore_then_exit(signum: int, frame: FrameType | None) -> None:
    for level in reversed(_levels):  # innermost first, so each fd ends in its original modes
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(level.fd, termios.TCSANOW, level.before)
    previous = _previous_handlers.get(signum)
    if callable(previous):
        previous(signum, frame)
        # The program chose to go on: back to raw mode.
        for level in _levels:
            with contextlib.suppress(termios.error, OSError):
                termios.tcsetattr(level.fd, termios.TCSANOW, level.raw)
        return
    raise SystemExit(128 + signum)


# ---- terminal I/O that never blocks the loop


@contextlib.contextmanager
def _own_description(fd: int, mode: int, *, blocking: bool = False) -> Iterator[int]:
    """An fd on a new open file description of the terminal on `fd` (non-blocking unless
    `blocking`), else `fd`."""
    if not os.isatty(fd):
        yield fd  # a pipe or file: blocking reads and writes there do not stall for long
        return
    flags = mode | os.O_NOCTTY | os.O_CLOEXEC | (0 if blocking else os.O_NONBLOCK)
    try:
        own = os.open(f"/proc/self/fd/{fd}", flags)
    except OSError:
        try:
            own = os.open(os.ttyname(fd), flags)
        except OSError:
            yield fd
            return
    try:
        yield own
    finally:
        os.close(own)


async def _read(fd: int) -> bytes:
    """The next bytes from `fd`; b"" at end of input or when the terminal is gone."""
    while True:
        # A regular file or /dev/null cannot be polled (EPERM); reading it never blocks.
        with contextlib.suppress(PermissionError):
            await anyio.wait_readable(fd)
        try:
            return os.read(fd, _READ_SIZE)
        except BlockingIOError:
            continue
        except OSError as exc:
            if exc.errno == errno.EIO:  # terminal hung up
                return b""
            raise


# ---- relay's notices


class Notices:
    """relay's notices to the human on the terminal (`relay: …` lines, on stderr).

    While the agent owns the screen (it draws a full screen: cursor addressing, the
    alternate screen), a line written to the terminal would land inside the agent's
    display, over its input row, and be wiped by its next redraw. Then a notice goes to
    the terminal's title (xterm's title stack: the human's title comes back after) and
    is held, to be written as a line once the agent has exited (`release`). The caller
    records every notice in the transcript as well (`relay logs`).
    """

    def __init__(self, write: Callable[[str], None], *, titles: bool) -> None:
        """`write`: a text to the terminal (stderr); `titles`: whether it is a terminal
        that shows a title (TTY mode)."""
        self._write = write
        self._titles = titles
        self._owned = False
        self._titled = False
        self.held: list[str] = []
        """Notices given while the agent owned the screen, not written as lines yet."""

    @property
    def owned(self) -> bool:
        return self._owned

    def own(self) -> None:
        """The agent draws a full screen from now on (until `release`)."""
        self._owned = True

    def tell(self, line: str) -> None:
        """One notice (already made visible, without its line break)."""
        if not self._owned:
            self._write(line.replace("\n", "\r\n") + "\r\n")
            return
        self.held.append(line)
        if self._titles:
            push = "" if self._titled else TITLE_PUSH
            self._titled = True
            title = " ".join(line.split())[:200]
            self._write(f"{push}\x1b]0;{title}\x07")

    def release(self) -> None:
        """The agent has exited: the title the human had back, and the held notices
        written as lines."""
        self._owned = False
        if self._titled:
            self._titled = False
            self._write(TITLE_POP)
        held, self.held = self.held, []
        if held:
            self._write("".join(line.replace("\n", "\r\n") + "\r\n" for line in held))


TITLE_PUSH, TITLE_POP = "\x1b[22;0t", "\x1b[23;0t"
"""xterm's title stack: the title saved, and restored."""

"""The agent's output copied to the human's terminal by a process of its own.

The copy is what the human waits on, so it runs like `script` does: a read of the PTY
master, then a blocking write to the terminal, and nothing else between the two calls.
It runs in a small child process (relay.session.copier: a native program where the
package's install compiled one, else a few lines on `python -I -S`), not on a thread:
a thread would need relay's GIL back after every 4 KiB read, and would wait for it
whenever the event loop is scanning, which capped passthrough at half of `script`'s
throughput. The child also writes each chunk, once shown, to a pipe that the event loop
reads in large blocks; there the scanner, the injector and the transcript see it (DESIGN
§8: the terminal bytes are never altered or delayed by that work).

The loop may fall behind a fast writer: the pipe holds up to PIPE_BYTES, then the copy
waits too, so memory stays bounded and no chunk is skipped by the scanner. The child
lives no longer than the session: it ends when the agent's side of the PTY closes, when
relay closes its end of a lifeline pipe (`stop`, or relay's own death), or when `stop`
kills it (a terminal paused with Ctrl-S blocks its write).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import subprocess
import sys
from collections.abc import Callable

from relay.engine.telemetry import debug, debug_enabled
from relay.errors import RelayError
from relay.session.copier import COPIER, native_copier
from relay.session.pty import AgentPty

PIPE_BYTES = 1 << 20
"""How far the loop may fall behind the terminal before the copy waits (the pipe's size)."""
READ_BYTES = 1 << 20
BATCH_BYTES = 256 << 10
BATCH_QUIET_MS = 1
BATCH_MAX_SECONDS = 0.01
"""The copier hands output to the loop in blocks: when BATCH_BYTES have gathered, when
the output pauses for BATCH_QUIET_MS, and at the latest BATCH_MAX_SECONDS after the
block's first byte reached the terminal. The loop then wakes once per block, not per
read, and not in the middle of a keystroke's echo. With blocks of 256 KiB rather than 64,
a fast writer's output woke the loop four times less often: 0.70x direct throughput
against 0.61x, eight interleaved rounds (tests/perf/bench_session.py's stream)."""
STOP_WAIT = 1.0
"""Seconds stop() waits for the copier to end before killing it."""


class OutputPump:
    """Copies `agent`'s output to `terminal_fd` until the agent's side of the PTY closes
    or `stop` is called; `deliver()` hands the output to the loop, in order."""

    def __init__(self, agent: AgentPty, terminal_fd: int, *, native: bool = True):
        """`native=False`, or RELAY_COPIER=python in the environment: the Python copier
        even where a native one was built."""
        self._master = agent.master_fd
        self._terminal = terminal_fd
        wanted = native and os.environ.get("RELAY_COPIER") != "python"
        self._native = native_copier() if wanted else None
        self._process: subprocess.Popen[bytes] | None = None
        self._sink = -1
        self._lifeline = -1

    @property
    def copier(self) -> str:
        """Which copier runs: "native", or "python" (none was built, or it cannot run)."""
        return "native" if self._native is not None else "python"

    def start(self) -> None:
        """Start the copier, the native one where it runs, else the Python one;
        RelayError, naming the reason, when neither can start (no pipes or processes
        left, no Python at sys.executable)."""
        opened: list[int] = []
        try:
            sink_read, sink_write = os.pipe2(os.O_CLOEXEC)
            opened += (sink_read, sink_write)
            lifeline_read, lifeline_write = os.pipe2(os.O_CLOEXEC)
            opened += (lifeline_read, lifeline_write)
            with contextlib.suppress(OSError):  # a smaller pipe only means an earlier wait
                fcntl.fcntl(sink_write, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            fds = (self._master, self._terminal, sink_write, lifeline_read)
            arguments = [
                *map(str, fds),
                *map(str, (BATCH_BYTES, BATCH_QUIET_MS, BATCH_MAX_SECONDS)),
            ]
            if self._native is not None:
                try:
                    self._process = _spawn([self._native, *arguments], fds)
                except OSError as exc:  # a noexec mount, another machine's binary
                    if debug_enabled():
                        debug(f"the native output copier cannot run ({exc}): the Python one runs")
                    self._native = None
            if self._process is None:
                self._process = _spawn([sys.executable, "-I", "-S", "-c", COPIER, *arguments], fds)
            if debug_enabled():
                debug(f"output copier: {self.copier} (pid {self._process.pid})")
        except OSError as exc:
            for fd in opened:
                os.close(fd)
            reason = exc.strerror or str(exc)
            raise RelayError(
                f"cannot start the output copier ({sys.executable}): {reason}"
            ) from None
        os.close(sink_write)  # the copier's ends now
        os.close(lifeline_read)
        os.set_blocking(sink_read, False)
        self._sink, self._lifeline = sink_read, lifeline_write

    async def deliver(self, on_output: Callable[[bytes], None]) -> None:
        """Call `on_output` with the output once it reached the terminal, in order (each
        time all that the pipe holds, up to READ_BYTES), until the output ends. Called
        straight from the loop's poll, not by a task woken for each read: a keystroke's
        echo is handled before the next keystroke comes. An error in `on_output` ends the
        delivery and is raised here."""
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()

        def end(error: BaseException | None) -> None:
            loop.remove_reader(self._sink)
            if not ended.done():
                if error is None:
                    ended.set_result(None)
                else:
                    ended.set_exception(error)

        def readable() -> None:
            try:
                data = os.read(self._sink, READ_BYTES)
            except BlockingIOError:
                return
            except OSError as exc:
                end(None if exc.errno == errno.EBADF else exc)
                return
            if not data:
                end(None)
                return
            try:
                on_output(data)
            except Exception as exc:  # raised in the session's task, not lost in the loop
                end(exc)

        loop.add_reader(self._sink, readable)
        try:
            await ended
        finally:
            loop.remove_reader(self._sink)

    def stop(self) -> None:
        """End the copy now (the agent is gone, or the session ends): the copier does not
        read the master once this returns."""
        process = self._process
        if self._lifeline >= 0:
            os.close(self._lifeline)
            self._lifeline = -1
        if process is not None:
            try:
                process.wait(STOP_WAIT)
            except subprocess.TimeoutExpired:
                process.kill()  # blocked writing to a terminal that takes nothing
                process.wait()
        if self._sink >= 0:
            os.close(self._sink)
            self._sink = -1


def _spawn(argv: list[str], fds: tuple[int, ...]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, pass_fds=fds, stdin=subprocess.DEVNULL, close_fds=True)

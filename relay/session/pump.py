"""The agent's output copied to the human's terminal by a process of its own.

The copy is what the human waits on, so it runs like `script` does: a read of the PTY
master, then a blocking write to the terminal, with no Python work but the two calls.
It runs in a small child process (COPIER, a few lines on `python -I -S`), not on a
thread: a thread would need relay's GIL back after every 4 KiB read, and would wait for
it whenever the event loop is scanning, which capped passthrough at half of `script`'s
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

from relay.errors import RelayError
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

COPIER = r"""
import errno, os, select, signal, sys, time
master, terminal, sink, lifeline = map(int, sys.argv[1:5])
batch, quiet_ms, most = int(sys.argv[5]), int(sys.argv[6]), float(sys.argv[7])
for number in ("SIGHUP", "SIGINT", "SIGQUIT", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGPIPE"):
    signal.signal(getattr(signal, number), signal.SIG_IGN)
poller = select.poll()
poller.register(master, select.POLLIN)
poller.register(lifeline, select.POLLIN)
read, write, clock = os.read, os.write, time.monotonic
held, size, since = [], 0, 0.0

def write_all(fd, data):
    while data:
        data = data[write(fd, data):]

def hand_over():  # the gathered output to relay's loop; False once relay stopped reading
    global held, size
    try:
        write_all(sink, b"".join(held))
    except OSError:  # EPIPE: the session ended (stop() or relay's death)
        return False
    held, size = [], 0
    return True

while True:
    try:
        data = read(master, 65536)
    except BlockingIOError:
        if held:
            wait = max(0, min(quiet_ms, int((since + most - clock()) * 1000)))
            ready = poller.poll(wait)
            if not ready:
                if not hand_over():  # the output paused: the loop sees it now
                    break
                continue
        else:
            ready = poller.poll()
        if any(fd == lifeline for fd, _ in ready):
            break  # relay is gone, or stopped the copy
        continue
    except OSError as exc:
        if exc.errno in (errno.EIO, errno.EBADF):
            break  # every slave fd is closed: the agent's output has ended
        raise
    if not data:
        break
    # One write per read, as `script` does. Gathering what else the PTY held into one
    # large write was slower: with the loop doing nothing, the copy alone reached 0.61x
    # direct that way and 0.78-0.87x without. While the copy waits on a long write to
    # the terminal, nobody reads the agent's side.
    if terminal >= 0:
        try:
            write_all(terminal, data)
        except OSError:  # EIO / EPIPE: the terminal is gone; the loop still sees output
            terminal = -1
    if not held:
        since = clock()
    held.append(data)
    size += len(data)
    if (size >= batch or clock() - since >= most) and not hand_over():
        break
if held:
    hand_over()
"""


class OutputPump:
    """Copies `agent`'s output to `terminal_fd` until the agent's side of the PTY closes
    or `stop` is called; `deliver()` hands the output to the loop, in order."""

    def __init__(self, agent: AgentPty, terminal_fd: int):
        self._master = agent.master_fd
        self._terminal = terminal_fd
        self._process: subprocess.Popen[bytes] | None = None
        self._sink = -1
        self._lifeline = -1

    def start(self) -> None:
        """Start the copier; RelayError, naming the reason, when it cannot be (no pipes
        or processes left, no Python at sys.executable)."""
        opened: list[int] = []
        try:
            sink_read, sink_write = os.pipe2(os.O_CLOEXEC)
            opened += (sink_read, sink_write)
            lifeline_read, lifeline_write = os.pipe2(os.O_CLOEXEC)
            opened += (lifeline_read, lifeline_write)
            with contextlib.suppress(OSError):  # a smaller pipe only means an earlier wait
                fcntl.fcntl(sink_write, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            fds = (self._master, self._terminal, sink_write, lifeline_read)
            self._process = subprocess.Popen(
                [
                    *(sys.executable, "-I", "-S", "-c", COPIER),
                    *map(str, fds),
                    *map(str, (BATCH_BYTES, BATCH_QUIET_MS, BATCH_MAX_SECONDS)),
                ],
                pass_fds=fds,
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
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

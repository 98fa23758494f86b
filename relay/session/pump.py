"""The agent's output copied to the human's terminal on a thread of its own.

The copy is what the human waits on, so it runs like `script` does: a blocking read of
the PTY master, then a blocking write to the terminal, with no event loop turn between
them and no Python work but the two calls (both release the GIL). Each chunk, once
written, is handed to the event loop, where the scanner, the injector and the transcript
see it (DESIGN §8: the terminal bytes are never altered or delayed by that work).

The loop may fall behind a fast writer: at most `max_pending` bytes wait for it, then
the copy waits too, so memory stays bounded and no chunk is skipped by the scanner.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import os
import select
import threading
from collections.abc import AsyncIterator

from relay.session.pty import AgentPty

MAX_PENDING = 8 << 20
"""Bytes written to the terminal but not yet seen by the loop, before the copy waits."""
READ_SIZE = 1 << 16


class OutputPump:
    """Copies `agent`'s output to `terminal_fd` until the agent's side of the PTY closes
    or `stop` is called; `chunks()` yields each chunk to the loop, in order."""

    def __init__(self, agent: AgentPty, terminal_fd: int, *, max_pending: int = MAX_PENDING):
        self._master = agent.master_fd
        self._agent = agent
        self._terminal = terminal_fd
        self._terminal_open = True
        self._max_pending = max_pending
        self._chunks: collections.deque[bytes] = collections.deque()
        self._pending = 0
        self._room = threading.Condition()
        self._finished = False
        self._stopped = False
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="relay-output", daemon=True)

    def start(self) -> None:
        """Start copying (call from the event loop that consumes `chunks`)."""
        self._loop = asyncio.get_running_loop()
        self._ready = asyncio.Event()
        self._thread.start()

    async def chunks(self) -> AsyncIterator[bytes]:
        """Each chunk after it reached the terminal, until the agent's output ends."""
        assert self._ready is not None
        while True:
            with self._room:
                taken = list(self._chunks)
                self._chunks.clear()
                self._pending = 0
                finished = self._finished
                if not taken and not finished:
                    # Under the lock: a chunk added after this sets the event again.
                    self._ready.clear()
                self._room.notify_all()
            for data in taken:
                yield data
            if not taken:
                if finished:
                    return
                await self._ready.wait()

    def stop(self) -> None:
        """End the copy now (the agent is gone, or the session ends) and wait for the
        thread: the master fd is not read after this returns."""
        with self._room:
            self._stopped = True
            self._room.notify_all()
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")
        if self._thread.is_alive():
            self._thread.join()
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)

    # ---- the thread

    def _run(self) -> None:
        try:
            while (data := self._read()) and not self._stopped:
                if self._terminal_open:
                    try:
                        self._write_all(data)
                    except OSError:  # EIO / EPIPE: the terminal is gone; keep scanning
                        self._terminal_open = False
                with self._room:
                    while self._pending >= self._max_pending and not self._stopped:
                        self._room.wait()
                    self._pending += len(data)
                    self._chunks.append(data)
                self._wake_loop()
        finally:
            with self._room:
                self._finished = True
            self._wake_loop()

    def _read(self) -> bytes:
        """The agent's next output (all it has written, up to READ_SIZE); b"" at its end."""
        while not self._stopped:
            try:
                data = os.read(self._master, READ_SIZE)
            except BlockingIOError:
                self._wait(self._master, select.POLLIN)
                continue
            except OSError as exc:
                if exc.errno in (errno.EIO, errno.EBADF):  # every slave fd is closed
                    return b""
                raise
            return self._agent.read_more(data, READ_SIZE) if data else b""
        return b""

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view and not self._stopped:
            try:
                view = view[os.write(self._terminal, view) :]
            except BlockingIOError:
                self._wait(self._terminal, select.POLLOUT)

    def _wait(self, fd: int, events: int) -> None:
        """Until `fd` is ready or `stop` is called (the GIL is released meanwhile)."""
        poller = select.poll()
        poller.register(fd, events)
        poller.register(self._wake_read, select.POLLIN)
        poller.poll()

    def _wake_loop(self) -> None:
        assert self._loop is not None and self._ready is not None
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting
            self._loop.call_soon_threadsafe(self._ready.set)

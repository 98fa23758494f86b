"""`relay serve`: the resident engine behind the hook clients, on a private Unix socket.

One server per user and install (the socket's name says which, see client.socket_path),
started on demand by a client, gone after an idle period. It keeps settings, trust,
script digests and the hook log warm; what it answers is what `relay hooks run` would
answer in the client's own process, because both call the same function (relay.hosts.call,
handed in as `handler`: this layer knows nothing of hosts).

Security: the socket's directory is created 0700 and must stay owned by this user alone;
the socket is 0600; every connection's peer uid (SO_PEERCRED) must be this user's. A
second server for the same socket exits at once (an flock), so racing clients start one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

from relay.config.sockets import identity, make_private_dir, peer
from relay.errors import RelayError
from relay.server.client import (
    Call,
    ProtocolViolation,
    Reply,
    accepted_frame,
    fallback_frame,
    read_request,
    result_frame,
)

DEFAULT_IDLE_SECONDS = 900.0
MAX_CONNECTIONS = 64
"""Connections served at once, each on a thread of its own; one more is told "busy" (the
client runs its call itself) by the accept loop, without a thread."""
READ_TIMEOUT = 5.0
"""Seconds a connection has, in all, to send its whole request (clients send it at once):
a client that sends nothing, or a byte at a time, holds a thread no longer."""
WRITE_TIMEOUT = 10.0
"""Seconds each answer may take to go out (a client that does not read holds no thread)."""
BOUND_SLACK_MS = 1000
"""Added to a plan's own time bound in the accept frame (rendering, the log, scheduling)."""


class Prepared(Protocol):
    """A planned call: it returns within `bound` seconds once `finish` is called."""

    bound: float

    def finish(self) -> Reply: ...


Handler = Callable[[Call], Prepared | None]
"""Plans a call; None when the client must run it itself (arguments for click)."""


class ServerError(RelayError):
    """The server cannot listen where it was asked to."""


class Server:
    """Accepts calls on `path` and answers each on a thread of its own: threads wait in
    accept() themselves and serve what they accept, kept for the next call (handing a
    connection from an accepting thread to a serving one cost a host's event a thread
    wake-up, 0.05 ms; starting a thread per call, more)."""

    def __init__(
        self,
        path: str,
        handler: Handler,
        *,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        on_stop: Callable[[], None] | None = None,
        figures: Callable[[], dict[str, object]] | None = None,
    ) -> None:
        self.path = path
        self.handler = handler
        self.idle_seconds = idle_seconds
        self.on_stop = on_stop
        self.figures = figures
        """The handler's own figures for the status (what it keeps, how often it helped)."""
        self.install = identity()
        self.started = time.time()
        self.calls = 0
        self._active = 0
        """Connections being served: each holds a thread."""
        self._calls_active = 0
        """Calls under way (their request read): only these keep the server from idling."""
        self._last = time.monotonic()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._lock_fd: int | None = None
        self._inode: int | None = None
        self._accepting = 0
        """Threads waiting in accept(): one at least while the server runs."""

    def bind(self) -> bool:
        """Take the socket; False when another server already holds it (not an error)."""
        folder = os.path.dirname(self.path)
        if not make_private_dir(folder):
            raise ServerError(
                f"{folder} must be a directory that only you own and can enter (mode 0700); "
                "relay will not listen there"
            )
        lock_fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            return False
        self._lock_fd = lock_fd
        os.ftruncate(lock_fd, 0)
        os.write(lock_fd, f"{os.getpid()}\n".encode())
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a socket left by a server that died
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        previous = os.umask(0o177)
        try:
            listener.bind(self.path)
        finally:
            os.umask(previous)
        os.chmod(self.path, 0o600)
        listener.listen(128)
        self._listener = listener
        self._inode = os.stat(self.path).st_ino
        return True

    def serve_forever(self) -> None:
        """Answer calls until stopped, SIGTERM/SIGINT, or idle for `idle_seconds`."""
        assert self._listener is not None
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                signal.signal(signum, lambda *_: self._stopping.set())
        try:
            self._add_thread()
            # Connections that come and go (and send no call) do not keep an idle server
            # alive: only calls count (see _answer).
            while not self._stopping.wait(1.0):
                if self._idle():
                    break
        finally:
            self.close()

    def _add_thread(self) -> None:
        """One more thread waiting in accept() (the caller holds no lock)."""
        with self._lock:
            self._accepting += 1
        threading.Thread(target=self._work, args=(self._listener,), daemon=True).start()

    def _work(self, listener: socket.socket | None) -> None:
        while listener is not None and not self._stopping.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:  # shut down by close() or a "stop": the server is ending
                break
            admitted, caller = self._admit(connection)
            if not admitted:
                continue
            with self._lock:
                self._active += 1
                self._accepting -= 1
                alone = self._accepting == 0 and not self._stopping.is_set()
            if alone:
                self._add_thread()  # someone accepts the next call while this one is served
            self._serve_connection(connection, caller)
            with self._lock:
                self._active -= 1
                # More threads than calls at once were ever served: this one ends.
                if self._accepting >= 2:
                    return
                self._accepting += 1
        with self._lock:
            self._accepting -= 1

    def _admit(self, connection: socket.socket) -> tuple[bool, int | None]:
        """Whether a thread serves this connection: not another user's (closed unanswered),
        and not past MAX_CONNECTIONS (told "busy" here, the client runs its call itself);
        and the pid of its process (None where unknown)."""
        try:
            pid, uid = peer(connection)
        except OSError:
            pid = uid = None
        if uid is not None and uid != os.getuid():
            connection.close()  # another user's process: not a word
            return False, None
        with self._lock:
            busy = self._active >= MAX_CONNECTIONS
        if busy:
            with contextlib.suppress(OSError):
                connection.setblocking(False)  # a few bytes into an empty buffer
                connection.send(fallback_frame("busy"))
            connection.close()
            return False, None
        return True, pid

    def stop(self) -> None:
        """Ask the server to end (serve_forever returns at once)."""
        self._stopping.set()

    def status(self) -> dict[str, object]:
        """What `relay serve --status` and `relay doctor` show."""
        figures = self.figures() if self.figures is not None else {}
        with self._lock:
            return {
                **figures,
                "pid": os.getpid(),
                "socket": self.path,
                "install": self.install,
                "started": self.started,
                "calls": self.calls,
                "active": self._calls_active,
                "connections": self._active - 1,  # not counting the status request itself
                "idle_seconds": self.idle_seconds,
            }

    def close(self) -> None:
        """Stop listening, remove the socket (if still ours) and release the lock; the
        threads waiting in accept() end, those serving a call end after it."""
        self._stopping.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes every accept()
            self._listener.close()
            self._listener = None
            with contextlib.suppress(OSError):
                if os.stat(self.path).st_ino == self._inode:
                    os.unlink(self.path)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self.on_stop is not None:
            self.on_stop()
            self.on_stop = None

    def _idle(self) -> bool:
        with self._lock:
            return self._calls_active == 0 and time.monotonic() - self._last > self.idle_seconds

    def _serve_connection(self, connection: socket.socket, caller: int | None) -> None:
        try:
            with connection:
                self._answer(connection, caller)
        except (OSError, ProtocolViolation):
            pass  # the client went away, too slowly, or spoke nonsense: nothing to answer

    def _answer(self, connection: socket.socket, caller: int | None) -> None:
        request = read_request(_reader(connection, time.monotonic() + READ_TIMEOUT))
        if isinstance(request, str):
            self._control(connection, request)
            return
        install, call = request
        call.caller = caller
        if install != self.install:
            _send(connection, fallback_frame(f"this server is {self.install}"))
            return
        with self._lock:
            self.calls += 1
            self._calls_active += 1
            self._last = time.monotonic()
        try:
            self._call(connection, call)
        finally:
            with self._lock:
                self._calls_active -= 1
                self._last = time.monotonic()

    def _call(self, connection: socket.socket, call: Call) -> None:
        try:
            prepared = self.handler(call)
        except Exception as exc:  # a bug: the client runs the call itself
            _send(connection, fallback_frame(f"internal error: {type(exc).__name__}: {exc}"))
            return
        if prepared is None:
            _send(connection, fallback_frame("arguments for the command line"))
            return
        # The client waits for the result only this long, then runs the call itself.
        _send(connection, accepted_frame(int(prepared.bound * 1000) + BOUND_SLACK_MS))
        reply = prepared.finish()
        try:
            _send(connection, result_frame(reply))
            reply.returned()
        finally:
            reply.finished()

    def _control(self, connection: socket.socket, command: str) -> None:
        if command == "status":
            answer = json.dumps(self.status()).encode()
        elif command == "stop":
            answer = json.dumps({"stopping": True, "pid": os.getpid()}).encode()
            self._stopping.set()
            listener = self._listener
            if listener is not None:
                # No new call is taken from now on (`relay serve --stop` waits for the
                # socket to go, which serve_forever's close() does at once).
                with contextlib.suppress(OSError):
                    listener.shutdown(socket.SHUT_RDWR)
        else:
            answer = json.dumps({"error": f"unknown command {command!r}"}).encode()
        _send(connection, result_frame(Reply(0, answer, b"")))


def _send(connection: socket.socket, data: bytes) -> None:
    """Send `data` within WRITE_TIMEOUT (a client that does not read holds no thread). On a
    socket still without a timeout (its request was read at once), a frame that its
    buffer takes goes in one system call: no wait for it to be writable first, which a
    socket with a timeout makes before each send."""
    sent = 0
    if connection.gettimeout() is None:
        with contextlib.suppress(BlockingIOError):
            sent = connection.send(data, socket.MSG_DONTWAIT)
    if sent < len(data):
        connection.settimeout(WRITE_TIMEOUT)
        connection.sendall(memoryview(data)[sent:])


def _reader(connection: socket.socket, deadline: float) -> Callable[[int], bytes]:
    """`read(size)` on `connection`, buffered, that raises TimeoutError once `deadline` has
    passed, however the bytes trickle in (a socket timeout alone restarts with each byte).
    What has arrived when the request is first read is taken at once, without a wait for
    the socket to be readable first (clients send the whole request at once)."""
    received = b""
    position = 0

    def read(size: int) -> bytes:
        nonlocal received, position
        if position >= len(received):
            try:
                if connection.gettimeout() is not None:
                    raise BlockingIOError  # not the first read: within the deadline
                received = connection.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the request took too long") from None
                connection.settimeout(left)
                received = connection.recv(1 << 16)
            position = 0
        chunk = received[position : position + size]
        position += len(chunk)
        return chunk

    return read

"""MiniLM in a child process, so that a long-lived process (the dashboard, `relay serve`,
the MCP server) does not keep the model in its own memory.

The model's process holds numpy, the int8 weights and their engine (about 155 MB
resident with onnxruntime, 93 with relay's own), where wordllama costs about 70. The process that searches keeps numpy, the store's sign codes and a pipe; the
child (`python -m relay.services.memory.embedding_process`) holds the model, runs it on
a thread a core (minilm.MiniLM.runs), each thread taking the next batch of the request
with the fewest texts left (a query is not kept waiting behind a backlog, and no thread
waits for another between batches), and exits when its parent closes the pipe (the parent exited) or
after IDLE_SECONDS without a request; the next request starts a new one.

The protocol, on the child's stdin and stdout: a request is a 4-byte big-endian length
and a msgpack list of texts; an answer is a status byte (0: vectors follow, float32, one
row per text; 1: an error message follows, UTF-8), a 4-byte length and the payload. The
child's first answer, unasked, says whether the model loaded (its payload: who runs it,
minilm.MiniLM.engine) or why not.

A running child also answers other processes of the same user and install, so that a
command (`relay memory search`) does not load the model again (about 1-2 s) while a
long-lived process (an MCP server, the dashboard) has one: the first child of an install
listens on a Unix socket (`shared_socket`, in a folder of this user's alone, the socket
0600, each peer's uid checked), with the same protocol, its first answer on a new
connection saying the model is loaded. A process looking for a model connects there
first, and starts a child of its own only when no child answers. The child still lives
only while its parent does (and is used): nothing is left running by a command. A
request from a connection that is not whole within READ_SECONDS, too long, or not a
list of texts closes that connection; the child goes on serving.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any, Protocol

import msgspec

from relay.config.sockets import (
    APP,
    SOCKET_NAME_LIMIT,
    fnv1a64,
    identity,
    make_private_dir,
    peer_pid,
    peer_uid,
    private_dir_ok,
    state_base,
)
from relay.services.memory import minilm
from relay.services.memory.semantic import SemanticUnavailable

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["IDLE_SECONDS", "ChildEmbedder", "shared_socket", "start"]

IDLE_SECONDS = 300.0
"""A child with no request for this long exits (its memory goes back to the system)."""
_IDLE_VARIABLE = "RELAY_EMBEDDING_IDLE_SECONDS"
READ_SECONDS = 5.0
"""A connection's request must arrive whole within this (a stalled peer holds no one up
for longer)."""
MAX_REQUEST = 64 << 20
"""The longest request a connection may send (the store sends 1,000 memories at once)."""
CONNECTIONS = 16
"""Connections served at once; more are closed as they come."""
_HEADER = struct.Struct(">I")
_OK, _ERROR = 0, 1
_encoder = msgspec.msgpack.Encoder()
_texts = msgspec.msgpack.Decoder(list[str])


class ChildEmbedder:
    """MiniLM's embeddings, made by a child process (see the module): a running child of
    this install's, when one answers on the shared socket, else a child of its own.
    Thread-safe."""

    name = minilm.MODEL
    dimensions = minilm.DIMENSIONS
    centred = minilm.MiniLM.centred
    min_similarity = minilm.MiniLM.min_similarity

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None
        self._remote: socket.socket | None = None
        self._answers: _Reader | None = None
        self.engine = ""
        """Who runs the model in the child answering, as it said (minilm.MiniLM.engine)."""

    @property
    def pid(self) -> int | None:
        """The answering process's id while it runs (another process's child, when shared)."""
        remote, child = self._remote, self._child
        if remote is not None:
            with contextlib.suppress(OSError):
                return peer_pid(remote)
            return None
        return child.pid if child is not None and child.poll() is None else None

    @property
    def shared(self) -> bool:
        """Whether the child answering is another process's (reached by its socket)."""
        return self._remote is not None

    def start(self) -> None:
        """Reach a running child, or start one and wait until its model is loaded;
        SemanticUnavailable (with the child's reason) when it cannot be."""
        with self._lock:
            self._start()

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One row per text (see minilm.MiniLM.embed); SemanticUnavailable when the child
        cannot answer, even once started again."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        request = _encoder.encode(list(texts))
        with self._lock:
            for attempt in (1, 2):
                if not self._running():
                    self._start()
                try:
                    payload = self._ask(request)
                    break
                except (OSError, EOFError):
                    # The child exited (idle, killed, or its parent gone) between two
                    # requests: once more, with another child or one of our own.
                    self._stop()
                    if attempt == 2:
                        raise SemanticUnavailable("the MiniLM process stopped answering") from None
        rows: NDArray[np.float32] = np.frombuffer(payload, dtype=np.float32).reshape(
            len(texts), self.dimensions
        )
        return rows.copy()

    def close(self) -> None:
        """Stop the child, or leave the one shared (it would exit by itself when this
        process does)."""
        with self._lock:
            self._stop()

    def _running(self) -> bool:
        return self._remote is not None or (self._child is not None and self._child.poll() is None)

    def _start(self) -> None:
        self._stop()
        path = shared_socket()
        reached = _connect(path)
        if reached is not None:
            self._remote, self._answers, engine = reached
            self.engine = engine.decode("utf-8", "replace")
            return
        child = subprocess.Popen(
            [sys.executable, "-m", "relay.services.memory.embedding_process", path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        self._child, self._answers = child, _stdout(child)
        try:
            self.engine = _read_answer(self._answers).decode("utf-8", "replace")
        except (OSError, EOFError):
            self._stop()
            raise SemanticUnavailable("the MiniLM process exited while loading") from None
        except SemanticUnavailable:
            self._stop()
            raise

    def _ask(self, request: bytes) -> bytes:
        frame = _HEADER.pack(len(request)) + request
        if self._remote is not None:
            self._remote.sendall(frame)
        else:
            child = self._child
            assert child is not None and child.stdin is not None
            child.stdin.write(frame)
            child.stdin.flush()
        assert self._answers is not None
        return _read_answer(self._answers)

    def _stop(self) -> None:
        remote, self._remote = self._remote, None
        child, self._child = self._child, None
        answers, self._answers = self._answers, None
        if remote is not None:
            if answers is not None:
                answers.close()
            remote.close()
        if child is None:
            return
        if child.stdin is not None:
            with contextlib.suppress(OSError):  # a child killed: its pipe is broken
                child.stdin.close()  # the child exits on end of input
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def shared_socket() -> str:
    """Where this install's running child answers other processes: beside `relay serve`'s
    socket (relay.server.client.socket_path: relay.config.sockets), named for the model
    and the install."""
    tag = fnv1a64(f"{minilm.MODEL}:{identity()}".encode())
    path = os.path.join(state_base(os.environ), "run", f"embed-{tag}.sock")
    if len(path.encode()) <= SOCKET_NAME_LIMIT:
        return path
    return os.path.join(f"/tmp/{APP}-{os.getuid()}", f"embed-{fnv1a64(path.encode())}.sock")


def _connect(path: str) -> tuple[socket.socket, _Reader, bytes] | None:
    """A connection to the child listening at `path` (its reader, and who runs its model),
    once the child has said that its model is loaded; None when there is none (no socket,
    a dead child's, or not this user's)."""
    if not private_dir_ok(os.path.dirname(path)):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    answers = sock.makefile("rb", buffering=0)
    try:
        sock.settimeout(READ_SECONDS)
        sock.connect(path)
        if peer_uid(sock) not in (None, os.getuid()):
            raise ConnectionRefusedError(f"{path} is another user's")
        engine = _read_answer(answers)
        sock.settimeout(None)  # a batch of 1,000 memories takes seconds
    except (OSError, EOFError, SemanticUnavailable):
        answers.close()
        sock.close()
        return None
    return sock, answers, engine


def start() -> ChildEmbedder:
    """A started child embedder (SemanticUnavailable, saying why, when MiniLM cannot be
    loaded there)."""
    embedder = ChildEmbedder()
    embedder.start()
    return embedder


def _stdout(child: subprocess.Popen[bytes]) -> IO[bytes]:
    assert child.stdout is not None
    return child.stdout


class _Reader(Protocol):
    """A pipe's or a socket's reading end, unbuffered (select must see what is left)."""

    def read(self, size: int = -1, /) -> bytes | None: ...

    def close(self) -> None: ...


def _read_exactly(stream: _Reader, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("the embedding process closed its output")
        data += chunk
    return data


def _read_answer(stream: _Reader) -> bytes:
    status = _read_exactly(stream, 1)[0]
    (size,) = _HEADER.unpack(_read_exactly(stream, _HEADER.size))
    payload = _read_exactly(stream, size)
    if status != _OK:
        raise SemanticUnavailable(payload.decode("utf-8", "replace"))
    return payload


def _frame(status: int, payload: bytes) -> bytes:
    return bytes([status]) + _HEADER.pack(len(payload)) + payload


def _answer(stream: IO[bytes], status: int, payload: bytes) -> None:
    stream.write(_frame(status, payload))
    stream.flush()


def main() -> int:
    """The child: load MiniLM, say so, then embed what is asked (by its parent, and by
    other processes when it listens on the shared socket named in its arguments) until
    its input ends or the idle time passes."""
    requests = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)  # noqa: SIM115
    answers = sys.stdout.buffer
    try:
        model = minilm.load()
    except SemanticUnavailable as exc:
        _answer(answers, _ERROR, str(exc).encode())
        return 1
    # Listening before saying so: once its parent knows the model is loaded, so can
    # every other process.
    listening = _listen(sys.argv[1]) if len(sys.argv) > 1 else None
    idle = float(os.environ.get(_IDLE_VARIABLE) or IDLE_SECONDS)
    try:
        _answer(answers, _OK, model.engine.encode())
        return _serve(model, requests, answers, listening[0] if listening else None, idle)
    finally:
        if listening is not None:
            _unlisten(sys.argv[1], *listening)


class _Job:
    """A request being answered: its texts, embedded a run (BATCH texts at most) at a
    time, by the runners (_Runners) or, for one batch, by the serving thread."""

    def __init__(self, asker: Any, texts: list[str], model: minilm.MiniLM) -> None:
        import numpy as np

        self.asker = asker
        """The parent's pipe (`requests`) or a connection: where the answer goes."""
        self.texts = texts
        self.order: list[int] | None = None
        """Where each text of `texts` was asked (None: in the order asked)."""
        self.encodings: list[list[int]] | None = None
        """The texts' token ids, when tokenized ahead (None: each run tokenizes its own)."""
        if model.any_lengths:
            # Relay's engine runs texts of any lengths together: each runner tokenizes
            # its own batch, so that the first runs start as soon as the request is
            # read (tokenizing 1,000 texts first left both cores idle for 10 to 25 ms).
            self.batches = [
                np.arange(start, min(start + minilm.BATCH, len(texts)))
                for start in range(0, len(texts), minilm.BATCH)
            ]
        else:
            # Fewest tokens first: onnxruntime runs texts of one token length together,
            # and a request sorted so makes a few full batches (4 of 64 texts from the
            # bench's memories, where sorted by characters made 13 of 5 texts: 8% more
            # CPU).
            encodings = [model.encode(text) for text in texts]
            self.order = sorted(range(len(texts)), key=lambda place: len(encodings[place]))
            self.texts = [texts[place] for place in self.order]
            self.encodings = [encodings[place] for place in self.order]
            self.batches = model.batches(self.encodings)
        self.rows = np.zeros((len(texts), minilm.DIMENSIONS), dtype=np.float32)
        """The embeddings, a row per text of `texts` (a text with nothing to embed: zero)."""
        self.given = 0
        """Batches handed to a runner."""
        self.running = 0
        """Batches being run."""
        self.failed: bytes | None = None

    @property
    def left(self) -> int:
        """Texts not yet handed to a runner."""
        return sum(len(rows) for rows in self.batches[self.given :])

    @property
    def finished(self) -> bool:
        return self.running == 0 and (self.given == len(self.batches) or self.failed is not None)

    def embed(self, model: minilm.MiniLM, rows: NDArray[np.intp]) -> NDArray[np.float32]:
        """The embeddings of the texts at `rows` (a batch), on the calling thread."""
        if self.encodings is None:
            return model.embed_batch([self.texts[row] for row in rows])
        return model.run([self.encodings[row] for row in rows])

    def run(self, model: minilm.MiniLM, rows: NDArray[np.intp]) -> bool:
        """Embed the texts at `rows` (a batch) into `rows` of the answer, on the calling
        thread; False when the model failed (`failed` then says so: the request's answer)."""
        try:
            self.rows[rows] = self.embed(model, rows)  # its own rows: no lock
        except Exception as exc:
            # onnxruntime's own errors (or whatever else): said to the asker, which
            # searches by words; the child goes on with the next request.
            self.failed = self.failed or _frame(_ERROR, f"MiniLM failed: {exc}".encode())
            return False
        return True

    def answer(self) -> bytes:
        """The vectors in the order the texts were asked in, or why there are none."""
        if self.failed is not None:
            return self.failed
        if self.order is None:
            return _frame(_OK, self.rows.tobytes())
        import numpy as np

        asked = np.empty_like(self.rows)
        asked[self.order] = self.rows
        return _frame(_OK, asked.tobytes())


class _Runners:
    """The threads that run the model on requests of more than one batch, one a run at
    once (minilm.MiniLM.runs): each takes the next batch of the request with the fewest
    texts left, so that no thread waits for another between two batches of a request. A
    finished request is handed to the serving thread, woken through a pipe, which
    answers it."""

    def __init__(self, model: minilm.MiniLM) -> None:
        self._model = model
        self._changed = threading.Condition()
        self._jobs: list[_Job] = []
        self._finished: list[_Job] = []
        self._stopping = False
        self.wake, self._waker = os.pipe()
        """Readable when a request is finished (`finished` takes it)."""
        os.set_blocking(self.wake, False)
        os.set_blocking(self._waker, False)
        self._threads = [
            threading.Thread(target=self._runner, name=f"minilm-{number}", daemon=True)
            for number in range(max(1, model.runs))
        ]
        for thread in self._threads:
            thread.start()

    def add(self, job: _Job) -> None:
        with self._changed:
            if job.finished:  # nothing to embed
                self._done(job)
            else:
                self._jobs.append(job)
                self._changed.notify_all()

    def finished(self) -> list[_Job]:
        """The requests finished since the last call."""
        with contextlib.suppress(BlockingIOError):
            os.read(self.wake, 4096)
        with self._changed:
            done, self._finished = self._finished, []
        return done

    def stop(self) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        for thread in self._threads:
            thread.join()
        os.close(self.wake)
        os.close(self._waker)

    def _done(self, job: _Job) -> None:
        # Under the condition's lock.
        if job in self._jobs:
            self._jobs.remove(job)
        self._finished.append(job)
        with contextlib.suppress(BlockingIOError):
            os.write(self._waker, b"\0")

    def _runner(self) -> None:
        while True:
            with self._changed:
                waiting = [job for job in self._jobs if job.given < len(job.batches)]
                while not waiting and not self._stopping:
                    self._changed.wait()
                    waiting = [job for job in self._jobs if job.given < len(job.batches)]
                if self._stopping:
                    return
                job = min(waiting, key=lambda job: job.left)
                rows = job.batches[job.given]
                job.given += 1
                job.running += 1
            done = job.run(self._model, rows)
            with self._changed:
                job.running -= 1
                if not done:
                    job.given = len(job.batches)  # the rest is not run
                if job.finished:
                    self._done(job)


def _serve(
    model: minilm.MiniLM,
    requests: _Reader,
    answers: IO[bytes],
    listener: socket.socket | None,
    idle: float,
) -> int:
    """Answer requests from the parent and from connections: a request of one batch at
    most (a query) at once on this thread, a longer one a batch at a time on each runner,
    the request with the fewest texts left first, so a query never waits for another's
    backlog. A source's next request is read once its answer is sent (answers go in the
    order asked)."""
    connections: list[socket.socket] = []
    jobs: list[_Job] = []
    runners = _Runners(model)

    def send(job: _Job) -> None:
        answer = job.answer()
        if job.asker is requests:
            answers.write(answer)
            answers.flush()
        elif not _send(job.asker, answer):
            connections.remove(job.asker)
            job.asker.close()

    def start(job: _Job) -> None:
        if len(job.batches) > 1:
            jobs.append(job)
            runners.add(job)
            return
        # A query (one batch at most) runs here at once, on a third thread when the
        # runners are busy with a backlog: it waits for no batch, and for no hand-over
        # between threads (each a wait for a CPU on a busy machine).
        for rows in job.batches:
            job.run(model, rows)
        send(job)

    try:
        while True:
            busy = {id(job.asker) for job in jobs}
            sources: list[Any] = [
                source for source in (requests, *connections) if id(source) not in busy
            ]
            if listener is not None:
                sources.append(listener)
            sources.append(runners.wake)
            ready, _, _ = select.select(sources, [], [], None if jobs else idle)
            if not ready:
                return 0  # idle: the parent starts another when it needs one
            for source in ready:
                if source is runners.wake:
                    for job in runners.finished():
                        jobs.remove(job)
                        send(job)
                elif source is requests:
                    try:
                        (size,) = _HEADER.unpack(_read_exactly(requests, _HEADER.size))
                        asked = _texts.decode(_read_exactly(requests, size))
                    except EOFError:
                        return 0  # the parent closed the pipe, or exited
                    except msgspec.DecodeError as exc:
                        _answer(answers, _ERROR, f"unreadable request: {exc}".encode())
                        return 1
                    start(_Job(requests, asked, model))
                elif source is listener:
                    _accept(listener, connections, model.engine.encode())
                else:
                    texts = _read_connection(source)
                    if texts is None:
                        connections.remove(source)
                        source.close()
                    else:
                        start(_Job(source, texts, model))
    finally:
        runners.stop()
        for connection in connections:
            connection.close()


def _listen(path: str) -> tuple[socket.socket, int] | None:
    """Listen on the shared socket (and hold its lock) unless another child does, or
    the folder is not this user's alone; None then."""
    if not make_private_dir(os.path.dirname(path)):
        return None
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock)
        return None  # another child answers there
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a child that was killed left it behind
        listener.bind(path)
        os.chmod(path, 0o600)
        listener.listen(CONNECTIONS)
    except OSError:
        listener.close()
        os.close(lock)
        return None
    return listener, lock


def _unlisten(path: str, listener: socket.socket, lock: int) -> None:
    """Leave nothing behind: the socket and the lock file (still ours: the lock is held;
    a child that opened the old lock file meanwhile listens in vain, beside its parent)."""
    for name in (path, path + ".lock"):
        with contextlib.suppress(OSError):
            os.unlink(name)
    listener.close()
    os.close(lock)


def _accept(listener: socket.socket, connections: list[socket.socket], engine: bytes) -> None:
    """Take a connection from this user (when fewer than CONNECTIONS are open) and say
    that the model is loaded, and who runs it."""
    try:
        connection, _ = listener.accept()
    except OSError:
        return
    try:
        if len(connections) >= CONNECTIONS or peer_uid(connection) not in (None, os.getuid()):
            raise ConnectionRefusedError("not served")
        connection.settimeout(READ_SECONDS)
        connection.sendall(_frame(_OK, engine))
    except OSError:
        connection.close()
        return
    connections.append(connection)


def _read_connection(connection: socket.socket) -> list[str] | None:
    """One request from a connection; None when the connection is done with (closed,
    stalled, too long a request, or not a list of texts: told why when it can be)."""
    try:
        (size,) = _HEADER.unpack(_receive(connection, _HEADER.size))
        if size > MAX_REQUEST:
            connection.sendall(_frame(_ERROR, f"request of {size} bytes: too long".encode()))
            return None
        return _texts.decode(_receive(connection, size))
    except (OSError, EOFError):
        return None
    except msgspec.DecodeError as exc:
        _send(connection, _frame(_ERROR, f"unreadable request: {exc}".encode()))
        return None


def _send(connection: socket.socket, answer: bytes) -> bool:
    """Send an answer; False when the connection is gone (or does not read)."""
    try:
        connection.sendall(answer)
    except OSError:
        return False
    return True


def _receive(connection: socket.socket, size: int) -> bytes:
    """`size` bytes from a connection, within READ_SECONDS in all (EOFError at its end)."""
    deadline = time.monotonic() + READ_SECONDS
    data = bytearray()
    while len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("a request that is not whole in time")
        connection.settimeout(left)
        chunk = connection.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise EOFError("the connection closed")
        data += chunk
    connection.settimeout(READ_SECONDS)
    return bytes(data)


if __name__ == "__main__":
    sys.exit(main())

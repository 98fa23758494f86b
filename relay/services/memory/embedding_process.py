"""MiniLM in a child process, so that a long-lived process (the dashboard, `relay serve`,
the MCP server) does not keep the model in its own memory.

onnxruntime turns the model's int8 weights into float32 when it loads them: the model
costs about 150 MB of resident memory, and onnxruntime 30 MB more, where wordllama costs
about 70. The process that searches keeps numpy, the store's sign codes and a pipe; the
child (`python -m relay.services.memory.embedding_process`) holds the model, answers one
request at a time, and exits when its parent closes the pipe (the parent exited) or
after IDLE_SECONDS without a request; the next request starts a new one.

The protocol, on the child's stdin and stdout: a request is a 4-byte big-endian length
and a msgpack list of texts; an answer is a status byte (0: vectors follow, float32, one
row per text; 1: an error message follows, UTF-8), a 4-byte length and the payload. The
child's first answer, unasked, says whether the model loaded (an empty payload) or why not.
"""

from __future__ import annotations

import os
import select
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

import msgspec

from relay.services.memory import minilm
from relay.services.memory.semantic import SemanticUnavailable

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["IDLE_SECONDS", "ChildEmbedder", "start"]

IDLE_SECONDS = 300.0
"""A child with no request for this long exits (its memory goes back to the system)."""
_IDLE_VARIABLE = "RELAY_EMBEDDING_IDLE_SECONDS"
_HEADER = struct.Struct(">I")
_OK, _ERROR = 0, 1
_encoder = msgspec.msgpack.Encoder()
_texts = msgspec.msgpack.Decoder(list[str])


class ChildEmbedder:
    """MiniLM's embeddings, made by a child process (see the module). Thread-safe."""

    name = minilm.MODEL
    dimensions = minilm.DIMENSIONS
    centred = minilm.MiniLM.centred
    min_similarity = minilm.MiniLM.min_similarity

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        child = self._child
        return child.pid if child is not None and child.poll() is None else None

    def start(self) -> None:
        """Start the child and wait until its model is loaded; SemanticUnavailable (with the
        child's reason) when it cannot be."""
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
                if self._child is None or self._child.poll() is not None:
                    self._start()
                try:
                    payload = self._ask(request)
                    break
                except (OSError, EOFError):
                    # The child exited (idle, or killed) between two requests: once more.
                    self._stop()
                    if attempt == 2:
                        raise SemanticUnavailable("the MiniLM process stopped answering") from None
        rows: NDArray[np.float32] = np.frombuffer(payload, dtype=np.float32).reshape(
            len(texts), self.dimensions
        )
        return rows.copy()

    def close(self) -> None:
        """Stop the child (it would exit by itself when this process does)."""
        with self._lock:
            self._stop()

    def _start(self) -> None:
        self._stop()
        child = subprocess.Popen(
            [sys.executable, "-m", "relay.services.memory.embedding_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        self._child = child
        try:
            _read_answer(_stdout(child))
        except (OSError, EOFError):
            self._stop()
            raise SemanticUnavailable("the MiniLM process exited while loading") from None
        except SemanticUnavailable:
            self._stop()
            raise

    def _ask(self, request: bytes) -> bytes:
        child = self._child
        assert child is not None and child.stdin is not None
        child.stdin.write(_HEADER.pack(len(request)) + request)
        child.stdin.flush()
        return _read_answer(_stdout(child))

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        if child.stdin is not None:
            child.stdin.close()  # the child exits on end of input
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()


def start() -> ChildEmbedder:
    """A started child embedder (SemanticUnavailable, saying why, when MiniLM cannot be
    loaded there)."""
    embedder = ChildEmbedder()
    embedder.start()
    return embedder


def _stdout(child: subprocess.Popen[bytes]) -> IO[bytes]:
    assert child.stdout is not None
    return child.stdout


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("the embedding process closed its output")
        data += chunk
    return data


def _read_answer(stream: IO[bytes]) -> bytes:
    status = _read_exactly(stream, 1)[0]
    (size,) = _HEADER.unpack(_read_exactly(stream, _HEADER.size))
    payload = _read_exactly(stream, size)
    if status != _OK:
        raise SemanticUnavailable(payload.decode("utf-8", "replace"))
    return payload


def _answer(stream: IO[bytes], status: int, payload: bytes) -> None:
    stream.write(bytes([status]) + _HEADER.pack(len(payload)) + payload)
    stream.flush()


def main() -> int:
    """The child: load MiniLM, say so, then embed what is asked until input ends or the
    idle time passes."""
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    try:
        model = minilm.load()
    except SemanticUnavailable as exc:
        _answer(answers, _ERROR, str(exc).encode())
        return 1
    _answer(answers, _OK, b"")
    idle = float(os.environ.get(_IDLE_VARIABLE) or IDLE_SECONDS)
    while True:
        ready, _, _ = select.select([requests], [], [], idle)
        if not ready:
            return 0  # idle: the parent starts another when it needs one
        try:
            (size,) = _HEADER.unpack(_read_exactly(requests, _HEADER.size))
            texts = _texts.decode(_read_exactly(requests, size))
        except EOFError:
            return 0  # the parent closed the pipe, or exited
        except msgspec.DecodeError as exc:
            _answer(answers, _ERROR, f"unreadable request: {exc}".encode())
            return 1
        try:
            vectors = model.embed(texts)
        except Exception as exc:
            # onnxruntime's own errors: said to the parent, which searches by words.
            _answer(answers, _ERROR, f"MiniLM failed: {exc}".encode())
            continue
        _answer(answers, _OK, vectors.astype("float32").tobytes())


if __name__ == "__main__":
    sys.exit(main())

"""relay's own typing, taken out of the copy of the output that is scanned (DESIGN §8).

An agent whose terminal echoes input shows what relay typed on the line the agent prints
next (`context from SessionStart@memory:save …`): that line would no longer start with the
directive. relay knows what it typed, so it removes the echo of those bytes, in order,
from what the directive scanner reads. The user's terminal still gets every byte.
"""

from __future__ import annotations

import time
from collections import deque

ECHO_SECONDS = 5.0
"""How long typed text is looked for in the output; an agent that never echoes it (a TUI
that draws its input box itself) leaves nothing behind for longer."""
MAX_PENDING = 64


class EchoFilter:
    """Removes the echo of typed bytes from an output stream read in chunks.

    An echo can be cut by the end of a read at any byte (an agent in raw mode echoes key by
    key), so a read that ends with the start of the expected echo keeps those bytes back
    until the next read says whether the echo goes on. Nothing is lost: held bytes that turn
    out to be the agent's own are passed on with the next read, or by `close()`.
    """

    def __init__(self, *, seconds: float = ECHO_SECONDS) -> None:
        self._seconds = seconds
        self._pending: deque[tuple[bytes, float]] = deque(maxlen=MAX_PENDING)
        self._held = b""

    def typed(self, data: bytes) -> None:
        """relay wrote `data` to the agent's input (without the Enter)."""
        if data:
            self._pending.append((data, time.monotonic()))

    def filter(self, data: bytes) -> bytes:
        """`data` without the echo of what was typed, where the echo is found in it."""
        data, self._held = self._held + data, b""
        pending = self._pending
        if not pending:
            return data
        oldest = time.monotonic() - self._seconds
        while pending and pending[0][1] < oldest:
            pending.popleft()
        while pending:
            expected = pending[0][0]
            at = data.find(expected)
            if at >= 0:
                data = data[:at] + data[at + len(expected) :]
                pending.popleft()
                continue
            size = _tail_overlap(data, expected)
            if size:
                data, self._held = data[:-size], data[-size:]
            break
        return data

    def close(self) -> bytes:
        """The bytes still held back: the stream ended, so they were the agent's own."""
        held, self._held = self._held, b""
        return held


def _tail_overlap(data: bytes, expected: bytes) -> int:
    """The length of the longest start of `expected` that `data` ends with."""
    for size in range(min(len(data), len(expected) - 1), 0, -1):
        if data.endswith(expected[:size]):
            return size
    return 0

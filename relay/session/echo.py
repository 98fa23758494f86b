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
MIN_OVERLAP = 3
"""A read that ends with fewer bytes of the echo's start is taken for the agent's own."""


class EchoFilter:
    """Removes the echo of typed bytes from an output stream read in chunks."""

    def __init__(self, *, seconds: float = ECHO_SECONDS) -> None:
        self._seconds = seconds
        self._pending: deque[tuple[bytes, float]] = deque(maxlen=MAX_PENDING)

    def typed(self, data: bytes) -> None:
        """relay wrote `data` to the agent's input (without the Enter)."""
        if data:
            self._pending.append((data, time.monotonic()))

    def filter(self, data: bytes) -> bytes:
        """`data` without the echo of what was typed, where the echo is found in it."""
        pending = self._pending
        if not pending:
            return data
        oldest = time.monotonic() - self._seconds
        while pending and pending[0][1] < oldest:
            pending.popleft()
        while pending:
            expected, when = pending[0]
            at = data.find(expected)
            if at >= 0:
                data = data[:at] + data[at + len(expected) :]
                pending.popleft()
                continue
            # The echo may be cut by the end of this read: its start ends the data.
            size = _tail_overlap(data, expected)
            if size and size >= min(MIN_OVERLAP, len(expected) - 1):
                data = data[:-size]
                pending[0] = (expected[size:], when)
            break
        return data


def _tail_overlap(data: bytes, expected: bytes) -> int:
    """The length of the longest start of `expected` that `data` ends with."""
    for size in range(min(len(data), len(expected) - 1), 0, -1):
        if data.endswith(expected[:size]):
            return size
    return 0

"""Asking the human in the terminal before a directive runs (`confirm: true`, DESIGN §8).

While a question is open, the human's keys answer it instead of reaching the agent: `y`
is yes, any other key no. Terminal replies that arrive on the same input (cursor
reports, colour answers: anything that starts with ESC) are never taken for an answer.
Without a terminal there is nobody to ask, and the answer is no.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio

ANSWER_SECONDS = 120.0


class Confirmer:
    """Yes/no questions to the human at the terminal, one at a time."""

    def __init__(
        self, tell: Callable[[str], None], *, available: bool, timeout: float = ANSWER_SECONDS
    ) -> None:
        self._tell = tell
        self.available = available
        self._timeout = timeout
        self._answered: anyio.Event | None = None
        self._yes = False
        self._lock = anyio.Lock()

    async def ask(self, question: str) -> bool:
        """Ask `question`; True only for a `y` typed within the time limit."""
        if not self.available:
            return False
        async with self._lock:
            self._answered, self._yes = anyio.Event(), False
            self._tell(f"{question} [y/N] ")
            try:
                with anyio.move_on_after(self._timeout):
                    await self._answered.wait()
            finally:
                self._answered = None
            self._tell("yes" if self._yes else "no")
            return self._yes

    @property
    def asking(self) -> bool:
        return self._answered is not None

    def intercept(self, data: bytes) -> bytes:
        """The human's keys: while a question is open they answer it (nothing goes on to
        the agent); otherwise they pass through unchanged."""
        answered = self._answered
        if answered is None or not data:
            return data
        if data.startswith(b"\x1b"):
            return b""  # a terminal reply or an arrow key: not an answer
        self._yes = data[:1] in (b"y", b"Y")
        answered.set()
        return b""

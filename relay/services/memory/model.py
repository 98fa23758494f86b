"""Memories and the service that stores them (the Protocol every backend implements)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import msgspec

from relay.errors import RelayError


class Memory(msgspec.Struct, kw_only=True, frozen=True):
    """One thing an agent saved to remember."""

    id: str
    """Short and stable: 8 lowercase hex characters, unique in the store."""
    content: str
    tags: list[str] = msgspec.field(default_factory=list)
    agent: str | None = None
    project: str | None = None
    """The project root it belongs to; None: global, visible in every project."""
    created_at: str
    """ISO 8601 UTC with milliseconds and Z."""


class MemoryHit(msgspec.Struct, kw_only=True, frozen=True):
    """A search result: the memory and its score (higher is better)."""

    memory: Memory
    score: float


class MemoryStoreError(RelayError):
    """The memory store cannot be used (locked, read-only, corrupt, …); names the store."""

    def __init__(self, message: str, *, store: str) -> None:
        self.message = message
        self.store = store
        super().__init__(f"{store}: {message}")


class MemoryService(Protocol):
    """What relay needs from a memory backend. Methods are synchronous; callers in async
    code run them on a worker thread."""

    def add(
        self,
        content: str,
        *,
        tags: Sequence[str] = (),
        agent: str | None = None,
        project: str | None = None,
    ) -> Memory:
        """Save a memory (project None: global) and return it with its new id."""
        ...

    def search(self, query: str, *, project: str | None = None, limit: int = 10) -> list[MemoryHit]:
        """Memories of `project` and global ones matching `query`, best first; [] when none.
        Any user text is a valid query (FTS syntax in it is taken literally)."""
        ...

    def get(self, memory_id: str) -> Memory | None:
        """The memory with this id, or None."""
        ...

    def delete(self, memory_id: str) -> bool:
        """Forget a memory; False when there was none with this id."""
        ...

    def list(self, *, project: str | None = None, limit: int = 50) -> list[Memory]:
        """Memories of `project` and global ones, newest first."""
        ...

    def export(self) -> Iterator[Memory]:
        """Every memory, oldest first."""
        ...

    def import_memories(self, memories: Iterable[Memory]) -> int:
        """Store memories as given (ids, tags, dates kept; an existing id is replaced);
        return how many were stored."""
        ...

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
    """The key of the project it belongs to (spec/memory.md "Which project": `git:…`,
    shared by the repository's clones, or the project root's path); None: global,
    visible in every project."""
    created_at: str
    """ISO 8601 UTC with milliseconds and Z."""
    team: str | None = None
    """The team it is shared with (spec/memory.md "Team memory"): saved on one machine,
    stored on every machine of the team; of a project whose key travels (`git:…`), or
    global (project None). None: this machine's alone."""


class Ranking(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """Why a hit ranked where it did (`relay memory search --explain`, spec/memory.md)."""

    by_meaning: bool = False
    """Whether the search looked by meaning at all (false: by words only, the `semantic`
    extra missing or `memory.semantic` off); the semantic fields are None then."""
    keyword_rank: int | None = None
    """Its place among the full-text matches (1: best); None: no query word in it."""
    keyword_score: float | None = None
    """BM25 (higher is better; a word in the tags counts twice one in the content)."""
    semantic_rank: int | None = None
    """Its place among the memories nearest in meaning (1: nearest); None: not among them."""
    similarity: float | None = None
    """Cosine similarity of the query's embedding and the memory's (-1 to 1)."""
    keyword_weight: float | None = None
    """In a search by words and meaning, the weight of its place by words in the score: 1.0
    with every word of the query and related in meaning, 0.3 with every word but unrelated
    or related with only some, 0.1 with only some and unrelated; None when not found by
    words."""
    model: str | None = None
    """The embedding model that measured `similarity` (None: not searched by meaning)."""
    recency: float = 1.0
    """The lift for a recent memory (1.2 saved today, 1.1 at 30 days, towards 1.0)."""
    tags: list[str] = msgspec.field(default_factory=list)
    """The query's words that are tags of the memory."""


class MemoryHit(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """A search result: the memory and its score (higher is better)."""

    memory: Memory
    score: float
    explain: Ranking | None = None
    """How the score came about, when the search was asked to explain."""


class SavedMemory(msgspec.Struct, kw_only=True, frozen=True):
    """What a save did: the memory, and whether it was already there (the same content,
    `content_key`, in its scope, `same_scope`): then nothing was added and `memory` is
    the one stored."""

    memory: Memory
    existing: bool = False


class ImportCounts(msgspec.Struct, kw_only=True, frozen=True):
    """What an import did with each memory it was given (the three add up to all of them)."""

    added: int = 0
    """Stored as new memories."""
    present: int = 0
    """Already in the store (the same id with the same fields, or a new id with the
    content of a memory stored before the import, as a save would find it): left alone."""
    updated: int = 0
    """The same id with other fields: replaced by the imported version."""

    @property
    def total(self) -> int:
        """How many memories the import was given."""
        return self.added + self.present + self.updated


def content_key(content: str) -> str:
    """What two memories' contents must share to be the same memory: the text without
    surrounding whitespace (an agent's save is stripped, a person's may not be)."""
    return content.strip()


def same_scope(saved_in: str | None, stored_in: str | None) -> bool:
    """Whether a memory stored in `stored_in` is one a save into `saved_in` finds as
    already there: the same project, or a global memory (already shown in every project)."""
    return stored_in is None or stored_in == saved_in


def visible_in(memories: Iterable[Memory], project: str | None) -> Iterator[Memory]:
    """The memories a `list` in `project` shows: the project's and global ones (project
    None: global ones only), in the order given."""
    return (memory for memory in memories if same_scope(project, memory.project))


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
        """Save a memory (project None: global) and return it: the new one, or the one
        already stored with the same content (see `save`)."""
        ...

    def save(
        self,
        content: str,
        *,
        tags: Sequence[str] = (),
        agent: str | None = None,
        project: str | None = None,
        team: str | None = None,
    ) -> SavedMemory:
        """Save a memory unless one with the same content (`content_key`) is stored in
        `project` or globally (`same_scope`); then return that one, `existing` true, with
        the new tags added to its own. `team`: shared with that team (project must be
        None); an identical memory found becomes the team's too."""
        ...

    def search(
        self, query: str, *, project: str | None = None, limit: int = 10, explain: bool = False
    ) -> list[MemoryHit]:
        """Memories of `project` and global ones matching `query`, best first; [] when none.
        Any user text is a valid query (FTS syntax in it is taken literally). `explain`:
        each hit carries its Ranking, where the backend can say it."""
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
        """Every memory, oldest first (`visible_in` narrows it to what `list` shows)."""
        ...

    def import_memories(self, memories: Iterable[Memory]) -> ImportCounts:
        """Store memories as given (ids, tags, dates kept): an id already stored is
        replaced when its fields differ and left alone when not; a new id whose content
        was stored before the import (as `save` would find it) is not added; say what
        happened."""
        ...

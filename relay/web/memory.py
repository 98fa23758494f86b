"""The Memory page's data: memory search with the reasons of `relay memory search
--explain`, and the memories of each scope: this project's, the team's and global ones.

Read through the configured memory service (`open_memory`, as `relay memory` opens it),
whose `search` and `list` see a project's memories and the global ones (team memories
are global ones shared with a team); a scope is those of them that are its own. Nothing
is written from the page.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

import msgspec

from relay.errors import RelayError
from relay.services.memory.model import Memory, MemoryHit, MemoryService, Ranking
from relay.services.memory.namespace import unwritten_tags

if TYPE_CHECKING:
    from relay.config.discovery import SettingsSet

__all__ = [
    "SCOPES",
    "Memories",
    "MemoryItem",
    "MemoryOverview",
    "Scope",
    "ScopeListing",
    "SearchAnswer",
    "SearchHit",
    "open_memories",
    "reasons",
    "scope_of",
]

Scope = Literal["project", "team", "global"]
SCOPES: tuple[Scope, ...] = ("project", "team", "global")
DEFAULT_LIMIT = 20
MAX_LIMIT = 200
MAX_QUERY = 1000
"""Characters of a search the page takes (a longer one is an error, not cut silently)."""
MAX_SCAN = 20_000
"""Memories read at most to find a scope's own among what the service returns."""

Found = TypeVar("Found")


class MemoryItem(msgspec.Struct, kw_only=True, frozen=True):
    """A memory as the page shows it."""

    id: str
    content: str
    tags: list[str]
    extra_tags: list[str]
    """The tags its content does not already show as `#tag` words."""
    agent: str | None
    project: str | None
    team: str | None
    created_at: str
    scope: Scope


class SearchHit(msgspec.Struct, kw_only=True, frozen=True):
    """A search result: the memory, its score, and why it ranked there."""

    memory: MemoryItem
    score: float
    why: list[str]
    """The reasons, as `relay memory search --explain` words them, one a part."""
    ranking: Ranking | None
    """The figures behind them; None when the backend does not say."""


class SearchAnswer(msgspec.Struct, kw_only=True, frozen=True):
    """A search of the page: its hits, best first, and how it searched."""

    query: str
    scope: Scope | None
    """The scope searched; None: every scope the project sees."""
    hits: list[SearchHit]
    by_meaning: bool
    """Whether it searched by meaning as well as by words."""
    model: str | None
    """The embedding model used for meaning."""
    notice: str | None
    """Why search is by words only, when the store says."""


class ScopeListing(msgspec.Struct, kw_only=True, frozen=True):
    """The newest memories of one scope."""

    scope: Scope
    memories: list[MemoryItem]
    more: bool
    """Older ones of the scope may exist."""
    note: str | None = None
    """Why the scope is empty by design (team memory off on this machine)."""


class MemoryOverview(msgspec.Struct, kw_only=True, frozen=True):
    """What the Memory page shows first: each scope's newest memories."""

    project: str
    team: str | None
    """The team memories are shared with; None: team memory is off."""
    scopes: list[ScopeListing]


class MemoryPageError(RelayError):
    """A search or listing the page cannot make (a bad scope, an over-long query)."""


def scope_of(memory: Memory) -> Scope:
    """Where a memory belongs: a team's, a project's, or everyone's."""
    if memory.team is not None:
        return "team"
    return "project" if memory.project is not None else "global"


def reasons(ranking: Ranking | None) -> list[str]:
    """Why a hit ranked, in the parts `relay memory search --explain` prints."""
    if ranking is None:
        return ["this memory backend does not say"]
    parts = []
    if ranking.keyword_rank is not None:
        parts.append(f"words #{ranking.keyword_rank} (bm25 {ranking.keyword_score or 0:.2f})")
    else:
        parts.append("words: none of the query's")
    if not ranking.by_meaning:
        parts.append("meaning: not searched")
    elif ranking.semantic_rank is not None:
        parts.append(f"meaning #{ranking.semantic_rank} (similarity {ranking.similarity or 0:.2f})")
    else:
        parts.append("meaning: not among the nearest")
    parts.append(f"recency x{ranking.recency:.2f}")
    if ranking.tags:
        parts.append("tags: " + " ".join("#" + tag for tag in ranking.tags))
    return parts


class Memories:
    """The memories a project sees through `service`, by scope."""

    def __init__(self, service: MemoryService, *, project: str, team: str | None) -> None:
        self.service = service
        self.project = project
        self.team = team

    def overview(self, *, limit: int = DEFAULT_LIMIT) -> MemoryOverview:
        """Each scope's newest `limit` memories."""
        return MemoryOverview(
            project=self.project,
            team=self.team,
            scopes=[self.listing(scope, limit=limit) for scope in SCOPES],
        )

    def listing(self, scope: Scope, *, limit: int = DEFAULT_LIMIT) -> ScopeListing:
        """The newest `limit` memories of `scope`."""
        scope = _checked_scope(scope)
        limit = _checked_limit(limit)
        if scope == "team" and self.team is None:
            from relay.services.memory.sharing import NOT_SET_UP

            return ScopeListing(scope=scope, memories=[], more=False, note=NOT_SET_UP)
        project = self.project if scope == "project" else None
        found, more = _enough(
            lambda wanted: self.service.list(project=project, limit=wanted),
            lambda memory: scope_of(memory) == scope,
            limit,
        )
        return ScopeListing(scope=scope, memories=[_item(memory) for memory in found], more=more)

    def search(
        self, query: str, *, scope: Scope | None = None, limit: int = DEFAULT_LIMIT
    ) -> SearchAnswer:
        """The best `limit` memories for `query` (of `scope`, else of every scope the
        project sees), each with its reasons."""
        if len(query) > MAX_QUERY:
            raise MemoryPageError(f"the search is {len(query)} characters; at most {MAX_QUERY}")
        if scope is not None:
            scope = _checked_scope(scope)
        limit = _checked_limit(limit)
        project = None if scope in ("team", "global") else self.project
        hits, _ = _enough(
            lambda wanted: self.service.search(query, project=project, limit=wanted, explain=True),
            lambda hit: scope is None or scope_of(hit.memory) == scope,
            limit,
        )
        by_meaning = any(hit.explain is not None and hit.explain.by_meaning for hit in hits)
        notice = getattr(self.service, "semantic_notice", None)
        return SearchAnswer(
            query=query,
            scope=scope,
            hits=[_hit(hit) for hit in hits],
            by_meaning=by_meaning,
            model=_model() if by_meaning else None,
            notice=notice if isinstance(notice, str) else None,
        )

    def close(self) -> None:
        """Close the store."""
        close = getattr(self.service, "close", None)
        if close is not None:
            close()


def open_memories(settings: SettingsSet, project: Path) -> Memories:
    """The memory service the settings configure, for `project` (as `relay memory` opens it)."""
    from relay.services.memory.backends import memory_config, open_memory
    from relay.services.memory.sharing import team_sharing

    config = memory_config(settings)
    sharing = team_sharing(settings, project)
    return Memories(
        open_memory(config, sharing),
        project=str(project.resolve()),
        team=sharing.team if sharing is not None else None,
    )


def _enough(
    read: Callable[[int], list[Found]], keep: Callable[[Found], bool], limit: int
) -> tuple[list[Found], bool]:
    """The first `limit` items that `keep` takes from `read(n)` (the first n items, best
    or newest first), asking for more while too few are kept and more may exist (up to
    MAX_SCAN); and whether more may exist beyond them."""
    wanted = limit
    while True:
        items = read(wanted + 1)
        kept = [item for item in items if keep(item)]
        exhausted = len(items) <= wanted
        if len(kept) > limit or exhausted or wanted >= MAX_SCAN:
            return kept[:limit], len(kept) > limit or not exhausted
        wanted = min(wanted * 4, MAX_SCAN)


def _checked_scope(scope: str) -> Scope:
    if scope not in SCOPES:
        raise MemoryPageError(f"no scope {scope!r}: one of {', '.join(SCOPES)}")
    return scope


def _checked_limit(limit: int) -> int:
    return max(1, min(limit, MAX_LIMIT))


def _model() -> str:
    from relay.services.memory.semantic import MODEL

    return MODEL


def _item(memory: Memory) -> MemoryItem:
    return MemoryItem(
        id=memory.id,
        content=memory.content,
        tags=list(memory.tags),
        extra_tags=unwritten_tags(memory),
        agent=memory.agent,
        project=memory.project,
        team=memory.team,
        created_at=memory.created_at,
        scope=scope_of(memory),
    )


def _hit(hit: MemoryHit) -> SearchHit:
    return SearchHit(
        memory=_item(hit.memory), score=hit.score, why=reasons(hit.explain), ranking=hit.explain
    )

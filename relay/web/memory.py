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

import anyio
import anyio.to_thread
import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from relay.errors import RelayError
from relay.services.memory.model import Memory, MemoryHit, MemoryService, Ranking
from relay.services.memory.namespace import unwritten_tags
from relay.web.app import json_answer, json_error
from relay.web.conversation import number_parameter
from relay.web.pages import Page

if TYPE_CHECKING:
    from relay.config.discovery import SettingsSet
    from relay.web.dashboard import Dashboard

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
    from relay.services.memory.sqlite import explain_parts

    return explain_parts(ranking)


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
            model=_model(hits) if by_meaning else None,
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
    from relay.services.memory.projects import memory_project
    from relay.services.memory.sharing import team_sharing

    config = memory_config(settings)
    sharing = team_sharing(settings, project)
    service = open_memory(config, sharing)
    return Memories(
        service,
        project=memory_project(service, project)[0],
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


def _checked_scope(scope: str | None) -> Scope:
    if scope not in SCOPES:
        raise MemoryPageError(f"no scope {scope!r}: one of {', '.join(SCOPES)}")
    return scope


def _checked_limit(limit: int) -> int:
    return max(1, min(limit, MAX_LIMIT))


def _model(hits: list[MemoryHit]) -> str:
    """The embedding model that ranked the hits (MiniLM, or wordllama, the fallback)."""
    from relay.services.memory.semantic import MODEL

    named = (hit.explain.model for hit in hits if hit.explain is not None)
    return next((model for model in named if model), MODEL)


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


# -- the page ----------------------------------------------------------------------------

LOOK_SECONDS = 1.0
"""How often the feed looks at the store's files for a change."""


class MemoryView:
    """The page's routes and feed over the memory service the settings configure.

    Routes: `GET /api/memory` (the snapshot: each scope's newest memories; `?limit=`),
    `GET /api/memory/search?q=WORDS&scope=&limit=` (hits with their reasons), `GET
    /api/memory/scope?scope=S&limit=` (one scope's newest). Event `memory.changed` (`{}`):
    the store was written (a save or a forget elsewhere); the page reads it again.
    """

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.memories: Memories | None = None
        self.problem: str | None = None
        """Why the memory service cannot be opened (the routes say it)."""
        try:
            self.memories = open_memories(dashboard.settings, dashboard.project)
        except RelayError as exc:
            self.problem = str(exc)

    async def follow(self) -> None:
        """Publish `memory.changed` when the store's files change."""
        if self.memories is None:
            return
        files = _store_files(self.memories.service)
        if not files:
            return  # a backend of its own (a command): nothing to look at
        stamp = _stamp(files)
        while True:
            await anyio.sleep(LOOK_SECONDS)
            now = _stamp(files)
            if now != stamp:
                stamp = now
                self.dashboard.publish("memory.changed", {})

    async def snapshot(self, request: Request) -> Response:
        """The page's first paint: each scope's newest memories."""
        try:
            limit = number_parameter(request, "limit", DEFAULT_LIMIT)
        except ValueError as exc:
            return json_error(str(exc))
        seq = self.dashboard.feed.seq
        return await self._answer(lambda memories: memories.overview(limit=limit), seq=seq)

    async def search(self, request: Request) -> Response:
        """A search, with each hit's reasons."""
        parameters = request.query_params
        query = parameters.get("q", "")
        scope = parameters.get("scope") or None
        try:
            limit = number_parameter(request, "limit", DEFAULT_LIMIT)
        except ValueError as exc:
            return json_error(str(exc))
        return await self._answer(
            lambda memories: memories.search(
                query, scope=_checked_scope(scope) if scope else None, limit=limit
            )
        )

    async def scope(self, request: Request) -> Response:
        """One scope's newest memories."""
        scope = request.query_params.get("scope", "")
        try:
            limit = number_parameter(request, "limit", DEFAULT_LIMIT)
        except ValueError as exc:
            return json_error(str(exc))
        return await self._answer(
            lambda memories: memories.listing(_checked_scope(scope), limit=limit)
        )

    async def _answer(
        self, read: Callable[[Memories], object], *, seq: int | None = None
    ) -> Response:
        memories = self.memories
        if memories is None:
            return json_error(f"memories cannot be read: {self.problem}", 503)
        try:
            data = await anyio.to_thread.run_sync(lambda: read(memories))
        except MemoryPageError as exc:
            return json_error(str(exc))
        except RelayError as exc:
            return json_error(str(exc), 503)
        if seq is None:
            return json_answer(data)
        return json_answer({"seq": seq, "data": data})


def _store_files(service: MemoryService) -> list[Path]:
    """The files of the SQLite store behind `service` (a team's wraps one); none for
    another backend."""
    local = getattr(service, "local", service)
    path = getattr(local, "path", None)
    if not isinstance(path, Path):
        return []
    return [path, Path(f"{path}-wal")]


def _stamp(files: list[Path]) -> tuple[int, ...]:
    stamp: list[int] = []
    for path in files:
        try:
            info = path.stat()
        except OSError:
            stamp += [0, 0]
        else:
            stamp += [info.st_size, info.st_mtime_ns]
    return tuple(stamp)


def page(dashboard: Dashboard) -> Page:
    """The Memory page of `dashboard`."""
    view = MemoryView(dashboard)
    return Page(
        name="memory",
        title="Memory",
        script="memory.js",
        style="pages.css",
        routes=[
            Route("/api/memory", view.snapshot),
            Route("/api/memory/search", view.search),
            Route("/api/memory/scope", view.scope),
        ],
        tasks=[view.follow],
    )

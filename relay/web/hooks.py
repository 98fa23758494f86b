"""The Hooks page's data: hook calls from the hook log as they happen (event, hook, agent,
decision, duration, error; denies and failures flagged), each hook's latency (p50, p99)
and errors over a recent window, and one call in full: the event's input as the hooks got
it, the hook's answer, and the logged result that `relay hooks replay` compares a replay
with.

The log is read through `HookLog`, as `relay hooks log` reads it (read-only: reading
never creates or changes it). The page never replays: a replay runs the hooks again, and
the page changes nothing but through its few actions; it shows the command that does.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from relay.engine.hooklog import HookLog, LoggedCall, LoggedEvent, UnknownLogEventError
from relay.engine.replay import logged_result
from relay.errors import RelayError
from relay.timestamps import iso_millis
from relay.web.app import json_answer, json_error
from relay.web.conversation import number_parameter
from relay.web.pages import Page

if TYPE_CHECKING:
    from relay.web.dashboard import Dashboard

__all__ = [
    "DEFAULT_LIMIT",
    "CallDetail",
    "CallRow",
    "HookStats",
    "HookWindow",
    "Hooks",
    "HooksPage",
    "calls_of",
    "hook_stats",
]

DEFAULT_LIMIT = 200
"""Events the page lists at first (the newest), each with its calls."""
MAX_LIMIT = 2000
FEED_PAGE = 200
"""Events read at a time for the feed."""
WINDOW_SECONDS = 3600.0
"""The latency and error figures cover the calls of the last hour..."""
WINDOW_EVENTS = 5000
"""...of at most this many newest events."""
DENIALS = frozenset({"deny", "block"})
"""A call's decision that refuses (a deny, or a Stop hook's block)."""


class CallRow(msgspec.Struct, kw_only=True, frozen=True):
    """One hook call, as the page lists it."""

    id: int
    """The call's id in the log."""
    event_id: int
    """Its event's id (`relay hooks log`'s `#N`, `relay hooks replay N`)."""
    time: str
    event: str
    hook: str
    source: str
    """Which settings file registered the hook (user, project, …)."""
    agent: str | None
    session_id: str | None
    decision: str | None
    """The call's own decision (allow, deny, ask, block, …); None: it decided nothing."""
    event_decision: str
    """The merged decision of the whole event."""
    duration_ms: float
    exit_code: int | None
    signal: str | None
    timed_out: bool
    error: str | None
    denied: bool
    """The call refused (deny, block)."""
    failed: bool
    """An error, a timeout, a signal, or an exit code other than 0 and 2."""


class HookStats(msgspec.Struct, kw_only=True, frozen=True):
    """One hook's figures over the window."""

    hook: str
    calls: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    errors: int
    """Failed calls (see `CallRow.failed`)."""
    denies: int


class HookWindow(msgspec.Struct, kw_only=True, frozen=True):
    """The figures of every hook called in the window, the slowest (p99) first."""

    since: str
    """The window's start (relay's time form)."""
    seconds: float
    events: int
    """How many events it holds (WINDOW_EVENTS at most)."""
    hooks: list[HookStats]


class HooksPage(msgspec.Struct, kw_only=True, frozen=True):
    """What the Hooks page shows first."""

    calls: list[CallRow]
    """Newest first."""
    stats: HookWindow
    cursor: int
    """The newest event id in the log when it was read: the feed goes on from there."""
    log: str
    """The hook log's file."""


class CallDetail(msgspec.Struct, kw_only=True, frozen=True):
    """One call in full, as `relay hooks log --json` shows its event."""

    call: CallRow
    input: dict[str, Any]
    """The event's input as the hooks got it (relay's dialect)."""
    answer: dict[str, Any] | None
    """The hook's report in the logged result: exit code, its answer (`output`), error;
    None when the log kept no result for the event (an older relay)."""
    result: dict[str, Any]
    """The event's merged result as logged: what `relay hooks replay` compares against."""
    replay: str
    """The command that runs the event again with the current hooks."""
    calls: list[CallRow]
    """Every call of the event, in the order they were planned."""


class Hooks:
    """The hook log at `log.path`, for the page and its feed. The window's figures are
    read from the log once, then kept up to date by what `since` reads."""

    def __init__(self, log: HookLog, *, window: Window | None = None) -> None:
        self.log = log
        self._window = window
        self._lock = threading.Lock()
        """The window is read by request threads and fed by the feed's."""

    def page(self, *, limit: int = DEFAULT_LIMIT, now: datetime | None = None) -> HooksPage:
        """The newest `limit` events' calls (newest first) and the window's figures."""
        limit = max(1, min(limit, MAX_LIMIT))
        # Taken first: an event logged while the page is read comes by the feed, not lost.
        newest = (self.log.id_range() or (0, 0))[1]
        stats = self.stats(now=now)
        events = self.log.events(limit=limit)
        return HooksPage(
            calls=calls_of(events),
            stats=stats,
            cursor=max([newest, *(event.id for event in events)]),
            log=str(self.log.path),
        )

    def stats(self, *, now: datetime | None = None) -> HookWindow:
        """Each hook's figures over the window, now."""
        with self._lock:
            if self._window is None:
                self._window = Window()
                self._window.add(reversed(self.log.events(limit=self._window.capacity)))
            window = self._window
            while True:  # what was logged since it last looked
                newer = self.log.events(limit=FEED_PAGE, after=window.last)
                window.add(newer)
                if len(newer) < FEED_PAGE:
                    break
            return window.stats(now=now)

    def since(self, cursor: int, *, limit: int = FEED_PAGE) -> tuple[list[CallRow], int]:
        """The calls of the first `limit` events logged after event `cursor`, oldest
        first, and the cursor to look after next time (the window takes them in too)."""
        events = self.log.events(limit=limit, after=cursor)
        if not events and cursor > (self.log.id_range() or (0, 0))[1]:
            # The log was deleted and begun again: its ids start over.
            events = self.log.events(limit=limit, after=0)
        with self._lock:
            if self._window is not None:
                self._window.add(events)
        return calls_of(events), events[-1].id if events else cursor

    def detail(self, call_id: int, event_id: int) -> CallDetail | None:
        """Call `call_id` of event `event_id` in full; None when the log holds no such
        call (pruned since, or never). UnknownLogEventError when the event is not there."""
        event = self.log.event(event_id)
        rows = calls_of([event])
        for index, call in enumerate(event.hook_calls):
            if call.id == call_id:
                return CallDetail(
                    call=rows[index],
                    input=event.input,
                    answer=_report(event, index, call),
                    result=logged_result(event),
                    replay=f"relay hooks replay {event.id}",
                    calls=rows,
                )
        return None


class Window:
    """The calls of the recent events, oldest first: what the figures are computed from."""

    def __init__(self, *, seconds: float = WINDOW_SECONDS, events: int = WINDOW_EVENTS) -> None:
        self.seconds = seconds
        self.capacity = events
        self._events: deque[tuple[str, list[CallRow]]] = deque()
        self.last = 0
        """The newest event id taken in: an event is counted once."""

    def add(self, events: Iterable[LoggedEvent]) -> None:
        """Take in newly logged events, oldest first."""
        for event in events:
            if event.id <= self.last:
                continue
            self.last = event.id
            self._events.append((event.time, calls_of([event])))
            if len(self._events) > self.capacity:
                self._events.popleft()

    def trim(self, *, now: datetime | None = None) -> None:
        """Let go of events older than the window."""
        since = self._since(now)
        while self._events and self._events[0][0] < since:
            self._events.popleft()

    def stats(self, *, now: datetime | None = None) -> HookWindow:
        """The figures of the calls in the window now."""
        self.trim(now=now)
        return HookWindow(
            since=self._since(now),
            seconds=self.seconds,
            events=len(self._events),
            hooks=hook_stats(call for _, calls in self._events for call in calls),
        )

    def _since(self, now: datetime | None) -> str:
        return iso_millis((now or datetime.now(UTC)) - timedelta(seconds=self.seconds))


def calls_of(events: Sequence[LoggedEvent]) -> list[CallRow]:
    """The calls of `events` as the page lists them, in the events' order, each event's
    calls in the order they were planned."""
    return [_row(event, call) for event in events for call in event.hook_calls]


def hook_stats(calls: Iterable[CallRow]) -> list[HookStats]:
    """Each hook's call count, latency (p50, p99, max), errors and denies; the slowest
    (by p99) first."""
    by_hook: dict[str, list[CallRow]] = {}
    for call in calls:
        by_hook.setdefault(call.hook, []).append(call)
    stats = []
    for hook, rows in by_hook.items():
        durations = sorted(row.duration_ms for row in rows)
        stats.append(
            HookStats(
                hook=hook,
                calls=len(rows),
                p50_ms=_percentile(durations, 50),
                p99_ms=_percentile(durations, 99),
                max_ms=durations[-1],
                errors=sum(row.failed for row in rows),
                denies=sum(row.denied for row in rows),
            )
        )
    return sorted(stats, key=lambda item: (-item.p99_ms, item.hook))


def _percentile(ordered: Sequence[float], percent: float) -> float:
    """The nearest-rank percentile of sorted values: a value that was measured."""
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]


def _row(event: LoggedEvent, call: LoggedCall) -> CallRow:
    return CallRow(
        id=call.id,
        event_id=event.id,
        time=event.time,
        event=event.event,
        hook=call.hook,
        source=call.source,
        agent=event.agent,
        session_id=event.session_id,
        decision=call.decision,
        event_decision=event.decision,
        duration_ms=call.duration_ms,
        exit_code=call.exit_code,
        signal=call.signal,
        timed_out=call.timed_out,
        error=call.error,
        denied=call.decision in DENIALS,
        failed=call.failed,
    )


def _report(event: LoggedEvent, index: int, call: LoggedCall) -> dict[str, Any] | None:
    """The hook's report in the event's logged result: the `index`-th (the log writes a
    call per report, in order), checked by its name."""
    if event.result is None:
        return None
    reports = event.result.get("hooks")
    if not isinstance(reports, list) or index >= len(reports):
        return None
    report = reports[index]
    if not isinstance(report, dict) or report.get("name") != call.hook:
        return None
    return report


# -- the page ----------------------------------------------------------------------------

POLL_SECONDS = 0.05
"""How often the feed looks at the log's files (a look is two stat calls); the log is read
only when they changed. Its writer commits in batches gathered over 0.2 s."""
STATS_SECONDS = 1.0
"""The figures are published at most this often."""


class HooksView:
    """The page's routes and feed over the dashboard's hook log.

    Routes: `GET /api/hooks` (the snapshot: the newest calls and the figures; `?limit=`),
    `GET /api/hooks/call?event=N&call=M` (one call in full). Events: `hooks.calls`
    (`{"calls": [CallRow, …] oldest first, "cursor": N}`), `hooks.stats` (`HookWindow`).
    """

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.hooks = Hooks(HookLog(dashboard.hook_log))

    async def follow(self) -> None:
        """Publish the calls logged from now on, as they are logged, and the figures."""
        hooks, log = self.hooks, self.hooks.log
        cursor = await anyio.to_thread.run_sync(lambda: (log.id_range() or (0, 0))[1])
        stamp: tuple[int, ...] = ()
        published = 0.0
        while True:
            now = log.stamp()
            if now != stamp:
                stamp = now
                calls, cursor = await anyio.to_thread.run_sync(hooks.since, cursor)
                if calls:
                    self.dashboard.publish("hooks.calls", {"calls": calls, "cursor": cursor})
                    if anyio.current_time() - published >= STATS_SECONDS:
                        published = anyio.current_time()
                        stats = await anyio.to_thread.run_sync(hooks.stats)
                        self.dashboard.publish("hooks.stats", stats)
                    continue  # more may be waiting
            await anyio.sleep(POLL_SECONDS)

    async def snapshot(self, request: Request) -> Response:
        """The page's first paint: the newest calls, newest first, and the figures."""
        try:
            limit = number_parameter(request, "limit", DEFAULT_LIMIT)
        except ValueError as exc:
            return json_error(str(exc))
        seq = self.dashboard.feed.seq  # before the read: an event after it may repeat a call
        try:
            page = await anyio.to_thread.run_sync(lambda: self.hooks.page(limit=limit))
        except RelayError as exc:
            return json_error(str(exc), 503)
        return json_answer({"seq": seq, "now": iso_millis(datetime.now(UTC)), "page": page})

    async def call(self, request: Request) -> Response:
        """One call in full: its event's input, its answer, the logged result."""
        try:
            event_id = number_parameter(request, "event", 0)
            call_id = number_parameter(request, "call", 0)
        except ValueError as exc:
            return json_error(str(exc))
        try:
            detail = await anyio.to_thread.run_sync(lambda: self.hooks.detail(call_id, event_id))
        except UnknownLogEventError as exc:
            return json_error(str(exc), 404)
        except RelayError as exc:
            return json_error(str(exc), 503)
        if detail is None:
            return json_error(f"event {event_id} of the hook log has no call {call_id}", 404)
        return json_answer(detail)


def page(dashboard: Dashboard) -> Page:
    """The Hooks page of `dashboard`."""
    view = HooksView(dashboard)
    return Page(
        name="hooks",
        title="Hooks",
        script="hooks.js",
        style="pages.css",
        routes=[Route("/api/hooks", view.snapshot), Route("/api/hooks/call", view.call)],
        tasks=[view.follow],
    )

"""Reading the hook log that relay.engine.telemetry writes: recent events and their hook calls.

The log is opened read-only, so reading never creates it, never migrates it and never
waits on a writer (the log is in WAL mode: readers see the last committed state).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from relay.errors import RelayError

if TYPE_CHECKING:
    import sqlite3

DEFAULT_LIMIT = 20
READ_TIMEOUT = 2.0
FOLLOW_POLL = 0.2
"""Seconds between looks at the log while following: its writer commits in batches
gathered over 0.2 s, so a quicker look would find nothing more."""
FOLLOW_PAGE = 200
_FAILED = (
    "(c.error IS NOT NULL OR c.timed_out != 0 OR c.signal IS NOT NULL"
    " OR (c.exit_code IS NOT NULL AND c.exit_code NOT IN (0, 2)))"
)
"""A hook call that failed: an error, a timeout, a signal, or an exit code other than 0 and 2."""
_CALL_COLUMNS = (
    "c.id, c.event_id, c.hook, c.source, c.exit_code, c.signal, c.timed_out, c.duration_ms,"
    " c.decision, c.error, c.stdout_truncated, c.stderr_truncated"
)


class HookLogError(RelayError):
    """The hook log exists but cannot be read: names the file and why."""

    def __init__(self, reason: str, *, file: str) -> None:
        self.reason = reason
        self.file = file
        super().__init__(f"hook log {file}: {reason}")


class UnknownLogEventError(RelayError):
    """An event id that is not in the hook log; says which ids are."""

    def __init__(self, event_id: int, *, file: str, first: int | None, last: int | None) -> None:
        self.event_id = event_id
        self.file = file
        self.first = first
        self.last = last
        if first is None or last is None:
            known = "the log is empty"
        elif first == last:
            known = f"the log holds event {first}"
        else:
            known = f"the log holds events {first} to {last}"
        super().__init__(f"no event {event_id} in the hook log {file}; {known}")


class LoggedCall(msgspec.Struct, kw_only=True):
    """One hook call of a logged event (a row of `hook_calls`)."""

    id: int
    hook: str
    source: str
    exit_code: int | None
    signal: str | None
    timed_out: bool
    duration_ms: float
    decision: str | None
    error: str | None
    stdout_truncated: bool
    stderr_truncated: bool

    @property
    def failed(self) -> bool:
        """An error, a timeout, a signal, or an exit code other than 0 and 2 (2 is a deny)."""
        return (
            self.error is not None
            or self.timed_out
            or self.signal is not None
            or (self.exit_code is not None and self.exit_code not in (0, 2))
        )


class LoggedEvent(msgspec.Struct, kw_only=True):
    """One logged event: its input as the hooks got it (relay dialect), result and calls."""

    id: int
    time: str
    session_id: str | None
    event: str
    decision: str
    duration_ms: float
    input: dict[str, Any]
    result: dict[str, Any] | None
    """The merged result object; None for events logged before relay kept it."""
    hook_calls: list[LoggedCall]
    agent: str | None = None
    """The agent that made the call (its agent_name, or $RELAY_AGENT_NAME); None when
    no agent was named, or the event was logged before relay kept it."""


class HookLog:
    """The hook log at `path`, for reading."""

    def __init__(self, path: Path, *, timeout: float = READ_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout

    def events(
        self,
        *,
        limit: int | None = DEFAULT_LIMIT,
        event: str | None = None,
        hook: str | None = None,
        failed: bool = False,
        project: str | None = None,
        agent: str | None = None,
        after: int | None = None,
    ) -> list[LoggedEvent]:
        """The newest events first, each with the hook calls that pass the filters; with
        `after` (an event id), the first `limit` events logged after it, oldest first.

        `event` is a canonical name; `hook` and `failed` select hook calls, and an event
        is listed only when at least one of its calls is selected; `project` keeps the
        events whose cwd is that folder or inside it; `agent` those the agent of that
        name made.
        """
        call_filters: list[str] = []
        call_values: list[object] = []
        if hook is not None:
            call_filters.append("c.hook = ?")
            call_values.append(hook)
        if failed:
            call_filters.append(_FAILED)
        event_filters: list[str] = []
        event_values: list[object] = []
        if event is not None:
            event_filters.append("e.event = ?")
            event_values.append(event)
        if agent is not None:
            event_filters.append("e.agent = ?")
            event_values.append(agent)
        if after is not None:
            event_filters.append("e.id > ?")
            event_values.append(after)
        if project is not None:
            inside = project.rstrip("/") + "/"
            event_filters.append(
                "(json_extract(e.input, '$.cwd') = ?"
                " OR substr(json_extract(e.input, '$.cwd'), 1, ?) = ?)"
            )
            event_values.extend([project, len(inside), inside])
        if call_filters:
            event_filters.append(
                "EXISTS (SELECT 1 FROM hook_calls c WHERE c.event_id = e.id AND "
                + " AND ".join(call_filters)
                + ")"
            )
            event_values.extend(call_values)
        where = " WHERE " + " AND ".join(event_filters) if event_filters else ""
        order = " ORDER BY e.id ASC" if after is not None else " ORDER BY e.id DESC"
        return self._read(
            where + order + (" LIMIT ?" if limit is not None else ""),
            [*event_values, *([limit] if limit is not None else [])],
            call_filters,
            call_values,
        )

    def event(self, event_id: int) -> LoggedEvent:
        """One event with all its hook calls; UnknownLogEventError when it is not logged."""
        found = self._read(" WHERE e.id = ?", [event_id], [], [])
        if not found:
            first, last = self.id_range() or (None, None)
            raise UnknownLogEventError(event_id, file=str(self.path), first=first, last=last)
        return found[0]

    def follow(
        self,
        *,
        after: int,
        event: str | None = None,
        hook: str | None = None,
        failed: bool = False,
        project: str | None = None,
        agent: str | None = None,
    ) -> Iterator[LoggedEvent]:
        """Forever: each event the filters select (as `events` does) logged after event
        `after`, oldest first, as it is logged. The log is read only when its files
        changed, looked at every FOLLOW_POLL seconds."""
        stamp = self.stamp()
        while True:
            found = self.events(
                limit=FOLLOW_PAGE,
                after=after,
                event=event,
                hook=hook,
                failed=failed,
                project=project,
                agent=agent,
            )
            yield from found
            if found:
                after = found[-1].id
            if len(found) == FOLLOW_PAGE:
                continue
            while self.stamp() == stamp:
                time.sleep(FOLLOW_POLL)
            stamp = self.stamp()

    def stamp(self) -> tuple[int, ...]:
        """A value that changes when a writer commits (the sizes and times of the log and
        its WAL): a look with no SQLite connection, for following the log."""
        stamp: list[int] = []
        for path in (self.path, Path(f"{self.path}-wal")):
            try:
                info = path.stat()
            except OSError:
                stamp += [0, 0]
            else:
                stamp += [info.st_size, info.st_mtime_ns]
        return tuple(stamp)

    def id_range(self) -> tuple[int, int] | None:
        """The oldest and newest event ids in the log, or None when it is empty."""
        connection = self._open()
        if connection is None:
            return None
        try:
            ((first, last),) = self._query(connection, "SELECT MIN(id), MAX(id) FROM events", [])
        finally:
            connection.close()
        return (first, last) if first is not None else None

    # -- reading --------------------------------------------------------------------

    def _read(
        self,
        event_query: str,
        event_values: Sequence[object],
        call_filters: list[str],
        call_values: Sequence[object],
    ) -> list[LoggedEvent]:
        connection = self._open()
        if connection is None:
            return []
        try:
            columns = {row[1] for row in self._query(connection, "PRAGMA table_info(events)", [])}
            if "agent" not in columns:
                # A log no relay that records agents has written to yet: no event has one.
                event_query = event_query.replace("e.agent = ?", "NULL = ?")
            # One read transaction: the writer's pruning cannot split an event from its calls.
            self._query(connection, "BEGIN", [])
            event_rows = self._query(
                connection,
                "SELECT e.id, e.time, e.session_id, e.event, e.decision, e.duration_ms, e.input,"
                # A log written before relay kept results has no `result` column: not migrated
                # here, reading never changes the file.
                + (" e.result" if "result" in columns else " NULL")
                + (", e.agent" if "agent" in columns else ", NULL")
                + " FROM events e"
                + event_query,
                event_values,
            )
            calls: dict[int, list[LoggedCall]] = {row[0]: [] for row in event_rows}
            if calls:
                # The same selection again as a subquery: no limit on how many ids it holds.
                selected = f"c.event_id IN (SELECT e.id FROM events e{event_query})"
                rows = self._query(
                    connection,
                    f"SELECT {_CALL_COLUMNS} FROM hook_calls c WHERE "
                    + " AND ".join([selected, *call_filters])
                    + " ORDER BY c.id",
                    [*event_values, *call_values],
                )
                for row in rows:
                    calls[row[1]].append(_call(row))
        finally:
            connection.close()  # ends the read transaction too
        return [self._event(row, calls[row[0]]) for row in event_rows]

    def _event(self, row: tuple[Any, ...], calls: list[LoggedCall]) -> LoggedEvent:
        event_id, time, session_id, event, decision, duration_ms, raw_input, raw_result, agent = row
        try:
            event_input = msgspec.json.decode(raw_input)
            result = msgspec.json.decode(raw_result) if raw_result is not None else None
        except (msgspec.DecodeError, TypeError):
            raise HookLogError(
                f"event {event_id} is damaged: its stored JSON cannot be read", file=str(self.path)
            ) from None
        return LoggedEvent(
            id=event_id,
            time=time,
            session_id=session_id,
            event=event,
            decision=decision,
            duration_ms=duration_ms,
            input=event_input if isinstance(event_input, dict) else {},
            result=result if isinstance(result, dict) else None,
            hook_calls=calls,
            agent=agent,
        )

    def _open(self) -> sqlite3.Connection | None:
        """A read-only connection, or None when there is no log (yet)."""
        import sqlite3

        path = self.path
        if not path.exists():
            return None  # no hook has run yet; reading must not create the file
        if not path.is_file():
            raise HookLogError("not a file", file=str(path))
        try:
            # mode=ro: reading never creates, migrates or otherwise changes the database.
            connection = sqlite3.connect(
                path.absolute().as_uri() + "?mode=ro",
                uri=True,
                timeout=self.timeout,
                isolation_level=None,
            )
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        try:
            tables = {
                row[0]
                for row in self._query(
                    connection, "SELECT name FROM sqlite_master WHERE type = 'table'", []
                )
            }
        except BaseException:
            connection.close()
            raise
        if not {"events", "hook_calls"} <= tables:
            connection.close()
            return None  # created, but nothing written yet
        return connection

    def _query(
        self, connection: sqlite3.Connection, sql: str, values: Sequence[object]
    ) -> list[tuple[Any, ...]]:
        """All rows of a query; any SQLite error becomes a HookLogError naming the file."""
        import sqlite3

        try:
            return connection.execute(sql, values).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def _error(self, exc: Exception) -> HookLogError:
        text = str(exc)
        if "locked" in text or "busy" in text:
            reason = f"busy: another process holds it locked ({text}); try again"
        elif "not a database" in text or "malformed" in text:
            reason = f"not a readable SQLite database ({text}); delete it to start a new log"
        else:
            reason = f"cannot be read ({text})"
        return HookLogError(reason, file=str(self.path))


def _call(row: tuple[Any, ...]) -> LoggedCall:
    (
        call_id,
        _event_id,
        hook,
        source,
        exit_code,
        signal,
        timed_out,
        duration_ms,
        decision,
        error,
        stdout_truncated,
        stderr_truncated,
    ) = row
    return LoggedCall(
        id=call_id,
        hook=hook,
        source=source,
        exit_code=exit_code,
        signal=signal,
        timed_out=bool(timed_out),
        duration_ms=duration_ms,
        decision=decision,
        error=error,
        stdout_truncated=bool(stdout_truncated),
        stderr_truncated=bool(stderr_truncated),
    )

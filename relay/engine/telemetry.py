"""A record of every hook call in a SQLite log, and the RELAY_DEBUG log on stderr.

Writes happen on a background thread so that firing an event never waits on the disk;
`close()` (also run at exit) flushes what is queued. A log that cannot be written is
reported once on stderr and then left alone: telemetry never breaks a hook run.
Reading the log is relay.engine.hooklog's job.
"""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from relay.config.paths import private_dir, private_file, state_file
from relay.protocol.output import AggregatedResult

if TYPE_CHECKING:
    import sqlite3

    from relay.config.model import LoadedSettings

LOG_FILE_NAME = "telemetry.db"
DEFAULT_MAX_EVENTS = 10_000
MAX_EVENTS_VARIABLE = "RELAY_LOG_MAX_EVENTS"
DEFAULT_MAX_BYTES = 64 << 20
MAX_BYTES_VARIABLE = "RELAY_LOG_MAX_BYTES"
ENTRY_MAX_BYTES = 32 << 10
"""The most an event's input, or its result, takes in the log: longer strings in it are
cut (saying how much), so one large event (a Write of a big file) cannot fill the log."""
WAL_MAX_BYTES = 4 << 20
"""What the write-ahead log is cut back to after a checkpoint (SQLite's journal_size_limit)."""
LOG_SETTING_SCOPES: frozenset[str] = frozenset({"system", "user", "settings"})
"""Files that may set `log.maxEvents`: the log is the user's, shared by every project."""
BATCH_SECONDS = 0.2
BATCH_MAX = 500
_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    time TEXT NOT NULL,
    session_id TEXT,
    event TEXT NOT NULL,
    input TEXT NOT NULL,
    decision TEXT NOT NULL,
    duration_ms REAL NOT NULL,
    result TEXT,
    agent TEXT
);
CREATE TABLE IF NOT EXISTS hook_calls (
    id INTEGER PRIMARY KEY,
    event_id INTEGER NOT NULL REFERENCES events(id) ON DELETE CASCADE,
    time TEXT NOT NULL,
    event TEXT NOT NULL,
    hook TEXT NOT NULL,
    source TEXT NOT NULL,
    exit_code INTEGER,
    signal TEXT,
    timed_out INTEGER NOT NULL,
    duration_ms REAL NOT NULL,
    decision TEXT,
    error TEXT,
    stdout_truncated INTEGER NOT NULL,
    stderr_truncated INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS hook_calls_event ON hook_calls(event_id);
"""


def log_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the hook log lives: `telemetry.db` in relay's state folder."""
    return state_file(LOG_FILE_NAME, env)


def resolve_max_events(
    files: Sequence[LoadedSettings] = (), env: Mapping[str, str] | None = None
) -> int:
    """The log's cap: $RELAY_LOG_MAX_EVENTS, else the last user-level `log.maxEvents`, else 10,000.

    Project files cannot set it: an untrusted checkout must not be able to shrink the
    user's log of every other project.
    """
    chosen = _positive_variable(MAX_EVENTS_VARIABLE, env)
    if chosen is not None:
        return chosen
    configured = [
        loaded.settings.log.maxEvents
        for loaded in files
        if loaded.scope in LOG_SETTING_SCOPES and loaded.settings.log.maxEvents is not None
    ]
    return configured[-1] if configured else DEFAULT_MAX_EVENTS


def resolve_max_bytes(env: Mapping[str, str] | None = None) -> int:
    """The log's size bound in bytes: $RELAY_LOG_MAX_BYTES, else 64 MiB."""
    chosen = _positive_variable(MAX_BYTES_VARIABLE, env)
    return DEFAULT_MAX_BYTES if chosen is None else chosen


def _positive_variable(name: str, env: Mapping[str, str] | None) -> int | None:
    """The whole number >= 1 an environment variable holds; None when unset or not one
    (said in a debug line)."""
    variable = (os.environ if env is None else env).get(name, "").strip()
    if not variable:
        return None
    try:
        value = int(variable)
    except ValueError:
        value = 0
    if value >= 1:
        return value
    debug(f"ignoring {name}={variable!r}: expected a whole number >= 1")
    return None


def bounded_json(text: bytes, limit: int = ENTRY_MAX_BYTES) -> str:
    """`text` (JSON) as stored in the log: as it is when it fits in `limit` bytes, else with
    its longest strings cut to fit, each saying how much was cut; the event's `cwd`,
    `session_id` and name are kept whole (the log is searched by them)."""
    if len(text) <= limit:
        return text.decode()
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        value = None
    cap = limit // 4
    while value is not None and cap >= 64:
        encoded = msgspec.json.encode(_cut_strings(value, cap, top=True))
        if len(encoded) <= limit:
            return encoded.decode()
        cap //= 2
    # Still too long (countless small values): what finds the event, and what was cut.
    kept = {
        key: value[key]
        for key in _KEPT_WHOLE
        if isinstance(value, dict) and isinstance(value.get(key), str) and len(value[key]) < 4096
    }
    kept["relay_log"] = f"{len(text)} bytes, too large for the hook log: not kept"
    return msgspec.json.encode(kept).decode()


_KEPT_WHOLE = ("hook_event_name", "session_id", "cwd")


def _cut_strings(value: object, cap: int, *, top: bool = False) -> object:
    if isinstance(value, str):
        if len(value) <= cap:
            return value
        return value[:cap] + f"… [{len(value) - cap} more characters not logged]"
    if isinstance(value, dict):
        return {
            key: item if top and key in _KEPT_WHOLE else _cut_strings(item, cap)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_cut_strings(item, cap) for item in value]
    return value


def debug_enabled() -> bool:
    """True when RELAY_DEBUG=1: callers build debug lines only then."""
    return os.environ.get("RELAY_DEBUG") == "1"


def debug(message: str) -> None:
    """One line of relay's debug log on stderr (when RELAY_DEBUG=1)."""
    if debug_enabled():
        sys.stderr.write(f"relay[{os.getpid()}] {message}\n")
        sys.stderr.flush()


_result_encoder = msgspec.json.Encoder()


def _migrate(connection: sqlite3.Connection) -> None:
    """Bring a log written by an older relay up to the current schema: the result of each
    event, then the agent that made the call."""
    import sqlite3

    columns = {row[1] for row in connection.execute("PRAGMA table_info(events)")}
    for column in ("result", "agent"):
        if column in columns:
            continue
        try:
            connection.execute(f"ALTER TABLE events ADD COLUMN {column} TEXT")
        except sqlite3.OperationalError as exc:
            # Another process migrated it between our look and our change.
            if "duplicate column" not in str(exc):
                raise


class CallRecord(msgspec.Struct, kw_only=True):
    """One event with its hook calls, queued for the log."""

    time: str
    session_id: str
    event: str
    input: bytes
    result: AggregatedResult
    decisions: list[str | None]
    agent: str | None = None
    """The agent that made the call: the event's agent_name, else $RELAY_AGENT_NAME."""


class Telemetry:
    """The hook-call log: `$RELAY_HOME/state/telemetry.db` by default.

    At most `max_events` events are kept (None: $RELAY_LOG_MAX_EVENTS, else 10,000), in at
    most about `max_bytes` (None: $RELAY_LOG_MAX_BYTES, else 64 MiB; see `_prune`).
    """

    def __init__(
        self,
        path: Path,
        *,
        max_events: int | None = None,
        max_bytes: int | None = None,
        on_problem: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        # Told once when the log cannot be written; by default a warning on stderr.
        self.on_problem = on_problem or _warn_on_stderr
        self.max_events = max_events if max_events is not None else resolve_max_events()
        self.max_bytes = max_bytes if max_bytes is not None else resolve_max_bytes()
        # Ids at or below this are known to be gone: lets a write skip the DELETE (see _prune).
        self._pruned_through = 0
        self._queue: queue.SimpleQueue[CallRecord | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._broken = False
        self._leave_open = False
        self._closing = threading.Event()

    def record(self, record: CallRecord) -> None:
        """Queue one event's calls for writing."""
        if self._broken:
            return
        with self._lock:
            if self._thread is None:
                self._closing.clear()
                self._thread = threading.Thread(
                    target=self._write_loop, name="relay-telemetry", daemon=True
                )
                self._thread.start()
                atexit.register(self.close)
        self._queue.put(record)

    def close(self, *, leave_open: bool = False) -> None:
        """Write what is queued and stop the writer.

        `leave_open`: commit but do not close the database, for a process about to end
        with os._exit: closing the last connection checkpoints the WAL, which syncs the
        disk on the host's time; the next writer or reader takes the WAL over instead.
        """
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._leave_open = leave_open
            self._closing.set()
            self._queue.put(None)
            thread.join(timeout=10)

    def _write_loop(self) -> None:
        import sqlite3  # here, on the writer thread: a run that logs nothing never loads it

        try:
            connection = self._connect()
        except (sqlite3.Error, OSError) as exc:
            self._give_up(exc)
            return
        try:
            stop = False
            while not stop:
                batch: list[CallRecord] = []
                item = self._queue.get()
                stop = item is None
                if item is not None:
                    batch.append(item)
                    # Gather what arrives in the next moment into one transaction, without
                    # waking for each event (a wake-up per event costs the firing thread
                    # CPU and the GIL on a small machine); close() cuts the wait short.
                    self._closing.wait(BATCH_SECONDS)
                    while len(batch) < BATCH_MAX:
                        try:
                            item = self._queue.get_nowait()
                        except queue.Empty:
                            break
                        if item is None:
                            stop = True
                            break
                        batch.append(item)
                if batch:
                    self._write(connection, batch)
        except (sqlite3.Error, OSError) as exc:
            self._give_up(exc)
            self._leave_open = False
        finally:
            if not self._leave_open:
                connection.close()

    def _connect(self) -> sqlite3.Connection:
        import sqlite3

        private_dir(self.path.parent)
        private_file(self.path)  # hook inputs hold prompts and tool commands: 0600
        connection = sqlite3.connect(self.path, timeout=5, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA foreign_keys=ON")
        connection.execute(f"PRAGMA journal_size_limit={WAL_MAX_BYTES}")
        connection.executescript(_SCHEMA)
        _migrate(connection)
        (oldest,) = connection.execute("SELECT MIN(id) FROM events").fetchone()
        self._pruned_through = oldest - 1 if oldest is not None else 0
        return connection

    def _write(self, connection: sqlite3.Connection, batch: list[CallRecord]) -> None:
        newest: int | None = None
        connection.execute("BEGIN IMMEDIATE")
        try:
            for record in batch:
                result = record.result
                cursor = connection.execute(
                    "INSERT INTO events"
                    " (time, session_id, event, input, decision, duration_ms, result, agent)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.time,
                        record.session_id,
                        record.event,
                        bounded_json(record.input),
                        result.decision,
                        result.duration_ms,
                        # Encoded here, on the writer thread, not on the thread that fired.
                        bounded_json(_result_encoder.encode(result)),
                        record.agent,
                    ),
                )
                newest = cursor.lastrowid
                connection.executemany(
                    "INSERT INTO hook_calls (event_id, time, event, hook, source, exit_code, signal,"
                    " timed_out, duration_ms, decision, error, stdout_truncated, stderr_truncated)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            cursor.lastrowid,
                            record.time,
                            record.event,
                            hook.name,
                            hook.source,
                            hook.exit_code,
                            hook.signal,
                            hook.timed_out,
                            hook.duration_ms,
                            decision,
                            hook.error,
                            hook.stdout_truncated,
                            hook.stderr_truncated,
                        )
                        for hook, decision in zip(result.hooks, record.decisions, strict=True)
                    ],
                )
            if newest is not None:
                self._prune(connection, newest)
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise

    def _prune(self, connection: sqlite3.Connection, newest: int) -> None:
        """Bounded: never more than max_events events (their calls go with them).

        Ids grow by one per event, so the newest id says how many rows there can be. When
        the log is full the oldest tenth goes in one DELETE, so a busy log deletes once
        per tenth of the cap rather than on every write.
        """
        if newest <= self._pruned_through:
            self._pruned_through = 0  # the log was emptied by hand and ids start again
        if newest - self._pruned_through > self.max_events:
            keep = self.max_events - self.max_events // 10
            through = newest - keep
            connection.execute("DELETE FROM events WHERE id <= ?", (through,))
            self._pruned_through = through
        self._prune_bytes(connection)

    def _prune_bytes(self, connection: sqlite3.Connection) -> None:
        """Bounded in bytes too: when the pages in use pass max_bytes, the oldest events go
        until a tenth of it is free. Freed pages are reused, so the file stays within
        max_bytes plus one batch (each entry at most 2 x ENTRY_MAX_BYTES), and the WAL is
        cut back to WAL_MAX_BYTES at each checkpoint."""
        (pages,) = connection.execute("PRAGMA page_count").fetchone()
        (free,) = connection.execute("PRAGMA freelist_count").fetchone()
        (page_size,) = connection.execute("PRAGMA page_size").fetchone()
        used = (pages - free) * page_size
        if used <= self.max_bytes:
            return
        excess = used - (self.max_bytes - self.max_bytes // 10)
        rows = connection.execute(
            "SELECT e.id, length(CAST(e.input AS BLOB))"
            " + coalesce(length(CAST(e.result AS BLOB)), 0)"
            " + (SELECT count(*) FROM hook_calls c WHERE c.event_id = e.id) * 200"
            " FROM events e ORDER BY e.id"
        ).fetchall()
        through = None
        freed = 0
        for event_id, size in rows:
            through = event_id
            freed += size + 200  # the row's other columns, and the b-tree's keeping
            if freed >= excess:
                break
        if through is not None:
            connection.execute("DELETE FROM events WHERE id <= ?", (through,))
            self._pruned_through = max(self._pruned_through, through)

    def _give_up(self, exc: BaseException) -> None:
        self._broken = True
        self.on_problem(f"hook log {self.path} cannot be written ({exc}); not logging")


def _warn_on_stderr(message: str) -> None:
    print(f"relay: warning: {message}", file=sys.stderr)

"""A record of every hook call in a SQLite log, and the RELAY_DEBUG log on stderr.

Writes happen on a background thread so that firing an event never waits on the disk;
`close()` (also run at exit) flushes what is queued. A log that cannot be written is
reported once on stderr and then left alone: telemetry never breaks a hook run.
"""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from relay.protocol.output import AggregatedResult

if TYPE_CHECKING:
    import sqlite3

DEFAULT_MAX_EVENTS = 10_000
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
    duration_ms REAL NOT NULL
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


def debug_enabled() -> bool:
    """True when RELAY_DEBUG=1: callers build debug lines only then."""
    return os.environ.get("RELAY_DEBUG") == "1"


def debug(message: str) -> None:
    """One line of relay's debug log on stderr (when RELAY_DEBUG=1)."""
    if debug_enabled():
        sys.stderr.write(f"relay[{os.getpid()}] {message}\n")
        sys.stderr.flush()


class CallRecord(msgspec.Struct, kw_only=True):
    """One event with its hook calls, queued for the log."""

    time: str
    session_id: str
    event: str
    input: bytes
    result: AggregatedResult
    decisions: list[str | None]


class Telemetry:
    """The hook-call log: `$RELAY_HOME/state/telemetry.db` by default."""

    def __init__(self, path: Path, *, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        self.path = path
        self.max_events = max_events
        self._queue: queue.SimpleQueue[CallRecord | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._broken = False

    def record(self, record: CallRecord) -> None:
        """Queue one event's calls for writing."""
        if self._broken:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._write_loop, name="relay-telemetry", daemon=True
                )
                self._thread.start()
                atexit.register(self.close)
        self._queue.put(record)

    def close(self) -> None:
        """Write what is queued and stop the writer."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
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
            while True:
                batch: list[CallRecord] = []
                item = self._queue.get()
                # Gather what arrives in the next moment into one transaction: a transaction
                # per event costs the firing thread CPU and the GIL on a small machine.
                deadline = time.monotonic() + BATCH_SECONDS
                while item is not None:
                    batch.append(item)
                    wait = deadline - time.monotonic()
                    if len(batch) >= BATCH_MAX or wait <= 0:
                        break
                    try:
                        item = self._queue.get(timeout=wait)
                    except queue.Empty:
                        break
                if batch:
                    self._write(connection, batch)
                if item is None:
                    return
        except (sqlite3.Error, OSError) as exc:
            self._give_up(exc)
        finally:
            connection.close()

    def _connect(self) -> sqlite3.Connection:
        import sqlite3

        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=5, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA foreign_keys=ON")
        connection.executescript(_SCHEMA)
        return connection

    def _write(self, connection: sqlite3.Connection, batch: list[CallRecord]) -> None:
        connection.execute("BEGIN IMMEDIATE")
        try:
            for record in batch:
                result = record.result
                cursor = connection.execute(
                    "INSERT INTO events (time, session_id, event, input, decision, duration_ms)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        record.time,
                        record.session_id,
                        record.event,
                        record.input.decode(),
                        result.decision,
                        result.duration_ms,
                    ),
                )
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
            # Bounded: keep the newest max_events events (their calls go with them).
            connection.execute(
                "DELETE FROM events WHERE id <= (SELECT MAX(id) FROM events) - ?",
                (self.max_events,),
            )
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise

    def _give_up(self, exc: BaseException) -> None:
        self._broken = True
        print(
            f"relay: warning: hook log {self.path} cannot be written ({exc}); not logging",
            file=sys.stderr,
        )

"""The status board on one machine: each agent's `AgentStatus` in a small SQLite file in
relay's private state folder (spec/fleet.md, "Live state").

One row per (team, name), replaced by every publish; the status is kept as its JSON. A
reader sees an agent as `lost` when its heartbeat is past its time to live, or at once
when its `relay run` process (pid and start time) is gone: the file is this machine's, so
every pid in it is a pid here. Writes do not sync (a heartbeat lost in a power cut is
replaced three seconds later); WAL keeps readers off the writers' way. Queries run in a
worker thread: the async methods never block the event loop.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import msgspec

from relay.config.paths import private_dir, private_file, state_dir
from relay.engine.processes import process_alive
from relay.errors import RelayError
from relay.fleet.model import AgentStatus, reads_as

DATABASE_NAME = "fleet.db"
SCHEMA_VERSION = 1
BUSY_TIMEOUT = 2.0
"""Seconds a query waits for another process's write lock before it fails (a session
never waits on the board: its reporter publishes in a task of its own)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS statuses (
    team TEXT NOT NULL,
    name TEXT NOT NULL,
    record BLOB NOT NULL,
    PRIMARY KEY (team, name)
) WITHOUT ROWID;
"""
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AgentStatus)
Result = TypeVar("Result")


class BoardError(RelayError):
    """The status board cannot be used; names the store and why."""

    def __init__(self, message: str, *, store: str) -> None:
        self.message = message
        self.store = store
        super().__init__(f"{store}: {message}")


def default_store() -> Path:
    """This user's board: fleet.db in relay's state folder."""
    return state_dir() / DATABASE_NAME


class SqliteBoard:
    """The StatusBoard of one machine (see the module docstring). Thread-safe."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_store()
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None

    # -- the StatusBoard protocol -------------------------------------------------------

    async def publish(self, status: AgentStatus) -> None:
        """Record `status` (replacing the agent's previous one) and its heartbeat."""
        import anyio.to_thread  # here: `relay agents` reads the board without an event loop

        await anyio.to_thread.run_sync(self.publish_now, status, abandon_on_cancel=True)

    async def statuses(self, team: str) -> list[AgentStatus]:
        """The team's agents, by name, as they read now (lost past their heartbeat's time
        to live, or with their relay process gone; unless they had ended)."""
        import anyio.to_thread

        return await anyio.to_thread.run_sync(self.statuses_now, team, abandon_on_cancel=True)

    async def remove(self, team: str, name: str) -> None:
        """Forget an agent's status."""
        import anyio.to_thread

        await anyio.to_thread.run_sync(self.remove_now, team, name, abandon_on_cancel=True)

    # -- the same, synchronous ----------------------------------------------------------

    def publish_now(self, status: AgentStatus) -> None:
        """`publish`, in this thread."""
        record = _encoder.encode(status)
        self._run(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO statuses (team, name, record) VALUES (?, ?, ?)",
                (status.team, status.name, record),
            )
        )

    def statuses_now(self, team: str) -> list[AgentStatus]:
        """`statuses`, in this thread."""
        rows = self._run(
            lambda db: db.execute(
                "SELECT record FROM statuses WHERE team = ? ORDER BY name", (team,)
            ).fetchall()
        )
        now = datetime.now(UTC)
        found = []
        for (record,) in rows:
            try:
                status = _decoder.decode(record)
            except msgspec.DecodeError:
                continue  # a row no relay wrote: not an agent
            alive = process_alive(status.pid, status.started_ticks) if status.pid else None
            status.state = reads_as(status, now=now, alive=alive)
            found.append(status)
        return found

    def remove_now(self, team: str, name: str) -> None:
        """`remove`, in this thread."""
        self._run(
            lambda db: db.execute("DELETE FROM statuses WHERE team = ? AND name = ?", (team, name))
        )

    def data_version(self) -> int:
        """A number that changes when another connection commits (a cheap poll)."""
        return self._run(lambda db: int(db.execute("PRAGMA data_version").fetchone()[0]))

    def close(self) -> None:
        """Close the connection (a later call opens it again)."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None

    # -- the connection -----------------------------------------------------------------

    def _run(self, work: Callable[[sqlite3.Connection], Result]) -> Result:
        with self._lock:
            try:
                return work(self._connect())
            except sqlite3.Error as exc:
                raise BoardError(str(exc), store=str(self.path)) from None

    def _connect(self) -> sqlite3.Connection:
        if self._connection is not None:
            return self._connection
        try:
            # Private before SQLite creates anything: last lines may quote the agent's work.
            private_dir(self.path.parent)
            private_file(self.path)
            connection = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise BoardError(f"cannot open the status board: {exc}", store=str(self.path)) from None
        try:
            if connection.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
                raise sqlite3.OperationalError("cannot switch to WAL journal mode")
            connection.execute("PRAGMA synchronous = NORMAL")
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"schema version {version} is newer than this relay knows ({SCHEMA_VERSION})"
                )
            if version < SCHEMA_VERSION:
                connection.executescript(_SCHEMA + f"PRAGMA user_version = {SCHEMA_VERSION};")
        except sqlite3.Error as exc:
            connection.close()
            raise BoardError(f"cannot use the status board: {exc}", store=str(self.path)) from None
        self._connection = connection
        return connection

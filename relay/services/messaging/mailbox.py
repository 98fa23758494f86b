"""The embedded mailbox: one SQLite file, the source of truth for messages on one machine.

Layout (schema version 5, in `PRAGMA user_version`; versions 1 to 4 are upgraded in place):

- `agents`: every agent and human sender the team has known (`kind`: agent or human),
  with presence: state, host, relay's pid and its start time (a reused pid is not
  mistaken for a live agent), cwd, last seen, session id, and the live session's
  doorbell (`bell`: its address, random per session, and its key; see doorbell.py).
- `messages`: one row per message; `seq` (INTEGER PRIMARY KEY) is the commit order,
  which is the delivery order, so one sender's messages arrive in the order it sent them.
  Indexed by sender (the rate limit) and by sender and recipient (the loop guard, version 3).
- `deliveries`: one row per message and recipient, keyed (team, recipient, seq), with
  the state queued -> handed -> acked, or dead / denied, the attempts, the session it
  was handed to, and why it was acked (evidence) or refused (reason). Indexed by state
  (a claim reads what waits, not the recipient's history) and, for the handed ones, by
  session (a claim skips what is handed to its own session: version 4).
- `messages_text`: the full-text index (FTS5) of the message bodies, an external-content
  table over `messages` (keyed by seq) kept in step by triggers, so that every writer,
  an older relay's connection included, keeps it whole; built from the messages that
  were there when a mailbox is upgraded to version 5. Messages are also indexed by time
  (version 5), for `--since`.
- `stream_marks`: with the nats transport, how far the team's stream has been read into
  the history (`store_history`), so that the next read starts there (version 5).
- `watchers`: the doorbells of `relay messages --follow` processes, rung (bare) when a
  transaction that stores a message of their team commits (version 5).

Privacy: the folder is made 0700 and the file 0600 (whatever the umask) before SQLite
opens it; SQLite gives its -wal and -shm files the database's mode.

Durability: WAL, committed with `synchronous=NORMAL` (no sync of its own), and a durable
write (a message, an agent) then syncs the WAL file itself before it returns, so a
message whose send returned survives a power cut (`_sync`). A transaction that queues
mail reads the recipients' doorbell addresses and rings them all through one socket
(doorbell.py) once it has committed and before that sync: the recipients read the
message while the sender waits for the disk.

Hand-over at the send: a message for an agent whose live session has a keyed doorbell
and nothing else waiting or handed to it (acknowledged, refused or dead is all it has) is
handed to that session in the sender's own transaction, and the poke carries the
delivery (doorbell.py). The session hands it to the agent with no read and no claim of
its own: a broadcast then costs each session of the machine a wake-up, not a wake-up,
a read and a write transaction queued behind the others'. A session with mail waiting
or handed gets a bare poke and claims, so that the session keeps each sender's order;
a poke that does not go in (the session is gone, or has not read its pokes for a while
and its socket's queue is full) puts the delivery back to queued, and the session
claims it as any other. Writes take the lock up front (BEGIN
IMMEDIATE) and wait for other writers in fine steps, up to BUSY_TIMEOUT (`_when_free`).
Every sqlite3 or file-system failure leaves this module as MessagingError naming the
file.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import random
import socket
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from relay.config.paths import private_dir, private_file, state_dir
from relay.engine.processes import process_alive, process_start_ticks
from relay.services.messaging.doorbell import CARRY_LIMIT, parse_bell_record, ring_all
from relay.services.messaging.history import Found, HistoryQuery, match_expression
from relay.services.messaging.model import (
    BROADCAST,
    SYSTEM_SENDER,
    Agent,
    AgentKind,
    AgentState,
    Delivery,
    DeliveryState,
    HandedAtSend,
    LoopStoppedError,
    MailboxBusy,
    Message,
    MessagingError,
    NameTakenError,
    RateLimitedError,
    RecipientAwayError,
    SenderIsLiveError,
    UnknownRecipientError,
    check_name,
    new_message,
    recipients_for,
    short_id,
    utc_now,
)
from relay.services.messaging.ulid import new_ulid

__all__ = [
    "AWAY_SECONDS",
    "DATABASE_NAME",
    "PRUNE_SECONDS",
    "SCHEMA_VERSION",
    "SqliteMailbox",
    "default_store",
]

DATABASE_NAME = "messages.db"
SCHEMA_VERSION = 5
BUSY_TIMEOUT = 10.0
"""Seconds a write waits for another process's lock before failing."""
_BUSY_FIRST_WAIT = 50e-6
_BUSY_SHORT_WAIT = 200e-6
_BUSY_LONG_WAIT = 5e-3
_BUSY_QUEUE_SECONDS = 0.2
"""Waiting for the write lock (see `_when_free`): tries 50 µs apart, doubling to 200 µs,
for this long (writers queueing behind each other hold it for 0.1 ms or so), then 5 ms
apart (a writer stalled on a slow disk or stopped)."""
RATE_WINDOW = 60.0
AWAY_SECONDS = 24 * 3600.0
"""An agent offline for longer than this is away: mail for it needs `queue=True` (`relay
send --queue`), and broadcasts skip it."""
PRUNE_SECONDS = 7 * 24 * 3600.0
"""`relay agents --prune` removes agents offline for longer than this by default."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agents (
    team TEXT NOT NULL,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER,
    started_ticks INTEGER,
    cwd TEXT,
    last_seen TEXT NOT NULL,
    session_id TEXT,
    kind TEXT NOT NULL DEFAULT 'agent',
    bell BLOB,
    PRIMARY KEY (team, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    team TEXT NOT NULL,
    sender TEXT NOT NULL,
    recipient TEXT NOT NULL,
    thread TEXT,
    body TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_sender ON messages(team, sender, created_at);
CREATE INDEX IF NOT EXISTS messages_by_thread ON messages(team, thread, seq);
CREATE INDEX IF NOT EXISTS messages_by_pair ON messages(team, sender, recipient, seq);
CREATE INDEX IF NOT EXISTS messages_by_time ON messages(team, created_at);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_text USING fts5(
    body, content='messages', content_rowid='seq', tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS messages_text_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_text (rowid, body) VALUES (new.seq, new.body);
END;
CREATE TRIGGER IF NOT EXISTS messages_text_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_text (messages_text, rowid, body) VALUES ('delete', old.seq, old.body);
END;
CREATE TRIGGER IF NOT EXISTS messages_text_update AFTER UPDATE OF body ON messages BEGIN
    INSERT INTO messages_text (messages_text, rowid, body) VALUES ('delete', old.seq, old.body);
    INSERT INTO messages_text (rowid, body) VALUES (new.seq, new.body);
END;
CREATE TABLE IF NOT EXISTS stream_marks (
    team TEXT PRIMARY KEY,
    seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS watchers (
    bell BLOB PRIMARY KEY,
    team TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started_ticks INTEGER
);
CREATE TABLE IF NOT EXISTS deliveries (
    team TEXT NOT NULL,
    recipient TEXT NOT NULL,
    seq INTEGER NOT NULL REFERENCES messages(seq),
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    session_id TEXT,
    handed_at TEXT,
    acked_at TEXT,
    evidence TEXT,
    reason TEXT,
    PRIMARY KEY (team, recipient, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS deliveries_by_state ON deliveries(team, recipient, state, seq);
CREATE INDEX IF NOT EXISTS deliveries_handed ON deliveries(team, recipient, state, session_id)
    WHERE state = 'handed';
"""

_MESSAGE_FIELDS = ("id", "team", "sender", "recipient", "thread", "body", "created_at")
_DELIVERY_FIELDS = ("recipient", "state", "attempts", "handed_at", "acked_at", "evidence", "reason")
_AGENT_FIELDS = (
    "name", "team", "state", "host", "pid", "started_ticks", "cwd", "last_seen", "session_id",
    "kind",
)  # fmt: skip
# Version 1 had no kind and no bell; its human senders are the rows no session ever had.
_UPGRADE_FROM_1 = """
ALTER TABLE agents ADD COLUMN kind TEXT NOT NULL DEFAULT 'agent';
ALTER TABLE agents ADD COLUMN bell BLOB;
UPDATE agents SET kind = 'human' WHERE session_id IS NULL;
"""
_MESSAGE_COLUMNS = ", ".join(_MESSAGE_FIELDS)
_DELIVERY_COLUMNS = ", ".join(
    [*(f"m.{name}" for name in _MESSAGE_FIELDS), *(f"d.{name}" for name in _DELIVERY_FIELDS)]
)
_AGENT_COLUMNS = ", ".join(_AGENT_FIELDS)
# What a session may claim: its queued mail, oldest first, through the index of what
# waits (without statistics SQLite walks the primary key instead, for the order: the
# recipient's whole history), and what is handed to other sessions (normally nothing),
# its seeks skipping the session's own hand-outs (`session_id IS NOT ?` reads them all).
_CLAIMABLE_QUEUED = f"""
SELECT {_DELIVERY_COLUMNS}, d.seq FROM deliveries d INDEXED BY deliveries_by_state
JOIN messages m ON m.seq = d.seq
WHERE d.team = ? AND d.recipient = ? AND d.state = 'queued' ORDER BY d.seq LIMIT ?
"""
# Every name the team's deliveries are for (a name removed from `agents` keeps its
# deliveries): one seek per name along the primary key, not a scan of the deliveries.
_RECIPIENTS = """
WITH RECURSIVE named(name) AS (
    SELECT (SELECT MIN(recipient) FROM deliveries WHERE team = ?1)
    UNION ALL SELECT (SELECT MIN(recipient) FROM deliveries WHERE team = ?1 AND recipient > name)
    FROM named WHERE name IS NOT NULL
) SELECT name FROM named WHERE name IS NOT NULL
"""
# The deliveries of a JSON list of [recipient, seq] pairs, each by its primary key (CROSS
# JOIN keeps the list the outer loop: the planner would scan the team's deliveries).
_DELIVERIES_OF = f"""
SELECT d.seq, {_DELIVERY_COLUMNS} FROM json_each(?2) AS j
CROSS JOIN deliveries d ON d.team = ?1 AND d.recipient = json_extract(j.value, '$[0]')
    AND d.seq = json_extract(j.value, '$[1]')
CROSS JOIN messages m ON m.seq = d.seq ORDER BY d.seq, d.recipient
"""
_CLAIMABLE_ELSEWHERE = """
SELECT seq FROM deliveries
    WHERE team = ?1 AND recipient = ?2 AND state = 'handed' AND session_id < ?3
UNION ALL SELECT seq FROM deliveries
    WHERE team = ?1 AND recipient = ?2 AND state = 'handed' AND session_id > ?3
UNION ALL SELECT seq FROM deliveries
    WHERE team = ?1 AND recipient = ?2 AND state = 'handed' AND session_id IS NULL
"""

Result = TypeVar("Result")


def default_store() -> Path:
    """Where the mailbox lives: $RELAY_HOME/state/messages.db (or the platform state dir)."""
    return state_dir() / DATABASE_NAME


def _private_database(path: Path) -> None:
    """Make the database a 0600 file before SQLite opens it. An existing one is tightened
    by its path, not opened: closing a descriptor of a file drops every POSIX lock this
    process holds on it, those of another mailbox's connection to it too, and a process
    that closes its last connection then takes the WAL for unused and removes it, leaving
    that connection reading a WAL nobody writes."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        private_file(path)
        return
    if not stat.S_ISREG(info.st_mode):
        private_file(path)  # a link or worse: refused as it was (O_NOFOLLOW)
    elif info.st_mode & 0o777 != 0o600 and info.st_uid == os.getuid():
        os.chmod(path, 0o600)


def _statements(script: str) -> list[str]:
    """The SQL statements of `script` (a trigger's body keeps its semicolons)."""
    statements: list[str] = []
    current = ""
    for piece in script.split(";"):
        current += piece + ";"
        if sqlite3.complete_statement(current):
            if current.strip(" \n;"):
                statements.append(current.strip())
            current = ""
    return statements


def _upgrade(connection: sqlite3.Connection) -> None:
    """Bring the mailbox to SCHEMA_VERSION in one transaction, the version read again
    under the write lock (another process may have upgraded it meanwhile). `executescript`
    is not used: it commits first, which would let two processes upgrade at once."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if version < SCHEMA_VERSION:
            for statement in _statements((_UPGRADE_FROM_1 if version == 1 else "") + _SCHEMA):
                connection.execute(statement)
            if version:  # messages stored before version 5 are indexed now
                connection.execute("INSERT INTO messages_text (messages_text) VALUES ('rebuild')")
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        connection.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            connection.execute("ROLLBACK")
        raise


def _fdatasync(descriptor: int) -> None:
    """fdatasync, or fsync where there is none (macOS)."""
    getattr(os, "fdatasync", os.fsync)(descriptor)


def _sync_folder(folder: Path) -> None:
    """fsync a folder (a new file's entry in it); a failure is ignored, as SQLite ignores it."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


class SqliteMailbox:
    """The embedded mailbox (see the module docstring). Thread-safe; methods are synchronous:
    async callers run them on a worker thread."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        max_attempts: int = 5,
        max_per_minute: int = 30,
        max_exchanges: int = 20,
        loop_cooldown: float = 600.0,
        doorbell: bool = True,
    ) -> None:
        self.path = Path(path) if path is not None else default_store()
        self.max_attempts = max_attempts
        self.max_per_minute = max_per_minute
        self.max_exchanges = max_exchanges
        self.loop_cooldown = loop_cooldown
        """Seconds: how long a pair stopped by the loop guard waits, and the quiet gap that
        ends a run of exchanges."""
        self.doorbell = doorbell
        self.host = socket.gethostname()
        self._lock = threading.RLock()
        self._connection: sqlite3.Connection | None = None
        self._rings = _Rings()
        """Doorbells to poke when the write transaction under way commits."""
        self._wal: int | None = None
        """A descriptor of the WAL file, kept open for `_sync`."""
        self._sync_lock = threading.Lock()

    # -- connection --------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._connection is not None:
            return self._connection
        try:
            # Private before SQLite creates anything: messages are the user's alone.
            private_dir(self.path.parent)
            _private_database(self.path)
            connection = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise self._error(f"cannot open the mailbox: {exc}") from None
        try:
            connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
            if connection.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
                raise sqlite3.OperationalError("cannot switch to WAL journal mode")
            # Commits do not sync; durable writes sync the WAL after their commit (`_sync`).
            connection.execute("PRAGMA synchronous = NORMAL")
            connection.execute("PRAGMA foreign_keys = ON")
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"schema version {version} is newer than this relay knows ({SCHEMA_VERSION})"
                )
            if version < SCHEMA_VERSION:
                _upgrade(connection)
            # From now on SQLITE_BUSY comes back at once and the waiting is ours (`_when_free`).
            connection.execute("PRAGMA busy_timeout = 0")
        except sqlite3.Error as exc:
            connection.close()
            raise self._error(f"cannot use the mailbox: {exc}") from None
        self._connection = connection
        return connection

    def close(self) -> None:
        """Close the connection (a later call opens it again)."""
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
        with self._sync_lock, contextlib.suppress(OSError):
            self._close_wal()

    def _error(self, message: str) -> MessagingError:
        return MessagingError(message, store=str(self.path))

    def _read(self, work: Callable[[sqlite3.Connection], Result], *, wait: bool = True) -> Result:
        """Run `work` on the connection. `wait=False`: MailboxBusy at once when another
        thread holds it or the database refuses the read for now, instead of waiting."""
        if not self._lock.acquire(blocking=wait):
            raise MailboxBusy(str(self.path))
        try:
            connection = self._connect()
            if not wait:
                return work(connection)
            # In WAL mode a read is rarely refused (another connection recovering the
            # WAL after a crash, or checkpointing as it closes), and can be tried again.
            return _when_free(lambda: work(connection))
        except sqlite3.OperationalError as exc:
            if not wait and getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY:
                raise MailboxBusy(str(self.path)) from None
            raise self._error(str(exc)) from None
        except sqlite3.Error as exc:
            raise self._error(str(exc)) from None
        finally:
            self._lock.release()

    def _write(
        self,
        work: Callable[[sqlite3.Connection], Result],
        *,
        durable: bool = True,
        wait: bool = True,
    ) -> Result:
        """Run `work` in one IMMEDIATE transaction; commit, or roll back on any error.

        The doorbells the work queued are rung once it has committed. `durable` (the
        default): then the WAL is synced before this returns (`_sync`), after the rings,
        so that recipients read the mail while the sender waits for the disk.
        `durable=False` does without the sync: for hand-outs, acknowledgements and
        presence, which a power cut may only undo, so that a message is delivered again,
        never lost. Messages themselves are always synced.
        `wait=False`: MailboxBusy at once, instead of waiting, when another thread or
        connection holds the lock (for a caller that must not block, e.g. an event loop).
        """
        if not self._lock.acquire(blocking=wait):
            raise MailboxBusy(str(self.path))
        try:
            result = self._write_locked(work, wait=wait)
        finally:
            self._lock.release()
        if durable:
            self._sync()
        return result

    def _write_locked(self, work: Callable[[sqlite3.Connection], Result], *, wait: bool) -> Result:
        """The body of `_write`, under `self._lock`: the transaction and the rings."""
        connection = self._connect()
        try:
            if wait:
                _when_free(lambda: connection.execute("BEGIN IMMEDIATE"))
            else:
                connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if not wait and getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY:
                raise MailboxBusy(str(self.path)) from None
            raise self._error(f"cannot write to the mailbox: {exc}") from None
        except sqlite3.Error as exc:
            raise self._error(f"cannot write to the mailbox: {exc}") from None
        try:
            self._rings = _Rings()
            result = work(connection)
            connection.execute("COMMIT")
        except BaseException as exc:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._error(str(exc)) from None
            raise
        finally:
            rings, self._rings = self._rings, _Rings()
        try:  # committed: a bare poke is only a hint
            missed = ring_all(rings.addresses, rings.carrying)
        except OSError:
            missed = list(rings.handed)
        unheard = [address for address in missed if address in rings.handed]
        if unheard:
            self._take_back(unheard, rings)
        return result

    def _take_back(self, addresses: list[bytes], rings: _Rings) -> None:
        """Deliveries handed at the send whose pokes did not go in: queued again (unless
        something took them meanwhile), and those sessions poked again, bare, so that a
        session that looked in between looks once more. Left handed when this fails: the
        agent's next session claims them anyway."""

        def work(db: sqlite3.Connection) -> None:
            db.executemany(
                "UPDATE deliveries SET state = 'queued', session_id = NULL, handed_at = NULL"
                " WHERE team = ?1 AND recipient = ?2 AND state = 'handed' AND session_id = ?4"
                " AND seq = (SELECT seq FROM messages WHERE id = ?3 AND team = ?1)",
                [rings.handed[address] for address in addresses],
            )
            self._rings.addresses += addresses

        with contextlib.suppress(MessagingError):
            self._write_locked(work, wait=True)

    def _sync(self) -> None:
        """Make what is committed durable, as `synchronous=FULL` would have at the commit:
        fdatasync the WAL file, as SQLite does (a file's sync flushes every process's
        writes to it; fdatasync leaves out the times, which need no journal commit), and
        fsync its folder when the WAL is a file this mailbox has not synced before (its
        failure ignored, as SQLite ignores it).

        The WAL's descriptor is kept open while the mailbox is; when SQLite has removed
        that file since (the last connection to close checkpoints and removes it), the
        new one is opened. A checkpoint has synced both files (SQLite syncs around each
        one, and resets or removes the WAL only after one), so what was checkpointed
        before the sync is durable already, and with no WAL left there is nothing to do.
        The database file itself is never opened here: closing a descriptor of it would
        drop this process's SQLite locks on it."""
        with self._sync_lock:
            try:
                if self._wal is not None and os.fstat(self._wal).st_nlink == 0:
                    self._close_wal()
                if self._wal is None:
                    try:
                        self._wal = os.open(f"{self.path}-wal", os.O_RDONLY | os.O_CLOEXEC)
                    except FileNotFoundError:
                        return  # checkpointed and removed: synced by the checkpoint
                    _sync_folder(self.path.parent)
                _fdatasync(self._wal)
            except OSError as exc:
                raise self._error(
                    f"committed (it may be delivered: sending it again may deliver it twice),"
                    f" but not synced to disk ({exc}): a power cut may undo it"
                ) from None
            finally:
                if self._connection is None:  # closed meanwhile: keep nothing open
                    self._close_wal()

    def _close_wal(self) -> None:
        descriptor, self._wal = self._wal, None
        if descriptor is not None:
            os.close(descriptor)

    def data_version(self) -> int:
        """A number that changes when another connection commits (a cheap poll)."""
        return self._read(lambda db: int(db.execute("PRAGMA data_version").fetchone()[0]))

    def watch(self, team: str, bell: bytes) -> None:
        """Poke the doorbell at `bell` (its address) after every commit that stores a
        message of `team`, until `unwatch`. Watchers whose process is gone (killed before
        it could unwatch) are dropped here."""
        pid = os.getpid()
        ticks = process_start_ticks(pid)

        def work(db: sqlite3.Connection) -> None:
            gone = [
                (row[0],)
                for row in db.execute("SELECT bell, pid, started_ticks FROM watchers")
                if not process_alive(row[1], row[2])
            ]
            db.executemany("DELETE FROM watchers WHERE bell = ?", gone)
            db.execute(
                "INSERT OR REPLACE INTO watchers (bell, team, pid, started_ticks)"
                " VALUES (?, ?, ?, ?)",
                (bell, team, pid, ticks),
            )

        self._write(work, durable=False)

    def unwatch(self, bell: bytes) -> None:
        """Stop poking the doorbell at `bell`."""
        self._write(
            lambda db: db.execute("DELETE FROM watchers WHERE bell = ?", (bell,)), durable=False
        )

    # -- agents ------------------------------------------------------------------------

    def register_agent(
        self,
        name: str,
        *,
        team: str,
        session_id: str,
        pid: int | None = None,
        cwd: str | None = None,
        bell: bytes | None = None,
    ) -> Agent:
        """Mark `name` live for this session (its doorbell at `bell`, if it has one); a live
        agent of that name elsewhere is NameTakenError."""
        check_name(name)
        check_name(team, what="team name")
        pid = os.getpid() if pid is None else pid
        ticks = process_start_ticks(pid)
        now = utc_now()

        def work(db: sqlite3.Connection) -> Agent:
            current = self._agent_row(db, team, name)
            if (
                current is not None
                and current.session_id != session_id
                and self._presence(current) != "offline"
            ):
                raise NameTakenError(current)
            agent = Agent(
                name=name,
                team=team,
                state="live",
                host=self.host,
                pid=pid,
                started_ticks=ticks,
                cwd=cwd,
                last_seen=now,
                session_id=session_id,
            )
            db.execute(
                "INSERT OR REPLACE INTO agents (team, name, state, host, pid, started_ticks, cwd,"
                " last_seen, session_id, kind, bell) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (team, name, "live", self.host, pid, ticks, cwd, now, session_id, "agent", bell),
            )
            return agent

        return self._write(work)

    def set_presence(self, name: str, *, team: str, session_id: str, state: AgentState) -> None:
        """Record the agent's state (live, idle, busy, offline) and that it was seen now."""
        self._write(
            lambda db: db.execute(
                "UPDATE agents SET state = ?, last_seen = ?,"
                " bell = CASE WHEN ? = 'offline' THEN NULL ELSE bell END"
                " WHERE team = ? AND name = ? AND session_id = ?",
                (state, utc_now(), state, team, name, session_id),
            ),
            durable=False,
        )

    def traffic(self, name: str, *, team: str) -> tuple[int, int]:
        """How many messages `name` took in (acknowledged deliveries) and sent."""

        def work(db: sqlite3.Connection) -> tuple[int, int]:
            taken = db.execute(
                "SELECT count(*) FROM deliveries WHERE team = ? AND recipient = ? AND state = 'acked'",
                (team, name),
            ).fetchone()[0]
            sent = db.execute(
                "SELECT count(*) FROM messages WHERE team = ? AND sender = ?", (team, name)
            ).fetchone()[0]
            return int(taken), int(sent)

        return self._read(work)

    def known_names(self, team: str) -> list[str]:
        """Every name the team has known (agents and human senders), sorted."""
        return self._read(lambda db: self._names(db, team))

    def agents(self, team: str) -> list[Agent]:
        """The team's agents with their presence as it is now (a dead relay is offline)."""

        def work(db: sqlite3.Connection) -> list[Agent]:
            rows = db.execute(
                f"SELECT {_AGENT_COLUMNS} FROM agents WHERE team = ? ORDER BY name", (team,)
            ).fetchall()
            agents = []
            for row in rows:
                agent = _agent(row)
                agent.state = self._presence(agent)
                agents.append(agent)
            return agents

        return self._read(work)

    def agents_named(self, name: str) -> list[Agent]:
        """The agents and humans called `name` in every team this mailbox knows, with their
        presence (for an error that says where else a name is)."""

        def work(db: sqlite3.Connection) -> list[Agent]:
            rows = db.execute(
                f"SELECT {_AGENT_COLUMNS} FROM agents WHERE name = ? ORDER BY team", (name,)
            ).fetchall()
            agents = [_agent(row) for row in rows]
            for agent in agents:
                agent.state = self._presence(agent)
            return agents

        return self._read(work)

    def _presence(self, agent: Agent) -> AgentState:
        if agent.state == "offline" or agent.pid is None:
            return "offline"
        if agent.host == self.host and not process_alive(agent.pid, agent.started_ticks):
            return "offline"  # its relay died without saying so (SIGKILL, a crash)
        return agent.state

    def _agent_row(self, db: sqlite3.Connection, team: str, name: str) -> Agent | None:
        row = db.execute(
            f"SELECT {_AGENT_COLUMNS} FROM agents WHERE team = ? AND name = ?", (team, name)
        ).fetchone()
        return _agent(row) if row is not None else None

    @staticmethod
    def _names(db: sqlite3.Connection, team: str) -> list[str]:
        return [
            row[0]
            for row in db.execute("SELECT name FROM agents WHERE team = ? ORDER BY name", (team,))
        ]

    def _away(self, db: sqlite3.Connection, team: str, seconds: float = AWAY_SECONDS) -> list[str]:
        """The team's agents offline for longer than `seconds` (not humans)."""
        rows = db.execute(
            f"SELECT {_AGENT_COLUMNS} FROM agents WHERE team = ? AND kind = 'agent'"
            " AND last_seen < ?",
            (team, utc_now(-seconds)),
        ).fetchall()
        return [agent.name for agent in map(_agent, rows) if self._presence(agent) == "offline"]

    def forget(self, name: str, *, team: str) -> int:
        """Remove `name` (an agent or human that is not live) from the team; its waiting mail
        becomes dead, its messages stay in the history. Returns how many deliveries died."""

        def work(db: sqlite3.Connection) -> int:
            current = self._agent_row(db, team, name)
            if current is None:
                raise UnknownRecipientError(name, team=team, known=self._names(db, team))
            if self._presence(current) != "offline":
                raise MessagingError(
                    f"{name} is live in team {team} (pid {current.pid} on {current.host}): "
                    "stop its session first"
                )
            return self._remove(db, team, name, f"{name} was removed from team {team}")

        return self._write(work)

    def prune(self, *, team: str, older_than: float = PRUNE_SECONDS) -> list[str]:
        """Remove the team's agents and humans offline (not seen) for longer than
        `older_than` seconds; their waiting mail becomes dead. Returns their names."""

        def work(db: sqlite3.Connection) -> list[str]:
            rows = db.execute(
                f"SELECT {_AGENT_COLUMNS} FROM agents WHERE team = ? AND last_seen < ?",
                (team, utc_now(-older_than)),
            ).fetchall()
            names = [a.name for a in map(_agent, rows) if self._presence(a) == "offline"]
            for name in names:
                self._remove(db, team, name, f"{name} was pruned from team {team}")
            return names

        return self._write(work)

    @staticmethod
    def _remove(db: sqlite3.Connection, team: str, name: str, reason: str) -> int:
        cursor = db.execute(
            "UPDATE deliveries SET state = 'dead', reason = ? WHERE team = ? AND recipient = ?"
            " AND state IN ('queued', 'handed')",
            (reason, team, name),
        )
        db.execute("DELETE FROM agents WHERE team = ? AND name = ?", (team, name))
        return cursor.rowcount

    @staticmethod
    def _agent_names(db: sqlite3.Connection, team: str) -> list[str]:
        """The team's agents, not its humans: who a broadcast is for."""
        return [
            row[0]
            for row in db.execute(
                "SELECT name FROM agents WHERE team = ? AND kind = 'agent' ORDER BY name", (team,)
            )
        ]

    # -- sending -----------------------------------------------------------------------

    def send(
        self,
        *,
        team: str,
        sender: str,
        recipient: str,
        body: str,
        thread: str | None = None,
        human: bool = False,
        queue: bool = False,
    ) -> tuple[Message, list[str]]:
        """Queue a message for `recipient` (a name or `*`); return it and who it was queued for.

        `human`: sent by a person from a terminal (`relay send`), who may not use the name
        of a live agent, becomes known to the team as a human (to get replies) and is
        not a recipient of broadcasts. An agent offline for longer than AWAY_SECONDS is
        away: a message for it is refused unless `queue`, and broadcasts skip it.

        Errors (nothing is queued): an unknown recipient, a broadcast with nobody to
        hear it, a bad body, a human using a live agent's name, two agents in a reply
        loop (LoopStoppedError, see `_loop_stop`: the other agent is told once), a sender
        over `max_per_minute` (the recipients are told once a minute that the sender is
        being held back).
        """
        message = new_message(
            team=team, sender=sender, recipient=recipient, body=body, thread=thread
        )

        def work(db: sqlite3.Connection) -> tuple[list[str], list[str], MessagingError | None]:
            current = self._agent_row(db, team, sender)
            is_agent = current is not None and current.kind == "agent"
            if human and current is not None and is_agent and self._presence(current) != "offline":
                raise SenderIsLiveError(current)
            broadcast = recipient == BROADCAST  # for agents only, never humans
            known = self._agent_names(db, team) if broadcast else self._names(db, team)
            if broadcast and not queue:
                away = set(self._away(db, team))
                known = [name for name in known if name not in away]
            recipients = recipients_for(message, known)
            if not broadcast and not queue:
                target = self._agent_row(db, team, recipient)
                if target is not None and recipient in self._away(db, team):
                    raise RecipientAwayError(target, away_hours=AWAY_SECONDS / 3600)
            if current is None:  # a human sending from a terminal gets a mailbox for replies
                self._ensure_known(
                    db, team, sender, message.created_at, kind="human" if human else "agent"
                )
            if not (human or (current is not None and current.kind == "human")):
                stopped = self._loop_stop(db, team, sender, recipients)
                if stopped is not None:
                    return [], [stopped.other] if stopped.new_stop else [], stopped
            retry = self._over_rate(db, team, sender)
            if retry is not None:
                notified = [
                    name
                    for name in recipients
                    if self._notice_once(
                        db,
                        team,
                        name,
                        f"{sender} is sending more than {self.max_per_minute} messages a minute: "
                        f"relay holds its messages back for now. No need to answer each one.",
                    )
                ]
                return [], notified, self._rate_error(sender, retry)
            self._insert(db, message, recipients, self._hand_at_send(db, message, recipients))
            return recipients, [], None

        def work_and_ring(
            db: sqlite3.Connection,
        ) -> tuple[list[str], list[str], MessagingError | None]:
            recipients, to_ring, refused = work(db)  # a refusal rings those it told
            self._ring_on_commit(db, team, to_ring)
            return recipients, to_ring, refused

        # A refusal is returned, not raised, so that the notices it queued are committed.
        recipients, _, refused = self._write(work_and_ring)
        if refused is not None:
            raise refused
        return message, recipients

    def store_incoming(self, message: Message, recipients: Sequence[str]) -> bool:
        """Store a message that arrived from elsewhere (NATS), queued for `recipients`;
        idempotent by message id. True when anything was new. Rings the recipients."""

        def work(db: sqlite3.Connection) -> bool:
            row = db.execute("SELECT seq FROM messages WHERE id = ?", (message.id,)).fetchone()
            seq = row[0] if row is not None else self._insert(db, message, [])
            new = False
            for name in recipients:
                self._ensure_known(db, message.team, name, message.created_at)
                cursor = db.execute(
                    "INSERT OR IGNORE INTO deliveries (team, recipient, seq, state)"
                    " VALUES (?, ?, ?, 'queued')",
                    (message.team, name, seq),
                )
                new = new or cursor.rowcount > 0
            if new:
                self._ring_on_commit(db, message.team, recipients)
            return new

        return self._write(work)

    def store_rejected(self, message: Message, recipient: str, reason: str) -> None:
        """Keep a message from elsewhere that failed the checks, dead for `recipient` with
        `reason`, never delivered. It is stored under a fresh id (its own may be forged:
        it must not shadow a real message that has that id) with its fields made safe to
        store and show; its own id is in the reason."""

        def safe(text: str, limit: int) -> str:
            text = text.encode("utf-8", "replace").decode("utf-8")[:limit]
            return "".join(c if c.isprintable() else "?" for c in text)

        kept = Message(
            id=new_ulid(),
            team=message.team,
            sender=safe(message.sender, 64) or "?",
            recipient=recipient,
            body=message.body.encode("utf-8", "replace").decode("utf-8"),
            created_at=utc_now(),
            thread=None,
        )
        why = f"refused on receipt: {reason} (its id: {safe(message.id, 40)!r})"

        def work(db: sqlite3.Connection) -> None:
            seq = self._insert(db, kept, [])
            db.execute(
                "INSERT INTO deliveries (team, recipient, seq, state, reason)"
                " VALUES (?, ?, ?, 'dead', ?)",
                (kept.team, recipient, seq, why),
            )

        self._write(work)

    def stream_mark(self, team: str) -> int:
        """How far the team's NATS stream has been read into the history (a stream
        sequence; 0: not yet)."""
        row = self._read(
            lambda db: db.execute("SELECT seq FROM stream_marks WHERE team = ?", (team,)).fetchone()
        )
        return int(row[0]) if row is not None else 0

    def store_history(self, team: str, messages: Sequence[Message], mark: int) -> int:
        """Keep messages read from the team's NATS stream in the history (for `relay
        messages`; delivered to nobody, idempotent by id) and that the stream has been
        read up to `mark`. Returns how many were new."""

        def work(db: sqlite3.Connection) -> int:
            new = 0
            for message in messages:
                if message.team != team:
                    continue
                if db.execute("SELECT 1 FROM messages WHERE id = ?", (message.id,)).fetchone():
                    continue
                self._insert(db, message, [])
                new += 1
            db.execute(
                "INSERT OR REPLACE INTO stream_marks (team, seq) VALUES (?, ?)", (team, mark)
            )
            return new

        # Not synced: a copy of what the stream keeps, read again if a power cut undoes it.
        return self._write(work, durable=False)

    def record_sent(self, message: Message) -> None:
        """Keep a copy of a message sent through another transport, for `relay messages`."""
        self.store_incoming(message, ())

    def _ensure_known(
        self,
        db: sqlite3.Connection,
        team: str,
        name: str,
        seen: str,
        *,
        kind: AgentKind = "agent",
    ) -> None:
        """Make `name` a known (offline) agent or human of the team unless it is known already."""
        db.execute(
            "INSERT OR IGNORE INTO agents (team, name, state, host, last_seen, kind)"
            " VALUES (?, ?, 'offline', ?, ?, ?)",
            (team, name, self.host, seen, kind),
        )

    def _insert(
        self,
        db: sqlite3.Connection,
        message: Message,
        recipients: Sequence[str],
        handed: dict[str, tuple[str, str]] | None = None,
    ) -> int:
        """Store a message queued for `recipients`, or handed to the session `handed` has
        for them (session id, time); its seq."""
        cursor = db.execute(
            "INSERT INTO messages (id, team, sender, recipient, thread, body, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                message.id,
                message.team,
                message.sender,
                message.recipient,
                message.thread,
                message.body,
                message.created_at,
            ),
        )
        if self.doorbell:  # `relay messages --follow` looks at once
            self._rings.addresses += [
                row[0]
                for row in db.execute("SELECT bell FROM watchers WHERE team = ?", (message.team,))
            ]
        handed = handed or {}
        db.executemany(
            "INSERT INTO deliveries (team, recipient, seq, state, session_id, handed_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            [
                (message.team, name, cursor.lastrowid, "handed", *handed[name])
                if name in handed
                else (message.team, name, cursor.lastrowid, "queued", None, None)
                for name in recipients
            ],
        )
        return int(cursor.lastrowid or 0)

    def check_limits(self, team: str, sender: str, recipient: str, *, human: bool = False) -> None:
        """For a message sent through another transport: LoopStoppedError when `sender` and
        `recipient` (or anyone a broadcast reaches) are stopped in a reply loop (the other
        agent is told once, if it is known here), RateLimitedError when `sender` has used
        up its messages for the minute. Counts what this mailbox holds."""

        def work(db: sqlite3.Connection) -> LoopStoppedError | None:
            current = self._agent_row(db, team, sender)
            if human or (current is not None and current.kind == "human"):
                return None
            if recipient == BROADCAST:
                recipients = [name for name in self._agent_names(db, team) if name != sender]
            else:
                recipients = [recipient]
            stopped = self._loop_stop(db, team, sender, recipients)
            if stopped is not None and stopped.new_stop:
                self._ring_on_commit(db, team, [stopped.other])
            return stopped

        stopped = self._write(work)
        if stopped is not None:
            raise stopped
        retry = self._read(lambda db: self._over_rate(db, team, sender))
        if retry is not None:
            raise self._rate_error(sender, retry)

    def _rate_error(self, sender: str, retry: float) -> RateLimitedError:
        return RateLimitedError(sender, limit=self.max_per_minute, retry_after=retry)

    def _loop_stop(
        self, db: sqlite3.Connection, team: str, sender: str, recipients: Sequence[str]
    ) -> LoopStoppedError | None:
        """The refusal for a message from `sender` to `recipients` when `sender` and one of
        them (an agent) have exchanged `max_exchanges` messages with no human message in
        between; None when it may go.

        A pair is unordered: its run is the messages either of the two sent to the other or
        to `*`, newer than the last message a human sent to either of them (or to `*`),
        back to the first quiet gap of `loop_cooldown` seconds; a run from one of them
        only is no loop. A stopped pair may write
        again `loop_cooldown` after its last message, or at once after a human's message.
        The other agent is told once per stop; only the newest `max_exchanges` messages of
        the pair are read, whatever the history.
        """
        now = datetime.now(UTC)
        history = _PairHistory(db, team, self.max_exchanges)
        # A run needs messages from both: only recipients that ever wrote to the sender or
        # to everyone can be in a loop with it (one index seek each, in one statement,
        # instead of reading every pair's history).
        replied = _replied(db, team, sender, recipients)
        for other in recipients:
            if other == sender or other not in replied:
                continue
            row = self._agent_row(db, team, other)
            if row is None or row.kind != "agent":
                continue  # a message to a human puts a human in the loop
            run_end = self._run_end(history, sender, other, now)
            if run_end is None:
                continue
            newest, newest_at = run_end
            resume = newest_at + timedelta(seconds=self.loop_cooldown)
            first, second = sorted((sender, other))
            notice = (
                f"{first} and {second} have exchanged {self.max_exchanges} messages with no "
                f"human message in between, so relay holds messages between them until a "
                f"human sends either of them a message (relay send) or until "
                f"{resume:%H:%M:%S} UTC. No need to answer."
            )
            # Told once per stop: the notice names the stop's end, so it is the same text
            # for every refusal of this stop and a new one for the next.
            told = db.execute(
                "SELECT 1 FROM messages WHERE team = ? AND sender = ? AND recipient IN (?, ?)"
                " AND seq > ? AND body = ?",
                (team, SYSTEM_SENDER, first, second, newest, notice),
            ).fetchone()
            if told is None:
                self._notice(db, team, other, notice)
            return LoopStoppedError(
                sender,
                other,
                limit=self.max_exchanges,
                retry_after=max(0.0, (resume - now).total_seconds()),
                notice=notice,
                new_stop=told is None,
            )
        return None

    def _run_end(
        self, history: _PairHistory, one: str, other: str, now: datetime
    ) -> tuple[int, datetime] | None:
        """The seq and time of the pair's newest message when its current run (see
        `_loop_stop`) holds `max_exchanges` messages; None when it holds fewer. "Newer"
        is the commit order (seq): two messages may share a millisecond."""
        human = max(history.last_from_human(name) for name in (one, other, BROADCAST))
        run = [
            row
            for pair in ((one, other), (one, BROADCAST), (other, one), (other, BROADCAST))
            for row in history.newest(*pair)
            if row[0] > human
        ]
        if len(run) < self.max_exchanges:
            return None
        run = sorted(run, reverse=True)[: self.max_exchanges]
        if len({sender for _, _, sender in run}) < 2:
            return None  # one way only: no reply loop (maxPerMinute paces a stream)
        later = now
        for _, created_at, _ in run:
            moment = _moment(created_at)
            if (later - moment).total_seconds() >= self.loop_cooldown:
                return None  # a quiet gap (or the cool-down since the last one) ends the run
            later = moment
        return run[0][0], _moment(run[0][1])

    def _over_rate(self, db: sqlite3.Connection, team: str, sender: str) -> float | None:
        """None when `sender` may send now; else seconds until it may."""
        if sender == SYSTEM_SENDER:
            return None
        # The sender's max_per_minute-th newest message within the window: an index range
        # of at most max_per_minute messages, whatever the history.
        row = db.execute(
            "SELECT created_at FROM messages WHERE team = ? AND sender = ? AND created_at >= ?"
            " ORDER BY created_at DESC LIMIT 1 OFFSET ?",
            (team, sender, utc_now(-RATE_WINDOW), self.max_per_minute - 1),
        ).fetchone()
        if row is None:
            return None
        oldest = _moment(row[0])
        return max(0.0, RATE_WINDOW - (datetime.now(UTC) - oldest).total_seconds())

    def _notice_once(self, db: sqlite3.Connection, team: str, to: str, body: str) -> bool:
        """Queue a notice from relay to `to`, unless the same one went out in the last minute."""
        seen = db.execute(
            "SELECT 1 FROM messages WHERE team = ? AND sender = ? AND recipient = ? AND body = ?"
            " AND created_at >= ?",
            (team, SYSTEM_SENDER, to, body, utc_now(-RATE_WINDOW)),
        ).fetchone()
        return seen is None and self._notice(db, team, to, body)

    def _notice(self, db: sqlite3.Connection, team: str, to: str, body: str) -> bool:
        """Queue a notice from relay to `to`; False when `to` is not a known agent."""
        if to == SYSTEM_SENDER or self._agent_row(db, team, to) is None:
            return False
        notice = new_message(team=team, sender=SYSTEM_SENDER, recipient=to, body=body, notice=True)
        self._insert(db, notice, [to])
        return True

    def _ring_on_commit(self, db: sqlite3.Connection, team: str, names: Sequence[str]) -> None:
        """Poke the doorbells of `names`' live sessions once this write transaction commits
        (their addresses read in it: no second transaction)."""
        if self.doorbell and names:
            self._rings.addresses += [row[2] for row in _sessions(db, team, names)]

    def _hand_at_send(
        self, db: sqlite3.Connection, message: Message, names: Sequence[str]
    ) -> dict[str, tuple[str, str]]:
        """Ring the live sessions of `names` once this transaction commits, and choose
        those that get `message` handed at the send (those that have nothing else waiting
        or handed): their pokes carry it (see the module docstring). Returns, for each of
        those recipients, the session id and the time, for `_insert`."""
        handed: dict[str, tuple[str, str]] = {}
        if not self.doorbell:
            return handed
        now = utc_now()
        for name, session_id, address, key, busy in _sessions(db, message.team, names):
            self._rings.addresses.append(address)
            if busy or not session_id or key is None:
                continue
            delivery = Delivery(message=message, recipient=name, state="handed", handed_at=now)
            carried = HandedAtSend(session_id=session_id, key=key, delivery=delivery)
            datagram = _CARRIED.encode(carried)
            if len(datagram) > CARRY_LIMIT:
                continue  # a long body goes by the mailbox alone
            handed[name] = (session_id, now)
            self._rings.carrying[address] = datagram
            self._rings.handed[address] = (message.team, name, message.id, session_id)
        return handed

    # -- receiving ---------------------------------------------------------------------

    def claim(
        self,
        name: str,
        *,
        team: str,
        session_id: str,
        limit: int = 100,
        wait: bool = True,
    ) -> list[Delivery]:
        """Hand `name`'s waiting mail to a session, oldest first.

        Waiting: queued, or handed to another session that never acknowledged it (that
        session died). Claiming counts no attempt: an attempt is counted only when the
        message actually reaches the agent (`typed`, or `ack(..., attempt=True)`), so a
        session that dies with a backlog it never typed costs that backlog nothing. A
        delivery that reached the agent `max_attempts` times without an acknowledgement
        is dead instead, and its sender is told. Mail already handed to this session is
        never handed again (until `release`d).
        """
        now = utc_now()

        def work(db: sqlite3.Connection) -> tuple[list[Delivery], set[str]]:
            rows = _claimable(db, team, name, session_id, limit)
            handed: list[Delivery] = []
            told: set[str] = set()
            for row in rows:
                delivery, seq = _delivery(row[:-1]), row[-1]
                if delivery.attempts >= self.max_attempts:
                    reason = f"handed out {delivery.attempts} times without an acknowledgement"
                    db.execute(
                        "UPDATE deliveries SET state = 'dead', reason = ? WHERE team = ?"
                        " AND recipient = ? AND seq = ?",
                        (reason, team, name, seq),
                    )
                    sender = delivery.message.sender
                    self._notice(
                        db,
                        team,
                        sender,
                        f"Your message to {name} [{delivery.message.short_id}] could not be "
                        f"delivered: {reason}.",
                    )
                    told.add(sender)
                    continue
                db.execute(
                    "UPDATE deliveries SET state = 'handed', session_id = ?, handed_at = ?"
                    " WHERE team = ? AND recipient = ? AND seq = ?",
                    (session_id, now, team, name, seq),
                )
                delivery.state, delivery.handed_at = "handed", now
                handed.append(delivery)
            self._ring_on_commit(db, team, sorted(told))
            return handed, told

        # Not synced: a hand-out undone by a power cut is handed out again (the dead
        # notices it may queue go with it, consistently).
        handed, _ = self._write(work, durable=False, wait=wait)
        return handed

    def waiting(
        self, name: str, *, team: str, session_id: str, limit: int = 100, wait: bool = True
    ) -> list[Delivery]:
        """What `claim` would take for this session now, oldest first, read without the
        write lock (in WAL mode a reader never waits for a writer) and without handing
        anything out: so a session can prepare its mail while the claim waits its turn.
        It includes what `claim` will mark dead instead (`attempts` at `max_attempts`),
        so that a full list means more may wait. `wait=False`: MailboxBusy at once when
        another thread of this process is using the mailbox."""
        return self._read(
            lambda db: [
                _delivery(row[:-1]) for row in _claimable(db, team, name, session_id, limit)
            ],
            wait=wait,
        )

    def typed(self, message_id: str, recipient: str, *, team: str, session_id: str) -> bool:
        """The session typed the message into the agent (its Enter written): count the
        attempt. False when it is no longer handed to that session."""

        def work(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "UPDATE deliveries SET attempts = attempts + 1, handed_at = ?"
                " WHERE team = ? AND recipient = ? AND state = 'handed' AND session_id = ?"
                " AND seq = (SELECT seq FROM messages WHERE id = ? AND team = ?)",
                (utc_now(), team, recipient, session_id, message_id, team),
            )
            return cursor.rowcount > 0

        # Not synced: a count undone by a power cut means one more try, never a loss.
        return self._write(work, durable=False)

    def release(self, name: str, message_ids: Sequence[str], *, team: str, session_id: str) -> int:
        """Give back mail claimed by a session that never reached the agent (the session
        ends cleanly with a backlog): queued again, for the agent's next session. Returns
        how many were released."""
        if not message_ids:
            return 0

        def work(db: sqlite3.Connection) -> int:
            released = 0
            for message_id in message_ids:
                cursor = db.execute(
                    "UPDATE deliveries SET state = 'queued', session_id = NULL, handed_at = NULL"
                    " WHERE team = ? AND recipient = ? AND state = 'handed' AND session_id = ?"
                    " AND seq = (SELECT seq FROM messages WHERE id = ? AND team = ?)",
                    (team, name, session_id, message_id, team),
                )
                released += cursor.rowcount
            return released

        return self._write(work, durable=False)

    def ack(
        self,
        message_id: str,
        recipient: str,
        *,
        team: str,
        evidence: str,
        attempt: bool = False,
    ) -> bool:
        """The recipient took the message in; False if it was not handed out (already acked).

        `attempt`: the message reached the agent only now, with this evidence (returned
        in a host's hook answer, by an MCP tool, by the waiter): count the attempt too.
        """
        return self._finish(
            message_id, recipient, team, "acked", evidence=evidence, attempt=attempt
        )

    def deny(self, message_id: str, recipient: str, *, team: str, reason: str) -> bool:
        """A MessageReceived hook refused the message: drop it and tell the sender."""
        return self._finish(message_id, recipient, team, "denied", reason=reason)

    def _finish(
        self,
        message_id: str,
        recipient: str,
        team: str,
        state: DeliveryState,
        *,
        evidence: str | None = None,
        reason: str | None = None,
        attempt: bool = False,
    ) -> bool:
        def work(db: sqlite3.Connection) -> str | None:
            row = db.execute(
                "SELECT seq, sender FROM messages WHERE id = ? AND team = ?", (message_id, team)
            ).fetchone()
            if row is None:
                return None
            cursor = db.execute(
                "UPDATE deliveries SET state = ?, acked_at = ?, evidence = ?, reason = ?,"
                " attempts = attempts + ? WHERE team = ? AND recipient = ? AND seq = ?"
                " AND state IN ('queued', 'handed')",
                (state, utc_now(), evidence, reason, int(attempt), team, recipient, row[0]),
            )
            if cursor.rowcount == 0:
                return None
            if state == "denied":
                self._notice(
                    db,
                    team,
                    row[1],
                    f"Your message to {recipient} [{short_id(message_id)}] was refused: "
                    f"{reason or 'a MessageReceived hook denied it'}.",
                )
                self._ring_on_commit(db, team, [row[1]])
                return str(row[1])
            return ""

        told = self._write(work, durable=state != "acked")  # a lost ack means redelivery
        return told is not None

    # -- reading -----------------------------------------------------------------------

    def inbox(
        self,
        name: str,
        *,
        team: str,
        states: Sequence[DeliveryState] | None = None,
        limit: int = 200,
    ) -> builtins.list[Delivery]:
        """`name`'s deliveries in the given states (default: all), oldest first."""

        def work(db: sqlite3.Connection) -> builtins.list[Delivery]:
            where, parameters = "d.team = ? AND d.recipient = ?", [team, name]
            if states:
                where += f" AND d.state IN ({', '.join('?' * len(states))})"
                parameters.extend(states)
            rows = db.execute(
                f"SELECT {_DELIVERY_COLUMNS} FROM deliveries d JOIN messages m ON m.seq = d.seq"
                f" WHERE {where} ORDER BY d.seq DESC LIMIT ?",
                (*parameters, limit),
            ).fetchall()
            return [_delivery(row) for row in reversed(rows)]

        return self._read(work)

    def delivery(self, message_id: str, recipient: str, *, team: str) -> Delivery | None:
        """One delivery, or None."""
        row = self._read(
            lambda db: db.execute(
                f"SELECT {_DELIVERY_COLUMNS} FROM deliveries d JOIN messages m ON m.seq = d.seq"
                " WHERE m.id = ? AND d.team = ? AND d.recipient = ?",
                (message_id, team, recipient),
            ).fetchone()
        )
        return _delivery(row) if row is not None else None

    def deliveries(
        self, team: str, keys: Iterable[tuple[int, str]]
    ) -> dict[int, builtins.list[Delivery]]:
        """The deliveries that `keys` name, each (seq, recipient): a message's (by its
        `Found.seq`) to that recipient, or with recipient `*` (a broadcast's) to each of
        its recipients. By seq, each message's in recipient order; what does not exist is
        left out. One index look-up a delivery, whatever the history."""
        wanted = set(keys)

        def work(db: sqlite3.Connection) -> dict[int, builtins.list[Delivery]]:
            pairs = {(name, seq) for seq, name in wanted if name != BROADCAST}
            broadcasts = {seq for seq, name in wanted if name == BROADCAST}
            if broadcasts:
                names = [row[0] for row in db.execute(_RECIPIENTS, (team,))]
                pairs.update((name, seq) for seq in broadcasts for name in names)
            found: dict[int, builtins.list[Delivery]] = {}
            for row in db.execute(_DELIVERIES_OF, (team, json.dumps(sorted(pairs)))):
                found.setdefault(int(row[0]), []).append(_delivery(row[1:]))
            return found

        return self._read(work)

    def history(
        self, *, team: str, thread: str | None = None, limit: int = 50
    ) -> builtins.list[Message]:
        """The team's messages (of one thread), the newest `limit`, oldest first."""
        found = self.search(team, HistoryQuery(thread=thread), limit=limit)
        return [item.message for item in found]

    def search(
        self, team: str, query: HistoryQuery, *, limit: int = 50, after: int | None = None
    ) -> builtins.list[Found]:
        """The team's messages that `query` selects, oldest first: the newest `limit`, or
        with `after` (a seq) the first `limit` stored after it. Its words are looked up
        in the full-text index, never read as FTS5 syntax (`match_expression`)."""
        conditions = ["m.team = ?"]
        values: list[object] = [team]
        for column, value in (
            ("m.sender = ?", query.sender),
            ("m.recipient = ?", query.recipient),
            ("m.thread = ?", query.thread),
            ("m.created_at >= ?", query.since),
            ("m.created_at < ?", query.until),
        ):
            if value is not None:
                conditions.append(column)
                values.append(value)
        if query.text is not None:
            # The index's rowids in order (FTS5 walks them either way), each joined to its
            # message by primary key: the newest matches come first, with no sort.
            source, order = "messages_text t JOIN messages m ON m.seq = t.rowid", "t.rowid"
            conditions.insert(0, "messages_text MATCH ?")
            values.insert(0, match_expression(query.text))
        else:
            source, order = "messages m", "m.seq"
        if after is not None:
            conditions.append(f"{order} > ?")
            values.append(after)
        direction = "ASC" if after is not None else "DESC"
        sql = (
            f"SELECT m.seq, {', '.join(f'm.{name}' for name in _MESSAGE_FIELDS)} FROM {source}"
            f" WHERE {' AND '.join(conditions)} ORDER BY {order} {direction} LIMIT ?"
        )
        rows = self._read(lambda db: db.execute(sql, (*values, limit)).fetchall())
        if after is None:
            rows.reverse()
        return [Found(seq=row[0], message=_message(row[1:])) for row in rows]

    def newest_seq(self, team: str) -> int:
        """The seq of the team's newest message; 0 when it has none."""
        row = self._read(
            lambda db: db.execute(
                "SELECT seq FROM messages WHERE team = ? ORDER BY seq DESC LIMIT 1", (team,)
            ).fetchone()
        )
        return int(row[0]) if row is not None else 0


class _PairHistory:
    """What the loop guard reads for one send, each read once (a broadcast checks a pair
    per recipient, and every pair includes the sender): index seeks only, whatever the
    history."""

    def __init__(self, db: sqlite3.Connection, team: str, limit: int) -> None:
        self._db, self._team, self._limit = db, team, limit
        self._newest: dict[tuple[str, str], list[tuple[int, str, str]]] = {}
        self._from_human: dict[str, int] = {}

    def newest(self, sender: str, recipient: str) -> list[tuple[int, str, str]]:
        """(seq, created_at, sender) of the newest `limit` messages `sender` sent `recipient`."""
        key = (sender, recipient)
        if key not in self._newest:
            self._newest[key] = self._db.execute(
                "SELECT seq, created_at, sender FROM messages WHERE team = ? AND sender = ?"
                " AND recipient = ? ORDER BY seq DESC LIMIT ?",
                (self._team, sender, recipient, self._limit),
            ).fetchall()
        return self._newest[key]

    def last_from_human(self, recipient: str) -> int:
        """The seq of the last message a human sent `recipient`; 0 if none."""
        if recipient not in self._from_human:
            # Per human an index seek (sender, recipient): humans are few, their messages too.
            self._from_human[recipient] = (
                self._db.execute(
                    "SELECT MAX(seq) FROM messages WHERE team = ?1 AND recipient = ?2 AND sender IN"
                    " (SELECT name FROM agents WHERE team = ?1 AND kind = 'human')",
                    (self._team, recipient),
                ).fetchone()[0]
                or 0
            )
        return self._from_human[recipient]


def _replied(db: sqlite3.Connection, team: str, sender: str, names: Sequence[str]) -> set[str]:
    """Which of `names` ever sent a message to `sender` or to everyone."""
    return {
        row[0]
        for row in db.execute(
            "SELECT j.value FROM json_each(?3) AS j WHERE EXISTS (SELECT 1 FROM messages"
            " WHERE team = ?1 AND sender = j.value AND recipient IN (?2, '*'))",
            (team, sender, json.dumps(list(names))),
        )
    }


def _claimable(
    db: sqlite3.Connection, team: str, name: str, session_id: str, limit: int
) -> builtins.list[Any]:
    """The rows (_DELIVERY_COLUMNS and seq) of what `name`'s session may claim, oldest
    first: its queued mail, and mail handed to another session of it that died."""
    rows = db.execute(_CLAIMABLE_QUEUED, (team, name, limit)).fetchall()
    elsewhere = sorted(
        row[0] for row in db.execute(_CLAIMABLE_ELSEWHERE, (team, name, session_id))
    )[:limit]
    if elsewhere:  # a session of this agent died with mail handed to it
        rows += db.execute(
            f"SELECT {_DELIVERY_COLUMNS}, d.seq FROM deliveries d JOIN messages m"
            " ON m.seq = d.seq WHERE d.team = ? AND d.recipient = ?"
            f" AND d.seq IN ({', '.join('?' * len(elsewhere))})",
            (team, name, *elsewhere),
        ).fetchall()
        rows = sorted(rows, key=lambda row: int(row[-1]))[:limit]
    return rows


class _Rings:
    """The doorbells a write transaction rings once it commits: every address once per
    poke, what the pokes of deliveries handed at the send carry, and (team, recipient,
    message id, session) of those deliveries, taken back when their poke does not go in."""

    def __init__(self) -> None:
        self.addresses: list[bytes] = []
        self.carrying: dict[bytes, bytes] = {}
        self.handed: dict[bytes, tuple[str, str, str, str]] = {}


_CARRIED = msgspec.json.Encoder()


def _sessions(
    db: sqlite3.Connection, team: str, names: Sequence[str]
) -> list[tuple[str, str | None, bytes, str | None, bool]]:
    """The live sessions of `names` that have a doorbell (one per agent): the name, the
    session id, the doorbell's address and key (None: it takes no delivery from a poke),
    and whether the agent has any delivery still waiting or handed."""
    wanted = list(dict.fromkeys(names))
    found: list[tuple[str, str | None, bytes, str | None, bool]] = []
    for start in range(0, len(wanted), 500):  # SQLite's bound-parameter limit
        chunk = wanted[start : start + 500]
        found += [
            (row[0], row[1], *parse_bell_record(bytes(row[2])), bool(row[3]))
            for row in db.execute(
                "SELECT name, session_id, bell, EXISTS (SELECT 1 FROM deliveries d"
                " INDEXED BY deliveries_by_state WHERE d.team = a.team AND d.recipient = a.name"
                " AND d.state IN ('queued', 'handed')) FROM agents a"
                " WHERE team = ? AND bell IS NOT NULL AND name IN"
                f" ({', '.join('?' * len(chunk))})",
                (team, *chunk),
            )
        ]
    return found


def _when_free(attempt: Callable[[], Result]) -> Result:
    """`attempt()`, tried again while the database is locked (SQLITE_BUSY), for up to
    BUSY_TIMEOUT.

    SQLite's own busy handler sleeps 1, 2, 5, 10, 15 ms... between tries: eight
    sessions claiming one broadcast, each holding the write lock for 0.1 ms, waited 1 to
    8 ms for it. Here the lock is tried again within 50 to 200 µs (with jitter, so that
    the waiters do not retry in step), and 5 ms apart once it has been held for long.
    """
    started: float | None = None
    wait = _BUSY_FIRST_WAIT
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY:
                raise
            now = time.monotonic()
            started = now if started is None else started
            waited = now - started
            if waited >= BUSY_TIMEOUT:
                raise
        time.sleep(min(wait * random.uniform(0.5, 1.0), BUSY_TIMEOUT - waited))
        wait = min(2 * wait, _BUSY_SHORT_WAIT if waited < _BUSY_QUEUE_SECONDS else _BUSY_LONG_WAIT)


def _moment(created_at: str) -> datetime:
    """A stored timestamp (`utc_now`'s form) as an aware datetime."""
    return datetime.strptime(created_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def _message(row: Sequence[Any]) -> Message:
    return Message(**dict(zip(_MESSAGE_FIELDS, row, strict=True)))


def _delivery(row: Sequence[Any]) -> Delivery:
    split = len(_MESSAGE_FIELDS)
    return Delivery(
        message=_message(row[:split]), **dict(zip(_DELIVERY_FIELDS, row[split:], strict=True))
    )


def _agent(row: Sequence[Any]) -> Agent:
    return Agent(**dict(zip(_AGENT_FIELDS, row, strict=True)))

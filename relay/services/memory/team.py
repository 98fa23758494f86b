"""Team memory: memories shared by every machine of a team through NATS JetStream.

Layout (spec/memory-team.md):

- one stream per team, `RELAY_MEMORY_<team>`, on `relay_memory.<team>.>` (file storage,
  kept until forgotten, a two-minute duplicate window keyed on `Nats-Msg-Id`);
- an event per memory id, on `relay_memory.<team>.<id>`: a save (the Memory as JSON with
  `"op": "save"`) or a forget (`{"op": "forget", "id", "team"}`). The stream keeps one
  message per subject, so a forget replaces its save and a machine that catches up
  reads each memory's last word only;
- each machine remembers, per stream, the sequence it has applied up to (a small SQLite
  file of its own, `state/memory-team.db`), and catches up from there with a short-lived
  consumer: the server keeps nothing per machine, and a machine that is gone leaves
  nothing behind on it;
- a save or forget is written locally and to an outbox in the same file first, then
  published; what could not be published waits in the outbox for the next save,
  forget or sync.

What arrives is hostile input: each event is bounded (size, UTF-8, nesting depth) before
it is parsed, decoded into a strict type (`decode_event`) and checked (`event_problem`);
one that fails in any way is skipped with a one-line problem naming the stream sequence,
the cursor moves past it, and the sync carries on. Who saved a memory cannot be known
from an event (any member of the team's account can publish any memory's subject), so
the agent it names is stored marked unverified. Search, list and get never touch the
network.

This module imports the NATS client; only code that shares memories imports it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import re
import secrets
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal, TypeVar

import anyio
import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js import api as js_api

from relay.config.model import NatsConfig
from relay.config.paths import private_dir, private_file, state_dir
from relay.services.memory.model import (
    ImportCounts,
    Memory,
    MemoryHit,
    MemoryService,
    MemoryStoreError,
    SavedMemory,
)
from relay.services.memory.sharing import (
    MAX_CONTENT_BYTES,
    SharedForget,
    SharedMemory,
    TeamMemoryError,
)
from relay.services.messaging.model import MessagingError, check_name
from relay.services.nats_connection import (
    UNREADABLE_HEADERS,
    describe,
    open_connection,
    without_secrets,
)
from relay.services.project import TRAVELLING_KEY

__all__ = [
    "DUPLICATE_WINDOW",
    "MAX_CLOCK_SKEW",
    "MAX_EVENT_BYTES",
    "MAX_EVENT_DEPTH",
    "UNVERIFIED",
    "MemoryEvent",
    "SyncReport",
    "TeamMemory",
    "TeamState",
    "UnreadableEvent",
    "decode_event",
    "event_problem",
    "event_subject",
    "memory_permissions",
    "memory_stream",
    "stream_subjects",
    "unverified",
]

DUPLICATE_WINDOW = 120.0
"""Seconds in which a second publish with the same `Nats-Msg-Id` is dropped by the server."""
MAX_EVENT_BYTES = 128 * 1024
"""Largest event the stream takes (its max_msg_size) and a receiver decodes."""
MAX_EVENT_DEPTH = 16
"""Deepest nesting of arrays and objects a receiver parses (an event needs 2)."""
MAX_CLOCK_SKEW = timedelta(minutes=10)
"""How far after the server stored an event its `created_at` may be (clocks differ)."""
UNVERIFIED = " (unverified)"
"""Appended to the agent a received memory names: nothing vouches for it."""
MAX_TAGS = 64
MAX_NAME = 128
"""Longest tag or agent name an event may carry."""
REQUEST_TIMEOUT = 5.0
"""Seconds one JetStream API request may take."""
BATCH = 256
"""Events asked for at once while catching up."""
BATCH_BYTES = 32 * 1024 * 1024
"""Bytes a batch may take at the server's largest message size: fewer events are asked for
at once where messages may be larger, so the client never drops one as a slow consumer."""
PUBLISH_TIMEOUT = 3.0
"""Seconds a save or forget waits to share itself before answering "not yet shared"."""
SYNC_TIMEOUT = 10.0
"""Seconds `relay memory sync` may take."""
START_TIMEOUT = 2.0
"""Seconds the catch-up at the start of a session (or of `relay mcp`) may take."""
WRONG_LAST_SEQUENCE = 10071
"""JetStream's error for a publish whose expected last subject sequence is not the stream's."""

_ID = re.compile(r"[0-9a-f]{8}\Z")
_DATE = re.compile(r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z\Z", re.ASCII)
_STRUCTURE = re.compile(rb'[\\"\[\]{}]')
"""The bytes that open or close a string, an array or an object, and the escape."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

Result = TypeVar("Result")


class MemoryEvent(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """One event of a team's memory stream: a save carries the memory's fields, a forget
    only its id and team. Unknown fields are accepted (a newer relay may add some)."""

    op: Literal["save", "forget"]
    id: str
    team: str
    content: str | None = None
    tags: list[str] = msgspec.field(default_factory=list)
    agent: str | None = None
    project: str | None = None
    created_at: str | None = None

    @classmethod
    def save(cls, memory: Memory) -> MemoryEvent:
        """The save event of a team memory."""
        if memory.team is None:
            raise ValueError(f"memory {memory.id} is not a team memory")
        return cls(
            op="save",
            id=memory.id,
            team=memory.team,
            content=memory.content,
            tags=list(memory.tags),
            agent=memory.agent,
            project=memory.project,
            created_at=memory.created_at,
        )

    def memory(self, *, agent: str | None) -> Memory:
        """The memory a checked save event carries, saved by `agent`."""
        return Memory(
            id=self.id,
            content=self.content or "",
            tags=list(self.tags),
            agent=agent,
            project=self.project,
            created_at=self.created_at or "",
            team=self.team,
        )


_decode_event = msgspec.json.Decoder(MemoryEvent)
_encode = msgspec.json.Encoder()


class UnreadableEvent(Exception):
    """A received event that is not a memory event; `problem` says why, in one line."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


def decode_event(data: bytes) -> MemoryEvent:
    """Decode a received event, bounded before it is parsed: at most MAX_EVENT_BYTES, UTF-8,
    nested at most MAX_EVENT_DEPTH deep (UnreadableEvent otherwise, or for any failure of
    the parser: no event can raise anything else)."""
    if not data:
        raise UnreadableEvent("an empty event")
    if len(data) > MAX_EVENT_BYTES:
        raise UnreadableEvent(f"{len(data):,} bytes, more than {MAX_EVENT_BYTES:,}")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableEvent(
            f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    if _nested_deeper(data, MAX_EVENT_DEPTH):
        raise UnreadableEvent(f"arrays or objects nested more than {MAX_EVENT_DEPTH} deep")
    try:
        return _decode_event.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise UnreadableEvent(f"not a memory event: {exc}") from None
    except Exception as exc:  # the parser's own failure: still this event's problem
        raise UnreadableEvent(f"not a memory event: {type(exc).__name__}: {exc}") from None


def _nested_deeper(data: bytes, limit: int) -> bool:
    """Whether arrays and objects in JSON `data` nest more than `limit` deep; brackets in
    strings do not count. Looks only at the bytes that matter, once: linear in any input
    (msgspec recurses per level and would raise RecursionError first)."""
    if data.count(b"[") + data.count(b"{") <= limit:
        return False  # the common case, at C speed
    depth = 0
    in_string = False
    escaped = -1
    for match in _STRUCTURE.finditer(data):
        at = match.start()
        if at == escaped:
            continue
        byte = data[at]
        if in_string:
            if byte == 0x5C:  # backslash: the next byte is escaped
                escaped = at + 1
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in b"[{":
            depth += 1
            if depth > limit:
                return True
        elif byte in b"]}":
            depth -= 1
    return False


def _created(value: str) -> datetime | None:
    """`value` as a UTC time, if it is one in relay's form (`2025-06-01T09:30:00.000Z`)."""
    match = _DATE.match(value)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    fraction = match.group(7) or ""
    try:
        return datetime(
            year, month, day, hour, minute, second, int(fraction[:6].ljust(6, "0")), tzinfo=UTC
        )
    except ValueError:  # 2025-02-30, hour 24, year 0
        return None


def unverified(agent: str | None) -> str | None:
    """The name an event gives its agent, marked as unverified (once)."""
    if agent is None or agent.endswith(UNVERIFIED):
        return agent
    return agent + UNVERIFIED


class SyncReport(msgspec.Struct, kw_only=True):
    """What a sync did (`relay memory sync --json`)."""

    team: str
    stream: str
    saved: list[str] = msgspec.field(default_factory=list)
    """Ids of memories stored (new, or changed by another machine)."""
    forgotten: list[str] = msgspec.field(default_factory=list)
    """Ids of memories another machine forgot, deleted here."""
    unchanged: int = 0
    """Events that changed nothing here (already applied, or forgets of unknown ids)."""
    published: int = 0
    """Saves and forgets of this machine's outbox now shared."""
    waiting: int = 0
    """Saves and forgets still in the outbox (the server could not be reached)."""
    sequence: int = 0
    """The stream sequence this machine has applied up to."""
    problems: list[str] = msgspec.field(default_factory=list)
    """Events skipped, one line each: stream, sequence, what is wrong."""
    unreachable: str | None = None
    """Why the sync could not be done (nothing was pulled), or None."""


def memory_stream(team: str) -> str:
    """The team's memory stream."""
    return f"RELAY_MEMORY_{check_name(team, what='team name')}"


def stream_subjects(team: str) -> str:
    """The subjects of the team's memory stream."""
    return f"relay_memory.{team}.>"


def event_subject(team: str, memory_id: str) -> str:
    """The subject of every event about one memory (the stream keeps the last one)."""
    return f"relay_memory.{team}.{memory_id}"


def memory_permissions(team: str) -> dict[str, list[str]]:
    """What a NATS user needs to share team `team`'s memories (publish and subscribe
    `allow` lists; connect with the inbox prefix `_INBOX_memory_<team>`)."""
    stream = memory_stream(team)
    api = "$JS.API"
    return {
        "publish": [
            f"relay_memory.{team}.*",
            f"{api}.INFO",
            f"{api}.STREAM.INFO.{stream}",
            f"{api}.STREAM.CREATE.{stream}",
            # The catch-up consumer: only created with the stream's own filter.
            f"{api}.CONSUMER.CREATE.{stream}.*.{stream_subjects(team)}",
            f"{api}.CONSUMER.MSG.NEXT.{stream}.*",
            f"{api}.CONSUMER.DELETE.{stream}.*",
        ],
        "subscribe": [f"{memory_inbox(team)}.>"],
    }


def memory_inbox(team: str) -> str:
    """The reply-subject prefix of a team-memory connection."""
    return f"_INBOX_memory_{team}"


def event_problem(
    event: MemoryEvent, *, team: str, subject: str, stored_at: datetime | None = None
) -> str | None:
    """Why a received event must not be applied, or None. `stored_at`: when the server
    stored it (now if unknown); a save may not be created later than that, bar clock skew."""
    if not _ID.match(event.id):
        return f"id {event.id[:40]!r} is not 8 lowercase hex digits"
    if event.team != team:
        return f"it is for team {event.team[:64]!r}, this stream is team {team}'s"
    expected = event_subject(team, event.id)
    if subject != expected:
        return f"it arrived on {subject[:200]}, not {expected}"
    if event.project is not None and TRAVELLING_KEY.match(event.project) is None:
        # A path means nothing on another machine, and would let a teammate put a memory
        # in whatever folder of this machine it names.
        return f"its project {event.project[:80]!r} is not a project key shared by clones (git:…)"
    if event.op == "forget":
        return None
    content = event.content
    if content is None or not content.strip():
        return "a save without content"
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        return "its content is not valid Unicode"
    if size > MAX_CONTENT_BYTES:
        return f"its content is {size:,} bytes, more than {MAX_CONTENT_BYTES:,}"
    created = _created(event.created_at) if event.created_at is not None else None
    if created is None:
        return f"created_at {str(event.created_at)[:40]!r} is not an ISO 8601 UTC time"
    published = stored_at or datetime.now(UTC)
    if created > published + MAX_CLOCK_SKEW:
        return (
            f"created_at {event.created_at} is in the future: the server stored it at "
            f"{published:%Y-%m-%dT%H:%M:%SZ}"
        )
    if len(event.tags) > MAX_TAGS:
        return f"{len(event.tags)} tags, more than {MAX_TAGS}"
    for tag in event.tags:
        if not tag or len(tag) > MAX_NAME or _CONTROL.search(tag) or tag != tag.strip():
            return f"tag {tag[:40]!r} is not a tag"
    if event.agent is not None and (len(event.agent) > MAX_NAME or _CONTROL.search(event.agent)):
        return f"agent {event.agent[:40]!r} is not an agent name"
    return None


class _Pending(msgspec.Struct, kw_only=True, frozen=True):
    """One outbox entry."""

    number: int
    team: str
    memory_id: str
    op: str
    payload: bytes
    expect_new: bool
    """A new memory's first save: published only if its subject is empty, so a retry of a
    publish the server did store never brings back a memory another machine forgot since."""


_SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    number INTEGER PRIMARY KEY AUTOINCREMENT,
    team TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    op TEXT NOT NULL,
    payload BLOB NOT NULL,
    expect_new INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS cursor (
    stream TEXT PRIMARY KEY,
    created TEXT NOT NULL,
    sequence INTEGER NOT NULL
);
"""


class TeamState:
    """This machine's side of team memory, in `state/memory-team.db`: the outbox (saves
    and forgets not yet published) and, per stream, the sequence applied up to. Apart
    from the memory store so that team sharing never changes it."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path if path is not None else state_dir() / "memory-team.db"

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            private_dir(self.path.parent)
            private_file(self.path)
            connection = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise TeamMemoryError(f"{self.path}: cannot open: {exc}") from None
        try:
            connection.executescript(_SCHEMA)
            yield connection
        except sqlite3.Error as exc:
            raise TeamMemoryError(f"{self.path}: {exc}") from None
        finally:
            connection.close()

    def enqueue(self, event: MemoryEvent, *, expect_new: bool = False) -> None:
        """Put an event in the outbox."""
        with self._connect() as connection:
            connection.execute(
                "INSERT INTO outbox (team, memory_id, op, payload, expect_new, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (event.team, event.id, event.op, _encode.encode(event), expect_new, time.time()),
            )

    def pending(self, team: str) -> list[_Pending]:
        """The team's outbox, oldest first."""
        with self._connect() as connection:
            rows = connection.execute(
                "SELECT number, team, memory_id, op, payload, expect_new FROM outbox"
                " WHERE team = ? ORDER BY number",
                (team,),
            ).fetchall()
        return [
            _Pending(
                number=row[0],
                team=row[1],
                memory_id=row[2],
                op=row[3],
                payload=bytes(row[4]),
                expect_new=bool(row[5]),
            )
            for row in rows
        ]

    def done(self, number: int) -> None:
        """Remove an outbox entry (published, or no longer to be published)."""
        with self._connect() as connection:
            connection.execute("DELETE FROM outbox WHERE number = ?", (number,))

    def cursor(self, stream: str) -> tuple[str, int]:
        """The stream's creation time and the sequence applied up to ("", 0: never synced)."""
        with self._connect() as connection:
            row = connection.execute(
                "SELECT created, sequence FROM cursor WHERE stream = ?", (stream,)
            ).fetchone()
        return (row[0], row[1]) if row else ("", 0)

    def set_cursor(self, stream: str, created: str, sequence: int) -> None:
        """Remember that the stream (created at `created`) is applied up to `sequence`."""
        with self._connect() as connection:
            connection.execute(
                "INSERT INTO cursor (stream, created, sequence) VALUES (?, ?, ?)"
                " ON CONFLICT (stream) DO UPDATE SET created = excluded.created,"
                " sequence = excluded.sequence",
                (stream, created, sequence),
            )


def _sequence(msg: Msg) -> int:
    """An event's position in the stream (from its reply subject), 0 if unknown."""
    try:
        return int(msg.metadata.sequence.stream)
    except (nats.errors.Error, AttributeError, ValueError, IndexError):
        return 0


def _stored_at(msg: Msg) -> datetime | None:
    """When the server stored an event (from its reply subject), None if unknown."""
    try:
        stored = msg.metadata.timestamp
    except (nats.errors.Error, AttributeError, ValueError, IndexError, OverflowError):
        return None
    return stored if isinstance(stored, datetime) and stored.tzinfo is not None else None


class TeamMemory:
    """A MemoryService that shares team memories (spec/memory-team.md): it wraps the local
    store, which keeps everything and answers every read; a save or forget of a team
    memory is also published to the team's stream, and `sync` applies what other machines
    published. Each network operation opens a short connection of its own and is
    bounded in time; none happens on the search, list or get path."""

    def __init__(
        self,
        local: MemoryService,
        *,
        team: str,
        nats_config: NatsConfig,
        state: TeamState | None = None,
        publish_timeout: float = PUBLISH_TIMEOUT,
    ) -> None:
        self.local = local
        self.team = check_name(team, what="team name")
        self.nats_config = nats_config
        self.state = state or TeamState()
        self.publish_timeout = publish_timeout
        self.stream = memory_stream(team)
        self.where = without_secrets(nats_config.url)

    def __repr__(self) -> str:
        return f"TeamMemory({self.local!r}, team={self.team!r})"

    @property
    def semantic_notice(self) -> str | None:
        """The local store's note that search is by words only (SqliteMemory), or None."""
        notice = getattr(self.local, "semantic_notice", None)
        return notice if isinstance(notice, str) else None

    def close(self) -> None:
        """Close the local store."""
        close = getattr(self.local, "close", None)
        if close is not None:
            close()

    # -- local only ---------------------------------------------------------------------

    def add(
        self,
        content: str,
        *,
        tags: Sequence[str] = (),
        agent: str | None = None,
        project: str | None = None,
    ) -> Memory:
        """Save a memory of this machine (see MemoryService.add)."""
        return self.local.add(content, tags=tags, agent=agent, project=project)

    def search(
        self, query: str, *, project: str | None = None, limit: int = 10, explain: bool = False
    ) -> list[MemoryHit]:
        """Search the local store (team memories included): no network."""
        if explain:
            return self.local.search(query, project=project, limit=limit, explain=True)
        return self.local.search(query, project=project, limit=limit)

    def get(self, memory_id: str) -> Memory | None:
        """The memory with this id in the local store, or None."""
        return self.local.get(memory_id)

    def list(self, *, project: str | None = None, limit: int = 50) -> list[Memory]:
        """Memories of `project` and global ones (team memories included), newest first."""
        return self.local.list(project=project, limit=limit)

    def export(self) -> Iterator[Memory]:
        """Every memory of the local store, oldest first."""
        return self.local.export()

    def import_memories(self, memories: Iterable[Memory]) -> ImportCounts:
        """Import into the local store (nothing is published: an import is this machine's)."""
        return self.local.import_memories(memories)

    def move_project(self, old: Sequence[str], new: str) -> dict[str, int]:
        """Move the local store's memories of old project keys to `new` (see
        SqliteMemory.move_project); {} for a store that cannot."""
        move = getattr(self.local, "move_project", None)
        return {} if move is None else dict(move(old, new))

    # -- shared -------------------------------------------------------------------------

    def save(
        self,
        content: str,
        *,
        tags: Sequence[str] = (),
        agent: str | None = None,
        project: str | None = None,
        team: str | None = None,
    ) -> SavedMemory:
        """Save; with `team` (this machine's team) also share it: stored locally and in
        the outbox first, then published. Returns a SharedMemory for a team save."""
        if team is None:
            return self.local.save(content, tags=tags, agent=agent, project=project)
        if team != self.team:
            raise TeamMemoryError(f"this machine shares memories with team {self.team}, not {team}")
        size = len(content.encode("utf-8", "surrogatepass"))
        if size > MAX_CONTENT_BYTES:
            raise TeamMemoryError(
                f"too long to share: {size:,} bytes, a team memory has at most {MAX_CONTENT_BYTES:,}"
            )
        # The project's when its key travels (every clone on every machine has it), else global.
        shared_in = project if project is not None and TRAVELLING_KEY.match(project) else None
        saved = self.local.save(content, tags=tags, agent=agent, project=shared_in, team=team)
        memory = saved.memory
        if memory.team != self.team:  # an identical memory already shared with another team
            return SharedMemory(
                memory=memory,
                existing=saved.existing,
                problem=f"the same memory is team {memory.team}'s, not shared again",
            )
        self.state.enqueue(MemoryEvent.save(memory), expect_new=not saved.existing)
        problem = self.flush()
        return SharedMemory(
            memory=memory, existing=saved.existing, shared=problem is None, problem=problem
        )

    def delete(self, memory_id: str) -> bool:
        """Forget a memory; a memory of this machine's team is forgotten on every machine."""
        return self.forget(memory_id).forgotten

    def forget(self, memory_id: str) -> SharedForget:
        """Forget a memory and say whether the team heard of it (a team memory only)."""
        memory = self.local.get(memory_id)
        if memory is None or memory.team != self.team:
            team = memory.team if memory is not None else None
            return SharedForget(forgotten=self.local.delete(memory_id), team=team)
        self.state.enqueue(MemoryEvent(op="forget", id=memory_id, team=self.team))
        forgotten = self.local.delete(memory_id)
        problem = self.flush()
        return SharedForget(
            forgotten=forgotten, team=self.team, shared=problem is None, problem=problem
        )

    def flush(self, timeout: float | None = None) -> str | None:
        """Publish the outbox; None when it is empty now, else why not (one line)."""
        report = SyncReport(team=self.team, stream=self.stream)
        self._run(report, self._flush, timeout or self.publish_timeout)
        if report.unreachable is not None:
            return report.unreachable
        if report.waiting:
            return f"{report.waiting} saves or forgets not published yet"
        return None

    def sync(self, timeout: float = SYNC_TIMEOUT) -> SyncReport:
        """Publish the outbox, then apply every event of the team's stream this machine has
        not applied; never raises for the network (see `SyncReport.unreachable`)."""
        report = SyncReport(team=self.team, stream=self.stream)
        self._run(report, self._sync, timeout)
        return report

    # -- the network --------------------------------------------------------------------

    def _run(
        self,
        report: SyncReport,
        work: Callable[[Client, JetStreamContext, SyncReport], Awaitable[None]],
        timeout: float,
    ) -> None:
        """Connect, run `work` within `timeout` seconds, close; a failure is `report.unreachable`.
        On an event loop of its own (in a thread of its own when this thread runs one)."""

        async def bounded() -> None:
            nc: Client | None = None
            try:
                with anyio.fail_after(timeout):
                    nc = await open_connection(
                        self.nats_config,
                        name=f"relay memory of team {self.team}",
                        inbox=self.nats_config.inboxPrefix or memory_inbox(self.team),
                        connect_timeout=max(1, min(2, int(timeout))),
                    )
                    js = nc.jetstream(timeout=min(REQUEST_TIMEOUT, timeout))
                    await self._ensure_stream(js)
                    await work(nc, js, report)
            except TimeoutError:
                report.unreachable = f"{self.where}: timed out after {timeout:g} s"
            except MessagingError as exc:
                report.unreachable = str(exc)
            except (nats.errors.Error, OSError) as exc:
                report.unreachable = f"{self.where}: {describe(exc)}"
            finally:
                if nc is not None:
                    with (
                        anyio.CancelScope(shield=True),
                        anyio.move_on_after(1.0),
                        contextlib.suppress(Exception),
                    ):
                        await nc.close()
            if report.unreachable is not None:
                report.waiting = len(self.state.pending(self.team))

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            anyio.run(bounded, backend="asyncio")
            return
        # Called from a thread that runs an event loop: nats-py needs one of its own.
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(anyio.run, bounded).result()

    async def _call(self, what: str, operation: Callable[[], Awaitable[Result]]) -> Result:
        try:
            return await operation()
        except (TimeoutError, nats.errors.Error) as exc:
            raise MessagingError(f"{what}: {describe(exc)}", store=self.where) from exc

    async def _ensure_stream(self, js: JetStreamContext) -> None:
        """Create the team's memory stream unless it exists; check its subjects."""
        subjects = stream_subjects(self.team)
        try:
            info = await js.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            config = js_api.StreamConfig(
                name=self.stream,
                description=f"relay memories of team {self.team}",
                subjects=[subjects],
                retention=js_api.RetentionPolicy.LIMITS,
                storage=js_api.StorageType.FILE,
                max_msgs_per_subject=1,
                max_msg_size=MAX_EVENT_BYTES,
                duplicate_window=DUPLICATE_WINDOW,
                discard=js_api.DiscardPolicy.OLD,
            )
            info = await self._call(f"creating stream {self.stream}", lambda: js.add_stream(config))
        except (TimeoutError, nats.errors.Error) as exc:
            raise MessagingError(
                f"reading stream {self.stream}: {describe(exc)}", store=self.where
            ) from exc
        if subjects not in (info.config.subjects or []):
            raise MessagingError(
                f"stream {self.stream} exists with subjects {info.config.subjects}, not "
                f"{subjects}: another program uses that stream name",
                store=self.where,
            )

    async def _flush(self, nc: Client, js: JetStreamContext, report: SyncReport) -> None:
        """Publish the outbox in order, removing each entry once JetStream has stored it."""
        for entry in await anyio.to_thread.run_sync(self.state.pending, self.team):
            headers = {"Nats-Msg-Id": f"{entry.op}-{entry.memory_id}-{_digest(entry.payload)}"}
            if entry.op == "save":
                stored = await anyio.to_thread.run_sync(self.local.get, entry.memory_id)
                if stored is None or stored.team != self.team:
                    # Forgotten here since (by this machine or, through a sync, another).
                    await anyio.to_thread.run_sync(self.state.done, entry.number)
                    continue
                if entry.expect_new:
                    headers["Nats-Expected-Last-Subject-Sequence"] = "0"
            subject = event_subject(self.team, entry.memory_id)
            try:
                await js.publish(subject, entry.payload, stream=self.stream, headers=headers)
            except nats.js.errors.APIError as exc:
                if exc.err_code != WRONG_LAST_SEQUENCE:
                    raise MessagingError(
                        f"publishing to {subject}: {describe(exc)}", store=self.where
                    ) from exc
                # The subject has an event already: an earlier try of this very publish
                # that the server stored, or a forget since. Either way: not again.
            except (TimeoutError, nats.errors.Error) as exc:
                raise MessagingError(
                    f"publishing to {subject}: {describe(exc)}", store=self.where
                ) from exc
            await anyio.to_thread.run_sync(self.state.done, entry.number)
            report.published += 1

    async def _sync(self, nc: Client, js: JetStreamContext, report: SyncReport) -> None:
        await self._flush(nc, js, report)
        await self._pull(nc, js, report)

    async def _pull(self, nc: Client, js: JetStreamContext, report: SyncReport) -> None:
        """Apply the events after this machine's cursor, through a consumer that lives for
        this pull only (no acknowledgements: the cursor is the machine's own record)."""
        info = await self._call(
            f"reading stream {self.stream}", lambda: js.stream_info(self.stream)
        )
        created = info.created.isoformat() if info.created else ""
        known, sequence = await anyio.to_thread.run_sync(self.state.cursor, self.stream)
        last = info.state.last_seq or 0
        if known != created or sequence > last:
            # A stream this machine has not read, or one deleted and made again: from the
            # start (applying an event twice changes nothing).
            sequence = 0
        report.sequence = sequence
        if last <= sequence:
            await anyio.to_thread.run_sync(self.state.set_cursor, self.stream, created, sequence)
            return
        consumer = f"relay_memory_{secrets.token_hex(8)}"
        config = js_api.ConsumerConfig(
            name=consumer,
            description=f"relay: catching up on team {self.team}'s memories",
            filter_subject=stream_subjects(self.team),
            deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=sequence + 1,
            ack_policy=js_api.AckPolicy.NONE,
            inactive_threshold=30.0,  # the server removes it if this process dies
            mem_storage=True,
        )
        consumer_info = await self._call(
            f"creating a consumer of {self.stream}", lambda: js.add_consumer(self.stream, config)
        )
        pending = consumer_info.num_pending or 0
        inbox = nc.new_inbox()
        largest = max(nc.max_payload, MAX_EVENT_BYTES)
        most = max(1, min(BATCH, BATCH_BYTES // largest))
        subscription = await nc.subscribe(inbox, pending_bytes_limit=BATCH_BYTES + 2 * largest)
        next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{consumer}"
        applied = sequence
        try:
            taken = 0
            while taken < pending:
                batch = min(most, pending - taken)
                request = {"batch": batch, "expires": int(2e9)}
                await nc.publish(next_subject, _encode.encode(request), reply=inbox)
                received = 0
                while received < batch:
                    msg = await subscription.next_msg(timeout=3.0)
                    if msg.subject == inbox:
                        # The server's word on the request, not an event: only the server
                        # can send on this inbox (a status header on an event is the
                        # publisher's, and is read as part of that event).
                        if (msg.headers or {}).get(js_api.Header.STATUS.value) == "100":
                            continue
                        break  # the request is over (no more events, or expired)
                    received += 1
                    at = _sequence(msg) or sequence + 1
                    await anyio.to_thread.run_sync(self._apply, msg, at, report)
                    sequence = max(sequence, at)
                taken += received
                await anyio.to_thread.run_sync(
                    self.state.set_cursor, self.stream, created, sequence
                )
                applied = sequence
                if received == 0:
                    break  # fewer than counted: some were replaced meanwhile
        except nats.errors.TimeoutError:
            pass  # what was applied is in the cursor; the next sync goes on from there
        finally:
            report.sequence = sequence
            if sequence > applied:  # a batch cut short: what of it was applied stays applied
                with contextlib.suppress(TeamMemoryError):
                    await anyio.to_thread.run_sync(
                        self.state.set_cursor, self.stream, created, sequence
                    )
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
            with contextlib.suppress(Exception):
                await js.delete_consumer(self.stream, consumer)

    def _apply(self, msg: Msg, sequence: int, report: SyncReport) -> None:
        """Apply one received event to the local store, or note why it was skipped. Only
        the local store failing (MemoryStoreError) stops the sync: nothing an event holds
        can, so the cursor always moves past it."""
        where = f"{self.stream} #{sequence}"
        try:
            problem = self._store(msg, report)
        except MemoryStoreError:
            raise
        except Exception as exc:  # a fault of relay's own on this event: skip it, say what
            problem = f"cannot be applied: {type(exc).__name__}: {exc}"
        if problem is not None:
            report.problems.append(f"{where}: skipped: {problem}")

    def _store(self, msg: Msg, report: SyncReport) -> str | None:
        """Apply one received event; why it is not applied, or None."""
        if msg.headers is not None and UNREADABLE_HEADERS in msg.headers:
            return "its NATS headers cannot be read"
        try:
            event = decode_event(msg.data)
        except UnreadableEvent as exc:
            return exc.problem
        problem = event_problem(
            event, team=self.team, subject=msg.subject, stored_at=_stored_at(msg)
        )
        if problem is not None:
            return problem
        stored = self.local.get(event.id)
        if stored is not None and stored.team != self.team:
            # Never let the team overwrite or delete what is this machine's own.
            return f"id {event.id} is a memory of this machine that is not team {self.team}'s"
        if event.op == "forget":
            if stored is not None and self.local.delete(event.id):
                report.forgotten.append(event.id)
            else:
                report.unchanged += 1
            return None
        # Who saved it: as this machine knows it (its own save, or the first event it
        # applied), else the event's word for it, marked, since anyone in the team's
        # account can publish any memory's subject.
        agent = stored.agent if stored is not None else unverified(event.agent)
        counts = self.local.import_memories([event.memory(agent=agent)])
        if counts.added or counts.updated:
            report.saved.append(event.id)
        else:
            report.unchanged += 1
        return None


def _digest(payload: bytes) -> str:
    """A short digest of an event's payload, part of its Nats-Msg-Id: a retried publish is
    dropped by the server, a changed memory (new tags) is not."""
    return hashlib.blake2b(payload, digest_size=6).hexdigest()

"""The team's statuses across machines: a StatusBoard on two NATS JetStream key-value
buckets per team (spec/fleet.md).

- `relay_fleet_<team>`, the roster: one key per agent holding its last published
  `AgentStatus`, kept until `remove` (no TTL), so an agent never vanishes from the
  listing when its machine dies;
- `relay_alive_<team>`, the heartbeats: one key per agent, written on every publish and
  every HEARTBEAT_INTERVAL seconds by the board that published the agent's last live
  state, for as long as that board is open; the bucket's TTL (HEARTBEAT_TTL) makes a key
  vanish when its heartbeats stop.

A reader lists both buckets' keys (the stream's per-subject state: nats-server 2.9 sends
no event when a key expires) and reads each value. An agent whose last state is live
(not exited or stopped) and that has no heartbeat reads `lost`. A value another machine
published that relay could not have written (not JSON, too big, wrong types, another
name than its key's, another team's) is skipped and noted once. Every network step is
bounded: a server that is down is a MessagingError in seconds for a reader, and for a
session a publish that fails in seconds and heartbeats that keep retrying, noted.

This module imports the NATS client; only code that uses the nats transport imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.kv import KeyValue

from relay.config.model import NatsConfig
from relay.fleet.model import AgentStatus, StatusBoard
from relay.protocol.display import visible
from relay.services.messaging.model import NAME_PATTERN, MessagingError, check_name, utc_now
from relay.services.messaging.nats import NatsPermissions, inbox_prefix
from relay.services.nats_connection import describe, open_connection, without_secrets

__all__ = [
    "HEARTBEAT_INTERVAL",
    "HEARTBEAT_TTL",
    "Heartbeat",
    "NatsBoard",
    "NotAllowedError",
    "board_permissions",
    "heartbeat_bucket",
    "open_nats_board",
    "status_bucket",
]

HEARTBEAT_TTL = 8.0
"""Seconds a heartbeat lives: the TTL of `relay_alive_<team>`, set by whichever machine
creates the bucket. With the server's expiry sweep, a dead machine's agents read lost
within 10 s."""
HEARTBEAT_INTERVAL = 2.0
"""Seconds between two heartbeats of an agent (a few per TTL: one lost heartbeat is no loss)."""
REQUEST_TIMEOUT = 2.0
"""Seconds one JetStream request may take."""
OPEN_TIMEOUT = 12.0
"""Seconds connecting and opening the buckets may take in all (two tries of each server
fit in it, at the default connect timeout)."""
READ_TIMEOUT = 5.0
"""Seconds reading a team's statuses may take."""
PUBLISH_TIMEOUT = 3.0
"""Seconds publishing one status may take."""
MAX_STATUS_BYTES = 16 * 1024
"""A status value is at most this big (the roster bucket's limit; a reader skips a bigger one)."""
MAX_HEARTBEAT_BYTES = 1024
LAST_LINE_CHARACTERS = 200
"""`AgentStatus.last_line` is cut to this many characters (model.py)."""
ENDED_STATES = frozenset({"exited", "stopped"})
"""States an agent keeps when its heartbeats stop (it ended as it said)."""
NOT_BEATING = ENDED_STATES | {"lost"}
"""States that no heartbeat keeps alive."""
READERS = 64
"""Values read at once."""
PROBLEMS_KEPT = 100
NOTED_KEPT = 10_000
"""Problems remembered as said (a machine that publishes junk all day is not a leak)."""
LOST_WITHIN = 10.0
"""What a dead machine's agents reading lost within is promised to be (spec/fleet.md)."""

_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")
_DENIED = re.compile(r'permissions violation for publish to "([^"]*)"', re.IGNORECASE)

Result = TypeVar("Result")


class NotAllowedError(MessagingError):
    """The server refused a publish: the NATS user may not write that agent's status."""

    def __init__(self, message: str, *, store: str, refusal: str) -> None:
        super().__init__(message, store=store)
        self.refusal = refusal
        """The server's words."""


class Heartbeat(msgspec.Struct, kw_only=True, frozen=True):
    """The value of an agent's key in `relay_alive_<team>`: who beats, from where, when."""

    team: str
    name: str
    at: str
    """When it was written (ISO 8601 UTC, the writer's clock)."""
    machine: str
    pid: int | None = None


_decode_status = msgspec.json.Decoder(AgentStatus)
_decode_heartbeat = msgspec.json.Decoder(Heartbeat)


def status_bucket(team: str) -> str:
    """The KV bucket of the team's last published statuses (the roster; no TTL)."""
    return f"relay_fleet_{check_name(team, what='team name')}"


def heartbeat_bucket(team: str) -> str:
    """The KV bucket of the team's heartbeats (its TTL makes a silent agent's key vanish)."""
    return f"relay_alive_{check_name(team, what='team name')}"


def board_permissions(team: str, name: str, agents: Sequence[str] = ()) -> NatsPermissions:
    """What the NATS user `name` needs to read the whole team's statuses and publish those
    of `agents` (default: its own), connecting with `open_nats_board(..., name=name)`. For
    an agent, add it to `agent_permissions(team, name)`; a machine's supervisor publishes
    for every agent it runs."""
    publish: list[str] = []
    for bucket in (status_bucket(team), heartbeat_bucket(team)):
        stream = f"KV_{bucket}"
        publish += [
            f"$JS.API.STREAM.INFO.{stream}",
            f"$JS.API.STREAM.CREATE.{stream}",
            f"$JS.API.DIRECT.GET.{stream}",
            f"$JS.API.DIRECT.GET.{stream}.>",
            f"$JS.API.STREAM.MSG.GET.{stream}",
        ]
        publish += [f"$KV.{bucket}.{check_name(agent)}" for agent in agents or [name]]
    return NatsPermissions(publish=publish, subscribe=[f"{inbox_prefix(team, name)}.>"])


def _is_timestamp(text: str | None) -> bool:
    return text is None or _TIMESTAMP.match(text) is not None


def _status_problem(status: AgentStatus, team: str, key: str) -> str | None:
    """Why a decoded status could not have been written by relay for `key`, or None."""
    if status.team != team:
        return f"claims team {status.team[:70]!r}"
    if status.name != key:
        return f"names agent {status.name[:70]!r}, not its key"
    for field in ("since", "heartbeat", "started"):
        value = getattr(status, field)
        if not _is_timestamp(value):
            return f"{field} {value[:40]!r} is not a relay timestamp"
    return None


class NatsBoard:
    """The statuses of one team's agents in NATS, with heartbeats (a StatusBoard). Made
    by `open_nats_board`, which runs its heartbeats while it is open."""

    def __init__(
        self,
        nc: Client,
        *,
        team: str,
        where: str,
        ttl: float = HEARTBEAT_TTL,
        interval: float = HEARTBEAT_INTERVAL,
        on_problem: Callable[[str], None] | None = None,
    ) -> None:
        self.nc = nc
        self.team = check_name(team, what="team name")
        self.where = where
        self.ttl = ttl
        """The heartbeats' TTL asked for when this board creates the bucket."""
        self.interval = interval
        """Seconds between heartbeats (shortened to a third of an existing bucket's TTL)."""
        self.on_problem = on_problem
        self.problems: list[str] = []
        """What went wrong without stopping anything, each said once; newest last."""
        self.js: JetStreamContext = nc.jetstream(timeout=REQUEST_TIMEOUT)
        self.status_bucket = status_bucket(team)
        self.heartbeat_bucket = heartbeat_bucket(team)
        self._statuses: KeyValue | None = None
        self._heartbeats: KeyValue | None = None
        self._beating: dict[str, Heartbeat] = {}
        """The agents this board keeps alive (their last published state is live)."""
        self._noted: dict[str, None] = {}
        self._failing = False
        self._waiters: list[tuple[set[str], asyncio.Future[str]]] = []

    # -- problems ----------------------------------------------------------------------

    def note(self, problem: str, *, key: str | None = None) -> None:
        """Record `problem` (once per `key`, by default its text) and pass it on."""
        key = problem if key is None else key
        if key in self._noted:
            return
        self._noted[key] = None
        if len(self._noted) > NOTED_KEPT:
            del self._noted[next(iter(self._noted))]
        # Foreign text (a key, a value's fields, a server's words) made inert for a terminal.
        problem = visible(problem, one_line=True)
        self.problems.append(problem)
        del self.problems[:-PROBLEMS_KEPT]
        if self.on_problem is not None:
            self.on_problem(problem)

    async def on_error(self, exc: Exception) -> None:
        """The connection's asynchronous errors. A refused publish ends the request it
        belongs to at once (the server says so apart from the request, which would
        otherwise wait for its timeout); others are noted once."""
        text = str(exc)
        denied = _DENIED.search(text)
        if denied is not None:
            # nats-py lowercases the server's error text, subject included.
            subject = denied.group(1).lower()
            for subjects, waiter in self._waiters:
                if subject in subjects and not waiter.done():
                    waiter.set_result(text)
            self.note(f"{self.where}: {text}")
        elif not isinstance(exc, nats.errors.ConnectionClosedError | OSError):
            self.note(f"{self.where}: {describe(exc)}")

    def _error(self, message: str) -> MessagingError:
        return MessagingError(message, store=self.where)

    async def _call(
        self,
        what: str,
        operation: Callable[[], Awaitable[Result]],
        *,
        timeout: float = REQUEST_TIMEOUT,
        subjects: Sequence[str] = (),
    ) -> Result:
        """Run one NATS operation within `timeout` seconds, ended at once when the server
        refuses a publish to one of `subjects`; MessagingError saying what."""
        waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        entry = ({subject.lower() for subject in subjects}, waiter)
        self._waiters.append(entry)
        task = asyncio.ensure_future(operation())
        try:
            racing: set[asyncio.Future[Any]] = {task, waiter}
            done, _ = await asyncio.wait(
                racing, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if task in done:
                try:
                    return task.result()
                except MessagingError:
                    raise
                except Exception as exc:
                    raise self._error(f"{what}: {describe(exc)}") from exc
            if waiter.done():
                refusal = waiter.result()
                raise NotAllowedError(
                    f"{what}: not allowed: {refusal}", store=self.where, refusal=refusal
                )
            raise self._error(f"{what}: timed out after {timeout:g} s")
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            self._waiters.remove(entry)

    def _check_team(self, team: str) -> None:
        if team != self.team:
            raise self._error(f"this status board is team {self.team}'s, not team {team[:70]!r}'s")

    # -- buckets -----------------------------------------------------------------------

    async def open(self) -> None:
        """Open (or create) the team's two buckets."""
        self._statuses = await self._bucket(
            self.status_bucket, ttl=None, max_value=MAX_STATUS_BYTES, purpose="statuses"
        )
        self._heartbeats = await self._bucket(
            self.heartbeat_bucket, ttl=self.ttl, max_value=MAX_HEARTBEAT_BYTES, purpose="heartbeats"
        )

    async def _bucket(
        self, bucket: str, *, ttl: float | None, max_value: int, purpose: str
    ) -> KeyValue:
        stream = f"KV_{bucket}"
        js = self.js
        what = f"bucket {bucket}"
        info_subject = f"$JS.API.STREAM.INFO.{stream}"
        try:
            info = await self._call(
                f"reading {what}", lambda: js.stream_info(stream), subjects=[info_subject]
            )
        except MessagingError as exc:
            if not isinstance(exc.__cause__, nats.js.errors.NotFoundError):
                raise
            try:
                await self._call(
                    f"creating {what}",
                    lambda: js.create_key_value(
                        bucket=bucket,
                        description=f"relay: agents' {purpose} of team {self.team}",
                        history=1,
                        ttl=ttl,
                        max_value_size=max_value,
                        storage=js_api.StorageType.FILE,
                        direct=True,
                    ),
                    subjects=[f"$JS.API.STREAM.CREATE.{stream}"],
                )
            except MessagingError as created:
                # Another machine may have made it meanwhile: read what it made.
                if not isinstance(created.__cause__, nats.js.errors.APIError):
                    raise
            info = await self._call(
                f"reading {what}", lambda: js.stream_info(stream), subjects=[info_subject]
            )
        subjects = info.config.subjects or []
        if f"$KV.{bucket}.>" not in subjects:
            raise self._error(
                f"stream {stream} exists with subjects {subjects}, not $KV.{bucket}.>: "
                "another program uses that name"
            )
        if ttl is not None:
            found = info.config.max_age or 0.0
            if found <= 0:
                raise self._error(
                    f"{what} keeps heartbeats forever (no TTL): agents could never read lost; "
                    f"remove it (nats kv rm {bucket}) and relay makes it again"
                )
            # Heartbeats several times a TTL, whatever TTL the bucket was made with.
            self.interval = min(self.interval, found / 3)
            if found > LOST_WITHIN:
                self.note(
                    f"{self.where}: {what} was made with a TTL of {found:g} s: agents of a "
                    f"machine that died read lost only after that long"
                )
        return KeyValue(
            name=bucket,
            stream=stream,
            pre=f"$KV.{bucket}.",
            js=js,
            direct=bool(info.config.allow_direct),
        )

    @property
    def statuses_kv(self) -> KeyValue:
        """The roster bucket (MessagingError before `open`)."""
        if self._statuses is None:
            raise self._error("the status board is not open")
        return self._statuses

    @property
    def heartbeats_kv(self) -> KeyValue:
        """The heartbeat bucket (MessagingError before `open`)."""
        if self._heartbeats is None:
            raise self._error("the status board is not open")
        return self._heartbeats

    # -- writing -----------------------------------------------------------------------

    async def publish(self, status: AgentStatus) -> None:
        """Record `status` and its heartbeat; while this board is open, keep heartbeating
        for the agent unless its state is exited, stopped or lost."""
        self._check_team(status.team)
        name = check_name(status.name)
        if status.last_line is not None and len(status.last_line) > LAST_LINE_CHARACTERS:
            status = msgspec.structs.replace(
                status, last_line=status.last_line[:LAST_LINE_CHARACTERS]
            )
        payload = msgspec.json.encode(status)
        if len(payload) > MAX_STATUS_BYTES:
            raise self._error(
                f"status of {name} is {len(payload)} bytes, more than {MAX_STATUS_BYTES}"
            )
        if status.state in NOT_BEATING:
            self._beating.pop(name, None)
        else:
            # Kept before the puts: during an outage the heartbeats go on trying.
            self._beating[name] = Heartbeat(
                team=self.team,
                name=name,
                at=status.heartbeat,
                machine=status.machine,
                pid=status.pid,
            )
        statuses, heartbeats = self.statuses_kv, self.heartbeats_kv

        async def put() -> None:
            if name in self._beating:
                # The heartbeat first: a reader never sees a new live status without one.
                await heartbeats.put(name, self._beat(name))
            await statuses.put(name, payload)

        try:
            await self._call(
                f"publishing the status of {name}",
                put,
                timeout=PUBLISH_TIMEOUT,
                subjects=[
                    f"$KV.{self.status_bucket}.{name}",
                    f"$KV.{self.heartbeat_bucket}.{name}",
                ],
            )
        except NotAllowedError:
            self._beating.pop(name, None)  # not this user's agent: no heartbeats refused forever
            raise

    def _beat(self, name: str) -> bytes:
        beat = msgspec.structs.replace(self._beating[name], at=utc_now())
        return msgspec.json.encode(beat)

    async def heartbeat(self) -> None:
        """Refresh the heartbeat of every agent this board keeps alive, now; a failure is
        noted once per outage (a session never stops for it)."""
        heartbeats = self.heartbeats_kv
        names = list(self._beating)
        if not names:
            return

        async def beat_all() -> None:
            failures: list[BaseException] = []

            async def beat(name: str, payload: bytes) -> None:
                try:
                    await heartbeats.put(name, payload)
                except Exception as exc:
                    failures.append(exc)

            async with anyio.create_task_group() as group:
                for name in names:
                    if name in self._beating:
                        group.start_soon(beat, name, self._beat(name))
            if failures:
                raise failures[0]

        try:
            await self._call(
                f"heartbeats of {', '.join(names)[:200]}",
                beat_all,
                timeout=REQUEST_TIMEOUT,
                subjects=[f"$KV.{self.heartbeat_bucket}.{name}" for name in names],
            )
        except MessagingError as exc:
            if not self._failing:
                self._failing = True
                self.note(
                    f"{exc}: other machines read these agents as lost until NATS answers",
                    key=f"failing {time.monotonic()}",
                )
            return
        if self._failing:
            self._failing = False
            self.note(f"{self.where}: heartbeats resumed", key=f"resumed {time.monotonic()}")

    async def run_heartbeats(self) -> None:
        """Forever: `heartbeat` every `interval` seconds."""
        next_beat = time.monotonic() + self.interval
        while True:
            await anyio.sleep(max(0.0, next_beat - time.monotonic()))
            next_beat = time.monotonic() + self.interval
            await self.heartbeat()

    async def remove(self, team: str, name: str) -> None:
        """Forget an agent's status (its heartbeats, if any machine still sends them, are
        ignored until a status is published again)."""
        self._check_team(team)
        check_name(name)
        self._beating.pop(name, None)
        statuses = self.statuses_kv
        await self._call(
            f"removing the status of {name}",
            lambda: statuses.purge(name),
            timeout=PUBLISH_TIMEOUT,
            subjects=[f"$KV.{self.status_bucket}.{name}"],
        )

    # -- reading -----------------------------------------------------------------------

    async def statuses(self, team: str) -> list[AgentStatus]:
        """The team's agents by name; one whose last state is live and that has no
        heartbeat reads `lost`. MessagingError when NATS does not answer in READ_TIMEOUT."""
        self._check_team(team)
        read: dict[str, dict[str, tuple[int, bytes]]] = {}
        failures: list[MessagingError] = []

        async def values(bucket: str, kv: KeyValue, limit: int) -> None:
            try:
                read[bucket] = await self._values(bucket, kv, limit)
            except MessagingError as exc:
                failures.append(exc)

        try:
            with anyio.fail_after(READ_TIMEOUT):
                async with anyio.create_task_group() as group:
                    group.start_soon(values, self.status_bucket, self.statuses_kv, MAX_STATUS_BYTES)
                    group.start_soon(
                        values, self.heartbeat_bucket, self.heartbeats_kv, MAX_HEARTBEAT_BYTES
                    )
        except TimeoutError:
            raise self._error(
                f"reading the statuses of team {self.team}: timed out after {READ_TIMEOUT:g} s"
            ) from None
        if failures:
            raise failures[0]
        statuses, heartbeats = read[self.status_bucket], read[self.heartbeat_bucket]
        alive: dict[str, Heartbeat] = {}
        for key, (revision, value) in heartbeats.items():
            where = f"{self.where}: {self.heartbeat_bucket}/{key}"
            try:
                beat = _decode_heartbeat.decode(value)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                self.note(f"{where}: not a heartbeat, skipped: {exc}", key=f"{where}@{revision}")
                continue
            if beat.team != self.team or beat.name != key or not _is_timestamp(beat.at):
                self.note(
                    f"{where}: a heartbeat for {beat.team[:70]!r}/{beat.name[:70]!r} at "
                    f"{beat.at[:40]!r}, skipped",
                    key=f"{where}@{revision}",
                )
                continue
            alive[key] = beat
        result: list[AgentStatus] = []
        for key, (revision, value) in sorted(statuses.items()):
            where = f"{self.where}: {self.status_bucket}/{key}"
            try:
                status = _decode_status.decode(value)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                self.note(
                    f"{where}: not an agent status, skipped: {exc}", key=f"{where}@{revision}"
                )
                continue
            problem = _status_problem(status, self.team, key)
            if problem is not None:
                self.note(f"{where}: {problem}, skipped", key=f"{where}@{revision}")
                continue
            if status.last_line is not None:
                # As model.py promises it: visible, at most 200 characters.
                status.last_line = visible(status.last_line, one_line=True)[:LAST_LINE_CHARACTERS]
            live = alive.get(key)
            if live is not None:
                status.heartbeat = max(status.heartbeat, live.at)
            elif status.state not in NOT_BEATING:
                # No heartbeat within the TTL: since it was last heard of.
                status.state = "lost"
                status.since = status.heartbeat
            result.append(status)
        return result

    async def _values(self, bucket: str, kv: KeyValue, limit: int) -> dict[str, tuple[int, bytes]]:
        """Each live key of `bucket` with its revision and value. A key relay could not
        have written, or a value over `limit` bytes, is skipped and noted once."""
        stream = f"KV_{bucket}"
        prefix = f"$KV.{bucket}."
        js = self.js
        info = await self._call(
            f"listing bucket {bucket}",
            lambda: js.stream_info(stream, subjects_filter=f"{prefix}>"),
            subjects=[f"$JS.API.STREAM.INFO.{stream}"],
        )
        keys: list[str] = []
        for subject in sorted(info.state.subjects or {}):
            key = subject.removeprefix(prefix)
            if NAME_PATTERN.match(key) is None:
                self.note(f"{self.where}: {bucket}: key {key[:70]!r} is not an agent name, skipped")
                continue
            keys.append(key)
        values: dict[str, tuple[int, bytes]] = {}
        failures: list[MessagingError] = []
        readers = anyio.Semaphore(READERS)

        async def read(key: str) -> None:
            where = f"{self.where}: {bucket}/{key}"
            async with readers:
                try:
                    entry = await kv.get(key)
                except nats.js.errors.KeyNotFoundError:  # removed, or expired since the listing
                    return
                except (nats.errors.TimeoutError, nats.errors.ConnectionClosedError) as exc:
                    failures.append(self._error(f"reading {bucket}/{key}: {describe(exc)}"))
                    return
                except Exception as exc:  # whatever a hostile value makes the client trip on
                    self.note(f"{where}: unreadable, skipped: {describe(exc)}")
                    return
            value = entry.value or b""
            if len(value) > limit:
                self.note(
                    f"{where}: {len(value)} bytes, more than {limit}, skipped",
                    key=f"{where}@{entry.revision}",
                )
                return
            values[key] = (entry.revision or 0, value)

        async with anyio.create_task_group() as group:
            for key in keys:
                group.start_soon(read, key)
        if failures:
            raise failures[0]
        return values


@asynccontextmanager
async def open_nats_board(
    config: NatsConfig,
    team: str,
    *,
    name: str | None = None,
    on_problem: Callable[[str], None] | None = None,
    ttl: float = HEARTBEAT_TTL,
    interval: float = HEARTBEAT_INTERVAL,
) -> AsyncIterator[NatsBoard]:
    """The team's status board on the NATS server of `config` (the messaging settings:
    servers, login, TLS), heartbeating while open. `name`: whose reply subjects the
    connection uses (`_INBOX_<team>_<name>`, the agent's in a session, $USER for
    `relay agents`) unless `config.inboxPrefix` says. MessagingError naming the server
    when it cannot be reached within OPEN_TIMEOUT seconds."""
    check_name(team, what="team name")
    where = without_secrets(config.url)
    inbox = config.inboxPrefix or (inbox_prefix(team, name) if name else None)
    board: NatsBoard | None = None

    async def on_error(exc: Exception) -> None:
        if board is not None:
            await board.on_error(exc)

    nc: Client | None = None
    try:
        with anyio.fail_after(OPEN_TIMEOUT):
            nc = await open_connection(
                config, name=f"relay status board of team {team}", inbox=inbox, on_error=on_error
            )
            board = NatsBoard(
                nc, team=team, where=where, ttl=ttl, interval=interval, on_problem=on_problem
            )
            await board.open()
    except TimeoutError:
        await _close(nc)
        raise MessagingError(
            f"status board of team {team}: no answer from NATS within {OPEN_TIMEOUT:g} s",
            store=where,
        ) from None
    except BaseException as exc:
        await _close(nc)
        if isinstance(exc, MessagingError):
            raise MessagingError(
                f"status board of team {team}: {exc.message}", store=exc.store or where
            ) from None
        raise
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(board.run_heartbeats)
            try:
                yield board
            finally:
                group.cancel_scope.cancel()
    finally:
        await _close(nc)


async def _close(nc: Client | None) -> None:
    """Close `nc` (pending writes flushed), within a bounded time, whatever happens."""
    if nc is None or nc.is_closed:
        return
    with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
        if nc.is_connected:
            with contextlib.suppress(Exception):
                await nc.flush(timeout=1)
        with contextlib.suppress(Exception):
            await nc.close()


if TYPE_CHECKING:

    def _is_a_status_board(board: NatsBoard) -> StatusBoard:
        return board  # mypy checks that NatsBoard has the StatusBoard protocol

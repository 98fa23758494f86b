"""The NATS JetStream transport: messages between agents on more than one machine.

Layout (spec/messaging-nats.md):

- one stream per team, `RELAY_<team>`, on `relay.<team>.>` (file storage, a two-minute
  duplicate window keyed on `Nats-Msg-Id`, which is the message id);
- a message is published on `relay.<team>.agent.<recipient>.<sender>` (a broadcast on
  `relay.<team>.broadcast.<sender>`): the subject carries the sender, so per-user publish
  permissions (`agent_permissions`) bind a sender's name to its NATS user, and a
  receiver refuses a message whose subject does not match its fields;
- per agent two durable pull consumers, `agent_<name>` on `relay.<team>.agent.<name>.*`
  (mail queues there while the agent is offline) and `bcast_<name>` on
  `relay.<team>.broadcast.*`. Two consumers, not one with two filters: nats-server 2.9
  accepts a `filter_subjects` list and silently ignores it, so each consumer's filter is
  read back from the server and checked;
- presence in the KV bucket `relay_presence_<team>` whose entries expire after
  `presenceTtlSeconds`; it is read by listing the bucket's subjects, because 2.9 sends
  no event when an entry expires.

The receiving machine checks each message as a local send is checked (`check_message`:
names, reserved names, body size, not blank) and against its subject; one that fails
is dead-lettered in the local mailbox with the reason, never typed. It stores each
message in its local mailbox (durably) before it acknowledges it to NATS, so a crash in between means a redelivery, which the mailbox
ignores by message id. Teams are isolated by NATS accounts, agents by per-user
permissions (`agent_permissions`).

This module imports the NATS client; only code that uses the nats transport imports it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import anyio
import anyio.to_thread
import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js.kv import KeyValue

from relay.config.model import NatsConfig
from relay.services.messaging.model import (
    BROADCAST,
    Agent,
    Message,
    MessagingError,
    check_message,
    check_name,
    new_message,
    recipients_for,
)
from relay.services.nats_connection import connect_options, open_connection
from relay.services.nats_connection import describe as _describe
from relay.services.nats_connection import without_secrets as _without_secrets
from relay.timestamps import iso_millis

__all__ = [
    "DUPLICATE_WINDOW",
    "MAX_AGE",
    "HistoryStore",
    "NatsMessaging",
    "NatsPermissions",
    "SentLog",
    "Store",
    "agent_permissions",
    "broadcast_consumer",
    "broadcast_subject",
    "history_permissions",
    "inbox_prefix",
    "mailbox_consumer",
    "mailbox_subject",
    "message_subject",
    "presence_bucket",
    "stream_name",
]

DUPLICATE_WINDOW = 120.0
"""Seconds in which a second publish with the same message id is dropped by the server."""
MAX_AGE = 7 * 24 * 3600.0
"""Seconds a message stays in the team's stream (acknowledged or not)."""
ACK_WAIT = 30.0
"""Seconds the server waits for an acknowledgement before it delivers a message again."""
REQUEST_TIMEOUT = 5.0
"""Seconds one JetStream API request may take."""
PUBLISH_TIMEOUT = 10.0
"""Seconds a publish keeps retrying (a server restarting, JetStream not yet ready)."""
PROBLEMS_KEPT = 100
HISTORY_BATCH = 500
"""Messages read from the stream stored in one transaction of the history."""
HISTORY_IDLE = 5.0
"""Seconds between the idle heartbeats of a history reader's consumer (its server-side
consumer goes away HISTORY_INACTIVE seconds after the reader does)."""
HISTORY_INACTIVE = 30.0
HISTORY_STALL = 3 * HISTORY_IDLE
"""Seconds without a word from a history reader's consumer after which it is made again."""
HISTORY_RETRY = 1.0
"""Seconds between attempts to make a followed history reader again."""
GATHER = 0.002
"""Seconds to wait, after a message arrives, for the other consumer's (stream order)."""

Result = TypeVar("Result")

_decode_message = msgspec.json.Decoder(Message)
_decode_agent = msgspec.json.Decoder(Agent)
_DENIED = re.compile(
    r'permissions violation for (publish|subscription) to "([^"]*)"', re.IGNORECASE
)


class Store(Protocol):
    """Where received messages go: the local mailbox (`SqliteMailbox`)."""

    def store_incoming(self, message: Message, recipients: Sequence[str]) -> bool:
        """Store `message` for `recipients` durably, idempotent by id; True when new."""
        ...

    def store_rejected(self, message: Message, recipient: str, reason: str) -> None:
        """Keep a message that failed the checks as dead for `recipient`, with `reason`."""
        ...


class HistoryStore(Protocol):
    """Where the team's history read from the stream goes (`SqliteMailbox`)."""

    def stream_mark(self, team: str) -> int:
        """The stream sequence the history has been read up to (0: none)."""
        ...

    def store_history(self, team: str, messages: Sequence[Message], mark: int) -> int:
        """Keep `messages` (idempotent by id) and that the stream is read up to `mark`."""
        ...


class SentLog(Protocol):
    """Where a sent message is kept for history (`SqliteMailbox`)."""

    def record_sent(self, message: Message) -> None:
        """Keep a copy of `message`, sent through NATS."""
        ...


class NatsPermissions(msgspec.Struct, kw_only=True):
    """The subjects one NATS user may publish to and subscribe to (`allow` lists)."""

    publish: list[str]
    subscribe: list[str]


def stream_name(team: str) -> str:
    """The team's JetStream stream."""
    return f"RELAY_{check_name(team, what='team name')}"


def mailbox_subject(team: str, name: str) -> str:
    """The subjects of messages for one agent (its consumer's filter), from any sender."""
    return f"relay.{team}.agent.{name}.*"


def broadcast_subject(team: str) -> str:
    """The subjects of messages for everyone in the team (a filter), from any sender."""
    return f"relay.{team}.broadcast.*"


def message_subject(team: str, recipient: str, sender: str) -> str:
    """The subject a message from `sender` to `recipient` (a name or `*`) is published on."""
    if recipient == BROADCAST:
        return f"relay.{team}.broadcast.{sender}"
    return f"relay.{team}.agent.{recipient}.{sender}"


def mailbox_consumer(name: str) -> str:
    """The durable consumer of an agent's own messages."""
    return f"agent_{name}"


def broadcast_consumer(name: str) -> str:
    """The durable consumer of the team's broadcasts, for one agent."""
    return f"bcast_{name}"


def presence_bucket(team: str) -> str:
    """The KV bucket of the team's presence entries."""
    return f"relay_presence_{team}"


def inbox_prefix(team: str, name: str) -> str:
    """The reply-subject prefix of an agent's connection, which only it may subscribe to."""
    return f"_INBOX_{team}_{name}"


def agent_permissions(team: str, name: str) -> NatsPermissions:
    """What the NATS user of agent `name` in `team` needs, and no more (connect with
    `inbox_prefix(team, name)`)."""
    check_name(team, what="team name")
    check_name(name)
    stream = stream_name(team)
    bucket = presence_bucket(team)
    kv_stream = f"KV_{bucket}"
    api = "$JS.API"
    own: list[str] = []
    for consumer, subject in (
        (mailbox_consumer(name), mailbox_subject(team, name)),
        (broadcast_consumer(name), broadcast_subject(team)),
    ):
        own += [
            # Only the create form that names the filter: the server checks that the
            # filter in the subject is the one in the config, so no other agent's mail.
            f"{api}.CONSUMER.CREATE.{stream}.{consumer}.{subject}",
            f"{api}.CONSUMER.INFO.{stream}.{consumer}",
            f"{api}.CONSUMER.MSG.NEXT.{stream}.{consumer}",
            f"$JS.ACK.{stream}.{consumer}.>",
        ]
    return NatsPermissions(
        publish=[
            # Only as itself: the subject's last token is the sender, checked on receipt.
            f"relay.{team}.agent.*.{name}",
            message_subject(team, BROADCAST, name),
            f"{api}.INFO",
            f"{api}.STREAM.INFO.{stream}",
            f"{api}.STREAM.CREATE.{stream}",
            f"{api}.CONSUMER.LIST.{stream}",
            f"{api}.CONSUMER.NAMES.{stream}",
            *own,
            f"{api}.STREAM.INFO.{kv_stream}",
            f"{api}.STREAM.CREATE.{kv_stream}",
            f"{api}.DIRECT.GET.{kv_stream}",
            f"{api}.DIRECT.GET.{kv_stream}.>",
            f"{api}.STREAM.MSG.GET.{kv_stream}",
            f"$KV.{bucket}.{name}",
        ],
        subscribe=[f"{inbox_prefix(team, name)}.>"],
    )


def history_permissions(team: str) -> list[str]:
    """What a NATS user needs, besides `agent_permissions`, to read the team's whole
    history (`relay messages` over NATS): publish rights to make a consumer of the team's
    stream that the server names (it pushes to the user's own inbox) and to answer its
    flow control. It lets the user read every message of the team, not deliver or
    acknowledge any: give it to those who may read them all."""
    stream = stream_name(team)
    return [f"$JS.API.CONSUMER.CREATE.{stream}", f"$JS.FC.{stream}.>"]


def _status(msg: Msg, inbox: str) -> str | None:
    """The status code of a JetStream control message, or None for a real message. Only
    the server sends on a pull request's own inbox: a message delivered from the stream
    comes with its own subject, and a Status header on it is its publisher's (a forged
    "404" would end every pull and leave the message unacknowledged, again and again)."""
    if msg.subject != inbox or msg.headers is None or msg.data:
        return None
    return msg.headers.get(js_api.Header.STATUS.value)


class _Puller:
    """One durable pull consumer, kept asked: a pull request stays open for up to `wait`
    seconds and every message it brings is handed out at once (nats-py's `fetch` waits
    for a full batch, which would delay a lone message by the whole wait)."""

    def __init__(self, nc: Client, stream: str, consumer: str, arrived: asyncio.Event) -> None:
        self.nc = nc
        self.consumer = consumer
        self.next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self.inbox = nc.new_inbox()
        self.queue: asyncio.Queue[Msg] = asyncio.Queue()
        self.arrived = arrived
        """Set whenever something comes for this consumer (shared by an agent's two)."""
        self.subscription: Subscription | None = None
        self.outstanding = 0
        """Messages the open pull request may still bring."""
        self.expires_at = 0.0
        """When the open pull request ends on the server (monotonic)."""
        self.refused: str | None = None
        """The last status other than "no messages" or "request timeout" (e.g. 409)."""

    async def start(self) -> None:
        """Subscribe to the inbox the server delivers this consumer's messages to."""

        async def on_message(msg: Msg) -> None:
            self.queue.put_nowait(msg)
            self.arrived.set()

        self.subscription = await self.nc.subscribe(self.inbox, cb=on_message)

    async def stop(self) -> None:
        """Stop listening (the durable consumer stays on the server)."""
        if self.subscription is not None and not self.nc.is_closed:
            with contextlib.suppress(nats.errors.Error):
                await self.subscription.unsubscribe()
        self.subscription = None

    async def ask(self, batch: int, wait: float) -> None:
        """Make sure a pull request is open (a server restart forgets open requests: one
        past its expiry is renewed)."""
        now = time.monotonic()
        if self.outstanding > 0 and now < self.expires_at:
            return
        request = {"batch": batch, "expires": int(wait * 1e9)}
        await self.nc.publish(self.next_subject, msgspec.json.encode(request), reply=self.inbox)
        self.outstanding = batch
        self.expires_at = now + wait

    def take(self, limit: int) -> list[Msg]:
        """The messages that have come, at most `limit` (control messages consumed)."""
        messages: list[Msg] = []
        while len(messages) < limit and not self.queue.empty():
            msg = self.queue.get_nowait()
            status = _status(msg, self.inbox)
            if status is None:
                self.outstanding -= 1
                messages.append(msg)
            elif status != "100":  # 100: an idle heartbeat; any other: this request is over
                self.outstanding = 0
                if status not in ("404", "408"):
                    headers = msg.headers or {}
                    self.refused = f"{status} {headers.get('Description', '')}".strip()
        return messages


def _problem(message: Message, subject: str) -> str | None:
    """Why a message from NATS must not be delivered, or None: the checks of a local send,
    and a subject that names its recipient and sender (the sender's NATS user may publish
    only under its own name)."""
    try:
        check_message(message)
    except MessagingError as exc:
        return exc.message
    expected = message_subject(message.team, message.recipient, message.sender)
    if subject != expected:
        return (
            f"it arrived on {subject}, not {expected}: its sender or recipient is not the one "
            "the subject names"
        )
    return None


def _filters(info: js_api.ConsumerInfo) -> list[str]:
    """A consumer's filter subjects as the server reports them (one field or the other)."""
    filters = [info.config.filter_subject] if info.config.filter_subject else []
    return filters + list(info.config.filter_subjects or [])


def _pending(msg: Msg) -> int | None:
    """How many messages the consumer still has for this reader (from its reply subject)."""
    try:
        return int(msg.metadata.num_pending)
    except (nats.errors.Error, AttributeError, ValueError, IndexError, TypeError):
        return None


def _stream_sequence(msg: Msg) -> int:
    """A message's position in the stream (from its reply subject)."""
    try:
        return int(msg.metadata.sequence.stream)
    except (nats.errors.Error, AttributeError, ValueError, IndexError):
        return 0


class NatsMessaging:
    """One connection to NATS JetStream for one team: publish, receive into a store,
    presence. An async context manager (connects on enter, drains on exit)."""

    def __init__(
        self,
        config: NatsConfig,
        *,
        team: str,
        inbox: str | None = None,
        publish_timeout: float = PUBLISH_TIMEOUT,
    ) -> None:
        self.config = config
        self.team = check_name(team, what="team name")
        self.inbox = inbox
        """The connection's reply-subject prefix (`inbox_prefix(team, name)` for an agent's
        own NATS user); None: NATS's default `_INBOX`."""
        self.publish_timeout = publish_timeout
        self.where = _without_secrets(config.url)
        self.stream = stream_name(team)
        self.bucket = presence_bucket(team)
        self.problems: list[str] = []
        """What went wrong without stopping anything (asynchronous server errors,
        undecodable messages), newest last; at most PROBLEMS_KEPT."""
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._kv: KeyValue | None = None
        self._pullers: dict[str, tuple[_Puller, _Puller]] = {}
        self._denial_waiters: list[tuple[str, asyncio.Future[str]]] = []

    # -- connection --------------------------------------------------------------------

    async def __aenter__(self) -> NatsMessaging:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _note(self, problem: str) -> None:
        self.problems.append(problem)
        del self.problems[:-PROBLEMS_KEPT]

    def _error(self, message: str) -> MessagingError:
        return MessagingError(message, store=self.where)

    def _connect_options(self) -> dict[str, Any]:
        """The NATS client's login and TLS options, from the settings."""
        return connect_options(self.config, inbox=self.inbox)

    async def connect(self) -> None:
        """Connect and make sure the team's stream exists."""

        async def on_error(exc: Exception) -> None:
            text = str(exc)
            self._note(f"{self.where}: {text}")
            denied = _DENIED.search(text)
            if denied is None:
                return
            # nats-py lowercases the server's error text, subject included.
            kind, subject = denied.group(1).lower(), denied.group(2).lower()
            for prefix, waiter in self._denial_waiters:
                if (
                    kind == "subscription" or subject.startswith(prefix.lower())
                ) and not waiter.done():
                    waiter.set_result(text)

        self._nc = await open_connection(
            self.config, name=f"relay team {self.team}", inbox=self.inbox, on_error=on_error
        )
        self._js = self._nc.jetstream(timeout=REQUEST_TIMEOUT)
        try:
            await self.ensure_stream()
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Stop receiving and close the connection (pending publishes flushed)."""
        nc, self._nc = self._nc, None
        self._js = None
        self._kv = None
        pullers, self._pullers = self._pullers, {}
        if nc is None:
            return
        for pair in pullers.values():
            for puller in pair:
                await puller.stop()
        if nc.is_connected:
            with contextlib.suppress(Exception), anyio.move_on_after(2.0):
                await nc.flush(timeout=2)
        with contextlib.suppress(Exception):
            await nc.close()

    @property
    def nc(self) -> Client:
        """The connected client (MessagingError when not connected)."""
        if self._nc is None or self._nc.is_closed:
            raise self._error("not connected to NATS")
        return self._nc

    @property
    def js(self) -> JetStreamContext:
        """The JetStream context of the connection."""
        if self._js is None or self._nc is None or self._nc.is_closed:
            raise self._error("not connected to NATS")
        return self._js

    async def _call(
        self, what: str, subject: str, operation: Callable[[], Awaitable[Result]]
    ) -> Result:
        """Run one NATS operation; a permissions violation for `subject` (which the server
        reports apart from the request) ends it at once. Errors: MessagingError saying what."""
        waiter: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        entry = (subject, waiter)
        self._denial_waiters.append(entry)
        task = asyncio.ensure_future(operation())
        try:
            racing: set[asyncio.Future[Any]] = {task, waiter}
            await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
            if waiter.done() and not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                raise self._error(f"{what}: not allowed: {waiter.result()}")
            try:
                return task.result()
            except MessagingError:
                raise
            except Exception as exc:
                raise self._error(f"{what}: {_describe(exc)}") from exc
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            self._denial_waiters.remove(entry)

    # -- stream and consumers ----------------------------------------------------------

    async def ensure_stream(self) -> None:
        """Create the team's stream unless it exists; check that it holds the team's subjects."""
        js = self.js
        subjects = f"relay.{self.team}.>"
        what = f"stream {self.stream}"
        try:
            info = await self._call(
                f"reading {what}",
                f"$JS.API.STREAM.INFO.{self.stream}",
                lambda: js.stream_info(self.stream),
            )
        except MessagingError as exc:
            if not isinstance(exc.__cause__, nats.js.errors.NotFoundError):
                raise
            config = js_api.StreamConfig(
                name=self.stream,
                description=f"relay messages of team {self.team}",
                subjects=[subjects],
                retention=js_api.RetentionPolicy.LIMITS,
                storage=js_api.StorageType.FILE,
                max_age=MAX_AGE,
                duplicate_window=DUPLICATE_WINDOW,
                discard=js_api.DiscardPolicy.OLD,
            )
            info = await self._call(
                f"creating {what}",
                f"$JS.API.STREAM.CREATE.{self.stream}",
                lambda: js.add_stream(config),
            )
        if subjects not in (info.config.subjects or []):
            raise self._error(
                f"{what} exists with subjects {info.config.subjects}, not {subjects}: "
                "another program uses that stream name"
            )

    async def ensure_agent(self, name: str) -> None:
        """Create the agent's two durable pull consumers unless they exist, and check the
        filter each has on the server; start listening to them."""
        check_name(name)
        js = self.js
        for consumer, subject, policy in (
            (mailbox_consumer(name), mailbox_subject(self.team, name), js_api.DeliverPolicy.ALL),
            # A broadcast sent before the agent first joined was not for it.
            (broadcast_consumer(name), broadcast_subject(self.team), js_api.DeliverPolicy.NEW),
        ):
            config = js_api.ConsumerConfig(
                name=consumer,
                durable_name=consumer,
                description=f"relay: {'messages' if consumer.startswith('agent_') else 'broadcasts'} for {name}",
                filter_subject=subject,
                deliver_policy=policy,
                ack_policy=js_api.AckPolicy.EXPLICIT,
                ack_wait=ACK_WAIT,
                max_deliver=-1,
            )
            what = f"consumer {consumer} of stream {self.stream}"
            try:
                info = await self._call(
                    f"creating {what}",
                    f"$JS.API.CONSUMER.CREATE.{self.stream}.{consumer}",
                    lambda config=config: js.add_consumer(self.stream, config),  # type: ignore[misc]
                )
            except MessagingError as exc:
                # The server refused (e.g. a consumer of that name with settings that
                # cannot be changed): use the existing one if its filter is right.
                if not isinstance(exc.__cause__, nats.js.errors.APIError):
                    raise
                try:
                    info = await self._call(
                        f"reading {what}",
                        f"$JS.API.CONSUMER.INFO.{self.stream}.{consumer}",
                        lambda consumer=consumer: js.consumer_info(self.stream, consumer),  # type: ignore[misc]
                    )
                except MessagingError:
                    raise exc from None
            filters = _filters(info)
            if filters != [subject]:
                raise self._error(
                    f"{what}: the server reports filter {filters or 'none'}, not [{subject!r}]; "
                    "refusing to read from it"
                )
        if name not in self._pullers:
            arrived = asyncio.Event()
            pair = (
                _Puller(self.nc, self.stream, mailbox_consumer(name), arrived),
                _Puller(self.nc, self.stream, broadcast_consumer(name), arrived),
            )
            for puller in pair:
                await puller.start()
            self._pullers[name] = pair

    async def consumer_filters(self, consumer: str) -> list[str]:
        """The filter subjects of a consumer of the team's stream, as the server reports them."""
        js = self.js
        info = await self._call(
            f"reading consumer {consumer} of stream {self.stream}",
            f"$JS.API.CONSUMER.INFO.{self.stream}.{consumer}",
            lambda: js.consumer_info(self.stream, consumer),
        )
        return _filters(info)

    async def _consumers(self) -> list[js_api.ConsumerInfo]:
        js = self.js
        infos: list[js_api.ConsumerInfo] = []
        while True:
            offset = len(infos)
            page = await self._call(
                f"listing the consumers of stream {self.stream}",
                f"$JS.API.CONSUMER.LIST.{self.stream}",
                lambda offset=offset: js.consumers_info(self.stream, offset=offset),  # type: ignore[misc]
            )
            infos += page
            if len(page) < 256:  # the server's page size
                return infos

    async def _mailbox_consumers(self) -> dict[str, js_api.ConsumerInfo]:
        """The team's agents (each has a mailbox consumer), by name."""
        prefix = mailbox_consumer("")
        return {
            info.name.removeprefix(prefix): info
            for info in await self._consumers()
            if info.name.startswith(prefix)
        }

    async def known_agents(self) -> list[str]:
        """Every agent the team has known, sorted."""
        return sorted(await self._mailbox_consumers())

    # -- sending -----------------------------------------------------------------------

    def subject_for(self, message: Message) -> str:
        """The subject `message` is published on (its recipient and sender in it)."""
        recipient = message.recipient
        if recipient != BROADCAST:
            check_name(recipient)
        return message_subject(self.team, recipient, check_name(message.sender))

    async def publish(self, message: Message) -> None:
        """Publish `message` and wait for JetStream to have stored it; a second publish of
        the same id within DUPLICATE_WINDOW is dropped by the server."""
        if message.team != self.team:
            raise self._error(
                f"message {message.id} is for team {message.team}, this is team {self.team}"
            )
        subject = self.subject_for(message)
        payload = msgspec.json.encode(message)
        js = self.js
        deadline = time.monotonic() + self.publish_timeout
        while True:
            attempt = min(REQUEST_TIMEOUT, max(0.1, deadline - time.monotonic()))
            try:
                await self._call(
                    f"publishing to {subject}",
                    subject,
                    lambda attempt=attempt: js.publish(  # type: ignore[misc]
                        subject,
                        payload,
                        timeout=attempt,
                        stream=self.stream,
                        headers={"Nats-Msg-Id": message.id},
                    ),
                )
                return
            except MessagingError as exc:
                # A restarting server or JetStream still starting: retry with the same id
                # (the server drops a duplicate), until the deadline.
                retry = "timed out" in str(exc) or "no responders" in str(exc)
                if not retry or time.monotonic() >= deadline:
                    raise
            await anyio.sleep(0.2)

    async def send(
        self,
        sent: SentLog,
        *,
        sender: str,
        recipient: str,
        body: str,
        thread: str | None = None,
    ) -> tuple[Message, list[str]]:
        """Send a message to a known agent or everyone (`*`); keep a copy in `sent`;
        return it and who it is for."""
        message = new_message(
            team=self.team, sender=sender, recipient=recipient, body=body, thread=thread
        )
        recipients = recipients_for(message, await self.known_agents())
        await self.publish(message)
        await anyio.to_thread.run_sync(sent.record_sent, message)
        return message, recipients

    # -- receiving ---------------------------------------------------------------------

    async def _take(self, name: str, store: Store, batch: int, wait: float) -> int:
        """Store what the agent's two consumers bring within `wait` seconds, in stream order,
        acknowledging each message after it is stored; return how many were new."""
        pullers = self._pullers[name]
        arrived = pullers[0].arrived
        deadline = time.monotonic() + wait
        msgs: list[Msg] = []
        try:
            while True:
                arrived.clear()
                for puller in pullers:
                    msgs += puller.take(batch)
                if msgs:
                    break
                for puller in pullers:
                    if puller.refused is not None:
                        self._note(
                            f"{self.where}: {self.stream}/{puller.consumer}: {puller.refused}"
                        )
                        puller.refused = None
                        await anyio.sleep(min(1.0, wait))  # not a busy loop on a refusal
                    await puller.ask(batch, min(wait, max(0.1, deadline - time.monotonic())))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return 0
                with anyio.move_on_after(remaining):
                    await arrived.wait()
                # The other consumer's messages may be a moment behind: gather them, so
                # a direct message and a broadcast are stored in the order they were sent.
                await anyio.sleep(GATHER)
        except nats.errors.ConnectionClosedError:
            raise self._error("the NATS connection is closed") from None
        except nats.errors.Error as exc:  # reconnecting: the next call asks again
            self._note(f"{self.where}: receiving for {name}: {_describe(exc)}")
            await anyio.sleep(min(0.2, wait))  # not a busy loop in run_bridge
            return 0
        msgs.sort(key=_stream_sequence)
        stored = 0
        # Shielded: a message stored but not acknowledged would only come again later.
        with anyio.CancelScope(shield=True):
            for msg in msgs:
                stored += await self._take_one(msg, name, store)
        return stored

    async def _take_one(self, msg: Msg, name: str, store: Store) -> int:
        where = f"{self.where}: {self.stream}: message on {msg.subject}"
        try:
            message = _decode_message.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self._note(f"{where}: not a relay message, dropped: {exc}")
            await self._reply(msg.term)
            return 0
        if message.team != self.team:
            self._note(f"{where}: message {message.id} claims team {message.team}, dropped")
            await self._reply(msg.term)
            return 0
        problem = _problem(message, msg.subject)
        if problem is not None:
            # Checked as a local send is (DESIGN: bad input never reaches the agent):
            # kept as dead with the reason, where `relay inbox --all` shows it.
            self._note(f"{where}: message {message.id[:40]!r} dead-lettered: {problem}")
            try:
                await anyio.to_thread.run_sync(store.store_rejected, message, name, problem)
            except MessagingError as exc:
                self._note(f"{where}: not stored: {exc}")
                await self._reply(lambda: msg.nak(delay=2.0))
                return 0
            await self._reply(msg.term)
            return 0
        if message.recipient == BROADCAST and message.sender == name:
            await self._reply(msg.ack)
            return 0
        try:
            new = await anyio.to_thread.run_sync(store.store_incoming, message, [name])
        except MessagingError as exc:
            # Not acknowledged: the server delivers it again a little later.
            self._note(f"{where}: message {message.id} not stored: {exc}")
            await self._reply(lambda: msg.nak(delay=2.0))
            return 0
        await self._reply(msg.ack)
        return 1 if new else 0

    async def _reply(self, acknowledge: Callable[[], Awaitable[None]]) -> None:
        """Acknowledge (or refuse) a message; a lost reply means only a redelivery."""
        try:
            await acknowledge()
        except nats.errors.Error as exc:
            self._note(f"{self.where}: acknowledging: {_describe(exc)}")

    async def receive(self, name: str, store: Store, *, batch: int = 64, wait: float = 1.0) -> int:
        """Store what is waiting for `name` (its messages and the team's broadcasts) in
        `store`, waiting up to `wait` seconds for the first; return how many were new."""
        if name not in self._pullers:
            await self.ensure_agent(name)
        return await self._take(name, store, batch, wait)

    async def run_bridge(
        self,
        name: str,
        store: Store,
        on_stored: Callable[[], None],
        *,
        batch: int = 64,
        wait: float = 5.0,
    ) -> None:
        """Forever: store what NATS has for `name` in `store`, then call `on_stored`.
        Survives server restarts (the client reconnects; open requests are renewed)."""
        await self.ensure_agent(name)
        while True:
            if await self._take(name, store, batch, wait):
                on_stored()
            elif not self.nc.is_connected:
                await anyio.sleep(0.2)

    # -- history -----------------------------------------------------------------------

    async def read_history(self, store: HistoryStore) -> int:
        """Read what the team's stream holds beyond `store`'s mark into `store`; return how
        many messages were new. Needs `history_permissions` (MessagingError otherwise)."""
        js = self.js
        info = await self._call(
            f"reading stream {self.stream}",
            f"$JS.API.STREAM.INFO.{self.stream}",
            lambda: js.stream_info(self.stream),
        )
        last = int(info.state.last_seq or 0)
        mark = await anyio.to_thread.run_sync(store.stream_mark, self.team)
        if mark > last:
            mark = 0  # the stream was made again: its sequence started over
        if last <= mark:
            return 0
        return await self._read_stream(store, mark, until=last)

    async def follow_history(self, store: HistoryStore) -> None:
        """Forever: store what the team's stream gets in `store`, as it comes. A reader
        the server stops serving (restarted: its consumer, kept in memory, is gone) is
        made again from the mark, once the connection is back."""
        while True:
            mark = await anyio.to_thread.run_sync(store.stream_mark, self.team)
            try:
                await self._read_stream(store, mark, until=None)
            except MessagingError as exc:
                self._note(str(exc))
            except nats.errors.Error as exc:  # the connection is down: the client reconnects
                self._note(f"{self.where}: following the history: {_describe(exc)}")
            await anyio.sleep(HISTORY_RETRY)

    async def _read_stream(self, store: HistoryStore, mark: int, *, until: int | None) -> int:
        """Store the stream's messages after sequence `mark` in `store`, up to `until` (or
        until none is pending), or forever with None, through a consumer of the team's
        stream that pushes to this connection's inbox, with flow control (the server
        waits for this reader rather than overflow its queue). MessagingError when the
        server says nothing (not even a heartbeat) for HISTORY_STALL seconds."""
        nc, js = self.nc, self.js
        inbox = nc.new_inbox()
        queue: asyncio.Queue[Msg] = asyncio.Queue()

        async def on_message(msg: Msg) -> None:
            queue.put_nowait(msg)

        subscription = await nc.subscribe(inbox, cb=on_message)
        config = js_api.ConsumerConfig(
            description=f"relay history reader of team {self.team}",
            deliver_subject=inbox,
            deliver_policy=js_api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=mark + 1,
            ack_policy=js_api.AckPolicy.NONE,
            filter_subject=f"relay.{self.team}.>",
            flow_control=True,
            idle_heartbeat=HISTORY_IDLE,
            inactive_threshold=HISTORY_INACTIVE,
            mem_storage=True,
            num_replicas=1,
        )
        stored = 0
        what = f"reading the history of stream {self.stream}"
        try:
            await self._call(
                what,
                f"$JS.API.CONSUMER.CREATE.{self.stream}",
                lambda: js.add_consumer(self.stream, config=config),
            )
            done = False
            while not done:
                batch: list[Message] = []
                try:
                    msg = await asyncio.wait_for(queue.get(), HISTORY_STALL)
                except TimeoutError:
                    raise self._error(
                        f"{what}: the server sent nothing, not even a heartbeat, for "
                        f"{HISTORY_STALL:.0f} s"
                    ) from None
                while True:
                    mark, message, idle = await self._history_message(msg, mark, inbox)
                    if message is not None:
                        batch.append(message)
                    done = until is not None and (idle or mark >= until)
                    if done or len(batch) >= HISTORY_BATCH:
                        break
                    try:
                        msg = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        break
                # Shielded: what was read is kept with its mark, or neither.
                with anyio.CancelScope(shield=True):
                    stored += await anyio.to_thread.run_sync(
                        store.store_history, self.team, batch, mark
                    )
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(nats.errors.Error):
                if not nc.is_closed:
                    await subscription.unsubscribe()
        return stored

    async def _history_message(
        self, msg: Msg, mark: int, inbox: str
    ) -> tuple[int, Message | None, bool]:
        """The stream sequence a pushed message brings the reader to, the message when it
        is one to keep, and whether the reader has caught up (nothing more is pending, or
        the consumer is idle). Flow control is answered, heartbeats noted. Only the
        server sends on the reader's inbox itself: a message from the stream comes with
        its own subject, and a Status header on it is its publisher's."""
        if _status(msg, inbox) is not None:
            headers = msg.headers or {}
            # A flow-control request, or a heartbeat saying the consumer is stalled
            # waiting for the answer to one that was lost: answered, so it goes on.
            answer = msg.reply or headers.get("Nats-Consumer-Stalled")
            if answer:
                with contextlib.suppress(nats.errors.Error):
                    await self.nc.publish(answer, b"")
            return mark, None, not answer  # a plain heartbeat: the consumer has nothing
        sequence = _stream_sequence(msg)
        caught_up = _pending(msg) == 0
        if sequence <= mark:
            return mark, None, caught_up
        mark, message = sequence, self._history_entry(msg, sequence)
        return mark, message, caught_up

    def _history_entry(self, msg: Msg, sequence: int) -> Message | None:
        """The relay message `msg` holds, checked as a receiver checks it; None (noted)
        for one that is not history."""
        where = f"{self.where}: {self.stream}: message {sequence} on {msg.subject}"
        try:
            message = _decode_message.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            self._note(f"{where}: not a relay message, left out of the history: {exc}")
            return None
        if message.team != self.team:
            self._note(f"{where}: claims team {message.team}, left out of the history")
            return None
        problem = _problem(message, msg.subject)
        if problem is not None:  # its recipients dead-lettered it: not shown as sent
            self._note(f"{where}: left out of the history: {problem}")
            return None
        return message

    # -- presence ----------------------------------------------------------------------

    async def _presence(self) -> KeyValue:
        """The team's presence bucket, created on first use with the configured TTL."""
        if self._kv is not None:
            return self._kv
        js = self.js
        what = f"presence bucket {self.bucket}"
        kv_stream = f"KV_{self.bucket}"
        try:
            self._kv = await self._call(
                f"opening {what}",
                f"$JS.API.STREAM.INFO.{kv_stream}",
                lambda: js.key_value(self.bucket),
            )
        except MessagingError as exc:
            if not isinstance(exc.__cause__, nats.js.errors.NotFoundError):
                raise
            self._kv = await self._call(
                f"creating {what}",
                f"$JS.API.STREAM.CREATE.{kv_stream}",
                lambda: js.create_key_value(
                    bucket=self.bucket,
                    description=f"relay presence of team {self.team}",
                    history=1,
                    ttl=self.config.presenceTtlSeconds,
                    storage=js_api.StorageType.FILE,
                    direct=True,
                ),
            )
        return self._kv

    async def heartbeat(self, agent: Agent) -> None:
        """Record `agent` as present for the next `presenceTtlSeconds`."""
        if agent.team != self.team:
            raise self._error(
                f"agent {agent.name} is in team {agent.team}, this is team {self.team}"
            )
        kv = await self._presence()
        payload = msgspec.json.encode(agent)
        await self._call(
            f"recording the presence of {agent.name}",
            f"$KV.{self.bucket}.{agent.name}",
            lambda: kv.put(check_name(agent.name), payload),
        )

    async def forget_presence(self, name: str) -> None:
        """Remove `name`'s presence entry (its session ended)."""
        kv = await self._presence()
        await self._call(
            f"removing the presence of {name}",
            f"$KV.{self.bucket}.{name}",
            lambda: kv.delete(check_name(name)),
        )

    async def _presence_entries(self) -> dict[str, Agent]:
        """The live presence entries, by agent name: the bucket's subjects are listed, since
        nats-server 2.9 sends no event when an entry expires."""
        kv = await self._presence()
        js = self.js
        kv_stream = f"KV_{self.bucket}"
        prefix = f"$KV.{self.bucket}."
        info = await self._call(
            f"listing {self.bucket}",
            f"$JS.API.STREAM.INFO.{kv_stream}",
            lambda: js.stream_info(kv_stream, subjects_filter=f"{prefix}>"),
        )
        entries: dict[str, Agent] = {}
        for subject in sorted(info.state.subjects or {}):
            key = subject.removeprefix(prefix)
            try:
                entry = await kv.get(key)
            except nats.js.errors.NotFoundError:  # deleted, or expired since the listing
                continue
            except Exception as exc:
                raise self._error(f"reading presence of {key}: {_describe(exc)}") from None
            try:
                agent = _decode_agent.decode(entry.value or b"")
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                self._note(f"{self.where}: {self.bucket}/{key}: not a presence entry: {exc}")
                continue
            entries[agent.name] = agent
        return entries

    async def agents(self) -> list[Agent]:
        """Every agent the team has known, with presence: one with no live entry is offline."""
        entries = await self._presence_entries()
        consumers = await self._mailbox_consumers()
        agents = dict(entries)
        for name, info in consumers.items():
            if name in agents:
                continue
            seen = info.delivered.last_active if info.delivered else None
            seen = seen or info.created
            agents[name] = Agent(
                name=name,
                team=self.team,
                state="offline",
                host="",
                last_seen=_iso(seen) if seen else "",
            )
        return [agents[name] for name in sorted(agents)]


def _iso(moment: datetime | str) -> str:
    """A server timestamp as ISO 8601 UTC with milliseconds and Z."""
    if isinstance(moment, str):
        try:
            parsed = datetime.fromisoformat(moment.replace("Z", "+00:00"))
        except ValueError:
            return moment
        return _iso(parsed)
    return iso_millis(moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC))

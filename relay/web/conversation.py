"""The Conversation page's data: the team's messages as a timeline (newest last), its
threads, search (the same as `relay messages --grep`), how each message's delivery to
each recipient stands (queued, handed, acked, dead, denied), relay's own notices (a
reply loop stopped among them), and what is new since a cursor (a seq) for the live feed.

Everything is read through the mailbox's own functions (`SqliteMailbox.search`,
`deliveries`, `agents`), the ones `relay messages` and `relay inbox` use: the page adds
layout, never SQL of its own. With the nats transport the mailbox holds what the team's
stream has been read into it (`Timeline`); other machines' deliveries are not in it, so
their messages show no delivery state.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

import anyio
import anyio.to_thread
import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from relay.errors import RelayError
from relay.services.messaging.history import Found, HistoryQuery, match_expression, moment
from relay.services.messaging.model import SYSTEM_SENDER, Delivery, DeliveryState, utc_now
from relay.web.app import json_answer, json_error
from relay.web.pages import Page

if TYPE_CHECKING:
    from relay.services.messaging.mailbox import SqliteMailbox
    from relay.web.dashboard import Dashboard

__all__ = [
    "DEFAULT_LIMIT",
    "Conversation",
    "ConversationFeed",
    "DeliveryChange",
    "DeliveryView",
    "Entry",
    "LoopStop",
    "ThreadSummary",
    "TimelinePage",
    "Update",
    "history_query",
]

DEFAULT_LIMIT = 200
"""Messages a page shows at first (the newest)."""
MAX_LIMIT = 2000
FEED_PAGE = 500
"""Messages read at a time for the feed."""
TRACKED = 3000
"""Deliveries under way (queued or handed) the feed watches at most, those of the oldest
messages let go first: each look reads each of them (one index look-up each)."""

SenderKind = Literal["agent", "human", "relay"]
NoticeKind = Literal["loop-stop", "refused", "undelivered", "rate-limit", "other"]

# relay's own notices, as SqliteMailbox words them (`_loop_stop`, `_finish`, `claim`, `send`):
# a test sends each kind through a real mailbox, so a change of wording there fails it.
_LOOP_STOP = re.compile(
    r"(?P<first>\S+) and (?P<second>\S+) have exchanged (?P<count>\d+) messages with no human"
    r" message in between, .* until (?P<until>\d\d:\d\d:\d\d) UTC\.",
    re.DOTALL,
)
_REFUSED = re.compile(r"Your message to \S+ \[\w{8}\] was refused: ")
_UNDELIVERED = re.compile(r"Your message to \S+ \[\w{8}\] could not be delivered: ")
_RATE_LIMIT = re.compile(r"\S+ is sending more than \d+ messages a minute: ")


class DeliveryView(msgspec.Struct, kw_only=True, frozen=True):
    """How a message's delivery to one recipient stands."""

    recipient: str
    state: DeliveryState
    attempts: int = 0
    """How many times it was handed to the recipient's session."""
    handed_at: str | None = None
    acked_at: str | None = None
    """When it was acknowledged, or refused or found dead."""
    evidence: str | None = None
    reason: str | None = None
    """Why it is dead or denied."""


class LoopStop(msgspec.Struct, kw_only=True, frozen=True):
    """A reply loop relay stopped: the two agents, how many messages they had exchanged
    and the time (UTC, HH:MM:SS) their messages resume unless a human writes first."""

    agents: list[str]
    exchanges: int
    until: str


class Entry(msgspec.Struct, kw_only=True, frozen=True):
    """One message of the timeline, with its deliveries."""

    seq: int
    """The mailbox's commit order: the timeline's order and the feed's cursor."""
    id: str
    short_id: str
    """The marker agents see (`[1a2b3c4d]`)."""
    sender: str
    sender_kind: SenderKind | None
    """An agent, a human (sent with `relay send`) or relay itself; None: not known here."""
    recipient: str
    """A name, or `*` for everyone in the team but the sender."""
    thread: str | None
    body: str
    created_at: str
    deliveries: list[DeliveryView]
    notice: NoticeKind | None = None
    """Set for relay's own notices: which kind."""
    loop_stop: LoopStop | None = None


class ThreadSummary(msgspec.Struct, kw_only=True, frozen=True):
    """A thread among the messages shown: how many, who wrote, when it last moved."""

    thread: str
    messages: int
    participants: list[str]
    last_at: str


class TimelinePage(msgspec.Struct, kw_only=True, frozen=True):
    """What the Conversation page shows first."""

    team: str
    entries: list[Entry]
    """Oldest first: the newest `limit` that match."""
    threads: list[ThreadSummary]
    """The threads of `entries`, the one that moved last first."""
    cursor: int
    """The team's newest seq when the page was read: the feed goes on from there."""
    limit: int
    more: bool
    """Older matching messages may exist (a full page)."""


class DeliveryChange(msgspec.Struct, kw_only=True, frozen=True):
    """A delivery of a message shown whose state (or attempts) changed."""

    seq: int
    id: str
    delivery: DeliveryView


class Update(msgspec.Struct, kw_only=True, frozen=True):
    """What happened since the last look: new messages and changed deliveries."""

    entries: list[Entry]
    deliveries: list[DeliveryChange]
    cursor: int
    """The newest seq seen: the next look starts after it."""


def history_query(
    *,
    sender: str | None = None,
    recipient: str | None = None,
    since: str | None = None,
    until: str | None = None,
    text: str | None = None,
    thread: str | None = None,
) -> HistoryQuery:
    """The query for the page's filters, read as `relay messages` reads its options
    (`--since 90m`, an ISO date, `--grep WORDS`); blank ones are left out. SearchTextError
    or TimeBoundError (MessagingError) when one cannot be used."""

    def given(value: str | None) -> str | None:
        return value if value is not None and value.strip() else None

    text = given(text)
    if text is not None:
        match_expression(text)  # an empty or wordless search is an error, as in the CLI
    since, until = given(since), given(until)
    return HistoryQuery(
        sender=given(sender),
        recipient=given(recipient),
        since=moment(since, option="since") if since is not None else None,
        until=moment(until, option="until") if until is not None else None,
        text=text,
        thread=given(thread),
    )


class Conversation:
    """The messages of `team` in `mailbox`, for the page and its feed."""

    def __init__(self, mailbox: SqliteMailbox, team: str) -> None:
        self.mailbox = mailbox
        self.team = team
        self._kinds: dict[str, SenderKind] = {}
        """Whether a name is an agent's or a human's, read again when a name is new."""

    def page(
        self, query: HistoryQuery | None = None, *, limit: int = DEFAULT_LIMIT
    ) -> TimelinePage:
        """The newest `limit` messages `query` selects, oldest first, with their threads."""
        limit = max(1, min(limit, MAX_LIMIT))
        # Taken first: a message stored while the page is read comes by the feed, not lost.
        cursor = self.mailbox.newest_seq(self.team)
        found = self.mailbox.search(self.team, query or HistoryQuery(), limit=limit)
        entries = self.entries(found)
        return TimelinePage(
            team=self.team,
            entries=entries,
            threads=threads_of(entries),
            cursor=max(cursor, entries[-1].seq if entries else 0),
            limit=limit,
            more=len(found) == limit,
        )

    def since(
        self, cursor: int, query: HistoryQuery | None = None, *, limit: int = FEED_PAGE
    ) -> tuple[list[Entry], int]:
        """The first `limit` messages `query` selects stored after seq `cursor`, oldest
        first, and the cursor to look after next time."""
        found = self.mailbox.search(self.team, query or HistoryQuery(), limit=limit, after=cursor)
        return self.entries(found), found[-1].seq if found else cursor

    def entries(self, found: Sequence[Found]) -> list[Entry]:
        """The timeline entries of messages the mailbox found, with their deliveries."""
        if not found:
            return []
        deliveries = self.mailbox.deliveries(
            self.team, [(item.seq, item.message.recipient) for item in found]
        )
        senders = {item.message.sender for item in found} - {SYSTEM_SENDER}
        if not senders <= self._kinds.keys():
            # A name not seen yet (a name is known to the mailbox before it sends).
            self._kinds = {agent.name: agent.kind for agent in self.mailbox.agents(self.team)}
        return [
            _entry(item, deliveries.get(item.seq, []), self._kinds.get(item.message.sender))
            for item in found
        ]


class ConversationFeed:
    """What is new in a conversation since a cursor, look after look: new messages, and
    the changes of the deliveries still under way (queued or handed) of those shown."""

    def __init__(
        self, conversation: Conversation, *, after: int, shown: Iterable[Entry] = ()
    ) -> None:
        self.conversation = conversation
        self.cursor = after
        self._pending: dict[int, dict[str, DeliveryView]] = {}
        """seq -> recipient -> the delivery as last seen, for those under way."""
        self._ids: dict[int, str] = {}
        self._tracked = 0
        """How many deliveries `_pending` holds."""
        self._version: int | None = None
        """The mailbox's data_version at the last look at the deliveries."""
        self.track(shown)

    def poll(self) -> Update:
        """New messages stored after the cursor (FEED_PAGE at most: look again while a
        look returns that many) and deliveries that changed since the last look (read
        again only when another connection has written to the mailbox since)."""
        version = self.conversation.mailbox.data_version()
        changes = self._changes() if version != self._version else []
        self._version = version
        entries, self.cursor = self.conversation.since(self.cursor)
        self.track(entries)
        return Update(entries=entries, deliveries=changes, cursor=self.cursor)

    def track(self, entries: Iterable[Entry]) -> None:
        """Follow the deliveries under way of `entries` from now on."""
        for entry in entries:
            under_way = {
                delivery.recipient: delivery
                for delivery in entry.deliveries
                if delivery.state in ("queued", "handed")
            }
            if under_way and entry.seq not in self._pending:
                self._pending[entry.seq] = under_way
                self._ids[entry.seq] = entry.id
                self._tracked += len(under_way)
        while self._tracked > TRACKED:
            oldest = min(self._pending)
            self._tracked -= len(self._pending.pop(oldest))
            self._ids.pop(oldest, None)

    def _changes(self) -> list[DeliveryChange]:
        if not self._pending:
            return []
        conversation = self.conversation
        keys = [(seq, name) for seq, seen in self._pending.items() for name in seen]
        now = conversation.mailbox.deliveries(conversation.team, keys)
        changes: list[DeliveryChange] = []
        for seq in sorted(self._pending):
            seen = self._pending[seq]
            for delivery in map(_delivery_view, now.get(seq, [])):
                before = seen.get(delivery.recipient)
                if before is None:
                    continue
                if (before.state, before.attempts) != (delivery.state, delivery.attempts):
                    changes.append(DeliveryChange(seq=seq, id=self._ids[seq], delivery=delivery))
                if delivery.state in ("queued", "handed"):
                    seen[delivery.recipient] = delivery
                else:
                    del seen[delivery.recipient]
                    self._tracked -= 1
            if not seen:
                del self._pending[seq]
                self._ids.pop(seq, None)
        return changes


def threads_of(entries: Sequence[Entry]) -> list[ThreadSummary]:
    """The threads among `entries`, the one with the newest message first."""
    grouped: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.thread is not None:
            grouped.setdefault(entry.thread, []).append(entry)
    summaries = [
        ThreadSummary(
            thread=thread,
            messages=len(members),
            participants=sorted({member.sender for member in members}),
            last_at=members[-1].created_at,
        )
        for thread, members in grouped.items()
    ]
    return sorted(summaries, key=lambda summary: summary.last_at, reverse=True)


def _delivery_view(delivery: Delivery) -> DeliveryView:
    return DeliveryView(
        recipient=delivery.recipient,
        state=delivery.state,
        attempts=delivery.attempts,
        handed_at=delivery.handed_at,
        acked_at=delivery.acked_at,
        evidence=delivery.evidence,
        reason=delivery.reason,
    )


def _entry(found: Found, deliveries: Sequence[Delivery], kind: SenderKind | None) -> Entry:
    message = found.message
    notice: NoticeKind | None = None
    loop_stop: LoopStop | None = None
    if message.sender == SYSTEM_SENDER:
        kind = "relay"
        notice, loop_stop = _notice(message.body)
    return Entry(
        seq=found.seq,
        id=message.id,
        short_id=message.short_id,
        sender=message.sender,
        sender_kind=kind,
        recipient=message.recipient,
        thread=message.thread,
        body=message.body,
        created_at=message.created_at,
        deliveries=[_delivery_view(delivery) for delivery in deliveries],
        notice=notice,
        loop_stop=loop_stop,
    )


def _notice(body: str) -> tuple[NoticeKind, LoopStop | None]:
    """Which of relay's notices `body` is (and for a loop stop, its pair and end)."""
    stop = _LOOP_STOP.match(body)
    if stop is not None:
        return "loop-stop", LoopStop(
            agents=[stop["first"], stop["second"]],
            exchanges=int(stop["count"]),
            until=stop["until"],
        )
    if _REFUSED.match(body):
        return "refused", None
    if _UNDELIVERED.match(body):
        return "undelivered", None
    if _RATE_LIMIT.match(body):
        return "rate-limit", None
    return "other", None


# -- the page ----------------------------------------------------------------------------

POLL_SECONDS = 0.25
"""How often the feed looks again when no doorbell rang: deliveries change without one."""
MAX_PARAMETER = 2**62
"""The largest number a route takes (SQLite's integers are 64-bit)."""


class ConversationView:
    """The page's routes and feed over the dashboard's messenger.

    Routes: `GET /api/conversation` (the snapshot: the newest messages the filters
    select; `?grep=&sender=&recipient=&thread=&since=&until=&limit=`), `GET
    /api/conversation/since?cursor=N&…` (the messages the filters select stored after
    seq N). Event `conversation.update` (`Update`): new messages and changed deliveries,
    of every message (a page showing a search asks `since` for what it selects).
    """

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard
        self.conversation = Conversation(dashboard.messenger.mailbox, dashboard.team)
        self.problems: list[str] = []

    async def follow(self) -> None:
        """Publish what is new in the mailbox, as it is stored: woken by the mailbox's
        doorbell (`Timeline.follow`, which also reads the team's NATS stream in)."""
        from relay.services.messaging.timeline import Timeline

        conversation = self.conversation
        start = await anyio.to_thread.run_sync(conversation.mailbox.newest_seq, conversation.team)
        feed = ConversationFeed(conversation, after=start)
        # The deliveries under way of what a page shows at first are followed too.
        shown = await anyio.to_thread.run_sync(conversation.page)
        feed.track(shown.entries)
        stored = anyio.Event()

        def wake(found: list[Found]) -> None:
            stored.set()

        async with Timeline(self.dashboard.messenger, who=self.dashboard.user) as timeline:
            self.problems = list(timeline.problems)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(lambda: timeline.follow(HistoryQuery(), after=start, emit=wake))
                while True:
                    update = await anyio.to_thread.run_sync(feed.poll)
                    if update.entries or update.deliveries:
                        self.dashboard.publish("conversation.update", update)
                    with anyio.move_on_after(POLL_SECONDS):
                        await stored.wait()
                    stored = anyio.Event()

    async def snapshot(self, request: Request) -> Response:
        """The page's first paint: the newest messages the filters select."""
        try:
            query = _query(request)
            limit = number_parameter(request, "limit", DEFAULT_LIMIT)
        except (RelayError, ValueError) as exc:
            return json_error(str(exc))
        seq = self.dashboard.feed.seq  # before the read: an event after it may repeat a message
        try:
            page = await anyio.to_thread.run_sync(
                lambda: self.conversation.page(query, limit=limit)
            )
        except RelayError as exc:
            return json_error(str(exc), 503)
        return json_answer(
            {
                "seq": seq,
                "now": utc_now(),
                "user": self.dashboard.user,
                "page": page,
                "filtered": query != HistoryQuery(),
                "problems": self.problems,
            }
        )

    async def since(self, request: Request) -> Response:
        """The messages the filters select stored after `cursor`."""
        try:
            query = _query(request)
            cursor = number_parameter(request, "cursor", 0)
        except (RelayError, ValueError) as exc:
            return json_error(str(exc))
        try:
            entries, after = await anyio.to_thread.run_sync(
                lambda: self.conversation.since(cursor, query)
            )
        except RelayError as exc:
            return json_error(str(exc), 503)
        return json_answer({"entries": entries, "cursor": after})


def _query(request: Request) -> HistoryQuery:
    parameters = request.query_params
    return history_query(
        sender=parameters.get("sender"),
        recipient=parameters.get("recipient"),
        since=parameters.get("since"),
        until=parameters.get("until"),
        text=parameters.get("grep"),
        thread=parameters.get("thread"),
    )


def number_parameter(request: Request, name: str, default: int) -> int:
    """The whole number >= 0 in the query parameter `name` (`default` when not given);
    ValueError saying what is wrong with it."""
    value = request.query_params.get(name)
    if value is None or not value.strip():
        return default
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {value[:40]!r}") from None
    if not 0 <= number <= MAX_PARAMETER:
        raise ValueError(f"{name} must be a whole number from 0 to {MAX_PARAMETER}")
    return number


def page(dashboard: Dashboard) -> Page:
    """The Conversation page of `dashboard`."""
    view = ConversationView(dashboard)
    return Page(
        name="conversation",
        title="Conversation",
        script="conversation.js",
        style="pages.css",
        routes=[
            Route("/api/conversation", view.snapshot),
            Route("/api/conversation/since", view.since),
        ],
        tasks=[view.follow],
    )

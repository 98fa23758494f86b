"""Messages between agents, their deliveries, agents' presence, and the errors of messaging.

A message is written once and delivered to each recipient separately: a delivery goes
queued -> handed (given to a session, not yet taken in by the agent) -> acked (the agent
showed it had it), or -> dead (handed `maxAttempts` times without an acknowledgement) or
-> denied (a MessageReceived hook refused it). The message id (a ULID) is the dedup key
everywhere: in the mailbox, in the injector and as NATS's `Nats-Msg-Id`.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import msgspec

from relay.errors import RelayError, did_you_mean
from relay.services.messaging.ulid import new_ulid
from relay.timestamps import utc_millis

MAX_BODY_BYTES = 64 * 1024
"""A message body is UTF-8 of at most this many bytes."""
BROADCAST = "*"
"""The recipient that means everyone in the team but the sender."""
SYSTEM_SENDER = "relay"
"""The sender of relay's own notices (a refused or dead message, a rate limit, a loop stopped)."""
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
"""Agent and team names: safe in file names, NATS subjects and consumer names."""
RESERVED_NAMES = frozenset({SYSTEM_SENDER, BROADCAST})
_ULID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}\Z")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\Z")
_THREAD = re.compile(r"[^\s\]]{1,200}\Z")

DeliveryState = Literal["queued", "handed", "acked", "dead", "denied"]
AgentState = Literal["live", "idle", "busy", "offline"]
AgentKind = Literal["agent", "human"]


def _digest(path: Path) -> str:
    return hashlib.sha256(os.fsencode(os.path.abspath(path))).hexdigest()


def project_team(project: Path) -> str:
    """The team of a project outside any git repository: the root folder's name (made safe,
    at most 40 characters) and 8 hex digits of its absolute path, so two projects never
    share a team by accident (`/src/shop` -> `shop-1f3a9c2e`)."""
    return _team_name(Path(os.path.abspath(project)).name, project)


def _team_name(label: str, identity: str | Path) -> str:
    base = re.sub(r"[^A-Za-z0-9_-]", "-", label).strip("-_")[:40].strip("-_")
    return f"{base}-{_digest(Path(identity))[:8]}" if base else f"p-{_digest(Path(identity))[:8]}"


def repository_team(project: Path) -> str:
    """The team a project is in by default: its git repository's, so every worktree of one
    repository is one team. That is `project_team` of the main checkout (the same name as
    a project folder there has always had), of the same folder inside it for a project
    below a worktree's root, and for a bare repository (or one whose git folder is not
    `<root>/.git`) a name from its common folder. Outside a repository that can be read
    and trusted (repository.py): `project_team(project)`."""
    from relay.services.messaging.repository import find_repository

    path = os.path.abspath(project)
    found = find_repository(path)
    if found is None:
        return project_team(Path(path))
    inside = os.path.relpath(path, found.checkout)
    if found.main is not None:
        return project_team(Path(os.path.normpath(os.path.join(found.main, inside))))
    if inside != ".":
        return _team_name(os.path.basename(path), os.path.join(found.common, inside))
    # `shop.git` -> shop; a hidden `.bare` in /src/shop -> shop.
    common = found.common
    label = os.path.basename(common)
    if label.startswith("."):
        label = os.path.basename(os.path.dirname(common))
    return _team_name(label.removesuffix(".git"), common)


def team_for(project: Path, settings_team: str | None = None, chosen: str | None = None) -> str:
    """The team a command or session in `project` works in: `chosen` (`--team`, or
    $RELAY_TEAM inside a `relay run` session), else `settings_team` (`messaging.team`),
    else the project's repository's (`repository_team`). Not checked: see `check_name`."""
    if chosen is not None:
        return chosen
    if settings_team is not None:
        return settings_team
    return repository_team(project)


def default_agent_name(command: str, project: Path) -> str:
    """The name of a session started without `--name`: the command's name made safe and
    6 hex digits of the project's path (`python3.11` in /src/shop -> `python3-11-1f3a9c`),
    so a default name in one project is never taken for another project's agent."""
    base = re.sub(r"[^A-Za-z0-9_-]", "-", Path(command).name).strip("-_")[:50].strip("-_")
    return f"{base or 'agent'}-{_digest(project)[:6]}"


class Message(msgspec.Struct, kw_only=True, frozen=True):
    """One message, as sent (a broadcast is one message with recipient `*`)."""

    id: str
    """A ULID: unique, sortable by creation time; the dedup key."""
    team: str
    sender: str
    recipient: str
    """An agent name, or `*` for everyone in the team but the sender."""
    body: str
    created_at: str
    """ISO 8601 UTC with milliseconds and Z."""
    thread: str | None = None

    @property
    def short_id(self) -> str:
        """The marker shown to agents (see `short_id`)."""
        return short_id(self.id)


def short_id(message_id: str) -> str:
    """The marker shown to agents for a message id: its last 8 characters (random), lowercase."""
    return message_id[-8:].lower()


utc_now = utc_millis
"""Now (plus `offset` seconds), ISO 8601 UTC with milliseconds and Z: sorts as text."""


def new_message(
    *,
    team: str,
    sender: str,
    recipient: str,
    body: str,
    thread: str | None = None,
    notice: bool = False,
) -> Message:
    """A new message, checked (names, body); a blank thread is no thread. MessagingError if
    unusable. Only relay's own notices (`notice`) come from the reserved sender `relay`."""
    if not notice:
        check_name(sender)
    if recipient != BROADCAST:
        check_name(recipient)
    check_body(body)
    thread = thread if thread is not None and thread.strip() else None
    if thread is not None and not _THREAD.match(thread):
        raise MessagingError(
            f"thread {thread[:40]!r} is not usable: 1 to 200 characters without spaces or ']'"
        )
    return Message(
        id=new_ulid(),
        team=team,
        sender=sender,
        recipient=recipient,
        body=body,
        created_at=utc_now(),
        thread=thread,
    )


def check_message(message: Message) -> Message:
    """`message` if it could have been sent by a relay (what a receiver checks of a message
    from elsewhere): usable names, the reserved ones refused, a sendable body, a thread
    without spaces or `]`, a ULID id and a timestamp as relay writes them. Else a
    MessagingError saying what is wrong."""
    if not _ULID.match(message.id):
        raise MessagingError(f"message id {message.id[:40]!r} is not a ULID")
    check_name(message.team, what="team name")
    check_name(message.sender, what="sender name")
    if message.recipient != BROADCAST:
        check_name(message.recipient, what="recipient name")
    check_body(message.body)
    if message.thread is not None and not _THREAD.match(message.thread):
        raise MessagingError("thread is not usable: 1 to 200 characters without spaces or ']'")
    if not _TIMESTAMP.match(message.created_at):
        raise MessagingError(f"created_at {message.created_at[:40]!r} is not a relay timestamp")
    return message


def recipients_for(message: Message, known: Sequence[str]) -> list[str]:
    """Who a message is queued for, among the team's `known` names: the recipient, or for
    `*` everyone but the sender. An unknown recipient, or nobody to broadcast to, is an error."""
    if message.recipient == BROADCAST:
        recipients = [name for name in known if name != message.sender]
        if not recipients:
            raise MessagingError(f"nobody else in team {message.team} to broadcast to")
        return recipients
    if message.recipient not in known:
        raise UnknownRecipientError(message.recipient, team=message.team, known=list(known))
    return [message.recipient]


class Delivery(msgspec.Struct, kw_only=True):
    """A message for one recipient, and where its delivery stands."""

    message: Message
    recipient: str
    state: DeliveryState
    attempts: int = 0
    """How many times it was handed to a session."""
    handed_at: str | None = None
    acked_at: str | None = None
    evidence: str | None = None
    """Why it counts as taken in: "marker" (its [id8] seen in the agent's output) or "output"."""
    reason: str | None = None
    """Why it is dead or denied."""


class HandedAtSend(msgspec.Struct, kw_only=True, frozen=True):
    """What a sender's doorbell poke carries when it handed the delivery to the recipient's
    live session in its own transaction (mailbox.py, "Hand-over at the send"): the session
    it was handed to and the delivery, so that session hands it over without reading or
    claiming anything."""

    session_id: str
    key: str
    """The session's doorbell key (doorbell.py), which only readers of the mailbox know."""
    delivery: Delivery


class Agent(msgspec.Struct, kw_only=True):
    """An agent known to the team, and its presence."""

    name: str
    team: str
    state: AgentState
    host: str
    pid: int | None = None
    started_ticks: int | None = None
    """The relay process's start time (clock ticks since boot): a reused pid is not this agent."""
    cwd: str | None = None
    last_seen: str
    session_id: str | None = None
    kind: AgentKind = "agent"
    """"agent" (it ran a session) or "human" (it only sent from a terminal): broadcasts
    go to agents only."""


class MessagingError(RelayError):
    """A message that cannot be sent or a mailbox that cannot be used; says what and where."""

    def __init__(self, message: str, *, store: str | None = None) -> None:
        self.message = message
        self.store = store
        super().__init__(f"{store}: {message}" if store else message)


class MailboxBusy(MessagingError):
    """The mailbox is held by another writer, and the caller asked not to wait."""

    def __init__(self, store: str) -> None:
        super().__init__("the mailbox is busy", store=store)


class Whereabouts(msgspec.Struct, kw_only=True, frozen=True):
    """A team on this machine that knows an agent's name, for an error that must say where
    else the agent is."""

    team: str
    cwd: str | None = None
    """Where its session started (or was last seen)."""
    live: bool = False


class UnknownRecipientError(MessagingError):
    """Mail for a name no agent of the team has ever had; says which other teams on this
    machine know the name (`elsewhere`) and how to reach them, or how an agent joins."""

    def __init__(
        self,
        recipient: str,
        *,
        team: str,
        known: list[str],
        elsewhere: Sequence[Whereabouts] | None = None,
        retry: str = "relay send --team {team} {name} …",
    ) -> None:
        self.recipient = recipient
        self.team = team
        self.known = known
        self.elsewhere = None if elsewhere is None else list(elsewhere)
        """The other teams on this machine that know the name; None: not looked for."""
        self.retry = retry
        """The command that reaches the agent in another team (`{team}`, `{name}` filled in)."""
        listed = ", ".join(known) if known else "none yet"
        hint = did_you_mean(recipient, known)
        text = f"no agent named {recipient}{hint} in team {team}; known: {listed}"
        if self.elsewhere:
            places = " and ".join(_place(where) for where in self.elsewhere[:3])
            more = f" and {len(self.elsewhere) - 3} more" if len(self.elsewhere) > 3 else ""
            command = retry.format(team=self.elsewhere[0].team, name=recipient)
            text += f"; {recipient} is in team {places}{more}: {command}"
        elif self.elsewhere is not None:  # looked (Messenger.explain), and found nobody
            text += (
                f"; no team on this machine knows {recipient}: an agent joins team {team} "
                f"with `relay run --name {recipient} --team {team} -- COMMAND`"
            )
        super().__init__(text)

    def explained(
        self, elsewhere: Sequence[Whereabouts], *, retry: str | None = None
    ) -> UnknownRecipientError:
        """The same error saying where else the name is known."""
        return UnknownRecipientError(
            self.recipient,
            team=self.team,
            known=self.known,
            elsewhere=elsewhere,
            retry=retry or self.retry,
        )


def _place(where: Whereabouts) -> str:
    if where.cwd is None:
        return f"{where.team} ({'live' if where.live else 'offline'})"
    if where.live:
        return f"{where.team} (live, started in {where.cwd})"
    return f"{where.team} (offline, last in {where.cwd})"


class NameTakenError(MessagingError):
    """A second live agent with a name that a live agent of the team already has."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        super().__init__(
            f"an agent named {agent.name} is already live in team {agent.team} "
            f"(pid {agent.pid} on {agent.host}); choose another --name"
        )


class SenderIsLiveError(MessagingError):
    """A human sending under the name of an agent that is live: its messages would pass
    for the agent's."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        where = f" (pid {agent.pid} on {agent.host})" if agent.pid else ""
        super().__init__(
            f"{agent.name} is a live agent in team {agent.team}{where}: a message sent as "
            f"{agent.name} would pass for its own; send under your own name"
        )


class RecipientAwayError(MessagingError):
    """Mail for an agent offline for so long it may never come back (`relay send --queue`
    queues it anyway)."""

    def __init__(self, agent: Agent, *, away_hours: float) -> None:
        self.agent = agent
        super().__init__(
            f"{agent.name} has been offline since {agent.last_seen} (more than "
            f"{away_hours:g} h), so the message was not queued; `relay send --queue` queues "
            f"it anyway, `relay agents forget {agent.name}` removes the agent"
        )


class RateLimitedError(MessagingError):
    """A sender over `messaging.maxPerMinute`."""

    def __init__(self, sender: str, *, limit: int, retry_after: float) -> None:
        self.sender = sender
        self.limit = limit
        self.retry_after = retry_after
        super().__init__(
            f"{sender} has sent {limit} messages in the last minute (messaging.maxPerMinute); "
            f"not sent: try again in {max(1, round(retry_after))} s"
        )


class LoopStoppedError(MessagingError):
    """A message between two agents that have exchanged `messaging.maxExchanges` messages
    with no human message to either of them in between (a reply loop): refused until a
    human writes to one of them or the cool-down is over."""

    def __init__(
        self,
        sender: str,
        other: str,
        *,
        limit: int,
        retry_after: float,
        notice: str,
        new_stop: bool,
    ) -> None:
        self.sender = sender
        self.other = other
        self.limit = limit
        self.retry_after = retry_after
        self.notice = notice
        """What the other agent is told, once per stop (and what the humans are shown)."""
        self.new_stop = new_stop
        """This refusal is the stop's first: the other agent was told just now."""
        first, second = sorted((sender, other))
        super().__init__(
            f"{first} and {second} have exchanged {limit} messages with no human message in "
            f"between (messaging.maxExchanges); not sent: messages between them resume once "
            f"a human sends either of them a message (relay send), or in "
            f"{_duration(retry_after)} (messaging.loopCooldownMinutes)"
        )


def _duration(seconds: float) -> str:
    """`12 s` under a minute and a half, else whole minutes rounded up (`10 min`)."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    return f"{math.ceil(seconds / 60)} min"


def check_name(name: str, *, what: str = "agent name") -> str:
    """`name` if it is a usable agent or team name; else a MessagingError saying why."""
    if not NAME_PATTERN.match(name):
        raise MessagingError(
            f"{what} {name!r} is not usable: 1 to 64 letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )
    if what != "team name" and name in RESERVED_NAMES:
        raise MessagingError(f"{what} {name!r} is reserved")
    return name


def check_body(body: str) -> str:
    """`body` if it is a sendable message body; else a MessagingError saying why."""
    try:
        size = len(body.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise MessagingError(
            f"message body is not valid UTF-8 (at character {exc.start})"
        ) from None
    if size > MAX_BODY_BYTES:
        raise MessagingError(
            f"message body is {size} bytes; the limit is {MAX_BODY_BYTES} (64 KiB)"
        )
    if not body.strip():
        raise MessagingError("message body is empty")
    return body

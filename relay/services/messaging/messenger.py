"""Messaging as the settings configure it: the embedded mailbox, and NATS JetStream in front
of it when `messaging.transport` is "nats" (imported only then)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from relay.config.discovery import SettingsSet, section_of
from relay.config.model import USER_ONLY_MESSAGING, MessagingConfig
from relay.services.messaging.mailbox import SqliteMailbox
from relay.services.messaging.model import (
    Agent,
    Message,
    MessagingError,
    SenderIsLiveError,
    UnknownRecipientError,
    Whereabouts,
    check_name,
    team_for,
)

if TYPE_CHECKING:
    from relay.services.messaging.nats import NatsMessaging


def messaging_config(settings: SettingsSet) -> MessagingConfig:
    """The `messaging` settings, the USER_ONLY_MESSAGING ones never from a project file."""
    return section_of(settings, "messaging", MessagingConfig(), user_only=USER_ONLY_MESSAGING)


class Messenger:
    """Send, list agents and read history for one team (see spec/messaging.md).

    The local mailbox is always the store a session reads from. With the nats
    transport, sends go to JetStream and a bridge (`NatsMessaging.run_bridge`) stores
    what arrives for local agents in the local mailbox before acknowledging it to NATS.
    """

    def __init__(
        self,
        config: MessagingConfig,
        *,
        mailbox: SqliteMailbox | None = None,
        project: Path | None = None,
        team: str | None = None,
    ) -> None:
        self.config = config
        # `team` (--team) wins over messaging.team; unset, the project's repository's team
        # (a `@relay:*` never reaches another repository).
        self.team = check_name(team_for(project or Path.cwd(), config.team, team), what="team name")
        self.mailbox = mailbox or SqliteMailbox(
            max_attempts=config.maxAttempts,
            max_per_minute=config.maxPerMinute,
            max_exchanges=config.maxExchanges,
            loop_cooldown=config.loopCooldownMinutes * 60,
            doorbell=config.doorbell,
        )
        self.nats: NatsMessaging | None = None
        """The connected NATS transport, set by whoever connected it (a session, a CLI call)."""
        self.unavailable: str | None = None
        """Why messaging cannot be used in this session (sends fail with it), or None."""

    @property
    def uses_nats(self) -> bool:
        """Whether messages cross machines through NATS."""
        return self.config.transport == "nats"

    async def send(
        self,
        sender: str,
        recipient: str,
        body: str,
        thread: str | None = None,
        *,
        human: bool = False,
        queue: bool = False,
    ) -> tuple[Message, list[str]]:
        """Send a message; return it and who it was queued for (MessagingError when it cannot be).
        `human`: a person sending from a terminal (never as a live agent); `queue`: even for an
        agent away for long (see `SqliteMailbox.send`)."""
        if self.unavailable is not None:
            raise MessagingError(f"messaging is unavailable in this session ({self.unavailable})")
        try:
            return await self._send(sender, recipient, body, thread, human=human, queue=queue)
        except UnknownRecipientError as exc:
            raise await self.explain(exc) from None

    async def _send(
        self,
        sender: str,
        recipient: str,
        body: str,
        thread: str | None,
        *,
        human: bool,
        queue: bool,
    ) -> tuple[Message, list[str]]:
        import anyio.to_thread  # here: a CLI that only reads the mailbox never loads anyio

        if self.nats is None:
            return await anyio.to_thread.run_sync(
                lambda: self.mailbox.send(
                    team=self.team,
                    sender=sender,
                    recipient=recipient,
                    body=body,
                    thread=thread,
                    human=human,
                    queue=queue,
                )
            )
        if human:
            for agent in await self.nats.agents():
                if agent.name == sender and agent.state != "offline":
                    raise SenderIsLiveError(agent)
        # The limits count this machine's copies of what was sent and received.
        await anyio.to_thread.run_sync(
            lambda: self.mailbox.check_limits(self.team, sender, recipient, human=human)
        )
        return await self.nats.send(
            self.mailbox, sender=sender, recipient=recipient, body=body, thread=thread
        )

    async def agents(self) -> list[Agent]:
        """The team's agents and their presence."""
        import anyio.to_thread

        if self.nats is None:
            return await anyio.to_thread.run_sync(self.mailbox.agents, self.team)
        return await self.nats.agents()

    async def explain(
        self,
        error: UnknownRecipientError,
        running: Sequence[Whereabouts] = (),
        *,
        retry: str | None = None,
    ) -> UnknownRecipientError:
        """`error` saying which other teams on this machine know its name: those of
        `running` (live sessions of that name) and of this mailbox, live ones first."""
        import anyio.to_thread

        try:
            known = await anyio.to_thread.run_sync(self.mailbox.agents_named, error.recipient)
        except MessagingError:
            known = []  # the error stands as it is: an unusable mailbox knows nobody
        places: dict[str, Whereabouts] = {}
        for where in running:
            places.setdefault(where.team, where)
        for agent in known:
            places.setdefault(
                agent.team,
                Whereabouts(team=agent.team, cwd=agent.cwd, live=agent.state != "offline"),
            )
        places.pop(error.team, None)
        ordered = sorted(places.values(), key=lambda where: not where.live)
        return error.explained(ordered, retry=retry)

"""The team's message history as `relay messages` reads it: searched in the local mailbox,
caught up from the team's NATS stream first with the nats transport, and followed as
messages are stored.

With the nats transport a machine's mailbox holds only what it sent and what came for
its own agents: messages between agents of other machines, and broadcasts sent while no
agent of this machine was in the team, are in the team's stream alone. So the stream is
read into the mailbox's history first (`NatsMessaging.read_history`; the NATS user
needs `history_permissions`), and the same query then reads one place. A user that may
not read the stream gets this machine's copy, with a warning saying why.

Following waits on a doorbell of its own, recorded in the mailbox as a watcher: every
commit that stores a message of the team pokes it (mailbox.py), so a new message is
shown at once, with no polling; a look every BACKSTOP seconds covers a sender whose
doorbells are turned off. Where no doorbell can be had, `PRAGMA data_version` is polled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from relay.services.messaging.history import Found, HistoryQuery
from relay.services.messaging.model import MessagingError

if TYPE_CHECKING:
    from relay.services.messaging.doorbell import Doorbell
    from relay.services.messaging.messenger import Messenger
    from relay.services.messaging.nats import NatsMessaging

__all__ = ["BACKSTOP", "POLL", "Timeline"]

BACKSTOP = 2.0
"""Seconds between looks at the mailbox while following, when no poke comes."""
POLL = 0.25
"""Seconds between looks at `data_version` while following without a doorbell."""
PAGE = 500
"""Messages read at a time while following."""


class Timeline:
    """The history of one messenger's team (an async context manager: with the nats
    transport it connects, and reads the stream into the mailbox, on enter)."""

    def __init__(self, messenger: Messenger, *, who: str) -> None:
        self.messenger = messenger
        self.who = who
        """Whose NATS reply subjects the connection uses (`inbox_prefix(team, who)`)."""
        self.problems: list[str] = []
        """Why the history may be incomplete (the stream could not be read), for the user."""
        self._nats: NatsMessaging | None = None

    async def __aenter__(self) -> Timeline:
        if self.messenger.uses_nats:
            await self._catch_up()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        nats, self._nats = self._nats, None
        if nats is not None:
            with anyio.CancelScope(shield=True):
                await nats.close()

    async def _catch_up(self) -> None:
        from relay.config.model import NatsConfig
        from relay.services.messaging.nats import NatsMessaging, inbox_prefix

        messenger = self.messenger
        config = messenger.config.nats or NatsConfig()
        inbox = config.inboxPrefix or inbox_prefix(messenger.team, self.who)
        nats = NatsMessaging(config, team=messenger.team, inbox=inbox)
        try:
            await nats.connect()
            await nats.read_history(messenger.mailbox)
        except MessagingError as exc:
            await nats.close()
            self.problems.append(
                f"showing this machine's copy of team {messenger.team}'s messages only: "
                f"the team's NATS stream cannot be read ({exc})"
            )
            return
        self._nats = nats

    async def search(self, query: HistoryQuery, *, limit: int) -> list[Found]:
        """The newest `limit` messages `query` selects, oldest first."""
        mailbox, team = self.messenger.mailbox, self.messenger.team
        return await anyio.to_thread.run_sync(lambda: mailbox.search(team, query, limit=limit))

    async def newest_seq(self) -> int:
        """Where following starts when nothing was listed."""
        mailbox, team = self.messenger.mailbox, self.messenger.team
        return await anyio.to_thread.run_sync(lambda: mailbox.newest_seq(team))

    async def follow(
        self, query: HistoryQuery, *, after: int, emit: Callable[[list[Found]], None]
    ) -> None:
        """Call `emit` with each batch of messages `query` selects stored after seq
        `after`, as they are stored; returns once `query.until` has passed (else runs
        until cancelled)."""
        from relay.services.messaging.doorbell import Doorbell

        mailbox, team = self.messenger.mailbox, self.messenger.team
        bell: Doorbell | None
        try:
            bell = Doorbell()
        except OSError:
            bell = None  # no private folder for it: poll
        try:
            if bell is not None:
                address = bell.address
                await anyio.to_thread.run_sync(lambda: mailbox.watch(team, address))
            async with anyio.create_task_group() as tasks:
                if self._nats is not None:
                    tasks.start_soon(self._nats.follow_history, mailbox)
                await self._show(query, after, emit, bell)
                tasks.cancel_scope.cancel()
        finally:
            if bell is not None:
                # Not awaited: this runs while the loop is cancelled (Ctrl-C).
                with contextlib.suppress(MessagingError):
                    mailbox.unwatch(bell.address)
                bell.close()

    async def _show(
        self,
        query: HistoryQuery,
        after: int,
        emit: Callable[[list[Found]], None],
        bell: Doorbell | None,
    ) -> None:
        mailbox, team = self.messenger.mailbox, self.messenger.team
        version = await anyio.to_thread.run_sync(mailbox.data_version)
        while True:
            found = await anyio.to_thread.run_sync(
                partial(mailbox.search, team, query, limit=PAGE, after=after)
            )
            if found:
                emit(found)
                after = found[-1].seq
                if len(found) == PAGE:
                    continue
            left = _seconds_until(query.until)
            if left is not None and left <= 0:
                return
            wait = min(BACKSTOP, left) if left is not None else BACKSTOP
            if bell is not None:
                await bell.wait(wait)
                continue
            deadline = anyio.current_time() + wait
            while anyio.current_time() < deadline:
                await anyio.sleep(POLL)
                now = await anyio.to_thread.run_sync(mailbox.data_version)
                if now != version:
                    version = now
                    break


def _seconds_until(moment: str | None) -> float | None:
    """Seconds from now until `moment` (relay's form); None without one."""
    if moment is None:
        return None
    until = datetime.strptime(moment, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return (until - datetime.now(UTC)).total_seconds()

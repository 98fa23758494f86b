"""Team memory as the settings set it up, and what a shared save or forget answers: the
parts that need no NATS client (relay.services.memory.team is the NATS side)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from relay.config.discovery import SettingsSet
from relay.config.model import NatsConfig
from relay.errors import RelayError
from relay.services.memory.model import SavedMemory

MAX_CONTENT_BYTES = 100_000
"""Longest content (UTF-8 bytes) a team memory may have: a save is refused, an event skipped."""
NOT_SET_UP = (
    "team memory is off on this machine: set "
    '"memory": {"transport": "nats"} in your user settings (spec/memory-team.md)'
)


class TeamMemoryError(RelayError):
    """A team save or forget that cannot be done as asked (sharing off, too long, …)."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


class TeamSharing(msgspec.Struct, kw_only=True, frozen=True):
    """Where this machine shares team memories (memory.transport "nats")."""

    team: str
    nats: NatsConfig
    sync_seconds: float


class SharedMemory(SavedMemory, kw_only=True, frozen=True):
    """What a team save did: SavedMemory, and whether the team has it yet."""

    shared: bool = False
    """True: the team's stream has it. False: it waits in this machine's outbox."""
    problem: str | None = None
    """Why it is not shared yet."""


class SharedForget(msgspec.Struct, kw_only=True, frozen=True):
    """What a forget did: whether there was a memory, and whether the team heard of it."""

    forgotten: bool
    team: str | None = None
    """The team whose memory it was (None: this machine's own memory)."""
    shared: bool = False
    problem: str | None = None


def team_sharing(
    settings: SettingsSet, project: Path | None, chosen: str | None = None
) -> TeamSharing | None:
    """Whether and with whom team memories are shared (None: memories stay local). The
    team: `memory.team`, else messaging's (`chosen`: `relay run --team` or $RELAY_TEAM
    inside its session; else `messaging.team`, else the repository's); the server:
    `messaging.nats`. All from files the user controls."""
    from relay.services.memory.backends import memory_config
    from relay.services.messaging.messenger import messaging_config
    from relay.services.messaging.model import MessagingError, check_name, team_for

    config = memory_config(settings)
    if config.transport != "nats":
        return None
    messaging = messaging_config(settings)
    team = config.team or team_for(project or Path.cwd(), messaging.team, chosen)
    try:
        check_name(team, what="memory.team")
    except MessagingError as exc:
        raise TeamMemoryError(exc.message) from None
    return TeamSharing(
        team=team, nats=messaging.nats or NatsConfig(), sync_seconds=config.syncSeconds
    )

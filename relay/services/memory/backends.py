"""Which memory backend the settings choose, and opening it."""

from __future__ import annotations

from collections.abc import Callable

from relay.config.discovery import SettingsSet, section_of
from relay.config.model import USER_ONLY_MEMORY, MemoryConfig
from relay.services.memory.model import MemoryService
from relay.services.memory.sharing import TeamSharing


def memory_config(settings: SettingsSet) -> MemoryConfig:
    """The `memory` settings, the USER_ONLY_MEMORY ones never from a project file."""
    return section_of(settings, "memory", MemoryConfig(), user_only=USER_ONLY_MEMORY)


def open_memory(
    config: MemoryConfig,
    sharing: TeamSharing | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> MemoryService:
    """The configured backend (the embedded SQLite store by default); with `sharing`,
    wrapped so that team memories are shared (relay.services.memory.team). `progress`:
    called with (done, total) while the embedded store embeds a large backlog."""
    local: MemoryService
    if config.backend == "command" and config.command:
        from relay.services.memory.command import CommandMemory

        local = CommandMemory(config.command)
    else:
        from relay.services.memory.sqlite import SqliteMemory

        local = SqliteMemory(semantic=config.semantic, progress=progress)
    if sharing is None:
        return local
    from relay.services.memory.team import TeamMemory

    return TeamMemory(local, team=sharing.team, nats_config=sharing.nats)

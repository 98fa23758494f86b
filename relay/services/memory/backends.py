"""Which memory backend the settings choose, and opening it."""

from __future__ import annotations

from relay.config.discovery import SettingsSet, section_of
from relay.config.model import MemoryConfig
from relay.services.memory.model import MemoryService


def memory_config(settings: SettingsSet) -> MemoryConfig:
    """The `memory` settings; backend and command only from files the user controls."""
    return section_of(settings, "memory", MemoryConfig(), user_only=("backend", "command"))


def open_memory(config: MemoryConfig) -> MemoryService:
    """The configured backend (the embedded SQLite store by default)."""
    if config.backend == "command" and config.command:
        from relay.services.memory.command import CommandMemory

        return CommandMemory(config.command)
    from relay.services.memory.sqlite import SqliteMemory

    return SqliteMemory()

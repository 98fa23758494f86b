"""Which memory backend the settings choose, and opening it."""

from __future__ import annotations

import msgspec

from relay.config.discovery import SettingsSet, most_specific
from relay.config.model import TRUST_REQUIRED, MemoryConfig
from relay.services.memory.model import MemoryService


def memory_config(settings: SettingsSet) -> MemoryConfig:
    """The `memory` settings; backend and command only from files the user controls."""
    sections = []
    for loaded in settings.files:
        section = loaded.settings.memory
        if loaded.scope in TRUST_REQUIRED:
            # A project file cannot choose a program for relay to run outside trust.
            section = msgspec.structs.replace(section, backend="sqlite", command=None)
        sections.append(section)
    return most_specific(sections, MemoryConfig())


def open_memory(config: MemoryConfig) -> MemoryService:
    """The configured backend (the embedded SQLite store by default)."""
    if config.backend == "command" and config.command:
        from relay.services.memory.command import CommandMemory

        return CommandMemory(config.command)
    from relay.services.memory.sqlite import SqliteMemory

    return SqliteMemory()

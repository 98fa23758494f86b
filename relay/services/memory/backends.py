"""Which memory backend the settings choose, and opening it."""

from __future__ import annotations

from relay.config.discovery import SettingsSet
from relay.config.model import TRUST_REQUIRED, MemoryConfig
from relay.services.memory.model import MemoryService


def memory_config(settings: SettingsSet) -> MemoryConfig:
    """The `memory` settings; backend and command only from files the user controls."""
    chosen = MemoryConfig()
    for loaded in settings.files:
        config = loaded.settings.memory
        fields: dict[str, object] = {
            "injectOnStart": config.injectOnStart,
            "promptOnEnd": config.promptOnEnd,
            "startBudget": config.startBudget,
        }
        if loaded.scope not in TRUST_REQUIRED:
            fields.update(backend=config.backend, command=config.command)
        defaults = MemoryConfig()
        changed = {key: value for key, value in fields.items() if value != getattr(defaults, key)}
        chosen = _replace(chosen, changed)
    return chosen


def open_memory(config: MemoryConfig) -> MemoryService:
    """The configured backend (the embedded SQLite store by default)."""
    if config.backend == "command" and config.command:
        from relay.services.memory.command import CommandMemory

        return CommandMemory(config.command)
    from relay.services.memory.sqlite import SqliteMemory

    return SqliteMemory()


def _replace(config: MemoryConfig, changed: dict[str, object]) -> MemoryConfig:
    import msgspec

    return msgspec.structs.replace(config, **changed)

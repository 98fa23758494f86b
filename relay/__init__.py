"""relay: a hook runtime for AI coding agents.

The public API. Names are imported on first use (PEP 562), so that `relay hooks run`
does not pay for what it does not use.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: the hook client imports this package, and typing costs ~5 ms
if TYPE_CHECKING:
    from typing import Any

    from relay.engine.system import HookSystem
    from relay.errors import InputError, RelayError, SettingsError
    from relay.protocol.events import (
        AfterAgent,
        AfterModel,
        AfterTool,
        BeforeAgent,
        BeforeModel,
        BeforeTool,
        BeforeToolSelection,
        Event,
        Idle,
        MessageReceived,
        Notification,
        Output,
        PassThrough,
        PatternMatch,
        PreCompress,
        SessionEnd,
        SessionStart,
    )
    from relay.protocol.output import (
        AggregatedResult,
        HookError,
        HookOutput,
        HookReport,
        HookSpecificOutput,
        ToolConfig,
    )
    from relay.session.wrapper import Relay

_EVENTS = [
    "AfterAgent", "AfterModel", "AfterTool", "BeforeAgent", "BeforeModel", "BeforeTool",
    "BeforeToolSelection", "Event", "Idle", "MessageReceived", "Notification", "Output",
    "PassThrough", "PatternMatch", "PreCompress", "SessionEnd", "SessionStart",
]  # fmt: skip
_OUTPUTS = [
    "AggregatedResult",
    "HookError",
    "HookOutput",
    "HookReport",
    "HookSpecificOutput",
    "ToolConfig",
]
_WHERE: dict[str, str] = {
    "HookSystem": "relay.engine.system",
    "Relay": "relay.session.wrapper",
    "InputError": "relay.errors",
    "RelayError": "relay.errors",
    "SettingsError": "relay.errors",
    **dict.fromkeys(_EVENTS, "relay.protocol.events"),
    **dict.fromkeys(_OUTPUTS, "relay.protocol.output"),
}

__all__ = [
    "AfterAgent",
    "AfterModel",
    "AfterTool",
    "AggregatedResult",
    "BeforeAgent",
    "BeforeModel",
    "BeforeTool",
    "BeforeToolSelection",
    "Event",
    "HookError",
    "HookOutput",
    "HookReport",
    "HookSpecificOutput",
    "HookSystem",
    "Idle",
    "InputError",
    "MessageReceived",
    "Notification",
    "Output",
    "PassThrough",
    "PatternMatch",
    "PreCompress",
    "Relay",
    "RelayError",
    "SessionEnd",
    "SessionStart",
    "SettingsError",
    "ToolConfig",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'relay' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

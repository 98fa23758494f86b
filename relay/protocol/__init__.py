"""The wire protocol: typed events, hook output, dialects, schemas. No I/O.

The names below are loaded on first use (PEP 562): a command that needs one module of the
protocol (`relay agents` shows text through relay.protocol.display) does not pay for the
typed events and outputs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relay.protocol.answers import Answer, ProtocolError, parse_answer
    from relay.protocol.codec import EventEnvelope, EventError, decode_event, make_event
    from relay.protocol.dialects import UnknownEventError, canonical_name, known_event_names
    from relay.protocol.events import EVENT_TYPES, Event
    from relay.protocol.output import (
        AggregatedResult,
        HookError,
        HookOutput,
        HookReport,
        HookSpecificOutput,
        ToolConfig,
    )

_HOMES = {
    "Answer": "answers",
    "ProtocolError": "answers",
    "parse_answer": "answers",
    "EventEnvelope": "codec",
    "EventError": "codec",
    "decode_event": "codec",
    "make_event": "codec",
    "UnknownEventError": "dialects",
    "canonical_name": "dialects",
    "known_event_names": "dialects",
    "EVENT_TYPES": "events",
    "Event": "events",
    "AggregatedResult": "output",
    "HookError": "output",
    "HookOutput": "output",
    "HookReport": "output",
    "HookSpecificOutput": "output",
    "ToolConfig": "output",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'relay.protocol' has no attribute {name!r}")
    return getattr(importlib.import_module(f"relay.protocol.{home}"), name)


__all__ = [
    "EVENT_TYPES",
    "AggregatedResult",
    "Answer",
    "Event",
    "EventEnvelope",
    "EventError",
    "HookError",
    "HookOutput",
    "HookReport",
    "HookSpecificOutput",
    "ProtocolError",
    "ToolConfig",
    "UnknownEventError",
    "canonical_name",
    "decode_event",
    "known_event_names",
    "make_event",
    "parse_answer",
]

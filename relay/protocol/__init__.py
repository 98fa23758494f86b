"""The wire protocol: typed events, hook output, dialects, schemas. No I/O."""

from __future__ import annotations

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

"""Decoding events from hosts and encoding them for hooks, in each dialect."""

from __future__ import annotations

import os
import uuid
from typing import Any

import msgspec

from relay.protocol.decoding import JsonDecodeError, decode_json, split_validation_error
from relay.protocol.dialects import Dialect, canonical_name, wire_name
from relay.protocol.events import EVENT_TYPES, Event, PassThrough
from relay.timestamps import utc_millis

_json_encoder = msgspec.json.Encoder()
_FIELD_NAMES: dict[type[Event], frozenset[str]] = {}


class EventError(ValueError):
    """An event that cannot be decoded; `path` names the offending field."""

    def __init__(self, message: str, path: str = "$") -> None:
        self.path = path
        super().__init__(f"{path}: {message}" if path != "$" else message)


BASE_ADDITIONS: frozenset[str] = frozenset({"session_id", "cwd", "timestamp", "hook_event_name"})
"""What relay adds to a host's event for hooks of the host's own dialect, when absent."""


class EventEnvelope(msgspec.Struct, kw_only=True):
    """A typed event plus the unknown fields it arrived with (passed through to hooks)."""

    event: Event
    extra: dict[str, Any] = msgspec.field(default_factory=dict)
    sent: frozenset[str] | None = None
    """The fields the host sent (None: relay made the whole event). A hook of a host's
    dialect sees only these, plus BASE_ADDITIONS: the host's event as the host sent it."""

    @property
    def name(self) -> str:
        """The canonical event name."""
        return self.event.hook_event_name

    @property
    def pass_through(self) -> bool:
        """True for an event relay only passes through (no canonical event of its own)."""
        return self.event.hook_event_name not in EVENT_TYPES

    def field(self, name: str) -> Any:
        """A field of the event, known or passed through (None when absent)."""
        if name in _field_names(type(self.event)):
            return getattr(self.event, name)
        return self.extra.get(name)

    def to_wire(self, dialect: Dialect) -> bytes:
        """The JSON a hook of `dialect` reads on stdin.

        A relay-dialect hook gets relay's typed event, every field present (defaults for
        what the host left out, as the schemas say). A hook of a host's dialect gets the
        event as the host sent it, plus only the base fields relay fills in.
        """
        body = msgspec.to_builtins(self.event)
        if dialect != "relay" and self.sent is not None:
            sent = self.sent
            body = {
                key: value for key, value in body.items() if key in sent or key in BASE_ADDITIONS
            }
        body.update(self.extra)
        body["hook_event_name"] = wire_name(self.event.hook_event_name, dialect)
        return _json_encoder.encode(body)


def event_type(canonical: str) -> type[Event]:
    """The Struct for a canonical event name (PassThrough for Claude's other events)."""
    return EVENT_TYPES.get(canonical, PassThrough)


def make_event(
    name: str,
    payload: dict[str, Any] | None = None,
    *,
    cwd: str | None = None,
    unknown_passes: bool = False,
) -> EventEnvelope:
    """Build an event from a partial payload, filling in the base fields (`cwd` if absent).

    `unknown_passes`: an event name no dialect knows is a pass-through event (hosts)."""
    canonical = canonical_name(name, unknown_passes=unknown_passes)
    data = dict(payload or {})
    data.pop("hook_event_name", None)
    cls = event_type(canonical)
    known = _field_names(cls)
    extra = {key: value for key, value in data.items() if key not in known}
    try:
        event = msgspec.convert({key: value for key, value in data.items() if key in known}, cls)
    except msgspec.ValidationError as exc:
        raise EventError(*split_validation_error(exc)) from None
    except RecursionError:
        raise EventError("nested too deeply") from None
    _fill_base(event, canonical, cwd)
    return EventEnvelope(event=event, extra=extra, sent=frozenset(data))


def complete_event(event: Event, name: str, *, cwd: str | None = None) -> Event:
    """A copy of a typed event with its (canonical) name set and missing base fields filled in."""
    copy = msgspec.structs.replace(event)
    _fill_base(copy, name, cwd)
    return copy


def _fill_base(event: Event, canonical: str, cwd: str | None) -> None:
    event.hook_event_name = canonical
    if not event.session_id:
        event.session_id = uuid.uuid4().hex
    if not event.cwd:
        event.cwd = _working_directory() if cwd is None else cwd  # "": left for the caller
    if not event.timestamp:
        event.timestamp = utc_timestamp()


def _working_directory() -> str:
    try:
        return os.getcwd()
    except OSError:
        raise EventError("the working directory no longer exists: give the event a cwd") from None


def decode_event(
    name: str, raw: bytes, *, cwd: str | None = None, unknown_passes: bool = False
) -> EventEnvelope:
    """Decode a JSON event object (possibly partial) sent by a host."""
    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark, as some editors write
    if not raw.strip():
        return make_event(name, cwd=cwd, unknown_passes=unknown_passes)
    try:
        value = decode_json(raw)
    except JsonDecodeError as exc:
        raise EventError(f"malformed JSON: {exc}") from None
    if not isinstance(value, dict):
        raise EventError("an event must be a JSON object")
    return make_event(name, value, cwd=cwd, unknown_passes=unknown_passes)


utc_timestamp = utc_millis
"""Now, as ISO 8601 UTC with a Z (an event's `timestamp`)."""


def _field_names(cls: type[Event]) -> frozenset[str]:
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.encode_name for f in msgspec.structs.fields(cls))
    return names

"""Which hooks run for one event, in what order, and whether one at a time (DESIGN §5, §6)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from relay.protocol.dialects import matcher_field

if TYPE_CHECKING:
    from relay.engine.registry import RegisteredHook


class Plan(msgspec.Struct, kw_only=True):
    """The hooks that run for one event, in plan order."""

    event: str
    hooks: list[Any]  # list[RegisteredHook]; Any keeps this module free of a cycle
    sequential: bool = False
    untrusted: list[Any] = msgspec.field(default_factory=list)
    """Hooks that matched the event but are not trusted: skipped (the user is told)."""


def plan_event(
    candidates: Sequence[RegisteredHook],
    event: str,
    field: Callable[[str], object],
    trusted: Callable[[RegisteredHook], bool] | None = None,
) -> Plan:
    """Select the matching hooks (already in plan order), dedup them, and pick the mode.

    `trusted` is asked only about hooks whose matcher accepts the event, before dedup (an
    untrusted project copy must not displace the user's own copy of a hook).
    """
    name = matcher_field(event)
    if name is not None:
        target = field(name)
        candidates = [hook for hook in candidates if hook.matcher(target)]
        if not candidates:  # the common case (a matcher for another tool): nothing more to do
            return Plan(event=event, hooks=[])
    chosen: list[RegisteredHook] = []
    untrusted: list[RegisteredHook] = []
    seen: set[object] = set()
    sequential = False
    for hook in candidates:
        if trusted is not None and not trusted(hook):
            untrusted.append(hook)
            continue
        # The same command registered twice for one event runs once (first in plan order).
        key = hook.dedup_key
        if key in seen:
            continue
        seen.add(key)
        chosen.append(hook)
        sequential = sequential or hook.sequential
    return Plan(event=event, hooks=chosen, sequential=sequential, untrusted=untrusted)

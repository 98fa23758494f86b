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
    broken: list[Any] = msgspec.field(default_factory=list)
    """Hooks that matched the event but whose settings entry is broken: not run (an error,
    or a deny for a failClosed one)."""


def plan_event(
    candidates: Sequence[RegisteredHook],
    event: str,
    field: Callable[[str], object],
    trusted: Callable[[RegisteredHook], bool] | None = None,
) -> Plan:
    """Select the matching hooks (already in plan order), dedup them, and pick the mode.

    `trusted` is asked only about hooks whose matcher accepts the event, before dedup (an
    untrusted project copy must not displace the user's own copy of a hook). Dedup keeps
    the first copy in plan order, except that a project copy never displaces a copy of
    the user's or system's: the project's runs before theirs in plan order, and its
    timeout, env or failClosed may differ (DESIGN §5).
    """
    name = matcher_field(event)
    if name is not None:
        target = field(name)
        candidates = [hook for hook in candidates if hook.matcher(target)]
        if not candidates:  # the common case (a matcher for another tool): nothing more to do
            return Plan(event=event, hooks=[])
    runnable: list[RegisteredHook] = []
    untrusted: list[RegisteredHook] = []
    broken: list[RegisteredHook] = []
    for hook in candidates:
        if hook.broken is not None:
            broken.append(hook)
        elif trusted is not None and not trusted(hook):
            untrusted.append(hook)
        else:
            runnable.append(hook)
    # The same command registered twice for one event runs once (first in plan order).
    keys = [hook.dedup_key for hook in runnable]
    own_seen: set[object] = set()
    project_seen = {key for hook, key in zip(runnable, keys, strict=True) if not hook.from_project}
    chosen: list[RegisteredHook] = []
    sequential = False
    for hook, key in zip(runnable, keys, strict=True):
        seen = project_seen if hook.from_project else own_seen
        if key in seen:
            continue
        seen.add(key)
        chosen.append(hook)
        sequential = sequential or hook.sequential
    return Plan(
        event=event, hooks=chosen, sequential=sequential, untrusted=untrusted, broken=broken
    )

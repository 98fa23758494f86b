"""Which hooks run for one event, in what order, and whether one at a time (DESIGN §5, §6)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from relay.protocol.dialects import matcher_field

if TYPE_CHECKING:
    from relay.engine.registry import RegisteredHook

_NAME_LIST = re.compile(r"[A-Za-z0-9_\- ,|]*")


class Matcher:
    """A Claude Code matcher: match-all, a list of exact names, or a regex searched in the target."""

    __slots__ = ("names", "pattern", "text")

    def __init__(self, text: str | None) -> None:
        self.text = text
        self.names: frozenset[str] | None = None
        self.pattern: re.Pattern[str] | None = None
        if text is None or text.strip() in ("", "*"):
            return
        if _NAME_LIST.fullmatch(text):
            self.names = frozenset(name.strip() for name in re.split(r"[|,]", text) if name.strip())
        else:
            self.pattern = re.compile(text)

    @property
    def matches_all(self) -> bool:
        """True when the matcher accepts every target."""
        return self.names is None and self.pattern is None

    def __call__(self, target: object) -> bool:
        if self.names is None and self.pattern is None:
            return True
        if not isinstance(target, str):
            return False
        if self.names is not None:
            return target in self.names
        assert self.pattern is not None
        return self.pattern.search(target) is not None

    def explain(self, target: object) -> str:
        """Why this matcher did or did not match `target`, in words."""
        if self.matches_all:
            return (
                "matcher matches everything"
                if self.text is None
                else f"matcher {self.text!r} matches everything"
            )
        verdict = "matches" if self(target) else "does not match"
        kind = "names" if self.names is not None else "regex"
        return f"{kind} {self.text!r} {verdict} {target!r}"


class Plan(msgspec.Struct, kw_only=True):
    """The hooks that run for one event, in plan order."""

    event: str
    hooks: list[Any]  # list[RegisteredHook]; Any keeps this module free of a cycle
    sequential: bool = False


def plan_event(
    candidates: Sequence[RegisteredHook], event: str, field: Callable[[str], object]
) -> Plan:
    """Select the matching hooks (already in plan order), dedup them, and pick the mode."""
    name = matcher_field(event)
    target = field(name) if name is not None else None
    chosen: list[RegisteredHook] = []
    seen: set[object] = set()
    sequential = False
    for hook in candidates:
        if name is not None and not hook.matcher(target):
            continue
        # The same command registered twice for one event runs once (first in plan order).
        key = hook.dedup_key
        if key in seen:
            continue
        seen.add(key)
        chosen.append(hook)
        sequential = sequential or hook.sequential
    return Plan(event=event, hooks=chosen, sequential=sequential)

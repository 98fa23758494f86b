"""Replaying a logged event against the current hooks, and what changed since it was logged."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from relay.engine.hooklog import LoggedEvent
from relay.errors import RelayError

if TYPE_CHECKING:
    from relay.engine.system import HookSystem

RESULT_FIELDS: tuple[str, ...] = (
    "decision",
    "reason",
    "continue",
    "stopReason",
    "inject",
    "systemMessage",
    "suppressOutput",
    "stopped_by",
    "tool_input",
    "hookSpecificOutput",
)
"""Fields of the result object compared by a replay, in the order changes are listed."""
HOOK_FIELDS: tuple[str, ...] = ("exit_code", "signal", "timed_out", "error", "output")
"""Fields of each hook's report compared by a replay."""

ChangeKind = Literal["field", "hook added", "hook removed", "hook"]


class ReplayError(RelayError):
    """A logged event that cannot be replayed (its stored input is no longer a valid event)."""

    def __init__(self, message: str, *, event_id: int) -> None:
        self.message = message
        self.event_id = event_id
        super().__init__(f"event {event_id}: {message}")


class Change(msgspec.Struct, kw_only=True):
    """One difference between the logged result and the replayed one.

    `field` names a result field (kind "field") or a hook's report field (kind "hook");
    `hook` names the hook for the hook kinds.
    """

    kind: ChangeKind
    field: str | None = None
    hook: str | None = None
    source: str | None = None
    before: Any = None
    after: Any = None


class Replay(msgspec.Struct, kw_only=True):
    """A logged event run again: the logged result, the new one, and how they differ."""

    id: int
    event: str
    before: dict[str, Any]
    """The logged result; for an event logged before relay kept results, only what the
    log's columns hold (decision and each hook's exit code, signal, timeout and error)."""
    after: dict[str, Any]
    changes: list[Change]


def replay_directory(logged: LoggedEvent) -> Path:
    """Where to find the project for a replay: the event's cwd if it still exists."""
    cwd = logged.input.get("cwd")
    if isinstance(cwd, str) and os.path.isdir(cwd):
        return Path(cwd)
    return Path.cwd()


def replay(logged: LoggedEvent, system: HookSystem) -> Replay:
    """Fire the logged event's input again through `system` and compare the results."""
    from relay.protocol.codec import EventError, make_event
    from relay.protocol.dialects import UnknownEventError

    try:
        envelope = make_event(logged.event, logged.input)
    except (EventError, UnknownEventError) as exc:
        message = f"the logged input is not a valid event: {exc}"
        raise ReplayError(message, event_id=logged.id) from None
    result = system.run(envelope.name, envelope)
    before = logged_result(logged)
    after: dict[str, Any] = msgspec.to_builtins(result)
    return Replay(
        id=logged.id,
        event=logged.event,
        before=before,
        after=after,
        changes=compare(before, after),
    )


def logged_result(logged: LoggedEvent) -> dict[str, Any]:
    """The result the log kept for an event, or what its columns still say of it."""
    if logged.result is not None:
        return logged.result
    return {
        "hook_event_name": logged.event,
        "decision": logged.decision,
        "hooks": [
            {
                "name": call.hook,
                "source": call.source,
                "exit_code": call.exit_code,
                "signal": call.signal,
                "timed_out": call.timed_out,
                "error": call.error,
            }
            for call in logged.hook_calls
        ],
    }


def compare(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Change]:
    """How `after` differs from `before` (result objects); a field `before` lacks is not compared."""
    changes = [
        Change(kind="field", field=name, before=before[name], after=after.get(name))
        for name in RESULT_FIELDS
        if name in before and before[name] != after.get(name)
    ]
    old = _hooks_by_key(before)
    new = _hooks_by_key(after)
    for key in old:
        if key not in new:
            changes.append(Change(kind="hook removed", hook=key[0], source=key[1]))
    for key, report in new.items():
        if key not in old:
            changes.append(Change(kind="hook added", hook=key[0], source=key[1]))
            continue
        previous = old[key]
        changes.extend(
            Change(
                kind="hook",
                hook=key[0],
                source=key[1],
                field=name,
                before=previous[name],
                after=report.get(name),
            )
            for name in HOOK_FIELDS
            if name in previous and previous[name] != report.get(name)
        )
    return changes


def _hooks_by_key(result: Mapping[str, Any]) -> dict[tuple[str, str, int], Mapping[str, Any]]:
    """A result's hook reports by (name, source, n-th of that name and source)."""
    reports: dict[tuple[str, str, int], Mapping[str, Any]] = {}
    seen: dict[tuple[str, str], int] = {}
    for report in result.get("hooks") or []:
        if not isinstance(report, Mapping):
            continue
        identity = (str(report.get("name")), str(report.get("source")))
        seen[identity] = seen.get(identity, 0) + 1
        reports[(*identity, seen[identity])] = report
    return reports

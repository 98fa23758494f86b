"""Trying hooks on one event and explaining what happened (the library side of `relay hooks test`).

Runs through the production path (HookSystem.run with a trace), so what it shows is what
relay does for real; adds the hooks that did not run and why, and teaching warnings.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from relay.engine.diagnosis import diagnose, hook_script_problems
from relay.engine.registry import RegisteredHook
from relay.engine.system import HookSystem
from relay.engine.trace import HookTrace
from relay.protocol.codec import EventEnvelope
from relay.protocol.dialects import matcher_field
from relay.protocol.output import AggregatedResult

Expectation = Literal["allow", "ask", "deny", "halt", "stop", "inject"]
EXPECTATIONS: tuple[Expectation, ...] = ("allow", "ask", "deny", "halt", "stop", "inject")


class TriedHook(msgspec.Struct, kw_only=True):
    """One hook that ran: its full trace and every warning about it."""

    trace: HookTrace
    warnings: list[str]


class SkippedHook(msgspec.Struct, kw_only=True):
    """A hook registered for the event that did not run, and why."""

    name: str
    source: str
    registered_as: str
    reason: str


class Trial(msgspec.Struct, kw_only=True):
    """The outcome of trying the hooks on one event."""

    event: dict[str, Any]
    hooks: list[TriedHook]
    skipped: list[SkippedHook]
    result: AggregatedResult

    @property
    def errored(self) -> bool:
        """True when any hook failed (an entry in the result's errors)."""
        return bool(self.result.errors)


def try_hooks(system: HookSystem, envelope: EventEnvelope, *, only: str | None = None) -> Trial:
    """Run the event's hooks (or only the one named `only`) with full tracing."""
    selected = (lambda hook: hook.name == only) if only is not None else None
    traces: list[HookTrace] = []
    result = system.run(envelope.name, envelope, trace=traces, only=selected)
    ran = {(trace.name, trace.source) for trace in traces}
    registered = {(hook.name, hook.source): hook for hook in system.registry.hooks}
    tried = [
        TriedHook(
            trace=trace,
            warnings=[
                *trace.report.warnings,
                *diagnose(trace, envelope.name, fail_closed=hook is not None and hook.fail_closed),
                *_script_warnings(system, hook, trace),
            ],
        )
        for trace in traces
        for hook in [registered.get((trace.name, trace.source))]
    ]
    skipped = [
        SkippedHook(name=hook.name, source=hook.source, registered_as=hook.event, reason=reason)
        for hook in system.registry.hooks
        if hook.canonical == envelope.name and (hook.name, hook.source) not in ran
        for reason in [_why_not(system, hook, envelope, only, result)]
    ]
    return Trial(
        event=msgspec.json.decode(envelope.to_wire("relay")),
        hooks=tried,
        skipped=skipped,
        result=result,
    )


def _script_warnings(
    system: HookSystem, hook: RegisteredHook | None, trace: HookTrace
) -> list[str]:
    """What is wrong with the script the hook runs (no execute bit, a bad #! line, …),
    except what the run's own error already said."""
    if hook is None or hook.entry is None:
        return []
    problems = hook_script_problems(hook.entry, system.project_dir)
    error = trace.report.error or ""
    return [problem for problem in problems if not ("chmod +x" in problem and "chmod +x" in error)]


def holds(result: AggregatedResult, expectation: Expectation) -> bool:
    """Whether the merged result meets `--expect`."""
    if expectation in ("allow", "ask", "deny"):
        return result.decision == expectation
    if expectation == "halt":
        return not result.continue_
    if expectation == "stop":
        return result.stopped_by is not None
    return result.inject is not None


def _why_not(
    system: HookSystem,
    hook: RegisteredHook,
    envelope: EventEnvelope,
    only: str | None,
    result: AggregatedResult,
) -> str:
    if only is not None and hook.name != only:
        return f"not selected (--hook {only})"
    if not system.registry.enabled:
        return "all hooks are off (hooksConfig.enabled is false)"
    if not hook.enabled:
        return "disabled (hooksConfig.disabled or enabled: false)"
    if not hook.trusted and hook.refusal is not None:
        return f"cannot be trusted as written: {hook.refusal}"
    if not hook.trusted:
        return "not trusted: review it and run `relay trust`"
    if hook.broken is not None:
        return f"its settings entry is broken: {hook.broken.errors[0]}"
    field = matcher_field(envelope.name)
    if field is not None and not hook.matcher(envelope.field(field)):
        return hook.matcher.explain(envelope.field(field))
    if result.stopped_by is not None:
        return f"not started: {result.stopped_by} stopped the chain"
    return "a duplicate of an earlier hook (same command, args, cwd and env): runs once"

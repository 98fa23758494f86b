"""HookSystem: one event in, one merged result out (registry -> planner -> runner -> aggregator)."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relay.config.discovery import SettingsSet, load_settings
from relay.config.model import DEFAULT_TIMEOUT, HookEntry
from relay.config.paths import find_project_root
from relay.config.trust import TrustStore
from relay.engine.aggregator import TOOL_INPUT_EVENTS, HookOutcome, aggregate
from relay.engine.planner import plan_event
from relay.engine.registry import PythonHandler, RegisteredHook, Registry, runtime_hook
from relay.engine.telemetry import (
    CallRecord,
    Telemetry,
    debug,
    debug_enabled,
    log_path,
    resolve_max_events,
)
from relay.engine.trace import HookTrace
from relay.errors import RelayError
from relay.protocol.codec import EventEnvelope, complete_event, make_event
from relay.protocol.dialects import canonical_name
from relay.protocol.events import Event
from relay.protocol.output import AggregatedResult

if TYPE_CHECKING:
    from relay.engine.execution import Executor

Payload = Mapping[str, Any] | Event | EventEnvelope | None

MAX_PARALLEL = 32


class HookSystem:
    """The engine's facade: register hooks, fire events, get one merged result."""

    def __init__(
        self,
        *,
        cwd: str | Path | None = None,
        settings: Sequence[str | Path] = (),
        load_files: bool = True,
        trust: TrustStore | None = None,
        telemetry: Telemetry | bool = True,
        max_parallel: int = MAX_PARALLEL,
        quiet: bool = False,
    ) -> None:
        self.cwd = Path(cwd) if cwd is not None else None
        self.extra_settings = [Path(path) for path in settings]
        self.load_files = load_files
        self._trust = trust
        self._telemetry_option = telemetry
        self.telemetry: Telemetry | None = None
        self.max_parallel = max_parallel
        # quiet: problems found while running (an unwritable log) are kept for warnings()
        # instead of printed, so a host's stderr stays the deny reason alone.
        self.quiet = quiet
        self._problems: list[str] = []
        self._runtime: list[RegisteredHook] = []
        self._registry: Registry | None = None
        self._settings: SettingsSet | None = None
        self._executor: Executor | None = None
        self._start = self.cwd or Path("/")  # set for real by initialize()

    # -- set-up ---------------------------------------------------------------------

    def initialize(self) -> None:
        """Load settings and build the registry; calling it again does nothing."""
        if self._registry is not None:
            return
        start = self._start = self.cwd or _working_directory()
        if self.load_files:
            self._settings = load_settings(start, self.extra_settings)
        else:
            self._settings = SettingsSet(root=find_project_root(start), files=[])
        if self._trust is None:
            self._trust = TrustStore()
        self._registry = Registry(self._settings, runtime=self._runtime, trust=self._trust)
        if self._telemetry_option is True:
            self.telemetry = Telemetry(
                log_path(),
                max_events=resolve_max_events(self._settings.files),
                on_problem=self._problem,
            )
        elif isinstance(self._telemetry_option, Telemetry):
            self.telemetry = self._telemetry_option
        if debug_enabled():
            for hook in self._registry.untrusted:
                debug(f"skipping untrusted hook {hook.name} from {hook.file}")

    def register(
        self,
        event: str,
        handler: PythonHandler,
        *,
        matcher: str | None = None,
        name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        sequential: bool = False,
        fail_closed: bool = False,
    ) -> None:
        """Register an in-process hook: `handler(event)` returns a dict, HookOutput, str or None."""
        if not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self._runtime.append(
            runtime_hook(
                event,
                handler,
                position=len(self._runtime),
                matcher=matcher,
                name=name,
                timeout=timeout,
                sequential=sequential,
                fail_closed=fail_closed,
            )
        )
        self._registry = None  # rebuilt on next use, so late registrations take effect
        self._executor = None

    def register_command(
        self,
        event: str,
        command: str,
        *,
        args: Sequence[str] | None = None,
        matcher: str | None = None,
        name: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        fail_closed: bool = False,
    ) -> RegisteredHook:
        """Register a command hook from Python (not from a file): trusted, first in plan order."""
        if not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        entry = HookEntry(
            command=command,
            args=list(args) if args is not None else None,
            name=name,
            timeout=timeout,
            failClosed=fail_closed,
        )
        hook = runtime_hook(
            event,
            None,
            entry=entry,
            position=len(self._runtime),
            matcher=matcher,
            name=name or entry.display_name,
            timeout=timeout,
            fail_closed=fail_closed,
        )
        self._runtime.append(hook)
        self._registry = None
        self._executor = None
        return hook

    @property
    def registry(self) -> Registry:
        """The registry (initializing on first use)."""
        if self._registry is None:
            self.initialize()
        assert self._registry is not None
        return self._registry

    @property
    def settings(self) -> SettingsSet:
        """The settings files in use."""
        self.registry  # noqa: B018 - initializes
        assert self._settings is not None
        return self._settings

    @property
    def _start_text(self) -> str:
        return str(self._start)

    @property
    def project_dir(self) -> Path:
        """The project root, or the working directory when there is none."""
        return self.settings.root or self._start

    def warnings(self) -> list[str]:
        """Settings warnings and one line naming untrusted hooks, for the user."""
        lines = [str(warning) for warning in self.settings.warnings]
        lines.extend(self.registry.warnings)
        lines.extend(self._problems)
        untrusted = self.registry.untrusted
        if untrusted:
            names = ", ".join(sorted({hook.name for hook in untrusted}))
            lines.append(
                f"skipped {len(untrusted)} untrusted project hook(s): {names}; "
                f"review them and run `relay trust` in {self.project_dir} to allow them"
            )
        return lines

    def _problem(self, message: str) -> None:
        self._problems.append(message)
        if not self.quiet:
            print(f"relay: warning: {message}", file=sys.stderr)

    def close(self) -> None:
        """Flush the hook log."""
        if self.telemetry is not None:
            self.telemetry.close()

    # -- firing ---------------------------------------------------------------------

    async def fire(
        self,
        event: str,
        payload: Payload = None,
        *,
        trace: list[HookTrace] | None = None,
        only: Callable[[RegisteredHook], bool] | None = None,
    ) -> AggregatedResult:
        """Run every matching hook for `event` and merge their answers.

        `payload` is a (partial) event object, a typed Event, or an EventEnvelope that
        also carries fields relay does not know (they reach the hooks unchanged).
        `trace` receives each hook's full run, in plan order; `only` keeps the hooks
        it returns True for (the rest are not considered at all).
        """
        prepared = self._prepare(event, payload, only)
        if isinstance(prepared, AggregatedResult):
            return prepared
        return await self._run_plan(*prepared, trace)

    def run(
        self,
        event: str,
        payload: Payload = None,
        *,
        trace: list[HookTrace] | None = None,
        only: Callable[[RegisteredHook], bool] | None = None,
    ) -> AggregatedResult:
        """`fire` for synchronous code; starts an event loop only when a hook has to run."""
        prepared = self._prepare(event, payload, only)
        if isinstance(prepared, AggregatedResult):
            return prepared
        import anyio  # only now: see relay.engine.execution

        return anyio.run(self._run_plan, *prepared, trace)

    def _prepare(
        self, event: str, payload: Payload, only: Callable[[RegisteredHook], bool] | None
    ) -> AggregatedResult | tuple[EventEnvelope, list[RegisteredHook], bool]:
        """The plan for an event, or its result already when no hook matches."""
        canonical = canonical_name(event)
        candidates = self.registry.for_event(canonical)
        if only is not None:
            candidates = [hook for hook in candidates if only(hook)]
        if isinstance(payload, Event):
            payload = EventEnvelope(event=payload)
        if isinstance(payload, EventEnvelope):
            # A copy: the caller's event is not changed, and missing base fields are filled.
            payload = EventEnvelope(
                event=complete_event(payload.event, canonical, cwd=self._start_text),
                extra=payload.extra,
            )
            plan = plan_event(candidates, canonical, payload.field) if candidates else None
            if plan is None or not plan.hooks:
                return _no_hooks(canonical, getattr(payload.event, "tool_input", None))
            return payload, plan.hooks, plan.sequential
        raw = payload or {}
        # Fast path: match on the raw object and build the typed event only when a hook runs.
        plan = plan_event(candidates, canonical, raw.get) if candidates else None
        if plan is None or not plan.hooks:
            return _no_hooks(canonical, raw.get("tool_input"))
        envelope = make_event(canonical, dict(raw), cwd=self._start_text)
        return envelope, plan.hooks, plan.sequential

    async def _run_plan(
        self,
        envelope: EventEnvelope,
        hooks: list[RegisteredHook],
        sequential: bool,
        trace: list[HookTrace] | None = None,
    ) -> AggregatedResult:
        if self._executor is None:
            from relay.engine.execution import Executor  # lazily: see that module

            self._executor = Executor(
                project_dir=self.project_dir, max_parallel=self.max_parallel, environ=os.environ
            )
        started = time.perf_counter()
        traces: dict[int, HookTrace] | None = {} if trace is not None else None
        outcomes, warnings = await self._executor.run(envelope, hooks, sequential, traces)
        if trace is not None and traces is not None:
            trace.extend(traces[id(hook)] for hook in hooks if id(hook) in traces)
        result = aggregate(
            envelope.name,
            outcomes,
            tool_input=getattr(envelope.event, "tool_input", None),
            warnings=warnings,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        if self.telemetry is not None:
            self.telemetry.record(
                CallRecord(
                    time=envelope.event.timestamp,
                    session_id=envelope.event.session_id,
                    event=envelope.name,
                    input=envelope.to_wire("relay"),
                    result=result,
                    decisions=[_decision_of(outcome) for outcome in outcomes],
                )
            )
        return result


def _working_directory() -> Path:
    try:
        return Path.cwd()
    except OSError:
        raise RelayError("the working directory no longer exists: give a cwd") from None


def _no_hooks(event: str, tool_input: object) -> AggregatedResult:
    """The result of an event no hook matched (it still carries BeforeTool's input)."""
    if event in TOOL_INPUT_EVENTS and isinstance(tool_input, dict):
        return AggregatedResult(hook_event_name=event, tool_input=tool_input)
    return AggregatedResult(hook_event_name=event)


def _decision_of(outcome: HookOutcome) -> str | None:
    if outcome.answer.error is not None:
        return "deny" if outcome.fail_closed else None
    return outcome.answer.decision

"""HookSystem: one event in, one merged result out (registry -> planner -> runner -> aggregator)."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from relay.config.discovery import SettingsCache, SettingsSet, load_settings
from relay.config.model import DEFAULT_TIMEOUT, TRUST_REQUIRED, HookEntry
from relay.config.paths import find_project_root, state_file
from relay.config.trust import DigestCache, TrustStore
from relay.engine.aggregator import TOOL_INPUT_EVENTS, HookOutcome, aggregate
from relay.engine.planner import Plan, plan_event
from relay.engine.registry import (
    PythonHandler,
    RegisteredHook,
    Registry,
    RegistryCache,
    runtime_hook,
)
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
from relay.protocol.answers import Answer
from relay.protocol.codec import EventEnvelope, complete_event, make_event
from relay.protocol.dialects import canonical_name
from relay.protocol.events import Event
from relay.protocol.output import AggregatedResult, HookReport

if TYPE_CHECKING:
    from relay.engine.execution import Executor, Foreseen

Payload = Mapping[str, Any] | Event | EventEnvelope | None

MAX_PARALLEL = 32
_ROOT = Path("/")


class PlannedEvent(msgspec.Struct, kw_only=True):
    """An event with its plan (`HookSystem.plan`), or its result already when no hook runs."""

    result: AggregatedResult | None = None
    envelope: EventEnvelope | None = None
    plan: Plan | None = None

    @property
    def untrusted(self) -> list[str]:
        """The names of the project hooks this event would run and may not (the result's
        `untrusted` once it has run), known before it runs."""
        if self.result is not None:
            return self.result.untrusted
        return _names(self.plan.untrusted) if self.plan is not None else []


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
        environ: Mapping[str, str] | None = None,
        settings_cache: SettingsCache | None = None,
        digests: DigestCache | None = None,
        isolate: Collection[str] = TRUST_REQUIRED,
        registries: RegistryCache | None = None,
    ) -> None:
        self.cwd = cwd if isinstance(cwd, Path) or cwd is None else Path(cwd)
        # The environment relay reads (RELAY_HOME, RELAY_SETTINGS, …) and hooks inherit:
        # this process's, or a client's when `relay serve` answers for it.
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self.settings_cache = settings_cache
        self.digests = digests
        # A resident server's registries by settings identity (None: built per system).
        self.registries = registries
        # Settings scopes whose broken files are set aside instead of raising (see
        # load_settings): the project's by default; every scope for a host's call.
        self.isolate = isolate
        self.extra_settings = [Path(path) for path in settings]
        self.load_files = load_files
        self._trust = trust
        self._telemetry_option = telemetry
        self.telemetry: Telemetry | None = None
        # A list: each event's record for the hook log is left here (as a call that makes
        # it), for the caller to make once its answer is out (relay serve: the host is
        # not kept waiting for it). None: recorded at once.
        self.deferred_records: list[Callable[[], None]] | None = None
        self.max_parallel = max_parallel
        # quiet: problems found while running (an unwritable log) are kept for warnings()
        # instead of printed, so a host's stderr stays the deny reason alone.
        self.quiet = quiet
        self._problems: list[str] = []
        self._runtime: list[RegisteredHook] = []
        self._registry: Registry | None = None
        self._settings: SettingsSet | None = None
        self._executor: Executor | None = None
        self._start = self.cwd or _ROOT  # set for real by initialize()

    # -- set-up ---------------------------------------------------------------------

    def initialize(self) -> None:
        """Load settings and build the registry; calling it again does nothing."""
        if self._registry is not None:
            return
        start = self._start = self.cwd or _working_directory()
        if self.load_files:
            self._settings = load_settings(
                start,
                self.extra_settings,
                env=self.environ,
                cache=self.settings_cache,
                isolate=self.isolate,
            )
        else:
            self._settings = SettingsSet(root=find_project_root(start), files=[])
        if self._trust is None:
            self._trust = TrustStore(state_file("trust.json", self.environ))
        if self.registries is not None and not self._runtime:
            self._registry = self.registries.view(self._settings, self._trust, self.digests)
        else:
            self._registry = Registry(
                self._settings, runtime=self._runtime, trust=self._trust, digests=self.digests
            )
        if self._telemetry_option is True:
            self.telemetry = Telemetry(
                log_path(self.environ),
                max_events=resolve_max_events(self._settings.files, self.environ),
                on_problem=self._problem,
            )
        elif isinstance(self._telemetry_option, Telemetry):
            self.telemetry = self._telemetry_option

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

    def warnings(self, *, untrusted: list[str] | None = None) -> list[str]:
        """Settings warnings, broken project files, and one line naming untrusted hooks
        (`untrusted`: these names; default: every untrusted project hook, which
        fingerprints them all)."""
        lines = [str(warning) for warning in self.settings.warnings]
        lines.extend(self.settings.problems())
        lines.extend(self.registry.warnings)
        lines.extend(self._problems)
        if untrusted is None:
            untrusted = sorted({hook.name for hook in self.registry.untrusted})
        refused = self.registry.refused_names()
        if cannot := [name for name in untrusted if name in refused]:
            lines.append(
                f"skipped {len(cannot)} project hook(s) relay cannot trust as written: "
                f"{', '.join(cannot)}; `relay trust` in {self.project_dir} says why and how "
                f"to pin them"
            )
        if untrusted := [name for name in untrusted if name not in refused]:
            lines.append(
                f"skipped {len(untrusted)} untrusted project hook(s): {', '.join(untrusted)}; "
                f"review them and run `relay trust` in {self.project_dir} to allow them"
            )
        return lines

    def _problem(self, message: str) -> None:
        self._problems.append(message)
        if not self.quiet:
            print(f"relay: warning: {message}", file=sys.stderr)

    def close(self, *, leave_open: bool = False) -> None:
        """Flush the hook log (`leave_open`: see Telemetry.close)."""
        if self.telemetry is not None:
            self.telemetry.close(leave_open=leave_open)

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
        envelope, plan = prepared
        return await self._fire_planned(PlannedEvent(envelope=envelope, plan=plan), trace)

    def run(
        self,
        event: str,
        payload: Payload = None,
        *,
        trace: list[HookTrace] | None = None,
        only: Callable[[RegisteredHook], bool] | None = None,
    ) -> AggregatedResult:
        """`fire` for synchronous code: command hooks run on this thread, with no event loop
        (one is started only for Python hooks)."""
        return self.run_planned(self.plan(event, payload, only=only), trace=trace)

    def plan(
        self,
        event: str,
        payload: Payload = None,
        *,
        only: Callable[[RegisteredHook], bool] | None = None,
    ) -> PlannedEvent:
        """Which hooks an event would run, without running them (`run_planned` does)."""
        prepared = self._prepare(event, payload, only)
        if isinstance(prepared, AggregatedResult):
            return PlannedEvent(result=prepared)
        envelope, plan = prepared
        return PlannedEvent(envelope=envelope, plan=plan)

    def run_planned(
        self,
        planned: PlannedEvent,
        *,
        trace: list[HookTrace] | None = None,
        meanwhile: Callable[[], None] | None = None,
        foreseen: Foreseen | None = None,
    ) -> AggregatedResult:
        """Run a planned event's hooks (on this thread unless some are Python hooks) and merge.
        `meanwhile`: the caller's work that needs no result, done once the first command
        hooks have started (while they run), else before the run; it must not raise.
        `foreseen`: the result for the endings it expects is made before `meanwhile` (which
        may use it), and is the result when the hooks end so (`Foreseen.taken`); used for a
        parallel run of command hooks whose outcomes nothing else changes, else ignored."""
        if planned.result is not None:
            if meanwhile is not None:
                meanwhile()
            return planned.result
        envelope, plan = planned.envelope, planned.plan
        assert envelope is not None and plan is not None
        if any(hook.handler is not None for hook in plan.hooks):
            import anyio

            if meanwhile is not None:
                meanwhile()
            return anyio.run(self._fire_planned, planned, trace)
        started = time.perf_counter()
        traces: dict[int, HookTrace] | None = {} if trace is not None else None
        if foreseen is not None and _foreseeable(plan, trace):
            meanwhile = self._foreseeing(foreseen, envelope, plan, meanwhile)
        else:
            foreseen = None
        outcomes, warnings = self._executor_for().run_sync(
            envelope, plan.hooks, plan.sequential, traces, meanwhile=meanwhile, foreseen=foreseen
        )
        if foreseen is not None and foreseen.taken and foreseen.result is not None:
            result = foreseen.result  # the same outcomes, with this run's durations
            result.duration_ms = round((time.perf_counter() - started) * 1000, 3)
            self._record(envelope, outcomes, result)
            return result
        if foreseen is not None:
            foreseen.taken = False  # its outcomes were taken, but not its result
        return self._finish(
            envelope, plan, outcomes, warnings, started=started, traces=traces, trace=trace
        )

    def _foreseeing(
        self,
        foreseen: Foreseen,
        envelope: EventEnvelope,
        plan: Plan,
        caller: Callable[[], None] | None,
    ) -> Callable[[], None]:
        """The work while the hooks run: the foreseen outcomes' result, then the caller's."""

        def meanwhile() -> None:
            with contextlib.suppress(Exception):  # then made after the run, as always
                if foreseen.outcomes is not None:
                    foreseen.result = self._result(envelope, plan, foreseen.outcomes, [], 0.0)
            if caller is not None:
                caller()

        return meanwhile

    def time_bound(self, planned: PlannedEvent) -> float:
        """Seconds within which `run_planned` returns for this plan, whatever its hooks do."""
        if planned.plan is None:
            return 0.0
        from relay.engine.execution import time_bound

        plan = planned.plan
        return time_bound(plan.hooks, plan.sequential, self.max_parallel, plan.event)

    async def _fire_planned(
        self, planned: PlannedEvent, trace: list[HookTrace] | None
    ) -> AggregatedResult:
        from relay.engine.async_execution import run_plan  # only now: it brings in anyio

        envelope, plan = planned.envelope, planned.plan
        assert envelope is not None and plan is not None
        started = time.perf_counter()
        traces: dict[int, HookTrace] | None = {} if trace is not None else None
        outcomes, warnings = await run_plan(
            self._executor_for(), envelope, plan.hooks, plan.sequential, traces
        )
        return self._finish(
            envelope, plan, outcomes, warnings, started=started, traces=traces, trace=trace
        )

    def add_environment(self, values: Mapping[str, str]) -> None:
        """Give every hook run from now on `values` in its environment (on top of the one
        relay reads): `relay run` adds the session's team, as it does for its agent."""
        self.environ = {**self.environ, **values}
        if self._executor is not None:
            self._executor.environ.update(values)

    def _executor_for(self) -> Executor:
        if self._executor is None:
            from relay.engine.execution import Executor

            self._executor = Executor(
                project_dir=self.project_dir, max_parallel=self.max_parallel, environ=self.environ
            )
        return self._executor

    def _prepare(
        self, event: str, payload: Payload, only: Callable[[RegisteredHook], bool] | None
    ) -> AggregatedResult | tuple[EventEnvelope, Plan]:
        """The plan for an event, or its result already when no hook is to run."""
        # An envelope was decoded by a caller that already judged its name (a host's newer
        # event passes through); a raw payload's name must be one relay knows.
        canonical = canonical_name(event, unknown_passes=isinstance(payload, EventEnvelope))
        registry = self.registry
        candidates = registry.candidates(canonical)
        if only is not None:
            candidates = [hook for hook in candidates if only(hook)]
        if isinstance(payload, Event):
            payload = EventEnvelope(event=payload)
        if isinstance(payload, EventEnvelope):
            envelope: EventEnvelope | None = self._completed(payload, canonical)
            assert envelope is not None
            field: Callable[[str], object] = envelope.field
            tool_input = getattr(envelope.event, "tool_input", None)
        else:
            # Fast path: match on the raw object and build the typed event only when a hook runs.
            raw = payload or {}
            envelope, field, tool_input = None, raw.get, raw.get("tool_input")
        plan = plan_event(candidates, canonical, field, registry.is_trusted) if candidates else None
        if plan is None or not (plan.hooks or plan.untrusted or plan.broken):
            return _no_hooks(canonical, tool_input)  # the common case: keep it short
        if not plan.hooks and not plan.broken and not _fail_closed(plan.untrusted):
            result = _no_hooks(canonical, tool_input)
            result.untrusted = _names(plan.untrusted)
            if debug_enabled():
                for hook in plan.untrusted:
                    debug(f"skipping untrusted hook {hook.name} from {hook.file}")
            return result
        if envelope is None:
            envelope = make_event(canonical, dict(payload or {}), cwd=self._start_text)  # type: ignore[arg-type]
        return envelope, plan

    def _completed(self, envelope: EventEnvelope, canonical: str) -> EventEnvelope:
        if _complete(envelope.event, canonical):
            return envelope  # an event no run changes in place is used as it is
        # A copy: the caller's event is not changed, and missing base fields are filled.
        return EventEnvelope(
            event=complete_event(envelope.event, canonical, cwd=self._start_text),
            extra=envelope.extra,
            sent=envelope.sent,
        )

    # -- the same plan for another call (relay serve's plan cache) -----------------------

    def for_call(self, environ: Mapping[str, str]) -> HookSystem:
        """This system as an initialized one for another call whose plan's inputs are the
        same (its settings files and project, by their stats: see hosts.call's plan cache):
        its settings, registry (a view with trust answers of its own) and options, with
        `environ` for the hooks and nothing of this call's run (hook log, problems)."""
        assert self._registry is not None and not self._runtime
        copy = object.__new__(HookSystem)
        copy.__dict__.update(self.__dict__)
        copy.environ = environ
        copy.telemetry = None
        copy.deferred_records = None
        copy._problems = []
        copy._executor = None
        copy._registry = self._registry.view()
        return copy

    def planned_again(self, plan: Plan | None, envelope: EventEnvelope) -> PlannedEvent:
        """What `plan(envelope.name, envelope)` gives when its plan is `plan` (None: no
        hook runs), without planning: `plan` came from a system whose settings and
        registry this one's are (`for_call`), for an event that matches the same way."""
        canonical = canonical_name(envelope.name, unknown_passes=True)
        if plan is None:
            return PlannedEvent(
                result=_no_hooks(canonical, getattr(envelope.event, "tool_input", None))
            )
        return PlannedEvent(envelope=self._completed(envelope, canonical), plan=plan)

    def _finish(
        self,
        envelope: EventEnvelope,
        plan: Plan,
        outcomes: list[HookOutcome],
        warnings: list[str],
        *,
        started: float,
        traces: dict[int, HookTrace] | None,
        trace: list[HookTrace] | None,
    ) -> AggregatedResult:
        if trace is not None and traces is not None:
            trace.extend(traces[id(hook)] for hook in plan.hooks if id(hook) in traces)
        duration = round((time.perf_counter() - started) * 1000, 3)
        outcomes = [*outcomes, *_not_run(plan)]
        result = self._result(envelope, plan, outcomes, warnings, duration)
        self._record(envelope, outcomes, result)
        return result

    def _result(
        self,
        envelope: EventEnvelope,
        plan: Plan,
        outcomes: list[HookOutcome],
        warnings: list[str],
        duration_ms: float,
    ) -> AggregatedResult:
        """The merged result of a run's outcomes (the hooks that did not run included)."""
        result = aggregate(
            envelope.name,
            outcomes,
            tool_input=getattr(envelope.event, "tool_input", None),
            warnings=warnings,
            duration_ms=duration_ms,
        )
        result.untrusted = _names(plan.untrusted)
        return result

    def _record(
        self, envelope: EventEnvelope, outcomes: list[HookOutcome], result: AggregatedResult
    ) -> None:
        """The hook log's record of a run, made now or left to the caller."""
        telemetry = self.telemetry
        if telemetry is not None:

            def record() -> None:
                telemetry.record(
                    CallRecord(
                        time=envelope.event.timestamp,
                        session_id=envelope.event.session_id,
                        event=envelope.name,
                        input=envelope.to_wire("relay"),
                        result=result,
                        decisions=[_decision_of(outcome) for outcome in outcomes],
                        agent=envelope.event.agent_name
                        or self.environ.get("RELAY_AGENT_NAME")
                        or None,
                    )
                )

            if self.deferred_records is None:
                record()
            else:
                self.deferred_records.append(record)


def _working_directory() -> Path:
    try:
        return Path.cwd()
    except OSError:
        raise RelayError("the working directory no longer exists: give a cwd") from None


def _complete(event: Event, canonical: str) -> bool:
    """Whether `complete_event` would give an equal copy of `event`."""
    return (
        event.hook_event_name == canonical
        and bool(event.session_id)
        and bool(event.cwd)
        and bool(event.timestamp)
    )


def _no_hooks(event: str, tool_input: object) -> AggregatedResult:
    """The result of an event no hook matched (it still carries BeforeTool's input)."""
    if event in TOOL_INPUT_EVENTS and isinstance(tool_input, dict):
        return AggregatedResult(hook_event_name=event, tool_input=tool_input)
    return AggregatedResult(hook_event_name=event)


def _not_run(plan: Plan) -> list[HookOutcome]:
    """The outcomes of the planned hooks that may not run: a failClosed one that is not
    trusted denies (its author said: no answer, no go), one whose settings entry is broken
    is an error, or a deny if failClosed."""
    outcomes = [_untrusted_outcome(hook) for hook in _fail_closed(plan.untrusted)]
    outcomes.extend(_broken_outcome(hook) for hook in plan.broken)
    return outcomes


def _foreseeable(plan: Plan, trace: list[HookTrace] | None) -> bool:
    """Whether a run's result can be made for expected endings before they are known: a
    parallel run of command hooks, all of one side (no hook judges another's rewrite
    again), untraced, with no debug lines to write twice, every planned hook running."""
    sides = {hook.from_project for hook in plan.hooks}
    return (
        not plan.sequential
        and trace is None
        and len(sides) == 1
        and not plan.untrusted
        and not plan.broken
        and not debug_enabled()
    )


def _fail_closed(hooks: list[RegisteredHook]) -> list[RegisteredHook]:
    return [hook for hook in hooks if hook.fail_closed]


def _names(hooks: list[RegisteredHook]) -> list[str]:
    return list(dict.fromkeys(hook.name for hook in hooks))


def _untrusted_outcome(hook: RegisteredHook) -> HookOutcome:
    if hook.refusal is not None:
        message = f"not run: cannot be trusted as written ({hook.refusal})"
    else:
        message = "not run: not trusted (new, or changed since `relay trust`)"
    report = HookReport(name=hook.name, source=hook.source, command=hook.command, error=message)
    return HookOutcome(
        report=report, answer=Answer(error=message), fail_closed=True, from_project=True
    )


def _broken_outcome(hook: RegisteredHook) -> HookOutcome:
    assert hook.broken is not None
    message = f"not run: its settings entry is broken: {hook.broken.errors[0]}"
    report = HookReport(name=hook.name, source=hook.source, command=hook.command, error=message)
    return HookOutcome(
        report=report,
        answer=Answer(error=message),
        fail_closed=hook.fail_closed,
        from_project=hook.from_project,
    )


def _decision_of(outcome: HookOutcome) -> str | None:
    if outcome.answer.error is not None:
        return "deny" if outcome.fail_closed else None
    return outcome.answer.decision

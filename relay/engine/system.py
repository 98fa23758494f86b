"""HookSystem: one event in, one merged result out (registry -> planner -> runner -> aggregator)."""

from __future__ import annotations

import inspect
import logging
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import msgspec

from relay.config.discovery import SettingsSet, load_settings
from relay.config.paths import find_project_root, state_dir
from relay.config.trust import TrustStore
from relay.engine.aggregator import TOOL_INPUT_EVENTS, HookOutcome, aggregate, apply_tool_input
from relay.engine.command import PROJECT_VARS, Launch, prepare_launch, substitute_project_vars
from relay.engine.planner import plan_event
from relay.engine.registry import PythonHandler, RegisteredHook, Registry, runtime_hook
from relay.engine.runner import ProcessResult, install_child_watcher, run_process
from relay.engine.telemetry import CallRecord, Telemetry, configure_debug_log
from relay.protocol.answers import Answer, answer_from_value, first_lines, parse_answer
from relay.protocol.codec import EventEnvelope, make_event
from relay.protocol.dialects import canonical_name, wire_name
from relay.protocol.events import Event
from relay.protocol.output import AggregatedResult, HookReport

log = logging.getLogger("relay")

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
    ) -> None:
        self.cwd = Path(cwd) if cwd is not None else None
        self.extra_settings = [Path(path) for path in settings]
        self.load_files = load_files
        self._trust = trust
        self._telemetry_option = telemetry
        self.telemetry: Telemetry | None = None
        self.max_parallel = max_parallel
        self._runtime: list[RegisteredHook] = []
        self._registry: Registry | None = None
        self._settings: SettingsSet | None = None
        self._launches: dict[int, Launch] = {}
        self._limiter: anyio.CapacityLimiter | None = None
        self._start = Path.cwd()

    # -- set-up ---------------------------------------------------------------------

    def initialize(self) -> None:
        """Load settings and build the registry; calling it again does nothing."""
        if self._registry is not None:
            return
        configure_debug_log()
        start = self._start = self.cwd or Path.cwd()
        if self.load_files:
            self._settings = load_settings(start, self.extra_settings)
        else:
            self._settings = SettingsSet(root=find_project_root(start), files=[])
        if self._trust is None:
            self._trust = TrustStore()
        self._registry = Registry(self._settings, runtime=self._runtime, trust=self._trust)
        if self._telemetry_option is True:
            self.telemetry = Telemetry(state_dir() / "telemetry.db")
        elif isinstance(self._telemetry_option, Telemetry):
            self.telemetry = self._telemetry_option
        for hook in self._registry.untrusted:
            log.debug("skipping untrusted hook %s from %s", hook.name, hook.file)

    def register(
        self,
        event: str,
        handler: PythonHandler,
        *,
        matcher: str | None = None,
        name: str | None = None,
        timeout: float = 60.0,
        sequential: bool = False,
        fail_closed: bool = False,
    ) -> None:
        """Register an in-process hook: `handler(event)` returns a dict, HookOutput, str or None."""
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
        self._launches.clear()

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
    def project_dir(self) -> Path:
        """The project root, or the working directory when there is none."""
        return self.settings.root or self._start

    def warnings(self) -> list[str]:
        """Settings warnings and one line naming untrusted hooks, for the user."""
        lines = [str(warning) for warning in self.settings.warnings]
        untrusted = self.registry.untrusted
        if untrusted:
            names = ", ".join(sorted({hook.name for hook in untrusted}))
            lines.append(
                f"skipped {len(untrusted)} untrusted project hook(s): {names}; "
                f"review them and run `relay trust` in {self.project_dir} to allow them"
            )
        return lines

    def close(self) -> None:
        """Flush the hook log."""
        if self.telemetry is not None:
            self.telemetry.close()

    # -- firing ---------------------------------------------------------------------

    async def fire(
        self, event: str, payload: Mapping[str, Any] | Event | EventEnvelope | None = None
    ) -> AggregatedResult:
        """Run every matching hook for `event` and merge their answers.

        `payload` is a (partial) event object, a typed Event, or an EventEnvelope that
        also carries fields relay does not know (they reach the hooks unchanged).
        """
        canonical = canonical_name(event)
        candidates = self.registry.for_event(canonical)
        if isinstance(payload, Event):
            payload = EventEnvelope(event=payload)
        if isinstance(payload, EventEnvelope):
            payload.event.hook_event_name = canonical
            plan = plan_event(candidates, canonical, payload.field) if candidates else None
            if plan is None or not plan.hooks:
                return _no_hooks(canonical, getattr(payload.event, "tool_input", None))
            return await self._run_plan(payload, plan.hooks, plan.sequential)
        raw = payload or {}
        # Fast path: match on the raw object and build the typed event only when a hook runs.
        plan = plan_event(candidates, canonical, raw.get) if candidates else None
        if plan is None or not plan.hooks:
            return _no_hooks(canonical, raw.get("tool_input"))
        envelope = make_event(canonical, dict(raw))
        return await self._run_plan(envelope, plan.hooks, plan.sequential)

    async def _run_plan(
        self, envelope: EventEnvelope, hooks: list[RegisteredHook], sequential: bool
    ) -> AggregatedResult:
        install_child_watcher()
        started = time.perf_counter()
        original_input = getattr(envelope.event, "tool_input", None)
        warnings: list[str] = []
        if sequential:
            outcomes = await self._run_sequential(envelope, hooks, warnings)
        else:
            outcomes = await self._run_parallel(envelope, hooks)
        result = aggregate(
            envelope.name,
            outcomes,
            tool_input=original_input,
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

    async def _run_parallel(
        self, envelope: EventEnvelope, hooks: list[RegisteredHook]
    ) -> list[HookOutcome]:
        if len(hooks) == 1:
            return [await self._run_hook(hooks[0], envelope, {})]
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.max_parallel)
        limiter = self._limiter
        outcomes: list[HookOutcome | None] = [None] * len(hooks)
        wire: dict[str, bytes] = {}

        async def run(index: int, hook: RegisteredHook) -> None:
            async with limiter:
                outcomes[index] = await self._run_hook(hook, envelope, wire)

        async with anyio.create_task_group() as group:
            for index, hook in enumerate(hooks):
                group.start_soon(run, index, hook)
        return [outcome for outcome in outcomes if outcome is not None]

    async def _run_sequential(
        self, envelope: EventEnvelope, hooks: list[RegisteredHook], warnings: list[str]
    ) -> list[HookOutcome]:
        outcomes: list[HookOutcome] = []
        current = envelope
        for index, hook in enumerate(hooks):
            outcome = await self._run_hook(hook, current, {})
            outcomes.append(outcome)
            answer = outcome.answer
            if answer.stop and answer.error is None:
                for skipped in hooks[index + 1 :]:
                    warnings.append(
                        f"hook {skipped.name} not started: {hook.name} stopped the chain"
                    )
                break
            tool_input = getattr(current.event, "tool_input", None)
            if (
                current.name in TOOL_INPUT_EVENTS
                and tool_input is not None
                and answer.tool_input is not None
            ):
                # Each later hook sees the input as rewritten so far.
                rewritten = apply_tool_input(tool_input, answer)
                current = EventEnvelope(
                    event=msgspec.structs.replace(current.event, tool_input=rewritten),
                    extra=current.extra,
                )
        return outcomes

    async def _run_hook(
        self, hook: RegisteredHook, envelope: EventEnvelope, wire: dict[str, bytes]
    ) -> HookOutcome:
        if hook.handler is not None:
            return await self._run_python(hook, envelope)
        assert hook.entry is not None
        stdin = wire.get(hook.dialect)
        if stdin is None:
            stdin = wire[hook.dialect] = envelope.to_wire(hook.dialect)
        project_dir = str(self.project_dir)
        process = await run_process(
            self._launch(hook, project_dir),
            stdin=stdin,
            env=self._environment(hook, envelope, project_dir),
            cwd=self._hook_cwd(hook, envelope, project_dir),
            timeout=hook.timeout,
            kill_signal=signal.Signals[hook.entry.signal],
        )
        answer = _answer_from_process(hook, envelope, process)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%s %s: %s exit=%s %.1fms %s",
                envelope.name,
                hook.name,
                process.launch.mode,
                process.exit_code,
                process.duration_ms,
                answer.error or answer.decision or "",
            )
        report = HookReport(
            name=hook.name,
            source=hook.source,
            command=hook.command,
            exit_code=process.exit_code,
            signal=process.signal,
            timed_out=process.timed_out,
            duration_ms=round(process.duration_ms, 3),
            output=answer.output,
            error=answer.error,
            stdout_truncated=process.stdout_truncated,
            stderr_truncated=process.stderr_truncated,
            warnings=answer.warnings,
        )
        return HookOutcome(report=report, answer=answer, fail_closed=hook.fail_closed)

    async def _run_python(self, hook: RegisteredHook, envelope: EventEnvelope) -> HookOutcome:
        handler = hook.handler
        assert handler is not None
        started = time.perf_counter()
        timed_out = False
        event = envelope.event
        if hook.dialect != "relay":
            # Like a settings hook, a handler registered under a Claude name sees Claude's name.
            event = msgspec.structs.replace(
                event, hook_event_name=wire_name(envelope.name, hook.dialect)
            )
        try:
            with anyio.fail_after(hook.timeout):
                if inspect.iscoroutinefunction(handler):
                    value = await handler(event)
                else:
                    # A thread, so that a slow sync handler is held to the same timeout.
                    value = await anyio.to_thread.run_sync(handler, event, abandon_on_cancel=True)
                    if inspect.isawaitable(value):
                        value = await value
            answer = answer_from_value(
                envelope.name, value, dialect=hook.dialect, pass_through=envelope.pass_through
            )
        except TimeoutError:
            timed_out = True
            answer = Answer(error=f"timed out after {hook.timeout:g}s")
        except Exception as exc:  # a Python hook's failure is data, like a process's
            answer = Answer(error=f"python hook raised {type(exc).__name__}: {exc}")
        report = HookReport(
            name=hook.name,
            source=hook.source,
            command=hook.command,
            exit_code=None,
            timed_out=timed_out,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
            output=answer.output,
            error=answer.error,
            warnings=answer.warnings,
        )
        return HookOutcome(report=report, answer=answer, fail_closed=hook.fail_closed)

    def _launch(self, hook: RegisteredHook, project_dir: str) -> Launch:
        launch = self._launches.get(id(hook))
        if launch is None:
            assert hook.entry is not None
            values = dict.fromkeys(PROJECT_VARS, project_dir)
            launch = self._launches[id(hook)] = prepare_launch(
                hook.entry.command, hook.entry.args, values
            )
        return launch

    def _environment(
        self, hook: RegisteredHook, envelope: EventEnvelope, project_dir: str
    ) -> dict[str, str]:
        env = dict(os.environ)
        for name in PROJECT_VARS:
            env[name] = project_dir
        env["RELAY_SESSION_ID"] = envelope.event.session_id
        env["RELAY_EVENT"] = envelope.name
        env["RELAY_AGENT_NAME"] = envelope.event.agent_name or ""
        assert hook.entry is not None
        env.update(hook.entry.env)
        return env

    def _hook_cwd(self, hook: RegisteredHook, envelope: EventEnvelope, project_dir: str) -> str:
        assert hook.entry is not None
        if hook.entry.cwd:
            cwd = substitute_project_vars(hook.entry.cwd, dict.fromkeys(PROJECT_VARS, project_dir))
            return str(Path(project_dir, os.path.expanduser(cwd)))
        event_cwd = envelope.event.cwd
        return event_cwd if event_cwd and os.path.isdir(event_cwd) else project_dir


def _answer_from_process(
    hook: RegisteredHook, envelope: EventEnvelope, process: ProcessResult
) -> Answer:
    """Read a finished process as an answer; failures become errors (DESIGN §4)."""
    stderr = first_lines(process.stderr)
    suffix = f": {stderr}" if stderr else ""
    if process.spawn_error is not None:
        return Answer(error=f"could not start: {process.spawn_error}")
    if process.timed_out:
        assert hook.entry is not None
        return Answer(error=f"timed out after {hook.timeout:g}s (sent {hook.entry.signal}){suffix}")
    if process.signal is not None:
        return Answer(error=f"killed by {process.signal}{suffix}")
    if process.stdout_truncated and process.exit_code == 0:
        # A cut JSON object cannot be trusted: fail open rather than act on half an answer.
        answer = Answer(error=f"stdout over the {len(process.stdout)}-byte cap; answer ignored")
    else:
        answer = parse_answer(
            envelope.name,
            exit_code=process.exit_code,
            stdout=process.stdout,
            stderr=process.stderr,
            dialect=hook.dialect,
            pass_through=envelope.pass_through,
        )
    if answer.error is not None and stderr and process.exit_code == 0:
        answer.error += suffix  # exit 0 errors (protocol, cap) carry stderr too (DESIGN §4)
    return answer


def _no_hooks(event: str, tool_input: object) -> AggregatedResult:
    """The result of an event no hook matched (it still carries BeforeTool's input)."""
    if event in TOOL_INPUT_EVENTS and isinstance(tool_input, dict):
        return AggregatedResult(hook_event_name=event, tool_input=tool_input)
    return AggregatedResult(hook_event_name=event)


def _decision_of(outcome: HookOutcome) -> str | None:
    if outcome.answer.error is not None:
        return "deny" if outcome.fail_closed else None
    return outcome.answer.decision

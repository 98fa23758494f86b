"""Running a plan's command hooks: from a registered hook and an event to a process spec,
from the finished process to an outcome, and the synchronous run of a whole plan.

No event loop here: `relay hooks run` and `relay serve` run plans through the runner's
poll driver on their own thread, and import neither asyncio nor anyio (a host pays for
every import on every event, DESIGN §10). Plans with Python hooks, and callers inside an
event loop, use relay.engine.async_execution, which shares everything below.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import msgspec

from relay.engine.aggregator import (
    TOOL_INPUT_EVENTS,
    HookOutcome,
    apply_tool_input,
    cap_output,
    cap_text,
    project_rewrite,
    taking_effect,
)
from relay.engine.command import PROJECT_VARS, Launch, prepare_launch, substitute_project_vars
from relay.engine.interpreters import pinned_launch
from relay.engine.registry import RegisteredHook
from relay.engine.runner import (
    DEFAULT_EXIT_DRAIN,
    DEFAULT_GRACE,
    ProcessResult,
    ProcessSpec,
    run_processes,
)
from relay.engine.telemetry import debug, debug_enabled
from relay.engine.trace import HookTrace
from relay.protocol.answers import Answer, first_lines, parse_answer
from relay.protocol.codec import EventEnvelope
from relay.protocol.dialects import matcher_field
from relay.protocol.output import AggregatedResult, HookReport

Traces = dict[int, HookTrace]
"""Traces of one run, by id() of the RegisteredHook."""


class Prepared(msgspec.Struct, kw_only=True):
    """A command hook ready to start: its process spec, and what a trace shows of it."""

    hook: RegisteredHook
    spec: ProcessSpec


Ending = tuple[object, ...]
"""What a hook's answer is made of, of how its process ended (`ending_of`): equal endings
give equal answers for the same hook and event."""


def ending_of(process: ProcessResult) -> Ending:
    """The parts of a finished process its answer is read from (not its duration or pid)."""
    return (
        process.exit_code,
        process.signal,
        process.timed_out,
        process.spawn_error,
        process.stdout,
        process.stderr,
        process.stdout_truncated,
        process.stderr_truncated,
    )


class Foreseen:
    """A parallel run's outcomes and result made while its hooks run, for the endings they
    are expected to have (`endings`, one per hook in plan order; relay serve expects those
    of the plan's last run): taken (`taken`) when they do end so, instead of being made
    after them, with the run's own durations. `result` is None until made, or when the
    caller finds it unusable. `seen`: how the hooks did end, once they have."""

    __slots__ = ("endings", "made", "outcomes", "result", "seen", "taken")

    def __init__(self, endings: list[Ending] | None) -> None:
        self.endings = endings
        self.outcomes: list[HookOutcome] | None = None
        self.result: AggregatedResult | None = None
        self.made: object = None
        """What the caller made of `result` meanwhile (relay serve: the host's answer)."""
        self.taken = False
        self.seen: list[Ending] | None = None


class Executor:
    """Runs planned hooks for one HookSystem; keeps what can be reused between events."""

    def __init__(self, *, project_dir: Path, max_parallel: int, environ: Mapping[str, str]) -> None:
        self.project_dir = str(project_dir)
        self.max_parallel = max_parallel
        # One copy of the environment per HookSystem, not per hook: copying os.environ
        # cost about 85 µs a hook (DESIGN §10 per-hook budget).
        self.environ = dict(environ)
        self.project_vars = dict.fromkeys(PROJECT_VARS, self.project_dir)
        self._launches: dict[int, Launch] = {}

    # ---- the synchronous run

    def run_sync(
        self,
        envelope: EventEnvelope,
        hooks: list[RegisteredHook],
        sequential: bool,
        traces: Traces | None = None,
        *,
        meanwhile: Callable[[], None] | None = None,
        foreseen: Foreseen | None = None,
    ) -> tuple[list[HookOutcome], list[str]]:
        """Run command hooks on this thread (parallel or one at a time); outcomes and warnings.
        `meanwhile`: the caller's work, done once the first hooks have started (run_processes).
        `foreseen`: outcomes made meanwhile for expected endings (a parallel run only)."""
        warnings: list[str] = []
        if sequential:
            chain = Chain(envelope, hooks, warnings)
            for index, hook, current in chain:
                item = self.prepare(hook, current, {})
                (process,) = run_processes([item.spec], meanwhile=meanwhile)
                meanwhile = None
                chain.record(index, self.outcome(item, current, process, traces))
            if meanwhile is not None:
                meanwhile()
            return chain.outcomes(), warnings
        outcomes = self._parallel(envelope, hooks, traces, meanwhile, foreseen)
        again = judge_again(envelope, hooks, outcomes, warnings)
        if again is not None:
            rewritten, indexes = again
            for index, outcome in zip(
                indexes, self._parallel(rewritten, [hooks[i] for i in indexes], traces), strict=True
            ):
                outcomes[index] = outcome
        return outcomes, warnings

    def _parallel(
        self,
        envelope: EventEnvelope,
        hooks: list[RegisteredHook],
        traces: Traces | None,
        meanwhile: Callable[[], None] | None = None,
        foreseen: Foreseen | None = None,
    ) -> list[HookOutcome]:
        wire: dict[str, bytes] = {}
        prepared = [self.prepare(hook, envelope, wire) for hook in hooks]
        endings = foreseen.endings if foreseen is not None else None
        if foreseen is not None and endings is not None and len(endings) == len(hooks):
            caller = meanwhile

            def meanwhile() -> None:
                with contextlib.suppress(Exception):  # then made after the run, as always
                    foreseen.outcomes = [
                        self.outcome(item, envelope, _ended(item.spec.launch, ending), None)
                        for item, ending in zip(prepared, endings, strict=True)
                    ]
                if caller is not None:
                    caller()

        processes = run_processes(
            [item.spec for item in prepared], max_parallel=self.max_parallel, meanwhile=meanwhile
        )
        if foreseen is not None:
            foreseen.seen = [ending_of(process) for process in processes]
            outcomes = foreseen.outcomes
            if outcomes is not None and foreseen.seen == endings:
                foreseen.taken = True
                for outcome, process in zip(outcomes, processes, strict=True):
                    outcome.report.duration_ms = round(process.duration_ms, 3)
                return outcomes
        return [
            self.outcome(item, envelope, process, traces)
            for item, process in zip(prepared, processes, strict=True)
        ]

    # ---- one command hook

    def prepare(
        self, hook: RegisteredHook, envelope: EventEnvelope, wire: dict[str, bytes]
    ) -> Prepared:
        """The process spec of a command hook for this event (`wire` caches the encoded event)."""
        assert hook.entry is not None
        stdin = wire.get(hook.dialect)
        if stdin is None:
            stdin = wire[hook.dialect] = envelope.to_wire(hook.dialect)
        spec = ProcessSpec(
            launch=self._launch(hook),
            stdin=stdin,
            env=self._environment(hook, envelope),
            cwd=self._hook_cwd(hook),
            timeout=hook.timeout,
            kill_signal=_signal(hook.entry.signal),
        )
        return Prepared(hook=hook, spec=spec)

    def outcome(
        self,
        prepared: Prepared,
        envelope: EventEnvelope,
        process: ProcessResult,
        traces: Traces | None,
    ) -> HookOutcome:
        """What a finished hook process means: its answer, report and (optionally) trace."""
        hook = prepared.hook
        try:
            answer = _answer_from_process(hook, envelope, process)
        except Exception as exc:  # one hook's odd output never breaks the event
            answer = Answer(error=f"relay could not read the answer: {type(exc).__name__}: {exc}")
        if debug_enabled():
            debug(
                f"{envelope.name} {hook.name}: {process.launch.mode} exit={process.exit_code}"
                f" {process.duration_ms:.1f}ms {answer.error or answer.decision or ''}"
            )
        report = HookReport(
            name=hook.name,
            source=hook.source,
            command=hook.command,
            exit_code=process.exit_code,
            signal=process.signal,
            timed_out=process.timed_out,
            duration_ms=round(process.duration_ms, 3),
            output=cap_output(answer.output),
            error=cap_text(answer.error),
            stdout_truncated=process.stdout_truncated,
            stderr_truncated=process.stderr_truncated,
            warnings=answer.warnings,
        )
        if traces is not None:
            traces[id(hook)] = make_trace(
                hook,
                envelope,
                report,
                mode=process.launch.mode,
                argv=list(process.launch.argv),
                cwd=prepared.spec.cwd,
                stdin=prepared.spec.stdin,
                stdout=process.stdout,
                stderr=process.stderr,
            )
        return HookOutcome(
            report=report,
            answer=answer,
            fail_closed=hook.fail_closed,
            from_project=hook.from_project,
        )

    def _launch(self, hook: RegisteredHook) -> Launch:
        launch = self._launches.get(id(hook))
        if launch is None:
            assert hook.entry is not None
            args = hook.entry.args
            launch = self._launches[id(hook)] = _launch_for(
                hook.entry.command, None if args is None else tuple(args), self.project_dir
            )
        if hook.pin is not None:
            # A trusted project hook runs the script bytes its trust check read, not
            # whatever is at the path by now (DESIGN §7).
            return pinned_launch(launch, hook.pin, self._hook_cwd(hook))
        return launch

    def _environment(self, hook: RegisteredHook, envelope: EventEnvelope) -> dict[str, str]:
        env = dict(self.environ)
        env.update(self.project_vars)
        # NUL cannot be in an environment variable: one in the event must not stop every hook.
        env["RELAY_SESSION_ID"] = envelope.event.session_id.replace("\0", "")
        env["RELAY_EVENT"] = envelope.name
        env["RELAY_AGENT_NAME"] = (envelope.event.agent_name or "").replace("\0", "")
        assert hook.entry is not None
        env.update(hook.entry.env)
        return env

    def _hook_cwd(self, hook: RegisteredHook) -> str:
        # The project root, not the event's cwd: a relative script path then names the
        # file that trust fingerprinted, whatever directory the agent is in.
        assert hook.entry is not None
        if hook.entry.cwd:
            cwd = substitute_project_vars(hook.entry.cwd, self.project_vars)
            return str(Path(self.project_dir, os.path.expanduser(cwd)))
        return self.project_dir


def _ended(launch: Launch, ending: Ending) -> ProcessResult:
    """A process of `launch` that ended as `ending` says (`ending_of`)."""
    exit_code, signal_name, timed_out, spawn_error, stdout, stderr, out_cut, err_cut = ending
    return ProcessResult(
        launch=launch,
        exit_code=exit_code,  # type: ignore[arg-type]
        signal=signal_name,  # type: ignore[arg-type]
        timed_out=timed_out,  # type: ignore[arg-type]
        spawn_error=spawn_error,  # type: ignore[arg-type]
        stdout=stdout,  # type: ignore[arg-type]
        stderr=stderr,  # type: ignore[arg-type]
        stdout_truncated=out_cut,  # type: ignore[arg-type]
        stderr_truncated=err_cut,  # type: ignore[arg-type]
    )


@functools.lru_cache(maxsize=1024)
def _launch_for(command: str, args: tuple[str, ...] | None, project_dir: str) -> Launch:
    """A command's launch in a project, kept: a server starts the same hooks again and
    again (a Launch is never changed)."""
    return prepare_launch(command, args, dict.fromkeys(PROJECT_VARS, project_dir))


@functools.lru_cache(maxsize=64)
def _signal(name: str) -> signal.Signals:
    return signal.Signals[name]


def time_bound(
    hooks: list[RegisteredHook], sequential: bool, max_parallel: int, event: str = ""
) -> float:
    """Seconds within which these hooks have all returned, whatever they do (DESIGN §6):
    each hook's timeout, the grace before SIGKILL and the drain after its exit, and in a
    parallel event the user's hooks judging a project's rewrite again (`judge_again`)."""
    if not hooks:
        return 0.0
    bounds = [hook.timeout + (0.0 if hook.handler else _SLACK) for hook in hooks]
    if sequential:
        return sum(bounds)
    width = max(max_parallel, 1)
    total = -(-len(bounds) // width) * max(bounds)
    if event in TOOL_INPUT_EVENTS:
        own = [bound for hook, bound in zip(hooks, bounds, strict=True) if not hook.from_project]
        if own and len(own) < len(bounds):
            total += -(-len(own) // width) * max(own)
    return total


_SLACK = DEFAULT_GRACE + DEFAULT_EXIT_DRAIN
"""What a command hook may take past its timeout: the grace before SIGKILL, the drain."""


class Chain:
    """A sequential plan, one hook at a time: which hook runs next, on what input.

    Each hook sees the tool input as rewritten so far. On an event whose input hooks
    rewrite (BeforeTool), the project's hooks run first and the user's after them, so
    that the user's hooks judge the input that will run. A stop keeps the hooks after
    it in plan order from starting; a project hook's stop, only the project's hooks
    (DESIGN §5, scopes and authority). Outcomes come back in plan order.
    """

    def __init__(
        self, envelope: EventEnvelope, hooks: list[RegisteredHook], warnings: list[str]
    ) -> None:
        self.hooks = hooks
        self.current = envelope
        self.warnings = warnings
        self._outcomes: dict[int, HookOutcome] = {}
        self._project_stopper: str | None = None
        self._stopper: tuple[int, str] | None = None
        order = list(range(len(hooks)))
        if envelope.name in TOOL_INPUT_EVENTS:
            order.sort(key=lambda index: not hooks[index].from_project)
        self._order = order

    def __iter__(self) -> Iterator[tuple[int, RegisteredHook, EventEnvelope]]:
        for index in self._order:
            hook = self.hooks[index]
            stopper = self._stopped(index, hook)
            if stopper is not None:
                self.warnings.append(f"hook {hook.name} not started: {stopper} stopped the chain")
                continue
            yield index, hook, self.current

    def record(self, index: int, outcome: HookOutcome) -> None:
        """A hook's outcome: a stop, or the input the next hook sees."""
        self._outcomes[index] = outcome
        answer = outcome.answer
        if answer.error is not None:
            return
        if answer.stop:
            hook = self.hooks[index]
            if not hook.from_project:
                self._stopper = self._stopper or (index, hook.name)
            elif self._project_stopper is None:
                self._project_stopper = hook.name
        tool_input = getattr(self.current.event, "tool_input", None)
        if (
            self.current.name in TOOL_INPUT_EVENTS
            and tool_input is not None
            and answer.tool_input is not None
        ):
            self.current = EventEnvelope(
                event=msgspec.structs.replace(
                    self.current.event, tool_input=apply_tool_input(tool_input, answer)
                ),
                extra=self.current.extra,
                sent=self.current.sent,
            )

    def outcomes(self) -> list[HookOutcome]:
        """The outcomes of the hooks that ran, in plan order."""
        return [self._outcomes[index] for index in sorted(self._outcomes)]

    def _stopped(self, index: int, hook: RegisteredHook) -> str | None:
        """Who keeps this hook from starting, if anyone."""
        if self._stopper is not None and index > self._stopper[0]:
            return self._stopper[1]
        if hook.from_project and self._project_stopper is not None:
            return self._project_stopper
        return None


def judge_again(
    envelope: EventEnvelope,
    hooks: list[RegisteredHook],
    outcomes: list[HookOutcome],
    warnings: list[str],
) -> tuple[EventEnvelope, list[int]] | None:
    """After a parallel run: when the project's hooks rewrote the tool input, the event as
    they rewrote it and the user's hooks (their indexes) that must judge it, since they
    judged the host's original (DESIGN §5: a user guard judges the input that will run)."""
    if envelope.name not in TOOL_INPUT_EVENTS:
        return None
    original = getattr(envelope.event, "tool_input", None)
    own = [index for index, hook in enumerate(hooks) if not hook.from_project]
    if original is None or not own or len(own) == len(hooks):
        return None
    rewritten = project_rewrite(original, outcomes)
    if rewritten == original:
        return None
    taken, _ = taking_effect(outcomes)
    rewriters = [
        outcome.report.name
        for outcome in taken
        if outcome.from_project
        and outcome.answer.tool_input is not None
        and outcome.answer.error is None
    ]
    judges = ", ".join(hooks[index].name for index in own)
    warnings.append(
        f"{judges} judged the tool input again, as rewritten by project hook(s) "
        f"{', '.join(rewriters)}"
    )
    event = msgspec.structs.replace(envelope.event, tool_input=rewritten)
    return EventEnvelope(event=event, extra=envelope.extra, sent=envelope.sent), own


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


def make_trace(
    hook: RegisteredHook,
    envelope: EventEnvelope,
    report: HookReport,
    *,
    mode: str,
    argv: list[str],
    cwd: str | None,
    stdin: bytes,
    stdout: bytes,
    stderr: bytes,
) -> HookTrace:
    """One hook's full run, for `relay hooks test` and replays."""
    field = matcher_field(envelope.name)
    target = envelope.field(field) if field is not None else None
    return HookTrace(
        name=hook.name,
        source=hook.source,
        registered_as=hook.event,
        dialect=hook.dialect,
        matcher=hook.matcher.text,
        matched=hook.matcher.explain(target)
        if field is not None
        else "this event has no matcher field",
        mode=mode,
        argv=argv,
        cwd=cwd,
        timeout=hook.timeout,
        stdin=stdin.decode("utf-8", "replace"),
        stdout=stdout.decode("utf-8", "replace"),
        stderr=stderr.decode("utf-8", "replace"),
        report=report,
    )

"""Running a plan's hooks: processes through the runner, Python hooks in-process.

HookSystem imports this module only when a hook has to run: it brings in anyio's core,
asyncio and the runner, which an event with no hook to run must not pay for at start-up
(`relay hooks run` with no hooks, DESIGN §10).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import msgspec

from relay.engine.aggregator import (
    TOOL_INPUT_EVENTS,
    HookOutcome,
    apply_tool_input,
    cap_output,
    cap_text,
)
from relay.engine.command import PROJECT_VARS, Launch, prepare_launch, substitute_project_vars
from relay.engine.registry import RegisteredHook
from relay.engine.runner import ProcessResult, run_process
from relay.engine.telemetry import debug, debug_enabled
from relay.engine.trace import HookTrace
from relay.protocol.answers import Answer, answer_from_value, first_lines, parse_answer
from relay.protocol.codec import EventEnvelope
from relay.protocol.dialects import matcher_field, wire_name
from relay.protocol.output import HookReport

Traces = dict[int, HookTrace]
"""Traces of one run, by id() of the RegisteredHook."""


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
        self._limiter: anyio.CapacityLimiter | None = None

    async def run(
        self,
        envelope: EventEnvelope,
        hooks: list[RegisteredHook],
        sequential: bool,
        traces: Traces | None = None,
    ) -> tuple[list[HookOutcome], list[str]]:
        """Run the hooks (in plan order, parallel or one at a time); outcomes and warnings.

        With `traces`, each hook's full run is recorded there under id(hook).
        """
        warnings: list[str] = []
        if sequential:
            return await self._run_sequential(envelope, hooks, warnings, traces), warnings
        return await self._run_parallel(envelope, hooks, traces), warnings

    async def _run_parallel(
        self, envelope: EventEnvelope, hooks: list[RegisteredHook], traces: Traces | None
    ) -> list[HookOutcome]:
        if len(hooks) == 1:
            return [await self._run_hook(hooks[0], envelope, {}, traces)]
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.max_parallel)
        limiter = self._limiter
        outcomes: list[HookOutcome | None] = [None] * len(hooks)
        wire: dict[str, bytes] = {}

        async def run(index: int, hook: RegisteredHook) -> None:
            async with limiter:
                outcomes[index] = await self._run_hook(hook, envelope, wire, traces)

        async with anyio.create_task_group() as group:
            for index, hook in enumerate(hooks):
                group.start_soon(run, index, hook)
        return [outcome for outcome in outcomes if outcome is not None]

    async def _run_sequential(
        self,
        envelope: EventEnvelope,
        hooks: list[RegisteredHook],
        warnings: list[str],
        traces: Traces | None,
    ) -> list[HookOutcome]:
        outcomes: list[HookOutcome] = []
        current = envelope
        for index, hook in enumerate(hooks):
            outcome = await self._run_hook(hook, current, {}, traces)
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
        self,
        hook: RegisteredHook,
        envelope: EventEnvelope,
        wire: dict[str, bytes],
        traces: Traces | None,
    ) -> HookOutcome:
        if hook.handler is not None:
            return await self._run_python(hook, envelope, traces)
        assert hook.entry is not None
        stdin = wire.get(hook.dialect)
        if stdin is None:
            stdin = wire[hook.dialect] = envelope.to_wire(hook.dialect)
        project_dir = self.project_dir
        cwd = self._hook_cwd(hook, project_dir)
        process = await run_process(
            self._launch(hook, project_dir),
            stdin=stdin,
            env=self._environment(hook, envelope, project_dir),
            cwd=cwd,
            timeout=hook.timeout,
            kill_signal=signal.Signals[hook.entry.signal],
        )
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
            traces[id(hook)] = _trace(
                hook,
                envelope,
                report,
                mode=process.launch.mode,
                argv=list(process.launch.argv),
                cwd=cwd,
                stdin=stdin,
                stdout=process.stdout,
                stderr=process.stderr,
            )
        return HookOutcome(report=report, answer=answer, fail_closed=hook.fail_closed)

    async def _run_python(
        self, hook: RegisteredHook, envelope: EventEnvelope, traces: Traces | None
    ) -> HookOutcome:
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
        value: object = None
        try:
            with anyio.fail_after(hook.timeout):
                if inspect.iscoroutinefunction(handler):
                    value = await handler(event)
                else:
                    value = await _in_daemon_thread(handler, event)
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
            output=cap_output(answer.output),
            error=cap_text(answer.error),
            warnings=answer.warnings,
        )
        if traces is not None:
            returned = b"" if value is None or answer.error else _encode_returned(value)
            traces[id(hook)] = _trace(
                hook,
                envelope,
                report,
                mode="python",
                argv=[hook.command],
                cwd=None,
                stdin=msgspec.json.encode(event),
                stdout=returned,
                stderr=b"",
            )
        return HookOutcome(report=report, answer=answer, fail_closed=hook.fail_closed)

    def _launch(self, hook: RegisteredHook, project_dir: str) -> Launch:
        launch = self._launches.get(id(hook))
        if launch is None:
            assert hook.entry is not None
            launch = self._launches[id(hook)] = prepare_launch(
                hook.entry.command, hook.entry.args, self.project_vars
            )
        return launch

    def _environment(
        self, hook: RegisteredHook, envelope: EventEnvelope, project_dir: str
    ) -> dict[str, str]:
        env = dict(self.environ)
        env.update(self.project_vars)
        # NUL cannot be in an environment variable: one in the event must not stop every hook.
        env["RELAY_SESSION_ID"] = envelope.event.session_id.replace("\0", "")
        env["RELAY_EVENT"] = envelope.name
        env["RELAY_AGENT_NAME"] = (envelope.event.agent_name or "").replace("\0", "")
        assert hook.entry is not None
        env.update(hook.entry.env)
        return env

    def _hook_cwd(self, hook: RegisteredHook, project_dir: str) -> str:
        # The project root, not the event's cwd: a relative script path then names the
        # file that trust fingerprinted, whatever directory the agent is in.
        assert hook.entry is not None
        if hook.entry.cwd:
            cwd = substitute_project_vars(hook.entry.cwd, self.project_vars)
            return str(Path(project_dir, os.path.expanduser(cwd)))
        return project_dir


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


def _trace(
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


def _encode_returned(value: object) -> bytes:
    """What a Python hook returned, as the JSON it stands for (for traces)."""
    if isinstance(value, str):
        return value.encode()
    try:
        return msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError):
        return repr(value).encode()


async def _in_daemon_thread(handler: Callable[[Any], Any], event: object) -> Any:
    """Call a sync handler on a daemon thread, so that it is held to the hook's timeout and
    one that never returns is abandoned without keeping the process from exiting (worker
    threads of a pool are joined at exit)."""
    finished = anyio.Event()
    token = anyio.lowlevel.current_token()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = handler(event)
        except BaseException as exc:  # handed back to the event loop below
            box["error"] = exc
        with contextlib.suppress(RuntimeError):  # the loop is gone: the hook was abandoned
            anyio.from_thread.run_sync(finished.set, token=token)

    threading.Thread(target=work, name="relay-python-hook", daemon=True).start()
    await finished.wait()
    if "error" in box:
        raise box["error"]
    return box["value"]

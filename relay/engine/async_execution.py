"""Running a plan inside an event loop: command hooks through the runner's asyncio driver,
Python hooks in-process, parallel under a CapacityLimiter (STYLE §9).

HookSystem imports this module only for `fire` and for plans with Python hooks: it
brings in anyio and asyncio, which `relay hooks run` must not pay for (DESIGN §10).
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import msgspec

from relay.engine.aggregator import HookOutcome, cap_output, cap_text
from relay.engine.execution import Chain, Executor, Prepared, Traces, judge_again, make_trace
from relay.engine.registry import RegisteredHook
from relay.engine.runner import StartedProcess, run_spec, start_spec
from relay.protocol.answers import Answer, answer_from_value
from relay.protocol.codec import EventEnvelope
from relay.protocol.dialects import wire_name
from relay.protocol.output import HookReport


async def run_plan(
    executor: Executor,
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
        chain = Chain(envelope, hooks, warnings)
        for index, hook, current in chain:
            chain.record(index, await _run_hook(executor, hook, current, {}, traces))
        return chain.outcomes(), warnings
    outcomes = await _run_parallel(executor, envelope, hooks, traces)
    again = judge_again(envelope, hooks, outcomes, warnings)
    if again is not None:
        rewritten, indexes = again
        judged = await _run_parallel(executor, rewritten, [hooks[i] for i in indexes], traces)
        for index, outcome in zip(indexes, judged, strict=True):
            outcomes[index] = outcome
    return outcomes, warnings


async def _run_parallel(
    executor: Executor,
    envelope: EventEnvelope,
    hooks: list[RegisteredHook],
    traces: Traces | None,
) -> list[HookOutcome]:
    """Run hooks at once (at most max_parallel at a time); outcomes in plan order."""
    if len(hooks) == 1:
        return [await _run_hook(executor, hooks[0], envelope, {}, traces)]
    limiter = anyio.CapacityLimiter(executor.max_parallel)
    results: list[HookOutcome | None] = [None] * len(hooks)
    wire: dict[str, bytes] = {}
    # Command hooks are spawned right away, one after another, while the limiter has room
    # (each holds a token until it ends): creating 16 tasks first would delay every spawn.
    started: dict[int, tuple[Prepared, StartedProcess]] = {}

    async def run(index: int, hook: RegisteredHook) -> None:
        if index not in started:
            async with limiter:
                results[index] = await _run_hook(executor, hook, envelope, wire, traces)
            return
        prepared, process = started[index]
        try:
            results[index] = executor.outcome(prepared, envelope, await process.wait(), traces)
        finally:
            limiter.release_on_behalf_of(process)

    await anyio.lowlevel.checkpoint_if_cancelled()  # an event cancelled already starts nothing
    try:
        for index, hook in enumerate(hooks):
            if hook.handler is None and limiter.available_tokens >= 1:
                prepared = executor.prepare(hook, envelope, wire)
                started[index] = prepared, start_spec(prepared.spec)
                limiter.acquire_on_behalf_of_nowait(started[index][1])
        async with anyio.create_task_group() as group:
            for index, hook in enumerate(hooks):
                group.start_soon(run, index, hook)
    finally:
        for _, process in started.values():  # cancelled before its task ran: still reaped
            process.close()
    return [outcome for outcome in results if outcome is not None]


async def _run_hook(
    executor: Executor,
    hook: RegisteredHook,
    envelope: EventEnvelope,
    wire: dict[str, bytes],
    traces: Traces | None,
) -> HookOutcome:
    if hook.handler is not None:
        return await _run_python(hook, envelope, traces)
    prepared = executor.prepare(hook, envelope, wire)
    process = await run_spec(prepared.spec)
    return executor.outcome(prepared, envelope, process, traces)


async def _run_python(
    hook: RegisteredHook, envelope: EventEnvelope, traces: Traces | None
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
        traces[id(hook)] = make_trace(
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
    return HookOutcome(
        report=report, answer=answer, fail_closed=hook.fail_closed, from_project=hook.from_project
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

    def done() -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone: the hook was abandoned
            anyio.from_thread.run_sync(finished.set, token=token)

    _HOOK_THREADS.run(work, done)
    await finished.wait()
    if "error" in box:
        raise box["error"]
    return box["value"]


class _HookThreads:
    """Daemon threads for sync Python hooks, each kept for a later call once its hook has
    returned: starting a thread holds the event loop until the new thread runs (about
    0.3 ms on the reference machine, per call, which an agent's directives paid while its
    output waited). A hook that never returns keeps its thread, which is abandoned as
    before; at most KEPT idle threads wait for work. Each call runs in a fresh, empty
    `contextvars` context, as on a new thread. A thread is idle again before it says its
    hook is done, so that the next call finds it; a forked child starts with none."""

    KEPT = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[queue.SimpleQueue[tuple[Callable[[], None], Callable[[], None]]]] = []

    def run(self, work: Callable[[], None], done: Callable[[], None]) -> None:
        """`work()`, then `done()`, on an idle thread or a new one."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(
                target=self._serve, args=(inbox,), name="relay-python-hook", daemon=True
            ).start()
        inbox.put((work, done))

    def _serve(
        self, inbox: queue.SimpleQueue[tuple[Callable[[], None], Callable[[], None]]]
    ) -> None:
        while True:
            work, done = inbox.get()
            contextvars.Context().run(work)
            with self._lock:
                kept = len(self._idle) < self.KEPT
                if kept:
                    self._idle.append(inbox)
            done()
            if not kept:
                return

    def forget(self) -> None:
        """In a forked child: the parent's threads are not there."""
        self._lock = threading.Lock()
        self._idle = []


_HOOK_THREADS = _HookThreads()
os.register_at_fork(after_in_child=_HOOK_THREADS.forget)

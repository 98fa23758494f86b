"""The in-process message bus: request/response by correlation id, always answered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from relay.engine.bus import (
    HOOK_EXECUTION_RESPONSE,
    HookExecutionRequest,
    HookExecutionResponse,
    MessageBus,
    attach,
)
from relay.engine.system import HookSystem
from relay.protocol.events import BeforeTool


@pytest.fixture
def bus(tmp_path: Path) -> MessageBus:
    (tmp_path / ".git").mkdir()
    system = HookSystem(cwd=tmp_path, telemetry=False)
    system.register(
        "BeforeTool",
        lambda event: {"decision": "deny", "reason": f"no {event.tool_name}"},
        matcher="Bash",
    )
    bus = MessageBus()
    attach(bus, system)
    return bus


def request(bus: MessageBus, event: str, data: dict[str, Any]) -> HookExecutionResponse:
    async def go() -> HookExecutionResponse:
        return await bus.request(HookExecutionRequest(eventName=event, input=data), timeout=10)

    return anyio.run(go)


def test_request_gets_the_merged_result(bus: MessageBus) -> None:
    response = request(bus, "PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls"}})
    assert response.success and response.error is None
    assert response.output is not None
    assert (response.output.decision, response.output.reason) == ("deny", "no Bash")


@pytest.mark.parametrize(
    ("event", "data", "error"),
    [
        ("Nope", {}, "unknown event 'Nope'"),
        (
            "BeforeTool",
            {"tool_name": "Bash", "tool_input": "rm"},
            "$.tool_input: expected `object`",
        ),
    ],
)
def test_invalid_requests_get_an_error_envelope(
    bus: MessageBus, event: str, data: dict[str, Any], error: str
) -> None:
    response = request(bus, event, data)
    assert not response.success
    assert response.output is None
    assert response.error is not None and error in response.error


def test_malformed_raw_message_is_answered_not_raised(bus: MessageBus) -> None:
    seen: list[HookExecutionResponse] = []

    async def collect(message: HookExecutionResponse) -> None:
        seen.append(message)

    bus.subscribe(HOOK_EXECUTION_RESPONSE, collect)
    anyio.run(
        bus.publish_raw, {"type": "HOOK_EXECUTION_REQUEST", "correlationId": "c-1", "eventName": 5}
    )
    assert len(seen) == 1
    assert (seen[0].correlationId, seen[0].success) == ("c-1", False)
    assert seen[0].error is not None and "eventName" in seen[0].error


def test_a_failing_engine_still_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = HookSystem(cwd=tmp_path, telemetry=False)

    async def broken(event: str, payload: object = None) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(system, "fire", broken)
    bus = MessageBus()
    attach(bus, system)
    response = request(bus, "BeforeTool", {})
    assert not response.success
    assert response.error == "internal error: RuntimeError: disk on fire"


def test_typed_event_struct_is_accepted_by_fire(tmp_path: Path) -> None:
    system = HookSystem(cwd=tmp_path, telemetry=False)
    system.register("BeforeTool", lambda event: {"inject": event.tool_input["command"]})
    result = anyio.run(
        system.fire, "BeforeTool", BeforeTool(tool_name="Bash", tool_input={"command": "ls"})
    )
    assert result.inject == "ls"


def test_request_timeout_covers_the_hook_run(tmp_path: Path) -> None:
    import time

    from relay.engine.bus import BusError

    (tmp_path / ".git").mkdir()
    system = HookSystem(cwd=tmp_path, telemetry=False)
    system.register_command("SessionStart", "sleep 60", name="slow")
    bus = MessageBus()
    attach(bus, system)
    started = time.monotonic()
    with pytest.raises(BusError, match="no response to SessionStart request"):
        request_with = HookExecutionRequest(eventName="SessionStart", input={})
        anyio.run(lambda: bus.request(request_with, timeout=0.3))
    assert time.monotonic() - started < 20  # the hook was cancelled, its process killed

"""HookSystem end to end: settings files -> real hook processes -> one merged result."""

from __future__ import annotations

import contextvars
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from processes import alive
from rendezvous import meet

from relay.config.trust import TrustStore
from relay.engine.system import HookSystem
from relay.protocol.events import BeforeTool
from relay.protocol.output import AggregatedResult, HookOutput

ENGINE = Path(__file__).resolve().parent / "resources" / "engine"
ANSWER = str(ENGINE / "answer.py")
PY = sys.executable
NODE = shutil.which("node")


def answer_hook(
    output: object = "", code: int = 0, stderr: str = "", **fields: Any
) -> dict[str, Any]:
    """A settings hook entry (exec form) that prints `output` and exits with `code`."""
    text = output if isinstance(output, str) else json.dumps(output)
    return {"command": PY, "args": [ANSWER, text, str(code), stderr], **fields}


def group(
    *hooks: dict[str, Any], matcher: str | None = None, sequential: bool = False
) -> dict[str, Any]:
    entry: dict[str, Any] = {"hooks": list(hooks)}
    if matcher is not None:
        entry["matcher"] = matcher
    if sequential:
        entry["sequential"] = True
    return entry


def write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project dir"  # a space, on purpose
    (root / ".git").mkdir(parents=True)
    return root


@pytest.fixture
def user_settings(relay_home: Path) -> Callable[..., Path]:
    """Write hooks into the user settings file (trusted without asking)."""

    def write(hooks: dict[str, Any], **rest: Any) -> Path:
        return write_json(relay_home / "settings.json", {"hooks": hooks, **rest})

    return write


def fire(system: HookSystem, event: str, payload: dict[str, Any] | None = None) -> AggregatedResult:
    async def go() -> AggregatedResult:
        return await system.fire(event, payload)

    try:
        return anyio.run(go)
    finally:
        system.close()


def make(project: Path) -> HookSystem:
    return HookSystem(cwd=project)


# -- §3 merge rules, through real processes -----------------------------------------------


def test_parallel_hooks_merge_in_plan_order(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    user_settings(
        {
            "SessionStart": [
                group(
                    answer_hook({"inject": "first", "systemMessage": "s1"}, name="a"),
                    answer_hook("plain text context", name="b"),
                    answer_hook({"hookSpecificOutput": {"additionalContext": "third"}}, name="c"),
                )
            ]
        }
    )
    result = fire(make(project), "SessionStart", {"source": "startup"})
    assert result.inject == "first\nplain text context\nthird"
    assert result.systemMessage == "s1"
    assert [hook.name for hook in result.hooks] == ["a", "b", "c"]
    assert all(hook.exit_code == 0 for hook in result.hooks)
    assert result.errors == []


def test_deny_wins_and_reasons_of_the_winner_join(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    user_settings(
        {
            "BeforeTool": [
                group(
                    answer_hook({"decision": "allow", "reason": "fine"}, name="allow"),
                    answer_hook({"decision": "block", "reason": "dangerous"}, name="block"),
                    answer_hook("", 2, "no way", name="exit2"),
                    answer_hook({"decision": "ask", "reason": "?"}, name="ask"),
                )
            ]
        }
    )
    result = fire(
        make(project), "BeforeTool", {"tool_name": "Bash", "tool_input": {"command": "ls"}}
    )
    assert result.decision == "deny"
    assert result.reason == "dangerous\nno way"


@pytest.mark.parametrize("event", ["BeforeModel", "AfterModel", "BeforeToolSelection"])
def test_block_wins_on_model_events(
    project: Path, user_settings: Callable[..., Path], event: str
) -> None:
    user_settings(
        {
            event: [
                group(
                    answer_hook({"decision": "block", "reason": "r"}),
                    answer_hook({"decision": "allow"}, name="later"),
                )
            ]
        }
    )
    result = fire(make(project), event, {"llm_request": {"model": "m"}})
    assert (result.decision, result.reason) == ("deny", "r")


def test_continue_false_and_suppress_output(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    user_settings(
        {
            "AfterAgent": [
                group(
                    answer_hook({"continue": False, "stopReason": "tests fail"}, name="a"),
                    answer_hook({"suppressOutput": True}, name="b"),
                )
            ]
        }
    )
    result = fire(make(project), "AfterAgent", {"prompt": "p", "prompt_response": "r"})
    assert result.continue_ is False
    assert result.stopReason == "tests fail"
    assert result.suppressOutput is True


def test_stop_in_parallel_mode_discards_later_hooks(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    user_settings(
        {
            "BeforeTool": [
                group(
                    answer_hook({"inject": "one"}, name="a"),
                    answer_hook({"stop": True, "inject": "two"}, name="stopper"),
                    answer_hook({"decision": "deny", "inject": "three"}, name="late"),
                    answer_hook("", 1, "late failure", name="late-error"),
                )
            ]
        }
    )
    result = fire(make(project), "BeforeTool", {"tool_name": "Bash"})
    assert result.stopped_by == "stopper"
    assert result.inject == "one\ntwo"
    assert result.decision == "allow"
    assert result.errors == []
    assert [hook.name for hook in result.hooks] == ["a", "stopper", "late", "late-error"]
    assert result.hooks[3].exit_code == 1  # it ran, but takes no effect


def test_stop_in_sequential_mode_does_not_start_later_hooks(
    project: Path, user_settings: Callable[..., Path], tmp_path: Path
) -> None:
    marker = tmp_path / "late-ran"
    user_settings(
        {
            "BeforeTool": [
                group(
                    answer_hook({"stop": True}, name="stopper"),
                    {"command": f"touch '{marker}'", "name": "late"},
                    sequential=True,
                )
            ]
        }
    )
    result = fire(make(project), "BeforeTool", {"tool_name": "Bash"})
    assert result.stopped_by == "stopper"
    assert [hook.name for hook in result.hooks] == ["stopper"]
    assert result.warnings == ["hook late not started: stopper stopped the chain"]
    assert not marker.exists()


def test_tool_input_chains_in_sequential_mode(
    project: Path, user_settings: Callable[..., Path], tmp_path: Path
) -> None:
    user_settings(
        {
            "BeforeTool": [
                group(
                    answer_hook(
                        {"hookSpecificOutput": {"tool_input": {"command": "ls -la"}}},
                        name="a",
                        env={"HOOK_ID": "a", "RECORD_DIR": str(tmp_path)},
                    ),
                    answer_hook(
                        {"hookSpecificOutput": {"tool_input": {"timeout": 5}}},
                        name="b",
                        env={"HOOK_ID": "b", "RECORD_DIR": str(tmp_path)},
                    ),
                    sequential=True,
                )
            ]
        }
    )
    result = fire(
        make(project),
        "BeforeTool",
        {"tool_name": "Bash", "tool_input": {"command": "ls", "description": "d"}},
    )
    assert result.tool_input == {"command": "ls -la", "description": "d", "timeout": 5}
    seen_by_b = json.loads((tmp_path / "b.json").read_text())["stdin"]["tool_input"]
    assert seen_by_b == {"command": "ls -la", "description": "d"}


def test_tool_input_merges_in_plan_order_in_parallel_mode(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    user_settings(
        {
            "BeforeTool": [
                group(
                    answer_hook(
                        {"hookSpecificOutput": {"tool_input": {"command": "a", "x": 1}}}, name="a"
                    ),
                    answer_hook({"hookSpecificOutput": {"tool_input": {"command": "b"}}}, name="b"),
                )
            ]
        }
    )
    result = fire(
        make(project), "BeforeTool", {"tool_name": "Bash", "tool_input": {"command": "orig"}}
    )
    assert result.tool_input == {"command": "b", "x": 1}


def test_model_fields_merge(project: Path, user_settings: Callable[..., Path]) -> None:
    user_settings(
        {
            "BeforeToolSelection": [
                group(
                    answer_hook(
                        {
                            "hookSpecificOutput": {
                                "toolConfig": {"mode": "ANY", "allowedFunctionNames": ["b", "a"]}
                            }
                        },
                        name="x",
                    ),
                    answer_hook(
                        {
                            "hookSpecificOutput": {
                                "toolConfig": {"mode": "NONE", "allowedFunctionNames": ["c"]}
                            }
                        },
                        name="y",
                    ),
                )
            ],
            "AfterModel": [
                group(
                    answer_hook(
                        {"hookSpecificOutput": {"llm_response": {"text": "1", "k": 1}}}, name="x"
                    ),
                    answer_hook({"hookSpecificOutput": {"llm_response": {"text": "2"}}}, name="y"),
                )
            ],
        }
    )
    system = make(project)
    selection = anyio.run(system.fire, "BeforeToolSelection", {})
    response = anyio.run(system.fire, "AfterModel", {})
    system.close()
    assert selection.hookSpecificOutput == {
        "toolConfig": {"mode": "NONE", "allowedFunctionNames": ["a", "b", "c"]}
    }
    assert response.hookSpecificOutput == {"llm_response": {"text": "2", "k": 1}}


def test_text_fields_are_capped(project: Path, user_settings: Callable[..., Path]) -> None:
    user_settings({"SessionStart": [group(answer_hook("x" * 30_000))]})
    result = fire(make(project), "SessionStart")
    assert result.inject is not None and len(result.inject) == 10_000


# -- output reading and §4 exit codes ---------------------------------------------------------


def test_protocol_errors_and_warnings(project: Path, user_settings: Callable[..., Path]) -> None:
    user_settings(
        {
            "AfterTool": [
                group(
                    answer_hook("[1, 2]", name="array"),
                    answer_hook({"decision": 7}, name="wrong-type"),
                    answer_hook(
                        {"systemMessage": "ok", "tool_result": "stale"}, name="unknown-field"
                    ),
                    answer_hook(json.dumps(json.dumps({"systemMessage": "double"})), name="double"),
                )
            ]
        }
    )
    result = fire(make(project), "AfterTool", {"tool_name": "Write"})
    errors = {error.hook: error.message for error in result.errors}
    assert errors["array"] == "protocol error: hook output must be a JSON object, got an array"
    assert errors["wrong-type"].startswith("protocol error: $.decision: expected")
    assert result.systemMessage == "ok\ndouble"
    assert result.hooks[2].warnings == ["unknown field $.tool_result ignored"]
    assert result.decision == "allow"  # fail-open


def test_exit_codes(project: Path, user_settings: Callable[..., Path]) -> None:
    user_settings(
        {
            "BeforeTool": [
                group(
                    answer_hook("", 2, "", name="silent-2"),
                    answer_hook("", 1, "oops\nline 2\n", name="exit-1"),
                    answer_hook("", 3, "", name="exit-3"),
                )
            ]
        }
    )
    result = fire(make(project), "BeforeTool", {"tool_name": "Bash"})
    assert (result.decision, result.reason) == ("deny", "hook exited with code 2")
    assert [(e.hook, e.message) for e in result.errors] == [
        ("exit-1", "hook exited with code 1: oops\nline 2"),
        ("exit-3", "hook exited with code 3"),
    ]


def test_fail_closed_turns_errors_into_deny(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    user_settings(
        {"BeforeTool": [group(answer_hook("", 1, "crashed", name="strict", failClosed=True))]}
    )
    result = fire(make(project), "BeforeTool", {"tool_name": "Bash"})
    assert result.decision == "deny"
    assert result.reason == "hook strict failed and is failClosed: hook exited with code 1: crashed"


def test_output_that_opens_like_json_but_does_not_parse_is_a_protocol_error(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    """A failClosed guard printing NaN denies (it was plain text, and the deny was lost);
    a log line that opens with `[` is an error too, text that does not open like JSON is
    still plain text."""
    nan = '{"decision": "deny", "reason": "risky", "score": NaN}'
    user_settings(
        {
            "BeforeTool": [
                group(
                    answer_hook(nan, 0, name="strict", failClosed=True),
                    answer_hook("[INFO] checked", 0, name="logger"),
                    answer_hook("nothing to add", 0, name="chatty"),
                )
            ]
        }
    )
    result = fire(make(project), "BeforeTool", {"tool_name": "Bash"})
    assert result.decision == "deny"
    assert result.reason is not None and "hook strict failed and is failClosed" in result.reason
    assert "JSON has no NaN or Infinity" in result.reason
    assert [e.hook for e in result.errors] == ["strict", "logger"]
    assert "unreadable JSON" in result.errors[1].message
    assert result.systemMessage == "nothing to add"


def test_timeout_missing_and_non_executable(
    project: Path, user_settings: Callable[..., Path], tmp_path: Path
) -> None:
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    user_settings(
        {
            "Notification": [
                group(
                    {"command": "sleep 30", "timeout": 0.3, "name": "slow"},
                    {"command": str(tmp_path / "missing-hook"), "name": "missing"},
                    {"command": str(script), "name": "noexec"},
                    {"command": "kill -9 $$", "name": "killed"},
                )
            ]
        }
    )
    started = time.monotonic()
    result = fire(make(project), "Notification", {"message": "m"})
    assert time.monotonic() - started < 0.3 + 2 + 0.5 + 10  # far under the hook's 30 s
    by_name = {hook.name: hook for hook in result.hooks}
    assert by_name["slow"].timed_out
    assert by_name["killed"].signal == "SIGKILL"
    errors = {error.hook: error.message for error in result.errors}
    assert errors["slow"].startswith("timed out after 0.3s (sent SIGTERM)")
    assert errors["missing"].startswith("could not start")
    assert errors["noexec"].startswith("could not start")
    assert errors["killed"].startswith("killed by SIGKILL")
    assert result.decision == "allow"


# -- registration ------------------------------------------------------------------------------


def test_matchers(project: Path, user_settings: Callable[..., Path]) -> None:
    user_settings(
        {
            "BeforeTool": [
                group(answer_hook({"inject": "names"}), matcher="Write|Edit"),
                group(answer_hook({"inject": "regex"}), matcher="^mcp__.*__write"),
                group(answer_hook({"inject": "all"}), matcher="*"),
                group(answer_hook({"inject": "none"}), matcher="Bash"),
            ]
        }
    )
    system = make(project)
    edit = anyio.run(system.fire, "BeforeTool", {"tool_name": "Edit"})
    mcp = anyio.run(system.fire, "BeforeTool", {"tool_name": "mcp__fs__write_file"})
    exact = anyio.run(system.fire, "BeforeTool", {"tool_name": "Editor"})
    system.close()
    assert edit.inject == "names\nall"
    assert mcp.inject == "regex\nall"
    assert exact.inject == "all"


def test_dedup_disabled_and_enabled(project: Path, user_settings: Callable[..., Path]) -> None:
    user_settings(
        {
            "SessionStart": [
                group(answer_hook({"inject": "once"}, name="dup")),
                group(answer_hook({"inject": "once"}, name="dup-again")),
                group(answer_hook({"inject": "off"}, name="off")),
                group(answer_hook({"inject": "entry-off"}, name="entry-off", enabled=False)),
            ]
        },
        hooksConfig={"disabled": ["off"]},
    )
    result = fire(make(project), "SessionStart")
    assert result.inject == "once"
    assert [hook.name for hook in result.hooks] == ["dup"]


def test_hooks_config_enabled_false_turns_everything_off(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    user_settings(
        {"SessionStart": [group(answer_hook({"inject": "x"}))]}, hooksConfig={"enabled": False}
    )
    result = fire(make(project), "SessionStart")
    assert result.hooks == [] and result.inject is None


def test_plan_order_across_files(
    project: Path,
    user_settings: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def hook(name: str) -> dict[str, Any]:
        return {"SessionStart": [group(answer_hook({"inject": name}, name=name))]}

    system_file = write_json(tmp_path / "system.json", {"hooks": hook("system")})
    monkeypatch.setenv("RELAY_SYSTEM_SETTINGS", str(system_file))
    user_settings(hook("user"))
    extra = write_json(tmp_path / "extra.json", {"hooks": hook("extra")})
    write_json(project / ".relay" / "settings.json", {"hooks": hook("project")})
    write_json(project / ".relay" / "settings.local.json", {"hooks": hook("local")})
    system = HookSystem(cwd=project, settings=[extra])
    system.register("SessionStart", lambda event: {"inject": "python"}, name="python")
    system.initialize()
    TrustStore().trust(
        project, [(h.fingerprint, h.name) for h in system.registry.untrusted if h.fingerprint]
    )
    trusted = HookSystem(cwd=project, settings=[extra])
    trusted.register("SessionStart", lambda event: {"inject": "python"}, name="python")
    result = fire(trusted, "SessionStart")
    assert result.inject == "python\nlocal\nproject\nuser\nextra\nsystem"


def test_environment_and_project_dir_expansion(
    project: Path, user_settings: Callable[..., Path], tmp_path: Path
) -> None:
    hooks_dir = project / "hooks"
    hooks_dir.mkdir()
    script = hooks_dir / "print env.sh"  # a space in the script's own name too
    script.write_text(
        '#!/bin/sh\ncat >/dev/null\nprintf "%s|%s|%s|%s|%s|%s" "$RELAY_PROJECT_DIR" "$CLAUDE_PROJECT_DIR" "$GEMINI_PROJECT_DIR" "$RELAY_EVENT" "$RELAY_SESSION_ID" "$LEVEL"\n'
    )
    script.chmod(0o755)
    user_settings(
        {
            "SessionStart": [
                group(
                    {
                        "command": '$CLAUDE_PROJECT_DIR/hooks/"print env.sh"',
                        "env": {"LEVEL": "strict"},
                        "name": "unquoted",
                    },
                    {
                        "command": '"${RELAY_PROJECT_DIR}/hooks/print env.sh"',
                        "env": {"LEVEL": "strict"},
                        "name": "quoted",
                    },
                )
            ]
        }
    )
    result = fire(make(project), "SessionStart", {"session_id": "s-1"})
    expected = f"{project}|{project}|{project}|SessionStart|s-1|strict"
    assert result.errors == []
    assert result.inject == f"{expected}\n{expected}"


def test_hook_gets_the_event_on_stdin_and_runs_in_the_project_root(
    project: Path, user_settings: Callable[..., Path], tmp_path: Path
) -> None:
    sub = project / "src"
    sub.mkdir()
    user_settings(
        {"BeforeAgent": [group(answer_hook("", env={"RECORD_DIR": str(tmp_path), "HOOK_ID": "r"}))]}
    )
    fire(make(project), "BeforeAgent", {"prompt": "hello", "cwd": str(sub), "future_field": [1]})
    seen = json.loads((tmp_path / "r.json").read_text())
    assert seen["cwd"] == str(project)  # not the event's cwd: see the trust test below
    assert seen["stdin"]["cwd"] == str(sub)
    stdin = seen["stdin"]
    assert stdin["prompt"] == "hello" and stdin["hook_event_name"] == "BeforeAgent"
    assert stdin["future_field"] == [1]
    assert {"session_id", "timestamp", "transcript_path", "agent_name"} <= set(stdin)


# -- dialects: hooks written for Claude Code and Gemini CLI run unchanged -----------------------


def test_claude_documented_hook_runs_unchanged(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    validator = str(ENGINE / "claude_bash_validator.py")
    user_settings({"PreToolUse": [group({"command": f"{PY} {validator}"}, matcher="Bash")]})
    system = make(project)
    denied = anyio.run(
        system.fire, "BeforeTool", {"tool_name": "Bash", "tool_input": {"command": "grep foo *.py"}}
    )
    allowed = anyio.run(
        system.fire, "PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls -la"}}
    )
    other = anyio.run(
        system.fire, "BeforeTool", {"tool_name": "Read", "tool_input": {"file_path": "x"}}
    )
    system.close()
    assert denied.hook_event_name == "BeforeTool"
    assert denied.decision == "deny"
    assert (
        denied.reason
        == "• Use 'rg' (ripgrep) instead of 'grep' for better performance and features"
    )
    assert (allowed.decision, allowed.reason) == ("allow", "listing is always fine")
    assert other.hooks == []


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_gemini_documented_hook_runs_unchanged(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    guard = str(ENGINE / "gemini_secret_guard.js")
    user_settings(
        {"BeforeTool": [group({"command": f"node {guard}"}, matcher="write_file|replace")]}
    )
    system = make(project)
    denied = anyio.run(
        system.fire,
        "BeforeTool",
        {"tool_name": "write_file", "tool_input": {"file_path": ".env", "content": "x"}},
    )
    allowed = anyio.run(
        system.fire, "BeforeTool", {"tool_name": "write_file", "tool_input": {"file_path": "a.py"}}
    )
    system.close()
    assert denied.decision == "deny"
    assert denied.reason == "Security Policy: writing to .env is blocked (BeforeTool)."
    assert denied.systemMessage == "Blocked a write to a secrets file"
    assert allowed.decision == "allow" and allowed.errors == []


def test_claude_hook_gets_claude_event_name_and_relay_hook_gets_relay_name(
    project: Path, user_settings: Callable[..., Path], tmp_path: Path
) -> None:
    record = {"RECORD_DIR": str(tmp_path)}
    user_settings(
        {
            "PreToolUse": [group(answer_hook("", env={**record, "HOOK_ID": "claude"}))],
            "BeforeTool": [group(answer_hook("", env={**record, "HOOK_ID": "relay"}))],
            "Stop": [group(answer_hook("", env={**record, "HOOK_ID": "stop"}))],
        }
    )
    system = make(project)
    anyio.run(system.fire, "BeforeTool", {"tool_name": "Bash"})
    anyio.run(system.fire, "AfterAgent", {"stop_hook_active": True})
    system.close()
    assert (
        json.loads((tmp_path / "claude.json").read_text())["stdin"]["hook_event_name"]
        == "PreToolUse"
    )
    assert (
        json.loads((tmp_path / "relay.json").read_text())["stdin"]["hook_event_name"]
        == "BeforeTool"
    )
    stop = json.loads((tmp_path / "stop.json").read_text())["stdin"]
    assert stop["hook_event_name"] == "Stop" and stop["stop_hook_active"] is True


def test_claude_updated_input_replaces(project: Path, user_settings: Callable[..., Path]) -> None:
    user_settings(
        {
            "PreToolUse": [
                group(
                    answer_hook(
                        {
                            "hookSpecificOutput": {
                                "hookEventName": "PreToolUse",
                                "updatedInput": {"command": "echo safe"},
                            }
                        }
                    )
                )
            ]
        }
    )
    result = fire(
        make(project),
        "BeforeTool",
        {"tool_name": "Bash", "tool_input": {"command": "rm -rf /", "timeout": 1}},
    )
    assert result.tool_input == {"command": "echo safe"}


def test_claude_pass_through_event(project: Path, user_settings: Callable[..., Path]) -> None:
    user_settings(
        {
            "PermissionRequest": [
                group(
                    answer_hook(
                        {
                            "hookSpecificOutput": {
                                "hookEventName": "PermissionRequest",
                                "decision": {"behavior": "allow"},
                            }
                        }
                    ),
                    matcher="Bash",
                )
            ]
        }
    )
    result = fire(make(project), "PermissionRequest", {"tool_name": "Bash", "tool_input": {}})
    assert result.hook_event_name == "PermissionRequest"
    assert result.hookSpecificOutput == {"decision": {"behavior": "allow"}}
    assert result.hooks[0].warnings == []


# -- Python hooks ------------------------------------------------------------------------------


def test_python_hooks_follow_the_same_rules(project: Path) -> None:
    system = HookSystem(cwd=project)

    async def deny(event: BeforeTool) -> dict[str, Any]:
        return {"decision": "deny", "reason": f"no {event.tool_name}"}

    def rewrite(event: BeforeTool) -> HookOutput:
        return HookOutput(inject="sync hook ran")

    def broken(event: BeforeTool) -> None:
        raise RuntimeError("boom")

    async def slow(event: BeforeTool) -> None:
        await anyio.sleep(5)

    system.register("BeforeTool", deny, matcher="Bash")
    system.register("PreToolUse", rewrite)
    system.register("BeforeTool", broken)
    system.register("BeforeTool", slow, timeout=0.2)
    result = fire(system, "BeforeTool", {"tool_name": "Bash"})
    assert (result.decision, result.reason, result.inject) == ("deny", "no Bash", "sync hook ran")
    errors = {error.hook: error.message for error in result.errors}
    assert (
        errors["test_python_hooks_follow_the_same_rules.<locals>.broken"]
        == "python hook raised RuntimeError: boom"
    )
    assert errors["test_python_hooks_follow_the_same_rules.<locals>.slow"] == "timed out after 0.2s"


def test_sync_python_hooks_reuse_threads_and_a_stuck_one_keeps_its_own(project: Path) -> None:
    system = HookSystem(cwd=project)
    ran: list[tuple[threading.Thread, str]] = []
    variable = contextvars.ContextVar("variable", default="unset")
    release = threading.Event()

    def record(event: object) -> None:
        ran.append((threading.current_thread(), variable.get()))
        variable.set("set by an earlier hook")

    def stuck(event: BeforeTool) -> None:
        release.wait(10)

    system.register("Idle", record)
    system.register("BeforeTool", stuck, timeout=0.2)
    try:
        fire(system, "Idle", {"idle_seconds": 1})
        fire(system, "Idle", {"idle_seconds": 1})
        # The second call ran on the first one's thread, in a context of its own.
        assert ran[1] == (ran[0][0], "unset") and ran[0][1] == "unset"
        assert ran[0][0] is not threading.current_thread() and ran[0][0].daemon
        result = fire(system, "BeforeTool", {"tool_name": "Bash"})
        assert [error.message for error in result.errors] == ["timed out after 0.2s"]
        fire(system, "Idle", {"idle_seconds": 1})  # the stuck hook still holds that thread
        assert ran[2][0] is not ran[0][0] and ran[2][1] == "unset"
    finally:
        release.set()


def test_a_forked_child_runs_sync_python_hooks_on_threads_of_its_own(project: Path) -> None:
    system = HookSystem(cwd=project)

    def hook(event: object) -> HookOutput:
        return HookOutput(inject="ran")

    system.register("Idle", hook, timeout=5)
    assert fire(system, "Idle", {"idle_seconds": 1}).inject == "ran"  # a thread is kept
    pid = os.fork()
    if pid == 0:  # the kept thread is not in the child: its hooks must not wait for it
        ran = False
        try:
            ran = fire(system, "Idle", {"idle_seconds": 1}).inject == "ran"
        finally:
            os._exit(0 if ran else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_sixteen_slow_hooks_run_in_parallel(
    project: Path, user_settings: Callable[..., Path], tmp_path: Path
) -> None:
    # Each hook waits until all sixteen have started: run one after another, none would end.
    arrived = tmp_path / "arrived"
    hooks = (
        {"command": f"{meet(arrived, 16, str(i))}; echo hook {i}", "name": f"h{i}", "timeout": 90}
        for i in range(16)
    )
    user_settings({"Idle": [group(*hooks)]})
    result = fire(make(project), "Idle", {"idle_seconds": 30})
    assert result.inject == "\n".join(f"hook {i}" for i in range(16))
    assert not result.errors


def test_parallel_hooks_stay_within_max_parallel(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    # Command hooks are spawned before any task starts; they still hold the limiter's tokens,
    # so a Python hook and the third command hook wait for a free slot.
    user_settings({"Idle": [group(*({"command": f"sleep 0.3; echo hook {i}"} for i in range(3)))]})
    system = HookSystem(cwd=project, max_parallel=2)

    async def python_hook(event: object) -> HookOutput:
        await anyio.sleep(0.3)
        return HookOutput(inject="python hook")

    system.register("Idle", python_hook)
    started = time.monotonic()
    result = fire(system, "Idle", {"idle_seconds": 30})
    assert time.monotonic() - started >= 0.6  # two rounds of two, at the least
    assert result.inject == "python hook\nhook 0\nhook 1\nhook 2"  # plan order


@pytest.mark.parametrize("when", ["cancelled before it starts", "while the hooks run"])
def test_cancelling_an_event_leaves_no_hook_process(
    project: Path, user_settings: Callable[..., Path], when: str
) -> None:
    marker = f"relay-test-{os.getpid()}-{time.monotonic_ns()}"
    sleeper = {"command": PY, "args": ["-c", "import time; time.sleep(30)", marker]}
    user_settings({"Idle": [group(*({**sleeper, "name": f"h{i}"} for i in range(4)))]})
    system = make(project)

    async def go() -> None:
        with anyio.CancelScope() as scope:
            if when == "cancelled before it starts":
                scope.cancel()  # before the event: nothing may be left running
            else:
                scope.deadline = anyio.current_time() + 0.5
            await system.fire("Idle", {"idle_seconds": 30})
        assert scope.cancelled_caught

    try:
        anyio.run(go)
    finally:
        system.close()
    assert [pid for pid in os.listdir("/proc") if _cmdline_has(pid, marker)] == []


def _cmdline_has(pid: str, marker: str) -> bool:
    """Whether process `pid` is running with `marker` among its arguments (a zombie has none)."""
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # not a process, or gone meanwhile
        return False


def test_no_matching_hook_is_an_empty_allow(project: Path) -> None:
    result = fire(make(project), "BeforeTool", {"tool_name": "Bash"})
    assert msgspec.to_builtins(result)["hooks"] == []
    assert result.decision == "allow"


# -- trust -------------------------------------------------------------------------------------


def test_untrusted_project_hooks_are_skipped_until_trusted(project: Path) -> None:
    script = project / ".relay" / "hooks" / "ctx.sh"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\necho from-project\n")
    script.chmod(0o755)
    write_json(
        project / ".relay" / "settings.json",
        {
            "hooks": {
                "SessionStart": [
                    group({"command": '"$RELAY_PROJECT_DIR/.relay/hooks/ctx.sh"', "name": "ctx"})
                ]
            }
        },
    )
    first = make(project)
    assert fire(first, "SessionStart").inject is None
    warning = first.warnings()[-1]
    assert "ctx" in warning and "relay trust" in warning
    TrustStore().trust(
        project, [(h.fingerprint, h.name) for h in first.registry.untrusted if h.fingerprint]
    )
    assert fire(make(project), "SessionStart").inject == "from-project"
    # A changed script is untrusted again.
    script.write_text("#!/bin/sh\necho changed\n")
    changed = make(project)
    assert fire(changed, "SessionStart").inject is None
    assert [hook.name for hook in changed.registry.untrusted] == ["ctx"]


def test_telemetry_records_every_call(
    project: Path, user_settings: Callable[..., Path], relay_home: Path
) -> None:
    import sqlite3

    user_settings(
        {
            "BeforeTool": [
                group(
                    answer_hook("", 2, "blocked", name="guard"),
                    answer_hook("", 1, "x", name="broken"),
                )
            ]
        }
    )
    fire(make(project), "BeforeTool", {"tool_name": "Bash", "tool_input": {"command": "rm"}})
    with sqlite3.connect(relay_home / "state" / "telemetry.db") as db:
        rows = db.execute(
            "SELECT hook, event, exit_code, decision, error FROM hook_calls ORDER BY id"
        ).fetchall()
        (stored,) = db.execute("SELECT input FROM events").fetchone()
    assert rows == [
        ("guard", "BeforeTool", 2, "deny", None),
        ("broken", "BeforeTool", 1, None, "hook exited with code 1: x"),
    ]
    assert json.loads(stored)["tool_input"] == {"command": "rm"}


# -- DESIGN §9 faults, through the whole engine ------------------------------------------------

RESOURCES = ENGINE.parent


def wait_gone(pids: list[int], within: float = 15.0) -> bool:
    """Whether `pids` are all gone within `within` seconds (a bound for a loaded machine:
    it returns as soon as they are)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return True
        time.sleep(0.02)
    return False


@pytest.mark.slow
def test_hook_ignoring_sigterm_is_killed_within_bound(
    project: Path, user_settings: Callable[..., Path], tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    user_settings(
        {
            "BeforeTool": [
                group(
                    {
                        "command": str(RESOURCES / "ignore_term.sh"),
                        "args": [str(pids)],
                        "timeout": 0.5,
                        "name": "stubborn",
                    }
                )
            ]
        }
    )
    started = time.monotonic()
    result = fire(make(project), "BeforeTool", {"tool_name": "Bash"})
    assert time.monotonic() - started < 0.5 + 2 + 0.5 + 10  # far under the hook's 30 s
    assert result.hooks[0].timed_out and result.decision == "allow"
    assert result.errors[0].message.startswith("timed out after 0.5s (sent SIGTERM)")
    assert wait_gone([int(pid) for pid in pids.read_text().split()])


def test_background_child_holding_stdout_does_not_hold_relay(
    project: Path, user_settings: Callable[..., Path], tmp_path: Path
) -> None:
    pid_file = tmp_path / "child"
    user_settings(
        {
            "AfterTool": [
                group({"command": str(RESOURCES / "background_child.sh"), "args": [str(pid_file)]})
            ]
        }
    )
    started = time.monotonic()
    result = fire(make(project), "AfterTool", {"tool_name": "Bash"})
    # The child sleeps 30 s holding stdout: relay returning well before it is the point.
    assert time.monotonic() - started < 15
    assert result.systemMessage == "done" and result.errors == []
    assert wait_gone([int(pid_file.read_text())])


@pytest.mark.slow
def test_fifty_megabytes_of_stdout(project: Path, user_settings: Callable[..., Path]) -> None:
    user_settings(
        {
            "AfterTool": [
                group({"command": PY, "args": [str(RESOURCES / "flood.py"), "50"], "name": "flood"})
            ]
        }
    )
    result = fire(make(project), "AfterTool", {"tool_name": "Bash"})
    (hook,) = result.hooks
    assert hook.stdout_truncated and hook.exit_code == 0
    assert result.errors[0].message == "stdout over the 1048576-byte cap; answer ignored: flooded"
    assert result.systemMessage is None


def test_hook_that_never_reads_a_large_stdin(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    user_settings(
        {"BeforeTool": [group({"command": str(RESOURCES / "ignore_stdin.sh"), "name": "deaf"})]}
    )
    big = {"tool_name": "Write", "tool_input": {"content": "y" * (5 << 20)}}
    started = time.monotonic()
    result = fire(make(project), "BeforeTool", big)
    assert time.monotonic() - started < 30  # a hang would last the hook's whole timeout
    assert result.errors == [] and result.hooks[0].exit_code == 0


# -- details -----------------------------------------------------------------------------------


def test_plan_order_is_file_order_across_event_names(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    user_settings(
        {
            "BeforeTool": [
                group(answer_hook({"inject": "guard"}, name="guard")),
                group(answer_hook({"inject": "ctx"}, name="ctx")),
            ],
            "PreToolUse": [group(answer_hook({"inject": "claude"}, name="claude"))],
        }
    )
    result = fire(make(project), "BeforeTool", {"tool_name": "Bash"})
    assert result.inject == "guard\nctx\nclaude"


def test_python_hook_under_a_claude_name_sees_the_claude_name(project: Path) -> None:
    system = HookSystem(cwd=project)
    system.register("PreToolUse", lambda event: {"inject": event.hook_event_name})
    system.register("BeforeTool", lambda event: {"inject": event.hook_event_name})
    assert fire(system, "BeforeTool", {}).inject == "PreToolUse\nBeforeTool"


def test_hook_cwd_may_name_the_project_dir(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    (project / "sub dir").mkdir()
    user_settings(
        {
            "SessionStart": [
                group(
                    {"command": "/bin/pwd", "cwd": "$RELAY_PROJECT_DIR/sub dir"},
                    {"command": "/bin/pwd", "cwd": "sub dir", "name": "relative"},
                )
            ]
        }
    )
    result = fire(make(project), "SessionStart")
    assert result.inject == f"{project / 'sub dir'}\n{project / 'sub dir'}"


def test_protocol_errors_carry_stderr(project: Path, user_settings: Callable[..., Path]) -> None:
    user_settings({"AfterTool": [group(answer_hook("[1]", 0, "why it broke\n"))]})
    result = fire(make(project), "AfterTool", {})
    assert (
        result.errors[0].message
        == "protocol error: hook output must be a JSON object, got an array: why it broke"
    )


def test_sequential_chaining_is_for_before_tool_only(
    project: Path, user_settings: Callable[..., Path], tmp_path: Path
) -> None:
    record = {"RECORD_DIR": str(tmp_path)}
    user_settings(
        {
            "AfterTool": [
                group(
                    answer_hook(
                        {"hookSpecificOutput": {"tool_input": {"command": "changed"}}},
                        env={**record, "HOOK_ID": "a"},
                    ),
                    answer_hook("", env={**record, "HOOK_ID": "b"}),
                    sequential=True,
                )
            ]
        }
    )
    result = fire(
        make(project), "AfterTool", {"tool_name": "Bash", "tool_input": {"command": "orig"}}
    )
    assert json.loads((tmp_path / "b.json").read_text())["stdin"]["tool_input"] == {
        "command": "orig"
    }
    assert result.tool_input is None


def test_a_relative_script_is_the_one_trust_fingerprinted(project: Path) -> None:
    """The agent's cwd must not pick another script than the reviewed one (trust bypass)."""
    reviewed = project / "hooks" / "guard.sh"
    reviewed.parent.mkdir()
    reviewed.write_text("#!/bin/sh\necho reviewed\n")
    reviewed.chmod(0o755)
    write_json(
        project / ".relay" / "settings.json",
        {"hooks": {"SessionStart": [group({"command": "./hooks/guard.sh"})]}},
    )
    first = make(project)
    first.initialize()
    TrustStore().trust(
        project, [(h.fingerprint, h.name) for h in first.registry.untrusted if h.fingerprint]
    )
    sneaky = project / "sub" / "hooks" / "guard.sh"
    sneaky.parent.mkdir(parents=True)
    sneaky.write_text("#!/bin/sh\necho UNREVIEWED\n")
    sneaky.chmod(0o755)
    result = fire(make(project), "SessionStart", {"cwd": str(project / "sub")})
    assert result.inject == "reviewed"


def test_project_settings_cannot_switch_off_user_hooks(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    """A cloned repository (not even trusted) must not disable the user's guard hooks."""
    user_settings({"BeforeTool": [group(answer_hook("", 2, "nope", name="guard"))]})
    write_json(
        project / ".relay" / "settings.json",
        {"hooksConfig": {"enabled": False, "disabled": ["guard"]}},
    )
    system = make(project)
    result = fire(system, "BeforeTool", {"tool_name": "Bash"})
    assert (result.decision, result.reason) == ("deny", "nope")
    warnings = system.warnings()
    assert any("cannot disable the user, system or runtime hook 'guard'" in w for w in warnings)
    assert any("turns off the project's hooks only" in w for w in warnings)


def test_project_settings_can_switch_off_project_hooks(project: Path) -> None:
    write_json(
        project / ".relay" / "settings.local.json",
        {"hooksConfig": {"disabled": ["repo-hook"]}},
    )
    write_json(
        project / ".relay" / "settings.json",
        {"hooks": {"SessionStart": [group({"command": "echo hi", "name": "repo-hook"})]}},
    )
    system = make(project)
    system.initialize()
    (hook,) = system.registry.hooks
    assert not hook.enabled and system.registry.untrusted == []


def test_a_runtime_hook_comes_back_when_its_setting_goes(
    project: Path, user_settings: Callable[..., Path]
) -> None:
    settings_file = user_settings({}, hooksConfig={"disabled": ["x"]})
    system = HookSystem(cwd=project, telemetry=False)
    system.register("SessionStart", lambda event: {"inject": "x ran"}, name="x")
    assert system.run("SessionStart").inject is None
    settings_file.write_text("{}")
    system.register("SessionEnd", lambda event: None, name="y")  # forces a rebuild
    assert system.run("SessionStart").inject == "x ran"

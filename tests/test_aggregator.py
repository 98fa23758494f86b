"""The merge rules of DESIGN §3 and §4, tested on hand-built outcomes (no processes)."""

from __future__ import annotations

from typing import Any

import pytest

from relay.engine.aggregator import TEXT_CAP, HookOutcome, aggregate, cap_text
from relay.protocol.answers import Answer, parse_answer
from relay.protocol.output import HookReport, ToolConfig

EVENTS = ["BeforeTool", "AfterTool", "BeforeModel", "AfterModel", "SessionStart", "AfterAgent"]


def outcome(name: str, fail_closed: bool = False, **fields: Any) -> HookOutcome:
    """An outcome whose answer has the given fields."""
    return HookOutcome(
        report=HookReport(name=name, source="test", command=name),
        answer=Answer(**fields),
        fail_closed=fail_closed,
    )


def answered(name: str, stdout: str, event: str = "BeforeTool", code: int = 0) -> HookOutcome:
    """An outcome read from raw stdout, the way the engine reads it."""
    answer = parse_answer(event, exit_code=code, stdout=stdout.encode(), stderr=b"")
    return HookOutcome(report=HookReport(name=name, source="test", command=name), answer=answer)


def test_no_hooks_is_allow_with_nulls() -> None:
    result = aggregate("SessionStart", [])
    assert result.decision == "allow"
    assert result.continue_ is True
    assert (result.inject, result.systemMessage, result.reason, result.stopReason) == (None,) * 4
    assert result.stopped_by is None
    assert result.hookSpecificOutput is None
    assert result.tool_input is None


@pytest.mark.parametrize("event", EVENTS)
def test_deny_beats_ask_beats_allow_on_every_event(event: str) -> None:
    result = aggregate(
        event,
        [
            outcome("a", decision="allow", reason="fine"),
            outcome("b", decision="deny", reason="no"),
            outcome("c", decision="ask", reason="maybe"),
            outcome("d", decision="allow", reason="sure"),
            outcome("e", decision="deny", reason="never"),
        ],
    )
    assert result.decision == "deny"
    assert result.reason == "no\nnever"


@pytest.mark.parametrize("event", EVENTS)
def test_ask_beats_allow(event: str) -> None:
    result = aggregate(
        event, [outcome("a", decision="allow"), outcome("b", decision="ask", reason="?")]
    )
    assert (result.decision, result.reason) == ("ask", "?")


@pytest.mark.parametrize("event", ["BeforeModel", "AfterModel", "BeforeToolSelection"])
def test_later_allow_does_not_erase_block_on_model_events(event: str) -> None:
    result = aggregate(
        event,
        [
            answered("a", '{"decision": "block", "reason": "r"}', event),
            answered("b", '{"decision": "approve"}', event),
        ],
    )
    assert (result.decision, result.reason) == ("deny", "r")


@pytest.mark.parametrize("event", EVENTS)
def test_text_fields_join_in_plan_order(event: str) -> None:
    result = aggregate(
        event,
        [
            outcome("a", inject="one", systemMessage="m1"),
            outcome("b"),
            outcome("c", inject="two", systemMessage="m2"),
        ],
    )
    assert result.inject == "one\ntwo"
    assert result.systemMessage == "m1\nm2"


def test_continue_false_wins_and_stop_reasons_join() -> None:
    result = aggregate(
        "AfterAgent",
        [
            outcome("a", continue_=True),
            outcome("b", continue_=False, stopReason="tests fail"),
            outcome("c", continue_=False, stopReason="budget"),
        ],
    )
    assert result.continue_ is False
    assert result.stopReason == "tests fail\nbudget"


def test_suppress_output_any_true() -> None:
    assert aggregate("AfterTool", [outcome("a"), outcome("b", suppressOutput=True)]).suppressOutput
    assert not aggregate("AfterTool", [outcome("a"), outcome("b")]).suppressOutput


def test_stop_discards_later_outputs_and_errors_but_lists_hooks() -> None:
    result = aggregate(
        "BeforeTool",
        [
            outcome("a", inject="before"),
            outcome("b", stop=True, inject="stopper"),
            outcome("c", decision="deny", reason="late"),
            outcome("d", error="hook exited with code 1"),
        ],
    )
    assert result.stopped_by == "b"
    assert result.inject == "before\nstopper"
    assert result.decision == "allow"
    assert result.errors == []
    assert [hook.name for hook in result.hooks] == ["a", "b", "c", "d"]


def test_first_stop_wins() -> None:
    result = aggregate("BeforeTool", [outcome("a", stop=True), outcome("b", stop=True)])
    assert result.stopped_by == "a"


def test_deny_does_not_end_the_chain() -> None:
    result = aggregate(
        "BeforeTool", [outcome("a", decision="deny", reason="x"), outcome("b", inject="still")]
    )
    assert result.stopped_by is None
    assert result.inject == "still"


def test_errors_fail_open_and_fail_closed_denies() -> None:
    open_result = aggregate("BeforeTool", [outcome("a", error="hook exited with code 1: boom")])
    assert open_result.decision == "allow"
    assert [(e.hook, e.message) for e in open_result.errors] == [
        ("a", "hook exited with code 1: boom")
    ]
    closed = aggregate("BeforeTool", [outcome("g", fail_closed=True, error="timed out after 1s")])
    assert closed.decision == "deny"
    assert closed.reason == "hook g failed and is failClosed: timed out after 1s"
    assert len(closed.errors) == 1


def test_tool_input_shallow_merges_in_plan_order() -> None:
    result = aggregate(
        "BeforeTool",
        [
            outcome("a", tool_input={"command": "ls -la", "timeout": 5}),
            outcome("b", tool_input={"timeout": 9}),
        ],
        tool_input={"command": "ls", "description": "list"},
    )
    assert result.tool_input == {"command": "ls -la", "description": "list", "timeout": 9}
    assert result.hookSpecificOutput == {"tool_input": result.tool_input}


def test_claude_updated_input_replaces_the_whole_object() -> None:
    result = aggregate(
        "BeforeTool",
        [
            outcome("a", tool_input={"extra": 1}),
            answered("b", '{"hookSpecificOutput": {"updatedInput": {"command": "echo safe"}}}'),
            outcome("c", tool_input={"timeout": 3}),
        ],
        tool_input={"command": "rm -rf /"},
    )
    assert result.tool_input == {"command": "echo safe", "timeout": 3}


def test_unchanged_tool_input_is_still_reported_for_before_tool() -> None:
    result = aggregate("BeforeTool", [outcome("a")], tool_input={"command": "ls"})
    assert result.tool_input == {"command": "ls"}
    assert result.hookSpecificOutput is None
    assert aggregate("AfterTool", [outcome("a")], tool_input={"command": "ls"}).tool_input is None


def test_llm_request_and_response_shallow_merge() -> None:
    result = aggregate(
        "AfterModel",
        [
            outcome(
                "a", llm_request={"model": "x", "temperature": 0.1}, llm_response={"text": "a"}
            ),
            outcome("b", llm_request={"temperature": 0.5}, llm_response={"text": "b"}),
        ],
    )
    assert result.hookSpecificOutput == {
        "llm_request": {"model": "x", "temperature": 0.5},
        "llm_response": {"text": "b"},
    }


@pytest.mark.parametrize(
    ("modes", "expected"),
    [(["AUTO", "ANY"], "ANY"), (["ANY", "NONE", "AUTO"], "NONE"), (["AUTO"], "AUTO")],
)
def test_tool_config_mode_precedence(modes: list[str], expected: str) -> None:
    outcomes = [outcome(m, toolConfig=ToolConfig(mode=m)) for m in modes]  # type: ignore[arg-type]
    result = aggregate("BeforeToolSelection", outcomes)
    assert result.hookSpecificOutput == {"toolConfig": {"mode": expected}}


def test_tool_config_allowed_names_sorted_union() -> None:
    result = aggregate(
        "BeforeToolSelection",
        [
            outcome("a", toolConfig=ToolConfig(mode="ANY", allowedFunctionNames=["write", "read"])),
            outcome("b", toolConfig=ToolConfig(allowedFunctionNames=["read", "glob"])),
        ],
    )
    assert result.hookSpecificOutput == {
        "toolConfig": {"mode": "ANY", "allowedFunctionNames": ["glob", "read", "write"]}
    }


def test_additional_context_is_inject_and_claude_decision_fields_are_read() -> None:
    result = aggregate(
        "BeforeTool",
        [
            answered(
                "claude",
                '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask",'
                ' "permissionDecisionReason": "confirm", "additionalContext": "ctx"}}',
            ),
        ],
    )
    assert (result.decision, result.reason, result.inject) == ("ask", "confirm", "ctx")


def test_pass_through_specific_fields_merge_in_plan_order() -> None:
    result = aggregate(
        "PermissionRequest",
        [
            outcome("a", extra_specific={"decision": {"behavior": "allow"}, "x": 1}),
            outcome("b", extra_specific={"decision": {"behavior": "deny"}}),
        ],
    )
    assert result.hookSpecificOutput == {"decision": {"behavior": "deny"}, "x": 1}


def test_clear_context_any_true() -> None:
    result = aggregate(
        "SessionStart", [outcome("a", clearContext=False), outcome("b", clearContext=True)]
    )
    assert result.hookSpecificOutput == {"clearContext": True}


def test_text_fields_are_capped_with_marker_included() -> None:
    long = "x" * (TEXT_CAP + 50)
    result = aggregate(
        "SessionStart",
        [outcome("a", inject=long, systemMessage=long, decision="deny", reason=long)],
    )
    for text in (result.inject, result.systemMessage, result.reason):
        assert text is not None
        assert len(text) == TEXT_CAP
        assert text.endswith("[truncated by relay]")
    assert cap_text("short") == "short"
    assert cap_text("y" * TEXT_CAP) == "y" * TEXT_CAP


def test_pass_through_permission_decisions_rank_like_decisions() -> None:
    deny = {"behavior": "deny", "message": "not in CI"}
    result = aggregate(
        "PermissionRequest",
        [
            outcome("a", extra_specific={"decision": {"behavior": "allow"}}),
            outcome("b", extra_specific={"decision": deny}),
            outcome("c", extra_specific={"decision": {"behavior": "allow", "updatedInput": {}}}),
        ],
    )
    assert result.hookSpecificOutput == {"decision": deny}
    assert (result.decision, result.reason) == ("deny", "not in CI")


# ---- scopes: a project hook's stop and rewrites (DESIGN §5, scopes and authority) -----------


def project(name: str, **fields: Any) -> HookOutcome:
    """An outcome of a hook from a project file."""
    return HookOutcome(
        report=HookReport(name=name, source="project", command=name),
        answer=Answer(**fields),
        from_project=True,
    )


def test_a_project_stop_ends_only_the_projects_later_hooks() -> None:
    result = aggregate(
        "BeforeTool",
        [
            project("p1", stop=True, systemMessage="p1"),
            project("p2", decision="deny", reason="p2"),
            outcome("user", decision="deny", reason="user"),
        ],
    )
    assert (result.decision, result.reason, result.stopped_by) == ("deny", "user", "p1")
    assert result.systemMessage == "p1"


def test_a_users_stop_ends_the_project_hooks_after_it_too() -> None:
    result = aggregate(
        "BeforeTool",
        [outcome("runtime", stop=True), project("p", decision="deny", reason="p")],
    )
    assert (result.decision, result.stopped_by) == ("allow", "runtime")


def test_the_users_rewrites_apply_after_the_projects_whatever_the_plan_order() -> None:
    result = aggregate(
        "BeforeTool",
        [
            outcome("runtime", tool_input={"command": "safe", "a": 1}),
            project("p", tool_input={"command": "rm -rf /", "b": 2}),
        ],
        tool_input={"command": "ls"},
    )
    assert result.tool_input == {"command": "safe", "a": 1, "b": 2}


def test_a_failed_hooks_rewrite_is_void() -> None:
    result = aggregate(
        "BeforeTool",
        [project("p", tool_input={"command": "x"}, error="boom")],
        tool_input={"command": "ls"},
    )
    assert result.tool_input == {"command": "ls"}

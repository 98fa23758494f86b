"""The wire protocol: events, reading hook answers, dialects, rendering, schemas (no processes)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from relay.protocol.answers import answer_from_value, parse_answer
from relay.protocol.codec import EventError, decode_event, make_event
from relay.protocol.dialects import (
    UnknownEventError,
    canonical_name,
    matcher_field,
    registered_dialect,
    wire_name,
)
from relay.protocol.output import HookOutput
from relay.protocol.schema import all_schemas, render

SPEC = Path(__file__).resolve().parent.parent / "spec" / "schemas"


def parse(stdout: str, event: str = "BeforeTool", code: int = 0, stderr: str = "", **kw: object):  # type: ignore[no-untyped-def]
    return parse_answer(event, exit_code=code, stdout=stdout.encode(), stderr=stderr.encode(), **kw)  # type: ignore[arg-type]


# -- events ------------------------------------------------------------------------------


def test_partial_event_gets_base_fields() -> None:
    envelope = decode_event("PreToolUse", b'{"tool_name": "Bash"}')
    event = envelope.event
    assert event.hook_event_name == "BeforeTool"
    assert event.tool_name == "Bash"  # type: ignore[attr-defined]
    assert event.tool_input == {}  # type: ignore[attr-defined]
    assert event.session_id and event.cwd
    assert event.timestamp.endswith("Z") and "T" in event.timestamp


def test_unknown_fields_pass_through_to_hooks() -> None:
    envelope = make_event(
        "BeforeTool", {"tool_name": "Bash", "tool_use_id": "t1", "permission_mode": "plan"}
    )
    wire = msgspec.json.decode(envelope.to_wire("claude"))
    assert wire["tool_use_id"] == "t1"
    assert wire["permission_mode"] == "plan"
    assert wire["hook_event_name"] == "PreToolUse"
    assert msgspec.json.decode(envelope.to_wire("relay"))["hook_event_name"] == "BeforeTool"


def test_wrong_field_type_names_the_path() -> None:
    with pytest.raises(EventError) as info:
        decode_event("BeforeTool", b'{"tool_input": "rm -rf /"}')
    assert info.value.path == "$.tool_input"
    assert "expected `object`" in str(info.value)


@pytest.mark.parametrize("raw", [b"{nope", b"[1, 2]", b'"text"'])
def test_malformed_events_are_errors(raw: bytes) -> None:
    with pytest.raises(EventError):
        decode_event("SessionStart", raw)


def test_unknown_event_lists_valid_names() -> None:
    with pytest.raises(UnknownEventError) as info:
        canonical_name("BeforeTol")
    assert "BeforeTool" in str(info.value) and "PreToolUse" in str(info.value)


def test_claude_pass_through_events() -> None:
    envelope = make_event(
        "PermissionRequest", {"tool_name": "Bash", "tool_input": {"command": "ls"}}
    )
    assert envelope.name == "PermissionRequest"
    assert envelope.pass_through
    assert envelope.field("tool_name") == "Bash"
    assert matcher_field("PermissionRequest") == "tool_name"
    assert matcher_field("SubagentStop") == "agent_type"
    assert registered_dialect("PermissionRequest") == "claude"


@pytest.mark.parametrize(
    ("name", "canonical", "dialect"),
    [
        ("PreToolUse", "BeforeTool", "claude"),
        ("PostToolUse", "AfterTool", "claude"),
        ("UserPromptSubmit", "BeforeAgent", "claude"),
        ("Stop", "AfterAgent", "claude"),
        ("PreCompact", "PreCompress", "claude"),
        ("SessionStart", "SessionStart", "relay"),
        ("Notification", "Notification", "relay"),
        ("BeforeTool", "BeforeTool", "relay"),
    ],
)
def test_aliases(name: str, canonical: str, dialect: str) -> None:
    assert canonical_name(name) == canonical
    assert registered_dialect(name) == dialect
    assert wire_name(canonical, registered_dialect(name)) == name


# -- answers -----------------------------------------------------------------------------


def test_empty_stdout_is_no_opinion() -> None:
    answer = parse("  \n")
    assert answer.error is None and answer.decision is None and answer.output is None


@pytest.mark.parametrize(
    "event", ["SessionStart", "BeforeAgent", "MessageReceived", "Idle", "PatternMatch"]
)
def test_plain_text_is_inject_for_context_events(event: str) -> None:
    answer = parse("branch main\n", event)
    assert (answer.inject, answer.systemMessage) == ("branch main", None)


@pytest.mark.parametrize(
    "event", ["BeforeTool", "AfterTool", "AfterAgent", "Notification", "SessionEnd"]
)
def test_plain_text_is_system_message_elsewhere(event: str) -> None:
    answer = parse("3 files formatted", event)
    assert (answer.inject, answer.systemMessage) == (None, "3 files formatted")


def test_double_encoded_json_is_decoded_once_more() -> None:
    answer = parse(msgspec.json.encode('{"decision": "deny", "reason": "r"}').decode())
    assert (answer.decision, answer.reason) == ("deny", "r")


@pytest.mark.parametrize(
    ("stdout", "kind"),
    [("[1]", "an array"), ("42", "a number"), ("null", "null"), ('"just text"', "a string")],
)
def test_non_object_json_is_a_protocol_error(stdout: str, kind: str) -> None:
    answer = parse(stdout)
    assert answer.error == f"protocol error: hook output must be a JSON object, got {kind}"


@pytest.mark.parametrize(
    ("stdout", "path"),
    [
        ('{"decision": 1}', "$.decision"),
        ('{"decision": "maybe"}', "$.decision"),
        ('{"continue": "no"}', "$.continue"),
        ('{"hookSpecificOutput": {"tool_input": []}}', "$.hookSpecificOutput.tool_input"),
        (
            '{"hookSpecificOutput": {"toolConfig": {"mode": "SOME"}}}',
            "$.hookSpecificOutput.toolConfig.mode",
        ),
    ],
)
def test_wrong_types_name_their_path(stdout: str, path: str) -> None:
    answer = parse(stdout)
    assert answer.error is not None
    assert answer.error.startswith(f"protocol error: {path}: ")


def test_unknown_fields_are_warnings() -> None:
    answer = parse(
        '{"inject": "x", "tool_result": 1, "hookSpecificOutput": {"foo": 2}}', "SessionStart"
    )
    assert answer.inject == "x"
    assert answer.warnings == [
        "unknown field $.tool_result ignored",
        "unknown field $.hookSpecificOutput.foo passed through",
    ]
    assert answer.extra_specific == {"foo": 2}


def test_unknown_fields_say_what_was_probably_meant() -> None:
    answer = parse(
        '{"tool_input": {"command": "ls"}, "systemMesage": "hi", "zzz": 1,'
        ' "hookSpecificOutput": {"systemMessage": "x", "permisionDecision": "deny"}}',
        "BeforeTool",
    )
    assert answer.warnings == [
        "unknown field $.tool_input ignored (it belongs in hookSpecificOutput:"
        " $.hookSpecificOutput.tool_input)",
        "unknown field $.systemMesage ignored (did you mean 'systemMessage'?)",
        "unknown field $.zzz ignored",
        "unknown field $.hookSpecificOutput.systemMessage passed through (it belongs at the"
        " top level: $.systemMessage)",
        "unknown field $.hookSpecificOutput.permisionDecision passed through (did you mean"
        " 'permissionDecision'?)",
    ]
    assert answer.tool_input is None  # said, not guessed


def test_claude_pass_through_specific_fields_are_quiet() -> None:
    answer = parse(
        '{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}}',
        "PermissionRequest",
        dialect="claude",
        pass_through=True,
    )
    assert answer.warnings == []
    assert answer.extra_specific == {"decision": {"behavior": "allow"}}


@pytest.mark.parametrize(
    ("wire", "relay"), [("block", "deny"), ("approve", "allow"), ("ask", "ask")]
)
def test_legacy_decisions(wire: str, relay: str) -> None:
    assert parse(f'{{"decision": "{wire}"}}').decision == relay


def test_exit_2_denies_with_stderr_reason() -> None:
    answer = parse("", code=2, stderr="rm -rf is not allowed\n")
    assert (answer.decision, answer.reason) == ("deny", "rm -rf is not allowed")


def test_exit_2_silent_still_denies() -> None:
    answer = parse("", code=2)
    assert (answer.decision, answer.reason) == ("deny", "hook exited with code 2")


def test_exit_2_keeps_json_fields_but_decision_stays_deny() -> None:
    answer = parse(
        '{"decision": "allow", "systemMessage": "m", "inject": "i"}', code=2, stderr="no"
    )
    assert (answer.decision, answer.reason, answer.systemMessage, answer.inject) == (
        "deny",
        "no",
        "m",
        "i",
    )


def test_exit_2_ignores_plain_text_stdout() -> None:
    answer = parse("some text", "SessionStart", code=2)
    assert answer.inject is None and answer.systemMessage is None and answer.decision == "deny"


@pytest.mark.parametrize("code", [1, 3, 127, 255])
def test_other_exit_codes_are_errors_with_stderr(code: int) -> None:
    answer = parse('{"decision": "deny"}', code=code, stderr="line1\nline2\n")
    assert answer.error == f"hook exited with code {code}: line1\nline2"
    assert answer.decision is None


def test_python_values_follow_the_same_rules() -> None:
    assert answer_from_value("BeforeTool", None).decision is None
    assert answer_from_value("BeforeTool", {"decision": "block"}).decision == "deny"
    assert answer_from_value("BeforeTool", HookOutput(inject="x")).inject == "x"
    assert answer_from_value("SessionStart", "hello").inject == "hello"
    error = answer_from_value("BeforeTool", {"decision": 3}).error
    assert error is not None and error.startswith("protocol error: $.decision")
    assert "got int" in (answer_from_value("BeforeTool", 5).error or "")


# -- schemas -------------------------------------------------------------------------------


def test_spec_schemas_match_the_structs() -> None:
    """spec/schemas/ is generated: regenerate with `make schemas` when this fails."""
    expected = all_schemas()
    on_disk = {str(path.relative_to(SPEC)) for path in SPEC.rglob("*.json")}
    assert on_disk == set(expected), "spec/schemas has missing or stale files: run `make schemas`"
    for name, schema in expected.items():
        assert (SPEC / name).read_text(encoding="utf-8") == render(schema), (
            f"{name} drifted: run `make schemas`"
        )


def test_event_schemas_allow_unknown_fields_and_describe_fields() -> None:
    schema = all_schemas()["events/BeforeTool.json"]
    assert schema["additionalProperties"] is True
    assert {"session_id", "cwd", "timestamp", "hook_event_name", "tool_name", "tool_input"} <= set(
        schema["properties"]
    )


def test_claude_codes_newer_events_are_known_with_the_field_their_matcher_tests() -> None:
    """Claude Code 2.1.332: the field its own matcher reads for each event (issue 32)."""
    assert matcher_field("PreModelSwitch") == "to_model"
    assert matcher_field("PostModelSwitch") == "to_model"
    assert matcher_field("DirectoryAdded") == "source"
    assert matcher_field("PreSkillShellCommand") == "tool_name"
    assert matcher_field("UserPromptExpansion") == "command_name"
    assert matcher_field("StopFailure") == "error"
    assert matcher_field("InstructionsLoaded") == "load_reason"
    for name in ("PreModelSwitch", "PostModelSwitch", "DirectoryAdded", "PreSkillShellCommand"):
        assert canonical_name(name) == name and registered_dialect(name) == "claude"


def test_claude_codes_own_answer_fields_are_checked_and_kept_for_the_host() -> None:
    answer = parse(
        '{"terminalSequence": "\\u0007", "hookSpecificOutput": {"classifierContext": "ok",'
        ' "watchPaths": ["/a"], "retry": true, "updatedToolOutput": {"stdout": "x"}}}',
        event="PostToolUse",
    )
    assert answer.error is None and answer.warnings == []
    assert answer.terminalSequence == "\x07"
    assert answer.extra_specific == {
        "classifierContext": "ok",
        "watchPaths": ["/a"],
        "retry": True,
        "updatedToolOutput": {"stdout": "x"},
    }
    wrong = parse('{"hookSpecificOutput": {"retry": "yes"}}', event="PermissionDenied")
    assert wrong.error is not None and "$.hookSpecificOutput.retry" in wrong.error

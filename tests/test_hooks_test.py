"""`relay hooks test`: realistic events, tracing, teaching warnings, --expect, --json."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from relay.cli.main import cli
from relay.protocol.codec import make_event
from relay.protocol.dialects import known_event_names
from relay.protocol.fixtures import PathError, example_event, set_path

ANSWER = str(Path(__file__).resolve().parent / "resources" / "engine" / "answer.py")
PY = sys.executable


def answer_hook(
    output: object = "", code: int = 0, stderr: str = "", **fields: Any
) -> dict[str, Any]:
    text = output if isinstance(output, str) else json.dumps(output)
    return {"command": PY, "args": [ANSWER, text, str(code), stderr], **fields}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


def settings(path: Path, hooks: dict[str, Any], **rest: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hooks": hooks, **rest}))
    return path


def run(args: list[str], stdin: str = "") -> Any:
    return CliRunner().invoke(cli, ["hooks", "test", *args], input=stdin)


def run_json(args: list[str], stdin: str = "") -> tuple[int, dict[str, Any]]:
    result = run([*args, "--json"], stdin)
    return result.exit_code, json.loads(result.stdout)


# -- fixtures --------------------------------------------------------------------------------


@pytest.mark.parametrize("event", known_event_names())
def test_every_event_has_a_valid_example(event: str) -> None:
    envelope = make_event(event, example_event(event, cwd="/p"))
    assert envelope.event.hook_event_name


@pytest.mark.parametrize(
    ("tool", "keys"),
    [
        ("Bash", {"command", "description"}),
        ("run_shell_command", {"command", "description"}),
        ("Write", {"file_path", "content"}),
        ("write_file", {"file_path", "content"}),
        ("Edit", {"file_path", "old_string", "new_string"}),
        ("replace", {"file_path", "old_string", "new_string", "expected_replacements"}),
        ("Read", {"file_path"}),
        ("read_file", {"file_path"}),
        ("mcp__github__create_issue", {"query"}),
    ],
)
def test_tool_examples(tool: str, keys: set[str]) -> None:
    payload = example_event("PreToolUse", tool=tool, cwd="/p")
    assert payload["tool_name"] == tool
    assert set(payload["tool_input"]) == keys
    assert "tool_response" in example_event("AfterTool", tool=tool, cwd="/p")


def test_set_path() -> None:
    payload: dict[str, Any] = {"tool_input": {"command": "ls"}, "n": 1}
    set_path(payload, "tool_input.command", "rm -rf /")
    set_path(payload, "a.b.c", [1])
    assert payload == {"tool_input": {"command": "rm -rf /"}, "n": 1, "a": {"b": {"c": [1]}}}
    with pytest.raises(PathError, match="n is int, not an object"):
        set_path(payload, "n.x", 1)


# -- the command ------------------------------------------------------------------------------


def test_traces_every_hook_and_the_merged_result(project: Path, tmp_path: Path) -> None:
    file = settings(
        tmp_path / "s.json",
        {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [answer_hook("", 2, "no deletes", name="guard")]}
            ],
            "BeforeTool": [
                {
                    "matcher": "Write",
                    "hooks": [answer_hook({"decision": "deny"}, name="writes-only")],
                }
            ],
        },
    )
    code, out = run_json(
        [
            "PreToolUse",
            "--settings",
            str(file),
            "--cwd",
            str(project),
            "--set",
            'tool_input.command="rm -rf /"',
        ]
    )
    assert code == 0
    assert out["event"]["tool_name"] == "Bash"
    assert out["event"]["tool_input"]["command"] == "rm -rf /"
    assert out["event"]["hook_event_name"] == "BeforeTool"
    (hook,) = out["hooks"]
    assert hook["name"] == "guard" and hook["exit_code"] == 2 and hook["stderr"] == "no deletes"
    assert json.loads(hook["stdin"])["hook_event_name"] == "PreToolUse"  # the claude dialect
    assert hook["mode"] == "exec" and hook["argv"][0] == PY
    assert hook["matcher"] == "Bash" and hook["matched"] == "names 'Bash' matches 'Bash'"
    assert out["result"]["decision"] == "deny" and out["result"]["reason"] == "no deletes"
    assert out["skipped"] == [
        {
            "name": "writes-only",
            "source": str(file),
            "registered_as": "BeforeTool",
            "reason": "names 'Write' does not match 'Bash'",
        }
    ]


@pytest.mark.parametrize(
    ("answer", "expect", "holds"),
    [
        ({"decision": "allow"}, "allow", True),
        ({"decision": "ask"}, "ask", True),
        ({"decision": "block"}, "deny", True),
        ({"continue": False, "stopReason": "x"}, "halt", True),
        ({"stop": True}, "stop", True),
        ({"inject": "ctx"}, "inject", True),
        ({}, "deny", False),
        ({}, "inject", False),
        ({"decision": "deny"}, "allow", False),
    ],
)
def test_expect(
    project: Path, tmp_path: Path, answer: dict[str, Any], expect: str, holds: bool
) -> None:
    file = settings(tmp_path / "s.json", {"SessionStart": [{"hooks": [answer_hook(answer)]}]})
    result = run(
        ["SessionStart", "--settings", str(file), "--cwd", str(project), "--expect", expect]
    )
    assert result.exit_code == (0 if holds else 1), result.output
    assert ("holds" if holds else "does NOT hold") in result.stdout
    code, out = run_json(
        ["SessionStart", "--settings", str(file), "--cwd", str(project), "--expect", expect]
    )
    assert code == (0 if holds else 1)
    assert out["expect"] == {"expected": expect, "held": holds}
    assert out["ok"] is holds


def test_json_without_expect_says_whether_any_hook_errored(project: Path) -> None:
    code, out = run_json(["Notification", "--cwd", str(project), "--command", "exit 3"])
    assert (code, out["ok"], out["expect"]) == (1, False, None)


def test_without_expect_exit_1_when_a_hook_errored(project: Path) -> None:
    assert run(["Notification", "--cwd", str(project), "--command", "exit 3"]).exit_code == 1
    assert run(["Notification", "--cwd", str(project), "--command", "true"]).exit_code == 0


def test_teaching_warnings(project: Path) -> None:
    command = 'cat >/dev/null; echo "{\\"tool_result\\": 1}" >&2; exit 1'
    code, out = run_json(["PostToolUse", "--cwd", str(project), "--command", command])
    assert code == 1
    warnings = out["hooks"][0]["warnings"]
    assert any(w.startswith("exit code 1 does not block: only exit 2 denies") for w in warnings)
    assert (
        "a JSON object was printed on stderr, where relay ignores it: print it on stdout"
        " (in Python: print(json.dumps(answer)), without file=sys.stderr)"
    ) in warnings
    assert any("`tool_result`" in w and "`tool_response`" in w for w in warnings)

    _, plain = run_json(
        ["BeforeAgent", "--cwd", str(project), "--command", "echo remember the style guide"]
    )
    assert (
        "stdout is not JSON: relay read it as plain text, as `inject`"
        in plain["hooks"][0]["warnings"]
    )
    assert plain["result"]["inject"] == "remember the style guide"

    _, silent = run_json(["PreToolUse", "--cwd", str(project), "--command", "exit 2"])
    assert any(w.startswith("exit 2 with empty stderr") for w in silent["hooks"][0]["warnings"])


def test_millisecond_timeout_and_unknown_field_warnings(project: Path, tmp_path: Path) -> None:
    file = settings(
        tmp_path / "s.json",
        {
            "SessionStart": [
                {
                    "hooks": [
                        answer_hook({"inject": "x", "injct": "y"}, timeout=5000, name="slowpoke")
                    ]
                }
            ]
        },
    )
    result = run(["SessionStart", "--settings", str(file), "--cwd", str(project)])
    assert result.exit_code == 0
    assert "timeout 5000 looks like milliseconds" in result.stdout
    assert "unknown field $.injct ignored" in result.stdout
    assert "did you mean milliseconds" in result.stderr  # the settings warning, once


def test_only_the_named_hook_runs(project: Path, tmp_path: Path) -> None:
    file = settings(
        tmp_path / "s.json",
        {
            "SessionStart": [
                {
                    "hooks": [
                        answer_hook({"inject": "a"}, name="a"),
                        answer_hook({"inject": "b"}, name="b"),
                    ]
                }
            ]
        },
    )
    code, out = run_json(
        ["SessionStart", "--settings", str(file), "--cwd", str(project), "--hook", "b"]
    )
    assert code == 0 and [hook["name"] for hook in out["hooks"]] == ["b"]
    assert out["result"]["inject"] == "b"
    assert out["skipped"][0]["reason"] == "not selected (--hook b)"
    # On screen the hooks left out are one line, not a block each (they are not being tried).
    shown = run(["SessionStart", "--settings", str(file), "--cwd", str(project), "--hook", "b"])
    assert "○ a" not in shown.stdout and "not selected" not in shown.stdout
    assert "○ 1 other hook of this event not run: only the one asked for runs" in shown.stdout
    tried = run(
        ["SessionStart", "--settings", str(file), "--cwd", str(project), "--command", "true"]
    )
    assert "○ 2 other hooks of this event not run" in tried.stdout
    assert "○ a" not in tried.stdout and "○ b" not in tried.stdout


def test_disabled_and_untrusted_hooks_are_explained(project: Path, relay_home: Path) -> None:
    settings(
        relay_home / "settings.json",
        {"Idle": [{"hooks": [{"command": "true", "name": "off"}]}]},
        hooksConfig={"disabled": ["off"]},
    )
    settings(
        project / ".relay" / "settings.json",
        {"Idle": [{"hooks": [{"command": "true", "name": "repo-hook"}]}]},
    )
    code, out = run_json(["Idle", "--cwd", str(project)])
    reasons = {entry["name"]: entry["reason"] for entry in out["skipped"]}
    assert reasons == {
        "off": "disabled (hooksConfig.disabled or enabled: false)",
        "repo-hook": "not trusted: review it and run `relay trust`",
    }
    assert code == 0 and out["hooks"] == []


def test_input_file_and_stdin(project: Path, tmp_path: Path) -> None:
    given = tmp_path / "event.json"
    given.write_text(
        json.dumps({"tool_name": "Write", "tool_input": {"file_path": ".env", "content": "K=V"}})
    )
    command = f"{PY} -c \"import json,sys; e=json.load(sys.stdin); print(json.dumps({{'inject': e['tool_input']['file_path']}}))\""
    _, out = run_json(
        ["BeforeTool", "--cwd", str(project), "--input", str(given), "--command", command]
    )
    assert out["result"]["inject"] == ".env"
    _, from_stdin = run_json(
        ["BeforeTool", "--cwd", str(project), "--input", "-", "--command", command],
        '{"tool_input": {"file_path": "a.txt"}}',
    )
    assert from_stdin["result"]["inject"] == "a.txt"


def test_tool_option_and_text_set_values(project: Path) -> None:
    _, out = run_json(
        [
            "AfterTool",
            "--tool",
            "write_file",
            "--cwd",
            str(project),
            "--set",
            "tool_input.content=plain words",
            "--command",
            "cat >/dev/null",
        ]
    )
    assert out["event"]["tool_name"] == "write_file"
    assert out["event"]["tool_input"]["content"] == "plain words"
    assert out["event"]["tool_response"] == {
        "filePath": str(project / "src" / "app.py"),
        "success": True,
    }


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (["BeforeTol"], "", "unknown event 'BeforeTol'"),
        (["BeforeTool", "--set", "nonsense"], "", "is not PATH=JSON"),
        (["BeforeTool", "--set", "tool_name.x=1"], "", "tool_name is str, not an object"),
        (["BeforeTool", "--input", "-"], "{broken", "--input"),
        (["BeforeTool", "--input", "-"], "[1]", "must be a JSON object"),
        (["BeforeTool", "--set", "tool_input=3"], "", "$.tool_input: expected `object`"),
        (["BeforeTool", "--hook", "ghost"], "", "no hook named 'ghost' for BeforeTool"),
        (["BeforeTool", "--hook", "a", "--command", "true"], "", "alternatives"),
    ],
)
def test_usage_errors_exit_2(project: Path, args: list[str], stdin: str, message: str) -> None:
    result = run([*args, "--cwd", str(project)], stdin)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_plain_output_has_no_colour_when_not_a_terminal(project: Path) -> None:
    result = run(["SessionStart", "--cwd", str(project), "--command", "echo hi"])
    assert "\x1b[" not in result.output
    assert "● (--command)" in result.stdout and "decision: allow" in result.stdout


def test_installed_relay_hooks_test(project: Path, relay_home: Path) -> None:
    relay = shutil.which("relay", path=str(Path(sys.executable).parent))
    assert relay is not None
    done = subprocess.run(
        [
            relay,
            "hooks",
            "test",
            "PreToolUse",
            "--cwd",
            str(project),
            "--command",
            "echo nope >&2; exit 2",
            "--expect",
            "deny",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"RELAY_HOME": str(relay_home), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["reason"] == "nope"

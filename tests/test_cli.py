"""The CLI: `relay hooks run` and `relay trust`, through CliRunner and as the installed command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from relay.cli.main import cli

ANSWER = str(Path(__file__).resolve().parent / "resources" / "engine" / "answer.py")
PY = sys.executable


def answer_hook(
    output: object = "", code: int = 0, stderr: str = "", **fields: Any
) -> dict[str, Any]:
    text = output if isinstance(output, str) else json.dumps(output)
    return {"command": PY, "args": [ANSWER, text, str(code), stderr], **fields}


def write_settings(path: Path, hooks: dict[str, Any], **rest: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hooks": hooks, **rest}))
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


def invoke(args: list[str], stdin: str = "") -> Any:
    return CliRunner().invoke(cli, args, input=stdin)


def test_hooks_run_prints_the_merged_result(project: Path, relay_home: Path) -> None:
    write_settings(
        relay_home / "settings.json",
        {
            "BeforeTool": [
                {
                    "matcher": "Bash",
                    "hooks": [answer_hook({"decision": "deny", "reason": "no rm"}, name="guard")],
                }
            ]
        },
    )
    result = invoke(
        ["hooks", "run", "PreToolUse", "--cwd", str(project)],
        json.dumps({"tool_name": "Bash", "tool_input": {"command": "rm -rf /"}}),
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == {
        "hook_event_name",
        "decision",
        "reason",
        "continue",
        "stopReason",
        "inject",
        "systemMessage",
        "suppressOutput",
        "terminalSequence",
        "stopped_by",
        "tool_input",
        "hookSpecificOutput",
        "hooks",
        "errors",
        "warnings",
        "untrusted",
        "duration_ms",
    }
    assert (out["hook_event_name"], out["decision"], out["reason"], out["continue"]) == (
        "BeforeTool",
        "deny",
        "no rm",
        True,
    )
    assert out["tool_input"] == {"command": "rm -rf /"}
    (hook,) = out["hooks"]
    assert set(hook) == {
        "name",
        "source",
        "command",
        "exit_code",
        "signal",
        "timed_out",
        "duration_ms",
        "output",
        "error",
        "stdout_truncated",
        "stderr_truncated",
        "warnings",
    }
    assert (hook["name"], hook["exit_code"], hook["output"]) == (
        "guard",
        0,
        {"decision": "deny", "reason": "no rm"},
    )
    assert hook["source"] == str(relay_home / "settings.json")


def test_hooks_run_with_no_hooks_and_empty_stdin(project: Path) -> None:
    result = invoke(["hooks", "run", "SessionStart", "--cwd", str(project)])
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert (out["decision"], out["hooks"], out["inject"]) == ("allow", [], None)


def test_claude_dialect_exits_2_on_deny(project: Path, tmp_path: Path) -> None:
    settings = write_settings(
        tmp_path / "s.json",
        {"BeforeTool": [{"hooks": [answer_hook("", 2, "destructive command")]}]},
    )
    result = invoke(
        [
            "hooks",
            "run",
            "--dialect",
            "claude",
            "PreToolUse",
            "--settings",
            str(settings),
            "--cwd",
            str(project),
        ],
        '{"tool_name": "Bash"}',
    )
    # Claude Code's own JSON decision with exit 0: it shows its normal block wording, not
    # a "hook error" naming relay's command line.
    assert (result.exit_code, result.stderr) == (0, "")
    assert json.loads(result.stdout) == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "destructive command",
        }
    }


def test_claude_dialect_exits_2_where_claude_has_no_json_block(
    project: Path, tmp_path: Path
) -> None:
    settings = write_settings(
        tmp_path / "s.json", {"PreCompact": [{"hooks": [answer_hook("", 2, "not now")]}]}
    )
    args = ["hooks", "run", "--dialect", "claude", "PreCompact", "--settings", str(settings)]
    result = invoke([*args, "--cwd", str(project)], '{"trigger": "manual"}')
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", "not now\n")


def test_claude_dialect_allow_renders_claude_fields(project: Path, tmp_path: Path) -> None:
    settings = write_settings(
        tmp_path / "s.json",
        {"SessionStart": [{"hooks": [answer_hook("branch: main")]}]},
    )
    result = invoke(
        [
            "hooks",
            "run",
            "--dialect",
            "claude",
            "SessionStart",
            "--settings",
            str(settings),
            "--cwd",
            str(project),
        ],
        "{}",
    )
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "branch: main"}
    }


def test_gemini_dialect(project: Path, tmp_path: Path) -> None:
    settings = write_settings(
        tmp_path / "s.json",
        {"BeforeTool": [{"hooks": [answer_hook({"decision": "allow", "systemMessage": "ok"})]}]},
    )
    result = invoke(
        [
            "hooks",
            "run",
            "--dialect",
            "gemini",
            "BeforeTool",
            "--settings",
            str(settings),
            "--cwd",
            str(project),
        ],
        "{}",
    )
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"systemMessage": "ok", "decision": "allow"}


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        (
            ["hooks", "run", "BeforeTol"],
            "{}",
            "unknown event 'BeforeTol' (did you mean 'BeforeTool'?); valid events: SessionStart",
        ),
        (["hooks", "run", "BeforeTool"], "{not json", "stdin: malformed JSON"),
        (["hooks", "run", "BeforeTool"], "[1]", "stdin: an event must be a JSON object"),
        (
            ["hooks", "run", "BeforeTool"],
            '{"tool_input": 3}',
            "stdin: $.tool_input: expected `object`",
        ),
    ],
)
def test_bad_input_exits_1_without_traceback(args: list[str], stdin: str, message: str) -> None:
    result = invoke(args, stdin)
    assert result.exit_code == 1
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_bad_settings_exit_1_with_location(project: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{\n  "hooks": {\n    "BeforeTool": [\n      {"hooks": [{"command": "x", "timeout": "ten"}]}\n    ]\n  }\n}\n'
    )
    result = invoke(
        ["hooks", "run", "BeforeTool", "--settings", str(bad), "--cwd", str(project)], "{}"
    )
    assert result.exit_code == 1
    assert str(bad) in result.stderr
    assert "hooks.BeforeTool[0].hooks[0].timeout: expected number, got string" in result.stderr

    malformed = tmp_path / "malformed.json"
    malformed.write_text('{\n  "hooks": {,\n}')
    result = invoke(
        ["hooks", "run", "BeforeTool", "--settings", str(malformed), "--cwd", str(project)], "{}"
    )
    assert result.exit_code == 1
    assert f"{malformed}:2:" in result.stderr


def test_trust_lists_records_and_revokes(project: Path) -> None:
    write_settings(
        project / ".relay" / "settings.json",
        {"SessionStart": [{"hooks": [{"command": "echo from-project", "name": "hello"}]}]},
    )
    run_args = ["hooks", "run", "SessionStart", "--cwd", str(project)]
    skipped = invoke(run_args, "{}")
    assert json.loads(skipped.stdout)["inject"] is None
    assert "untrusted project hook(s): hello" in skipped.stderr and "relay trust" in skipped.stderr

    refused = invoke(["trust", "--cwd", str(project)])
    assert refused.exit_code == 1 and "relay trust --yes" in refused.stderr
    listed = invoke(["trust", "--yes", "--cwd", str(project)])
    assert listed.exit_code == 0
    assert (
        "NOT TRUSTED" in listed.stdout
        and "echo from-project" in listed.stdout
        and "trusted 1 hook(s)" in listed.stdout
    )
    assert json.loads(invoke(run_args, "{}").stdout)["inject"] == "from-project"

    assert "1 hook(s)" in invoke(["trust", "--revoke", "--cwd", str(project)]).stdout
    assert json.loads(invoke(run_args, "{}").stdout)["inject"] is None


def test_installed_relay_runs_as_a_subprocess(project: Path, relay_home: Path) -> None:
    relay = shutil.which("relay", path=str(Path(sys.executable).parent))
    assert relay is not None, "the relay console script is not installed in this environment"
    write_settings(
        relay_home / "settings.json",
        {"PreToolUse": [{"matcher": "Bash", "hooks": [answer_hook("", 2, "blocked by policy")]}]},
    )
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    done = subprocess.run(
        [relay, "hooks", "run", "--dialect", "claude", "PreToolUse", "--cwd", str(project)],
        input=b'{"tool_name": "Bash", "tool_input": {"command": "rm -rf /"}}',
        capture_output=True,
        check=False,
        env=env,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    decision = json.loads(done.stdout)["hookSpecificOutput"]
    assert (decision["permissionDecision"], decision["permissionDecisionReason"]) == (
        "deny",
        "blocked by policy",
    )
    bad = subprocess.run(
        [relay, "hooks", "run", "Nope"],
        input=b"{}",
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert bad.returncode == 1 and b"Traceback" not in bad.stderr


@pytest.mark.parametrize(
    "args", [["hooks", "run"], ["hooks", "run", "BeforeTool", "--dialect", "cursor"]]
)
def test_hooks_run_usage_errors_exit_1_not_2(args: list[str]) -> None:
    """A host reads exit 2 as deny: a mistyped relay command must not block every tool call."""
    result = invoke(args, "{}")
    assert result.exit_code == 1
    assert "Usage:" in result.stderr


def test_claude_deny_keeps_stderr_to_the_reason(project: Path, tmp_path: Path) -> None:
    write_settings(
        project / ".relay" / "settings.json",
        {"BeforeTool": [{"hooks": [{"command": "echo untrusted"}]}]},
    )
    settings = write_settings(
        tmp_path / "s.json", {"BeforeTool": [{"hooks": [answer_hook("", 2, "denied")]}]}, surprise=1
    )
    result = invoke(
        [
            "hooks",
            "run",
            "--dialect",
            "claude",
            "PreToolUse",
            "--settings",
            str(settings),
            "--cwd",
            str(project),
        ],
        "{}",
    )
    assert result.exit_code == 0
    assert json.loads(result.stdout)["hookSpecificOutput"]["permissionDecisionReason"] == "denied"
    shown = invoke(
        ["hooks", "run", "PreToolUse", "--settings", str(settings), "--cwd", str(project)], "{}"
    )
    assert (
        "relay: warning:" in shown.stderr
        and "surprise" in shown.stderr
        and "untrusted" in shown.stderr
    )


def test_unknown_event_fields_reach_hooks_and_pass_through_matchers_work(
    project: Path, tmp_path: Path
) -> None:
    record = {"RECORD_DIR": str(tmp_path), "HOOK_ID": "perm"}
    settings = write_settings(
        tmp_path / "s.json",
        {"PermissionRequest": [{"matcher": "Bash", "hooks": [answer_hook("", env=record)]}]},
    )
    stdin = json.dumps(
        {"tool_name": "Bash", "tool_input": {"command": "ls"}, "permission_suggestions": [1]}
    )
    result = invoke(
        ["hooks", "run", "PermissionRequest", "--settings", str(settings), "--cwd", str(project)],
        stdin,
    )
    assert result.exit_code == 0
    seen = json.loads((tmp_path / "perm.json").read_text())["stdin"]
    assert seen["permission_suggestions"] == [1] and seen["tool_name"] == "Bash"
    assert seen["hook_event_name"] == "PermissionRequest"


def test_no_matching_hook_still_reports_tool_input(project: Path) -> None:
    result = invoke(
        ["hooks", "run", "PreToolUse", "--cwd", str(project)],
        '{"tool_name": "Read", "tool_input": {"file_path": "a"}}',
    )
    assert json.loads(result.stdout)["tool_input"] == {"file_path": "a"}


def test_colour_on_a_terminal_and_never_with_no_color(tmp_path: Path, relay_home: Path) -> None:
    from click.testing import CliRunner

    bad = tmp_path / "bad.json"
    bad.write_text('{"hooks": {"Stop": [{"hooks": [{"command": ""}]}]}}')
    runner = CliRunner()
    coloured = runner.invoke(cli, ["hooks", "validate", str(bad)], color=True)
    assert "\x1b[31m" in coloured.stdout  # error: in red
    plain = runner.invoke(cli, ["hooks", "validate", str(bad)], color=True, env={"NO_COLOR": "1"})
    assert "\x1b[" not in plain.output and "error: hooks.Stop[0]" in plain.stdout
    piped = runner.invoke(cli, ["hooks", "validate", str(bad)])  # not a terminal
    assert "\x1b[" not in piped.output


def test_one_error_format_with_the_closest_name(relay_home: Path) -> None:
    from relay.errors import did_you_mean
    from relay.services.messaging.model import UnknownRecipientError

    relay = str(Path(sys.executable).parent / "relay")
    bad_choice = subprocess.run(
        [relay, "install", "claud"], capture_output=True, text=True, timeout=60, check=False
    )
    assert bad_choice.returncode == 2
    assert bad_choice.stderr.startswith("relay: error: HOST: 'claud' is not one of 'claude'")
    assert bad_choice.stderr.rstrip().endswith("(relay install --help)")
    missing = subprocess.run(
        [relay, "send"], capture_output=True, text=True, timeout=60, check=False
    )
    assert missing.returncode == 2 and missing.stderr.startswith("relay: error: Missing argument")
    no_session = subprocess.run(
        [relay, "stop", "Alcie"], capture_output=True, text=True, timeout=60, check=False
    )
    assert no_session.returncode == 1
    assert no_session.stderr == "relay: error: no running session named 'Alcie'; running: none\n"
    error = UnknownRecipientError("Alcie", team="t", known=["Alice", "Bob"])
    assert str(error) == "no agent named Alcie (did you mean 'Alice'?) in team t; known: Alice, Bob"
    assert did_you_mean("sessionstart", ["SessionStart"]) == " (did you mean 'SessionStart'?)"
    assert did_you_mean("zzz", ["SessionStart"]) == ""


def test_mistyped_commands_and_options_get_the_closest_name(
    tmp_path: Path, relay_home: Path
) -> None:
    relay = str(Path(sys.executable).parent / "relay")

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [relay, *args], capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path
        )

    for args, closest in (
        (["hooks", "tset"], "'test'"),
        (["hook", "list"], "'hooks'"),
        (["trsut"], "'trust'"),
        (["hooks", "list", "--jsn"], "'--json'"),
    ):
        result = call(*args)
        assert result.returncode == 2, args
        assert result.stdout == ""
        assert f"Did you mean {closest}?" in result.stderr, result.stderr
        assert result.stderr.startswith("relay: error: No such ")
    nothing_close = call("hooks", "zzzz")
    assert nothing_close.returncode == 2 and "Did you mean" not in nothing_close.stderr
    version = call("-V")
    assert version.returncode == 0 and version.stdout == call("--version").stdout != ""
    # `validate` takes "cmd" for "command", not for the closer-spelled "cwd".
    settings = tmp_path / "settings.json"
    settings.write_text('{"hooks": {"Stop": [{"hooks": [{"command": "true", "cmd": "x"}]}]}}')
    checked = call("hooks", "validate", str(settings))
    assert "unknown key 'cmd' ignored (did you mean 'command'?)" in checked.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_that_completes_relays_commands(
    shell: str, tmp_path: Path, relay_home: Path
) -> None:
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    script = subprocess.run(
        ["relay", "completion", shell],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert script.returncode == 0 and "_RELAY_COMPLETE" in script.stdout
    if shell != "bash":
        return  # bash is on every machine; the others' scripts are click's own
    (tmp_path / "relay.bash").write_text(script.stdout)
    completed = subprocess.run(
        [
            "bash",
            "-c",
            f"source {tmp_path / 'relay.bash'}; COMP_WORDS=(relay hooks va); COMP_CWORD=2;"
            ' _relay_completion relay; echo "${COMPREPLY[@]}"',
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert completed.stdout.split() == ["validate"], completed.stderr


def test_a_mistyped_hooks_run_option_is_named_and_exits_1_through_the_installed_relay(
    project: Path, relay_home: Path
) -> None:
    """Through the console script, as a host runs it: exit 1 (a host reads 2 as deny), and
    the closest option named."""
    relay = str(Path(sys.executable).parent / "relay")
    for args, expected in (
        (["--dialet", "claude", "Stop"], "Did you mean '--dialect'?"),
        (["Stop", "--dialect", "cursor"], "'cursor' is not one of"),
    ):
        result = subprocess.run(
            [relay, "hooks", "run", *args],
            input="{}",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=project,
        )
        assert result.returncode == 1, result.stderr
        assert expected in result.stderr and result.stdout == ""

"""Bad input never crashes relay: each case found in review, reproduced and held."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from relay.cli.main import cli
from relay.engine.system import HookSystem
from relay.protocol.events import SessionStart

RELAY = str(Path(sys.executable).parent / "relay")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "p"
    (root / ".git").mkdir(parents=True)
    return root


def settings(path: Path, hooks: dict[str, object]) -> Path:
    path.write_text(json.dumps({"hooks": hooks}))
    return path


def hook(command: str, name: str) -> dict[str, object]:
    return {"hooks": [{"command": command, "name": name}]}


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ('printf \'{"systemMessage": "caf\\351"}\'', "unreadable JSON: not valid UTF-8"),
        (f"{sys.executable} -c \"print('[' * 100000)\"", "unreadable JSON: nested too deeply"),
        ("echo '{\"n\": 1e400}'", "unreadable JSON: Number out of range"),
    ],
)
def test_a_hooks_unreadable_stdout_is_one_error_and_other_hooks_still_count(
    project: Path, tmp_path: Path, output: str, message: str
) -> None:
    file = settings(
        tmp_path / "s.json",
        {"BeforeTool": [hook("echo blocked >&2; exit 2", "guard"), hook(output, "odd")]},
    )
    result = CliRunner().invoke(
        cli,
        [
            "hooks",
            "run",
            "--dialect",
            "claude",
            "PreToolUse",
            "--settings",
            str(file),
            "--cwd",
            str(project),
        ],
        input="{}",
    )
    assert result.exit_code == 0
    decision = json.loads(result.stdout)["hookSpecificOutput"]
    assert (decision["permissionDecision"], decision["permissionDecisionReason"]) == (
        "deny",
        "blocked",
    )
    relay = CliRunner().invoke(
        cli,
        ["hooks", "run", "BeforeTool", "--settings", str(file), "--cwd", str(project)],
        input="{}",
    )
    errors = json.loads(relay.stdout)["errors"]
    assert errors[0]["hook"] == "odd" and errors[0]["message"].startswith(
        f"protocol error: {message}"
    )


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        (b'{"tool_input": {"command": "\xff"}}', "malformed JSON: not valid UTF-8"),
        (b"[" * 100000, "malformed JSON: nested too deeply"),
        (b'{"x": 1e400}', "malformed JSON: Number out of range"),
    ],
)
def test_unreadable_stdin_exits_1(project: Path, stdin: bytes, message: str) -> None:
    done = subprocess.run(
        [RELAY, "hooks", "run", "BeforeTool", "--cwd", str(project)],
        input=stdin,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert message.encode() in done.stderr and b"Traceback" not in done.stderr


def test_byte_order_mark_on_stdin_is_accepted(project: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["hooks", "run", "SessionStart", "--cwd", str(project)],
        input=b'\xef\xbb\xbf{"source": "resume"}',
    )
    assert result.exit_code == 0, result.stderr


def test_closed_stdin_is_an_empty_event(project: Path) -> None:
    done = subprocess.run(
        f"{RELAY} hooks run SessionStart --cwd '{project}' <&-",
        shell=True,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["hook_event_name"] == "SessionStart"


def test_missing_cwd_is_a_usage_error_exit_1(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["hooks", "run", "SessionStart", "--cwd", str(tmp_path / "nope")], input="{}"
    )
    assert result.exit_code == 1 and "does not exist" in result.stderr


def test_deleted_working_directory(tmp_path: Path, project: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    env = {**os.environ}
    script = f"mkdir -p '{gone}' && cd '{gone}' && rmdir '{gone}' && {RELAY} hooks run SessionStart"
    done = subprocess.run(
        ["sh", "-c", script], input=b"{}", capture_output=True, timeout=30, env=env, check=False
    )
    assert done.returncode == 1, done.stderr
    assert b"working directory no longer exists" in done.stderr
    with_cwd = subprocess.run(
        ["sh", "-c", script + f" --cwd '{project}'"],
        input=b"{}",
        capture_output=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert with_cwd.returncode == 0, with_cwd.stderr


def test_unusable_state_folder_does_not_stop_a_run(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "home-is-a-file"
    home.write_text("not a folder")
    file = settings(tmp_path / "s.json", {"SessionStart": [hook("echo hello", "greeter")]})
    env = {**os.environ, "RELAY_HOME": str(home)}
    args = [RELAY, "hooks", "run", "SessionStart", "--settings", str(file), "--cwd", str(project)]
    done = subprocess.run(args, input=b"{}", capture_output=True, timeout=30, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["inject"] == "hello"
    assert b"hook log" in done.stderr and b"cannot be written" in done.stderr


def test_nul_in_event_strings_does_not_stop_hooks(project: Path, tmp_path: Path) -> None:
    file = settings(
        tmp_path / "s.json", {"SessionStart": [hook('printf %s "$RELAY_SESSION_ID"', "sid")]}
    )
    result = CliRunner().invoke(
        cli,
        ["hooks", "run", "SessionStart", "--settings", str(file), "--cwd", str(project)],
        input='{"session_id": "a\\u0000b"}',
    )
    out = json.loads(result.stdout)
    assert out["errors"] == [] and out["inject"] == "ab"


def test_huge_stderr_error_is_capped(project: Path, tmp_path: Path) -> None:
    noisy = f"{sys.executable} -c \"import sys; sys.stderr.write('x' * 3_000_000); sys.exit(1)\""
    file = settings(tmp_path / "s.json", {"AfterTool": [hook(noisy, "noisy")]})
    result = CliRunner().invoke(
        cli,
        ["hooks", "run", "AfterTool", "--settings", str(file), "--cwd", str(project)],
        input="{}",
    )
    out = json.loads(result.stdout)
    assert len(out["errors"][0]["message"]) <= 10_000
    assert len(out["hooks"][0]["error"]) <= 10_000


def test_typed_event_is_completed_and_not_changed(project: Path) -> None:
    system = HookSystem(cwd=project, telemetry=False)
    seen: list[SessionStart] = []
    system.register("SessionStart", seen.append)
    given = SessionStart()
    system.run("SessionStart", given)
    assert given.session_id == "" and given.hook_event_name == ""
    assert seen[0].session_id and seen[0].timestamp.endswith("Z") and seen[0].cwd == str(project)


def test_a_sync_hook_that_never_returns_does_not_hold_the_process(project: Path) -> None:
    code = f"""
import time
from relay.engine.system import HookSystem
system = HookSystem(cwd={str(project)!r}, telemetry=False)
system.register("Idle", lambda event: time.sleep(60), timeout=0.2)
print(system.run("Idle").errors[0].message)
"""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "timed out after 0.2s"
    assert time.monotonic() - started < 10


def test_empty_inject_adds_no_blank_line(project: Path) -> None:
    system = HookSystem(cwd=project, telemetry=False)
    system.register(
        "SessionStart",
        lambda event: {"inject": "", "hookSpecificOutput": {"additionalContext": "x"}},
    )
    assert system.run("SessionStart").inject == "x"


def test_firing_leaves_asyncio_subprocesses_working(project: Path) -> None:
    import asyncio

    system = HookSystem(cwd=project, telemetry=False)
    system.register_command("SessionStart", "true")

    async def main() -> int:
        await system.fire("SessionStart")
        process = await asyncio.create_subprocess_exec("true")
        return await process.wait()

    assert asyncio.run(main()) == 0


def test_hooks_help_lists_every_subcommand() -> None:
    result = CliRunner().invoke(cli, ["hooks", "--help"])
    assert result.exit_code == 0, result.output
    for name in (
        "run",
        "test",
        "list",
        "validate",
        "enable",
        "disable",
        "schema",
        "log",
        "replay",
        "import",
    ):
        assert f"  {name} " in result.stdout


def test_an_exit_request_inside_a_task_group_is_unwrapped() -> None:
    from relay.session.terminal import exit_request

    nested = BaseExceptionGroup("tasks", [BaseExceptionGroup("inner", [SystemExit(143)])])
    request = exit_request(nested)
    assert request is not None and request.code == 143
    interrupted = exit_request(BaseExceptionGroup("tasks", [KeyboardInterrupt()]))
    assert interrupted is not None and interrupted.code == 130
    assert exit_request(BaseExceptionGroup("tasks", [ValueError("bug")])) is None

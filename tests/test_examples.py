"""hooks-examples/: every example hook driven through relay, and `make demo`'s script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from relay.engine.system import HookSystem
from relay.protocol.output import AggregatedResult

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "hooks-examples"
SETTINGS = EXAMPLES / "settings.json"


def fire(event: str, payload: dict[str, Any]) -> AggregatedResult:
    system = HookSystem(cwd=ROOT, settings=[SETTINGS], telemetry=False)
    try:
        return anyio.run(system.fire, event, payload)
    finally:
        system.close()


def bash(command: str) -> dict[str, Any]:
    return {"tool_name": "Bash", "tool_input": {"command": command}}


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf / --no-preserve-root",
        "rm -rf ~",
        "git reset --hard HEAD~3",
        "dd if=/dev/zero of=/dev/sda",
    ],
)
def test_guard_shell_denies_destructive_commands(command: str) -> None:
    result = fire("PreToolUse", bash(command))
    assert result.decision == "deny"
    assert result.reason is not None and result.reason.startswith(f"Refusing '{command}'")
    assert result.errors == []


def test_guard_shell_allows_ordinary_commands() -> None:
    result = fire("BeforeTool", bash("rm -rf build/"))
    assert (result.decision, result.errors) == ("allow", [])


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("git push --force origin main", "git push --force-with-lease origin main"),
        ("git push -f", "git push --force-with-lease"),
        ("git push --force-with-lease", "git push --force-with-lease"),
    ],
)
def test_force_with_lease_rewrites_tool_input(command: str, expected: str) -> None:
    payload = {
        "tool_name": "run_shell_command",
        "tool_input": {"command": command, "description": "d"},
    }
    result = fire("BeforeTool", payload)
    assert result.tool_input == {"command": expected, "description": "d"}
    assert result.errors == []


def test_session_context_reports_branch_and_commits(tmp_path: Path) -> None:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q", "-b", "feature/x"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "first step"], check=True)
    (tmp_path / "new.txt").write_text("x")
    result = fire("SessionStart", {"source": "startup", "cwd": str(tmp_path)})
    assert result.inject is not None
    lines = result.inject.splitlines()
    assert lines[0] == "Git branch: feature/x"
    assert lines[1] == "Recent commits:" and lines[2].endswith(" first step")
    assert lines[3] == "Uncommitted changes in 1 file(s)."


def test_session_context_is_silent_outside_git(tmp_path: Path) -> None:
    result = fire("SessionStart", {"source": "startup", "cwd": str(tmp_path)})
    assert (result.inject, result.errors) == (None, [])


def test_demo_script_runs(relay_home: Path) -> None:
    relay = Path(sys.executable).parent / "relay"
    done = subprocess.run(
        ["bash", str(EXAMPLES / "demo.sh"), str(relay)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "decision: deny  (reason: Refusing 'rm -rf / --no-preserve-root'" in done.stdout
    assert (
        'tool_input: {"command": "git push --force-with-lease origin main", "description": "publish"}'
        in done.stdout
    )
    assert (
        json.dumps({"type": "command", "command": "relay hooks run --dialect claude PreToolUse"})
        in done.stdout
    )

"""hooks-examples/trajectory/ against the real `trail` (agent-trajectories 0.6.1 from npm):
a `relay run --task` session on the scripted agent ends with a completed trajectory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hostkit.npm import host_binary, unavailable
from scripted_sessions import RELAY, agent, reads

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "hooks-examples" / "trajectory"
HOOK = EXAMPLE / "trajectory.py"

pytestmark = pytest.mark.usefixtures("relay_home")


@pytest.fixture
def trail() -> Path:
    binary = host_binary("trail")
    if binary is None:
        pytest.skip(f"trail is not available: {unavailable('trail')}")
    return binary


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / "hooks-examples").symlink_to(ROOT / "hooks-examples", target_is_directory=True)
    return root


def environment(trail: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{trail.parent}{os.pathsep}{env['PATH']}"
    env.pop("TRAJECTORIES_DATA_DIR", None)
    return env


def wait_for(
    record: Path, label: str, process: subprocess.Popen[bytes], seconds: float = 60
) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for found, line in reads(record):
            if found == label:
                return line
        if process.poll() is not None:
            break
        time.sleep(0.05)
    out, err = process.communicate(timeout=10) if process.poll() is not None else (b"", b"")
    raise AssertionError(f"the agent never read {label!r}: {reads(record)} {out!r} {err!r}")


def run_hook(event: dict[str, Any], cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(HOOK)],
        input=json.dumps({"cwd": str(cwd), **event}),
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout) if done.stdout.strip() else {}


def test_a_session_with_a_task_leaves_a_completed_trajectory(
    trail: Path, project: Path, tmp_path: Path
) -> None:
    env = environment(trail)
    grace = tmp_path / "grace.json"  # room for `trail complete` (node) on a loaded machine
    grace.write_text(json.dumps({"session": {"endGraceSeconds": 30}}))
    record = project / "agent-record.jsonl"
    summary = "Fixed the login bug: the session cookie lacked SameSite"
    complete = (
        f'trail complete --summary "{summary}" --approach "reproduced it in a test first"'
        " --confidence 0.9"
    )
    steps = [
        {"read": "start"},
        {"print": "Phase: testing"},
        {"print": "still testing. Phase: testing"},  # not at the line's start: not a phase
        {"print": "Phase: testing"},  # the same phase again: recorded once
        {"read": "message"},
        {"read": "end"},
        {"shell": complete, "label": "completed"},
        {"exit": 0},
    ]
    session = subprocess.Popen(
        [
            RELAY,
            "run",
            "--headless",
            "--name",
            "Alice",
            "--task",
            "Fix the login bug",
            "--settings",
            str(EXAMPLE / "settings.json"),
            "--settings",
            str(grace),
            "--",
            *agent(steps, record),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=project,
        env=env,
    )
    try:
        start = wait_for(record, "start", session)
        assert start.startswith("Trajectory started: traj_")
        assert '"Fix the login bug" (active; agents: Alice;' in start
        sent = subprocess.run(
            [RELAY, "send", "Alice", "the fix is on staging", "--as", "Bob"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert sent.returncode == 0, sent.stderr
        assert "the fix is on staging" in wait_for(record, "message", session)
        stopped = subprocess.run(
            [RELAY, "stop", "Alice"], env=env, capture_output=True, timeout=60, check=False
        )
        assert stopped.returncode == 0, stopped.stderr
        end = wait_for(record, "end", session)
        assert "complete the trajectory traj_" in end and "trail complete --summary" in end
        assert wait_for(record, "completed", session).startswith("0 ")
        session.communicate(timeout=90)
    finally:
        if session.poll() is None:
            session.kill()
            session.communicate()
    data = project / ".agentworkforce" / "trajectories"
    assert list((data / "active").glob("*/trajectory.json")) == []
    (done,) = (data / "completed").glob("*/*/trajectory.json")
    trajectory = json.loads(done.read_text())
    assert trajectory["status"] == "completed"
    assert trajectory["task"]["title"] == "Fix the login bug"
    assert [agent["name"] for agent in trajectory["agents"]] == ["Alice"]
    assert trajectory["retrospective"]["summary"] == summary
    assert trajectory["retrospective"]["confidence"] == 0.9
    events = [event for chapter in trajectory["chapters"] for event in chapter["events"]]
    decisions = [event["raw"]["chosen"] for event in events if event["type"] == "decision"]
    assert decisions == ["phase: testing"]
    reflections = [event["content"] for event in events if event["type"] == "reflection"]
    assert reflections == ["message from Bob: the fix is on staging"]


def test_a_second_session_joins_the_active_trajectory(trail: Path, project: Path) -> None:
    env = environment(trail)
    first = run_hook(
        {"hook_event_name": "SessionStart", "task": "Ship v2", "agent_name": "Alice"},
        project,
        env,
    )
    assert first["inject"].startswith("Trajectory started: traj_")
    second = run_hook(
        {"hook_event_name": "SessionStart", "task": "Review v2", "agent_name": "Bob"},
        project,
        env,
    )
    assert second["inject"].startswith("Trajectory joined (one was already active): traj_")
    (active,) = (project / ".agentworkforce" / "trajectories" / "active").glob("*/trajectory.json")
    events = [e for c in json.loads(active.read_text())["chapters"] for e in c["events"]]
    assert [e["content"] for e in events] == ["Bob joined, to work on: Review v2"]
    # Without a task, nothing happens; when the session exits on its own, the human is told.
    assert run_hook({"hook_event_name": "SessionStart", "agent_name": "Carol"}, project, env) == {}
    ended = run_hook({"hook_event_name": "SessionEnd", "reason": "exit"}, project, env)
    assert "is still active; complete it with trail complete" in ended["systemMessage"]


def test_without_trail_the_human_is_told_and_the_session_goes_on(project: Path) -> None:
    env = dict(os.environ, PATH="/usr/bin:/bin", TRAIL_BIN="")
    answer = run_hook(
        {"hook_event_name": "SessionStart", "task": "Anything", "agent_name": "Alice"},
        project,
        env,
    )
    assert answer == {
        "systemMessage": "trajectory: trail is not installed (npm install -g agent-trajectories)"
    }

"""The hook log names the agent that made each call; `relay hooks log --agent` and
`--follow`, through real relay processes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from relay.cli.main import cli
from relay.engine.hooklog import HookLog
from relay.engine.telemetry import log_path

RELAY = str(Path(sys.executable).parent / "relay")
WAIT = 30.0
"""Seconds a test waits for a line from a relay process before it fails (a loaded machine)."""


@pytest.fixture
def project(tmp_path: Path, relay_home: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (relay_home / "settings.json").write_text(
        json.dumps(
            {
                "hooks": {
                    "BeforeTool": [
                        {"hooks": [{"command": sys.executable, "args": ["-c", ""], "name": "ok"}]}
                    ]
                }
            }
        )
    )
    return root


def fire(
    project: Path, relay_home: Path, command: str, *, agent: str | None, **fields: Any
) -> None:
    """A BeforeTool event through `relay hooks run`, as an agent's host fires it."""
    env = {key: value for key, value in os.environ.items() if key != "RELAY_AGENT_NAME"}
    env["RELAY_HOME"] = str(relay_home)
    if agent is not None:
        env["RELAY_AGENT_NAME"] = agent
    event = {"tool_name": "Bash", "tool_input": {"command": command}, **fields}
    subprocess.run(
        [RELAY, "hooks", "run", "BeforeTool", "--cwd", str(project)],
        input=json.dumps(event),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )


def log(project: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["hooks", "log", "--cwd", str(project), *args])
    return result.exit_code, result.output


def test_every_call_names_its_agent_and_agent_filters(project: Path, relay_home: Path) -> None:
    fire(project, relay_home, "ls", agent="Alice", session_id="s-alice")
    fire(project, relay_home, "pwd", agent="Bob", session_id="s-bob")
    fire(project, relay_home, "id", agent=None, session_id="s-human")
    # The event's own agent_name (an MCP call, a relay session) wins over the environment.
    fire(project, relay_home, "date", agent="Bob", agent_name="Carol\x1b[2J", session_id="s-c")
    code, out = log(project, "--json")
    events = json.loads(out)
    assert [(e["input"]["tool_input"]["command"], e["agent"]) for e in events] == [
        ("date", "Carol\x1b[2J"),
        ("id", None),
        ("pwd", "Bob"),
        ("ls", "Alice"),
    ]
    code, out = log(project, "--agent", "Bob", "--json")
    assert [(e["agent"], e["session_id"]) for e in json.loads(out)] == [("Bob", "s-bob")]
    code, out = log(project, "--agent", "Alice")
    heading = out.splitlines()[0]
    assert "BeforeTool" in heading and "agent Alice  session s-alice" in heading
    code, out = log(project)
    assert "agent Carol^[[2J  session s-c" in out and "\x1b" not in out
    code, out = log(project, "--agent", "Nobody")
    assert code == 0 and "no logged hook calls match" in out


def test_a_log_from_before_agents_is_read_then_migrated(project: Path, relay_home: Path) -> None:
    fire(project, relay_home, "ls", agent="Alice")
    path = log_path()
    with sqlite3.connect(path) as db:  # as an older relay wrote it: no agent column
        db.execute("ALTER TABLE events DROP COLUMN agent")
    assert HookLog(path).events()[0].agent is None
    assert HookLog(path).events(agent="Alice") == []
    fire(project, relay_home, "pwd", agent="Bob")
    assert [event.agent for event in HookLog(path).events()] == ["Bob", None]


def _reader(stream: Any, lines: list[str], arrived: threading.Condition) -> None:
    for line in stream:
        with arrived:
            lines.append(line.rstrip("\n"))
            arrived.notify_all()


def test_follow_prints_calls_as_they_are_logged(project: Path, relay_home: Path) -> None:
    fire(project, relay_home, "before", agent="Alice", session_id="s1")
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    process = subprocess.Popen(
        [RELAY, "hooks", "log", "--follow", "--json", "--agent", "Alice", "--cwd", str(project)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    arrived = threading.Condition()
    reader = threading.Thread(target=_reader, args=(process.stdout, lines, arrived), daemon=True)
    reader.start()

    def wait_for(count: int) -> list[str]:
        with arrived:
            arrived.wait_for(lambda: len(lines) >= count or process.poll() is not None, WAIT)
        assert len(lines) >= count, (lines, process.poll())
        return lines[:count]

    try:
        assert json.loads(wait_for(1)[0])["input"]["tool_input"]["command"] == "before"
        fire(project, relay_home, "by bob", agent="Bob")
        fire(project, relay_home, "first", agent="Alice", session_id="s1")
        fire(project, relay_home, "second", agent="Alice", session_id="s2")
        shown = [json.loads(line) for line in wait_for(3)]
        assert [(e["input"]["tool_input"]["command"], e["session_id"]) for e in shown[1:]] == [
            ("first", "s1"),
            ("second", "s2"),
        ]
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=WAIT)
        reader.join(WAIT)
    assert process.returncode == 130, err
    assert len(lines) == 3


def test_follow_on_a_terminal_lists_oldest_first(project: Path, relay_home: Path) -> None:
    for command in ("one", "two"):
        fire(project, relay_home, command, agent="Alice")
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    process = subprocess.Popen(
        [RELAY, "hooks", "log", "-f", "--cwd", str(project)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: list[str] = []
    arrived = threading.Condition()
    reader = threading.Thread(target=_reader, args=(process.stdout, lines, arrived), daemon=True)
    reader.start()
    try:
        with arrived:
            arrived.wait_for(lambda: len(lines) >= 4 or process.poll() is not None, WAIT)
        headings = [line for line in lines if line.startswith("#")]
        assert [heading.split()[0] for heading in headings] == ["#1", "#2"]
        fire(project, relay_home, "three", agent="Bob")
        with arrived:
            arrived.wait_for(lambda: len(lines) >= 6 or process.poll() is not None, WAIT)
        assert lines[4].startswith("#3 ") and "agent Bob" in lines[4], lines
        assert lines[5].lstrip().startswith("ok"), lines
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=WAIT)
        reader.join(WAIT)
    assert process.returncode == 130

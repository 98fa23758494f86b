"""`relay up`, `down`, `restart`, `ps`, `logs`, `attach`: a team of scripted agents through
real processes (supervisors, `relay run` sessions in PTYs, tmux, the real mailbox)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from scripted_sessions import polled

pytestmark = pytest.mark.timeout(240)
RELAY = [sys.executable, "-m", "relay"]
AGENT = str(Path(__file__).resolve().parent / "resources" / "fleet" / "agent.py")


def toml_value(value: Any) -> str:
    """A TOML value (JSON's strings, numbers, booleans and arrays are TOML's)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{key} = {toml_value(item)}" for key, item in value.items()) + " }"
    return json.dumps(value)


def write_team(project: Path, agents: list[dict[str, Any]], *, team: str = "crew") -> Path:
    lines = [f"team = {toml_value(team)}", ""]
    for agent in agents:
        lines.append("[[agent]]")
        lines += [f"{key} = {toml_value(value)}" for key, value in agent.items()]
        lines.append("")
    path = project / "relay.team.toml"
    path.write_text("\n".join(lines))
    return path


def scripted(name: str, records: Path, **more: Any) -> dict[str, Any]:
    """A scripted agent NAME that records what it reads in records/NAME.jsonl."""
    return {
        "name": name,
        "command": [sys.executable, AGENT],
        "env": {"AGENT_RECORD": str(records / f"{name}.jsonl")},
        **more,
    }


def relay(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*RELAY, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )


def heard(records: Path, name: str) -> list[dict[str, Any]]:
    path = records / f"{name}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def session_end_hook(relay_home: Path, record: Path) -> None:
    """A user hook that appends each SessionEnd event to `record`, one line in one write
    (the agents of a team end together: two appends each would interleave)."""
    hook = relay_home / "end.sh"
    hook.write_text(f"#!/bin/sh\nevent=$(cat)\nprintf '%s\\n' \"$event\" >> {record}\n")
    hook.chmod(0o755)
    settings = {"hooks": {"SessionEnd": [{"hooks": [{"command": str(hook)}]}]}}
    (relay_home / "settings.json").write_text(json.dumps(settings))


def ended(record: Path) -> list[dict[str, Any]]:
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


def ps(project: Path) -> dict[str, dict[str, Any]]:
    done = relay("ps", "--json", cwd=project)
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in json.loads(done.stdout)}


def ps_now(project: Path) -> dict[str, dict[str, Any]]:
    """ps(), from `relay ps --json` run in this process: what a wait polls."""
    return {row["name"]: row for row in json.loads(polled("ps", "--json", "--cwd", str(project)))}


def agent_pid(name: str) -> int | None:
    from relay.session.sessions import list_sessions

    for record in list_sessions():
        if record.name == name:
            return record.agent_pid
    return None


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A project folder; whatever `relay up` started there is stopped at the end."""
    folder = tmp_path / "project"
    folder.mkdir()
    (tmp_path / "records").mkdir()
    yield folder
    relay("down", cwd=folder)


def test_a_headless_team_starts_talks_and_ends_with_session_end(
    project: Path, relay_home: Path, tmp_path: Path
) -> None:
    records = tmp_path / "records"
    session_end_hook(relay_home, tmp_path / "ended.jsonl")
    write_team(project, [scripted(name, records) for name in ("Alice", "Bob", "Carol")])
    done = relay("up", "--yes", "--headless", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "team crew" in done.stdout
    for name in ("Alice", "Bob", "Carol"):
        assert f"{name}" in done.stdout and "live (relay run pid" in done.stdout
    # Running it again starts nothing and says what runs.
    again = relay("up", "--headless", cwd=project)
    assert again.returncode == 0 and again.stdout.count("already running") == 3
    # The human asks Alice to write to Bob; Bob reads Alice's message.
    sent = relay("send", "--team", "crew", "Alice", "say @relay:Bob hello from alice", cwd=project)
    assert sent.returncode == 0, sent.stderr
    line = wait_for(
        lambda: [e["line"] for e in heard(records, "Bob") if "hello from alice" in e["line"]],
        "Bob to read Alice's message",
    )[0]
    assert line.startswith("Relay message from Alice [")
    wait_for(
        lambda: "heard: Relay message from Alice" in polled("logs", "Bob", check=False),
        "Bob's transcript to show what it heard",
    )
    assert "heard: Relay message from Alice" in relay("logs", "Bob", cwd=project).stdout
    assert {row["state"] for row in ps(project).values()} == {"running"}
    down = relay("down", cwd=project)
    assert down.returncode == 0, down.stderr
    assert down.stdout.count("stopped") >= 3
    reasons = {
        event["agent_name"]: event.get("reason") for event in ended(tmp_path / "ended.jsonl")
    }
    assert reasons == {"Alice": "stop", "Bob": "stop", "Carol": "stop"}
    assert {row["state"] for row in ps(project).values()} == {"stopped"}
    from relay.session.sessions import list_sessions

    assert list_sessions() == []


def test_an_agent_killed_with_sigkill_is_restarted_and_loses_no_message(
    project: Path, tmp_path: Path
) -> None:
    records = tmp_path / "records"
    restart = {"policy": "on-failure", "backoff": 1.0, "limit": 3}
    write_team(project, [scripted("Bob", records, restart=restart)])
    assert relay("up", "--yes", "--headless", cwd=project).returncode == 0
    wait_for((records / "Bob.runs").exists, "Bob's first run to start")
    os.kill(agent_pid("Bob") or 0, signal.SIGKILL)
    # Sent while Bob is down: it waits in the mailbox for Bob's next run.
    sent = relay("send", "--team", "crew", "Bob", "while you were away", cwd=project)
    assert sent.returncode == 0, sent.stderr
    got = wait_for(
        lambda: [e for e in heard(records, "Bob") if "while you were away" in e["line"]],
        "the restarted Bob to read the message",
    )
    assert got[0]["run"] == 2
    row = ps(project)["Bob"]
    assert row["state"] == "running" and row["runs"] == 1 and row["exit_code"] != 0
    agents = json.loads(relay("agents", "--json", "--team", "crew", cwd=project).stdout)
    bob = next(agent["live"] for agent in agents if agent["name"] == "Bob")
    assert bob["supervised"] and bob["restarts"] == 1 and bob["state"] in ("working", "idle")
    logs = relay("logs", "--all", "Bob", cwd=project).stdout
    assert "ready Bob run 1" in logs and "ready Bob run 2" in logs


def test_restart_policy_and_its_limit(project: Path, tmp_path: Path) -> None:
    records = tmp_path / "records"
    failing = {"policy": "on-failure", "backoff": 0.1, "limit": 2, "healthy": 60}
    write_team(
        project,
        [
            {
                "name": "Crash",
                "command": [sys.executable, "-c", "import sys; sys.exit(3)"],
                "restart": failing,
            },
            {"name": "Done", "command": [sys.executable, "-c", "pass"], "restart": "on-failure"},
            scripted("Steady", records, restart="never"),
        ],
    )
    relay("up", "--yes", "--headless", "--wait", "5", cwd=project)
    wait_for(
        lambda: (
            (r := ps_now(project))["Crash"]["state"] == "exited" and r["Done"]["state"] == "exited"
        ),
        "Crash to be given up and Done to be left exited",
    )
    rows = ps(project)
    assert rows["Crash"]["runs"] == 3 and rows["Crash"]["exit_code"] == 3
    # The supervisor put it on the team's board: relay agents shows it ended, and why.
    agents = json.loads(relay("agents", "--json", "--team", "crew", cwd=project).stdout)
    crash = next(agent["live"] for agent in agents if agent["name"] == "Crash")
    assert (crash["state"], crash["exit_code"], crash["supervised"]) == ("exited", 3, True)
    assert crash["restarts"] == 2
    assert rows["Done"]["runs"] == 1 and rows["Done"]["exit_code"] == 0
    log = (Path(os.environ["RELAY_HOME"]) / "state" / "fleet" / "crew" / "Crash.log").read_text()
    assert "gave up after 2 restarts in a row" in log
    # never: Steady ends (exit 5) and stays ended; relay restart starts it again.
    relay("send", "--team", "crew", "Steady", "exit 5", cwd=project)
    wait_for(lambda: ps_now(project)["Steady"]["state"] == "exited", "Steady to exit")
    assert ps(project)["Steady"]["exit_code"] == 5
    again = relay("restart", "Steady", cwd=project)
    assert again.returncode == 0, again.stderr
    wait_for(lambda: (records / "Steady.runs").read_text() == "2", "Steady's second run")


def test_relay_restart_ends_a_running_agent_with_session_end_and_starts_it_at_once(
    project: Path, relay_home: Path, tmp_path: Path
) -> None:
    records = tmp_path / "records"
    session_end_hook(relay_home, tmp_path / "ended.jsonl")
    write_team(project, [scripted("Ann", records, restart="never")])
    assert relay("up", "--yes", "--headless", cwd=project).returncode == 0
    wait_for(lambda: agent_pid("Ann"), "Ann's agent")
    assert relay("restart", "Ann", cwd=project).returncode == 0
    wait_for(lambda: (records / "Ann.runs").read_text() == "2", "Ann's second run")
    assert [event["reason"] for event in ended(tmp_path / "ended.jsonl")] == ["stop"]
    assert ps(project)["Ann"]["state"] == "running"


def test_bad_team_files_start_nothing(project: Path, tmp_path: Path) -> None:
    records = tmp_path / "records"
    write_team(
        project,
        [scripted("Alice", records), {"name": "Bob", "command": ["no-such-program-xyz"]}],
    )
    done = relay("up", "--yes", "--headless", cwd=project)
    assert done.returncode == 1
    assert "relay.team.toml:" in done.stderr and "no-such-program-xyz" in done.stderr
    assert ps(project) == {}
    # Not a git repository: the file's check refuses Bob's worktree; nothing starts.
    write_team(project, [scripted("Alice", records), scripted("Bob", records, worktree=True)])
    done = relay("up", "--yes", "--headless", cwd=project)
    assert done.returncode == 1 and "agent[1].worktree" in done.stderr
    assert ps(project) == {}
    # A repository where Bob's branch is checked out elsewhere: his worktree cannot be
    # made when relay up makes it; Alice, who needs none, is not started either.
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "first"], cwd=project, check=True)
    elsewhere = tmp_path / "elsewhere"
    subprocess.run(
        [*git, "worktree", "add", "-q", "-b", "relay/Bob", str(elsewhere)], cwd=project, check=True
    )
    done = relay("up", "--yes", "--headless", cwd=project)
    assert done.returncode == 1, done.stdout
    assert "nothing was started" in done.stderr and "Bob" in done.stderr
    assert ps(project) == {}
    assert not (records / "Alice.runs").exists()


# ---- tmux ---------------------------------------------------------------------------------


@pytest.fixture
def tmux_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., str]]:
    """A tmux server of this test's own (its socket in a short private folder); killed at
    the end. Yields `tmux(*args)` -> stdout."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    folder = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    monkeypatch.setenv("TMUX_TMPDIR", folder)
    monkeypatch.delenv("TMUX", raising=False)

    def tmux(*args: str) -> str:
        done = subprocess.run(
            ["tmux", *args], capture_output=True, text=True, timeout=30, check=False
        )
        return done.stdout

    try:
        yield tmux
    finally:
        subprocess.run(["tmux", "kill-server"], capture_output=True, timeout=30, check=False)
        shutil.rmtree(folder, ignore_errors=True)


def test_agents_run_in_tmux_windows_and_attach_detaches_without_stopping(
    project: Path, tmp_path: Path, tmux_server: Callable[..., str]
) -> None:
    records = tmp_path / "records"
    write_team(project, [scripted("Alice", records), scripted("Bob", records)])
    done = relay("up", "--yes", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tmux session relay-crew" in done.stdout and "relay attach Alice" in done.stdout
    windows = tmux_server("list-windows", "-t", "=relay-crew", "-F", "#{window_name}").split()
    assert windows == ["Alice", "Bob"]
    wait_for(
        lambda: "ready Alice run 1" in tmux_server("capture-pane", "-p", "-t", "=relay-crew:Alice"),
        "Alice's window to show her",
    )
    # A human attaches from a terminal of their own (a real PTY), sees Alice, detaches.
    screen = attach_and_detach("Alice", project)
    assert "ready Alice run 1" in screen and "[detached" in screen
    assert ps(project)["Alice"]["state"] == "running"
    assert relay("down", cwd=project).returncode == 0
    assert wait_for(
        lambda: "relay-crew" not in tmux_server("list-sessions", "-F", "#{session_name}").split(),
        "the team's tmux session to close",
    )


def attach_and_detach(name: str, project: Path) -> str:
    """Run `relay attach NAME` on a PTY until NAME's first words show, type tmux's detach
    (C-b d), and return all it drew once it ended."""
    import fcntl
    import pty
    import struct
    import termios

    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(project)
        os.environ.pop("TMUX", None)
        os.environ["TERM"] = "xterm-256color"
        os.execv(sys.executable, [*RELAY, "attach", name])
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    import pyte

    screen = pyte.Screen(120, 40)
    stream = pyte.ByteStream(screen)
    drawn = b""
    detached = False
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            import select

            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    break  # the attach ended: the PTY closed
                if not chunk:
                    break
                drawn += chunk
                stream.feed(chunk)
            if not detached and any(f"ready {name} run 1" in row for row in screen.display):
                os.write(fd, b"\x02d")
                detached = True
        return "\n".join(screen.display) + drawn.decode("utf-8", "replace")
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)

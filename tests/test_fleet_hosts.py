"""A team with the real Claude Code (npm @anthropic-ai/claude-code, its interactive TUI, in
the team's tmux window, against the scripted Messages server of tests/hostkit) and three
scripted agents, each in a git worktree of its own: `relay up` types Claude's task as its first prompt, the two exchange
messages through their sessions, and `relay down` ends both with SessionEnd. Skipped, with
the reason, only when npm cannot install Claude Code or tmux is missing."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostkit.claude_code import MessagesApp, claude_binary, host_env, prepare_home
from hostkit.model_server import ModelServer
from hostkit.npm import host_binary, unavailable
from test_fleet_up import AGENT, heard, wait_for

if host_binary("claude") is None:
    pytest.skip(f"Claude Code unavailable: {unavailable('claude')}", allow_module_level=True)
if shutil.which("tmux") is None:
    pytest.skip("tmux is not installed", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
RELAY = [sys.executable, "-m", "relay"]


@pytest.fixture
def tmux_folder() -> Iterator[str]:
    folder = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    try:
        yield folder
    finally:
        subprocess.run(
            ["tmux", "kill-server"],
            env={"TMUX_TMPDIR": folder, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            timeout=30,
            check=False,
        )
        shutil.rmtree(folder, ignore_errors=True)


def test_claude_code_in_a_team_gets_its_task_and_exchanges_messages(
    tmp_path: Path, relay_home: Path, tmux_folder: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=project, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "first"], cwd=project, check=True)
    home = tmp_path / "home"
    claude_folder = project / ".relay" / "worktrees" / "Claude"  # relay up makes it
    prepare_home(home, claude_folder)
    records = tmp_path / "records"
    records.mkdir()
    lines = [
        'team = "crew"',
        "[[agent]]",
        'name = "Claude"',
        f"command = {json.dumps([str(claude_binary()), '--permission-mode', 'default'])}",
        "worktree = true",
        'task = "Greet Alice for me."',
    ]
    for name in ("Alice", "Bob", "Carol"):
        lines += [
            "[[agent]]",
            f'name = "{name}"',
            f"command = {json.dumps([sys.executable, AGENT])}",
            "worktree = true",
            f"env = {{ AGENT_RECORD = {json.dumps(str(records / (name + '.jsonl')))} }}",
        ]
    (project / "relay.team.toml").write_text("\n".join([*lines, ""]))
    app = MessagesApp(["@relay:Alice hello from claude"], final_text="Thanks noted.")
    with ModelServer(app) as server:
        env = host_env(home, server.url, {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"})
        env.update(TERM="xterm-256color", RELAY_HOME=str(relay_home), TMUX_TMPDIR=tmux_folder)
        env.pop("TMUX", None)

        def relay(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*RELAY, *args],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )

        try:
            done = relay("up", "--yes", "--wait", "120")
            assert done.returncode == 0, done.stdout + done.stderr
            # Each in its own git worktree, on its own branch.
            sessions = {s["name"]: s["cwd"] for s in json.loads(relay("sessions", "--json").stdout)}
            assert sessions == {
                name: str(project / ".relay" / "worktrees" / name)
                for name in ("Claude", "Alice", "Bob", "Carol")
            }
            branches = subprocess.run(
                ["git", "branch", "--list", "relay/*", "--format=%(refname:short)"],
                cwd=project,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            assert sorted(branches) == ["relay/Alice", "relay/Bob", "relay/Carol", "relay/Claude"]
            # Claude's task is typed as its first prompt; its answer's directive reaches Alice.
            wait_for(
                lambda: any(b"Greet Alice for me." in request.body for request in app.main),
                "Claude's task to reach the model",
                timeout=120,
            )
            line = wait_for(
                lambda: [
                    e["line"] for e in heard(records, "Alice") if "hello from claude" in e["line"]
                ],
                "Alice to read Claude's message",
                timeout=120,
            )[0]
            assert line.startswith("Relay message from Claude [")
            # Alice answers; relay types it into Claude Code, and the model sees it.
            sent = relay("send", "--team", "crew", "Alice", "say @relay:Claude thanks from alice")
            assert sent.returncode == 0, sent.stderr
            wait_for(
                lambda: any(b"thanks from alice" in request.body for request in app.main[1:]),
                "Alice's answer to reach Claude's model",
                timeout=120,
            )
        finally:
            down = relay("down")
        assert down.returncode == 0, down.stdout + down.stderr
        rows = {row["name"]: row["state"] for row in json.loads(relay("ps", "--json").stdout)}
        assert rows == dict.fromkeys(("Claude", "Alice", "Bob", "Carol"), "stopped")

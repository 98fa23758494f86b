"""Live state (spec/fleet.md, "Live state"): real `relay run` sessions of scripted agents
report their state to the real SQLite status board, and `relay agents` (a real CLI
process) shows it merged with the mailbox's known names."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from scripted_sessions import RELAY, agent, finish, polled, wait_for

from relay.fleet.board import SqliteBoard
from relay.fleet.model import AgentStatus, reads_as
from relay.fleet.roster import team_members
from relay.services.messaging.model import Agent
from relay.timestamps import utc_millis

TEAM = "default"
FAST = {
    "session": {"injectQuietMs": 100},
    "messaging": {"ackTimeoutSeconds": 0.3, "team": TEAM},
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


@pytest.fixture
def settings(tmp_path: Path) -> Path:
    path = tmp_path / "fast.json"
    path.write_text(json.dumps(FAST))
    return path


@pytest.fixture
def board(relay_home: Path) -> Any:
    board = SqliteBoard(relay_home / "state" / "fleet.db")
    yield board
    board.close()


def start(
    name: str,
    steps: list[dict[str, Any]],
    project: Path,
    settings: Path,
    *options: str,
) -> subprocess.Popen[bytes]:
    """`relay run --headless --name NAME` of a scripted agent, as a real process."""
    return subprocess.Popen(
        [
            *(RELAY, "run", "--headless", "--name", name, "--settings", str(settings)),
            *(*options, "--", *agent(steps, project / f"{name}.jsonl")),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=project,
    )


def relay(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY, *args], cwd=project, capture_output=True, text=True, check=False, timeout=60
    )


def listed(project: Path, settings: Path) -> dict[str, dict[str, Any]]:
    """`relay agents --json`, by name."""
    done = relay(project, "agents", "--json", "--settings", str(settings))
    assert done.returncode == 0, done.stderr
    return {member["name"]: member for member in json.loads(done.stdout)}


def live(project: Path, settings: Path, name: str) -> dict[str, Any]:
    """NAME's live status as `relay agents --json` shows it ({} when it has none)."""
    return listed(project, settings).get(name, {}).get("live") or {}


def now(project: Path, settings: Path, name: str) -> dict[str, Any]:
    """live(), from `relay agents --json` run in this process: what a wait polls."""
    shown = polled("agents", "--json", "--cwd", str(project), "--settings", str(settings))
    members = {member["name"]: member for member in json.loads(shown)}
    return members.get(name, {}).get("live") or {}


def test_a_session_reports_its_states_its_last_line_and_its_messages(
    project: Path, settings: Path
) -> None:
    gate = project / "go"
    settings.write_text(
        json.dumps(
            {
                **FAST,
                "hooks": {
                    "SessionStart": [
                        {
                            "hooks": [
                                {
                                    "type": "command",
                                    "command": f"while [ ! -e {gate} ]; do sleep 0.05; done; echo '{{}}'",
                                }
                            ]
                        }
                    ]
                },
            }
        )
    )
    # pat is known to the team before Alice answers her.
    assert relay(project, "send", "--as", "pat", "nobody-yet", "x").returncode == 1
    alice = start(
        "Alice",
        [
            {"print": "compiling the parser"},
            {"read": "mail"},
            {"print": "@relay:pat thanks, on it"},
            {"sleep": 1.0},
            {"exit": 3},
        ],
        project,
        settings,
        "--idle-seconds",
        "1",
    )
    try:
        # SessionStart has not finished: starting.
        wait_for(lambda: now(project, settings, "Alice").get("state") == "starting", "starting")
        gate.touch()
        wait_for(
            lambda: now(project, settings, "Alice").get("last_line") == "compiling the parser",
            "its last line",
        )
        wait_for(lambda: now(project, settings, "Alice").get("state") == "idle", "idle")
        status = live(project, settings, "Alice")
        assert (status["pid"], status["host_kind"], status["team"]) == (alice.pid, "other", TEAM)
        sent = relay(project, "send", "--as", "pat", "--settings", str(settings), "Alice", "hi")
        assert sent.returncode == 0, sent.stderr
        code, err = finish(alice)
    finally:
        if alice.poll() is None:
            alice.kill()
            alice.communicate()
    assert code == 3, err
    members = listed(project, settings)
    alice_status = members["Alice"]["live"]
    assert (alice_status["state"], alice_status["exit_code"]) == ("exited", 3)
    assert members["Alice"]["state"] == "offline"  # its mailbox presence, as before
    assert (alice_status["messages_in"], alice_status["messages_out"]) == (1, 1)
    # Its last line: relay's confirmation of the send, typed in and echoed.
    assert alice_status["last_line"].startswith("✓ Queued for pat [")
    assert (members["pat"]["kind"], members["pat"]["live"]) == ("human", None)
    table = relay(project, "agents", "--settings", str(settings)).stdout.splitlines()
    [row] = [line for line in table if line.startswith("Alice ")]
    assert row.split()[:3] == ["Alice", "agent", "exited(3)"]
    assert row.endswith(alice_status["last_line"])


def test_a_killed_session_reads_as_lost_at_once(project: Path, settings: Path) -> None:
    bob = start("Bob", [{"print": "bob ready"}, {"read": "never"}], project, settings)
    try:
        wait_for(lambda: now(project, settings, "Bob").get("last_line") == "bob ready", "Bob")
        bob.kill()  # SIGKILL: no final status
        bob.communicate()
        # Not after the heartbeat's 10 s: its relay process is gone.
        assert listed(project, settings)["Bob"]["live"]["state"] == "lost"
    finally:
        if bob.poll() is None:
            bob.kill()
            bob.communicate()


def test_a_host_hook_says_the_tool_and_a_prompt_waiting_for_the_human(
    project: Path, settings: Path
) -> None:
    gates = [project / f"go{n}" for n in range(3)]

    def wait_gate(gate: Path) -> dict[str, str]:
        return {"shell": f"while [ ! -e {gate} ]; do sleep 0.05; done", "label": gate.name}

    tool = {"tool_name": "Bash", "tool_input": {"command": "make test"}}
    steps = [
        {"print": "starting work"},
        {"hook": "PreToolUse", "payload": tool, "label": "pre"},
        wait_gate(gates[0]),
        {"hook": "Notification", "payload": {"notification_type": "permission_prompt",
                                             "message": "Claude needs your permission"},
         "label": "note"},
        wait_gate(gates[1]),
        {"hook": "PostToolUse", "payload": {**tool, "tool_response": {}}, "label": "post"},
        wait_gate(gates[2]),
    ]  # fmt: skip
    carol = start("Carol", steps, project, settings)
    try:
        wait_for(lambda: now(project, settings, "Carol").get("tool") == "Bash", "the tool")
        assert live(project, settings, "Carol")["state"] == "working"
        gates[0].touch()
        wait_for(lambda: now(project, settings, "Carol").get("state") == "waiting", "waiting")
        assert live(project, settings, "Carol")["tool"] == "Bash"
        gates[1].touch()
        wait_for(lambda: now(project, settings, "Carol").get("tool") is None, "the tool's end")
        assert live(project, settings, "Carol")["state"] == "working"
        gates[2].touch()
        code, err = finish(carol)
        assert code == 0, err
    finally:
        if carol.poll() is None:
            carol.kill()
            carol.communicate()
    assert listed(project, settings)["Carol"]["live"]["state"] == "exited"


def test_a_session_goes_on_when_the_board_cannot_be_written(
    project: Path, settings: Path, relay_home: Path
) -> None:
    (relay_home / "state" / "fleet.db").mkdir(parents=True)  # not a database: cannot open
    steps = [{"print": f"line {n}"} for n in range(3)] + [{"sleep": 4}, {"exit": 5}]
    dave = start("Dave", steps, project, settings)
    code, err = finish(dave)
    assert code == 5
    assert err.count("live state not published") == 1, err
    # The listing still works, from the mailbox alone, and says why.
    shown = relay(project, "agents", "--json", "--settings", str(settings))
    assert shown.returncode == 0
    assert "live state unavailable" in shown.stderr
    assert json.loads(shown.stdout)[0]["name"] == "Dave"


def test_a_session_never_stalls_on_a_locked_board(
    project: Path, settings: Path, relay_home: Path, board: SqliteBoard
) -> None:
    board.publish_now(_status("someone", state="idle"))  # the file exists
    holder = sqlite3.connect(relay_home / "state" / "fleet.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # every write and read of the board waits, then fails
    try:
        steps = [{"print": f"line {n}"} for n in range(3)] + [{"sleep": 3}, {"exit": 0}]
        erin = start("Erin", steps, project, settings)
        code, err = finish(erin)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert code == 0
    assert err.count("live state not published") == 1, err


def test_a_status_published_from_outside_a_session(
    project: Path, settings: Path, board: SqliteBoard
) -> None:
    """What a supervisor does: publish `restarting` for an agent it starts again."""
    old = utc_millis(-60)
    anyio.run(board.publish, _status("Frank", state="restarting", pid=None, ttl=120.0))
    anyio.run(board.publish, _status("Gina", state="working", pid=None, heartbeat=old))
    anyio.run(board.publish, _status("Hugo", state="stopped", pid=None, heartbeat=old))
    members = listed(project, settings)
    assert {name: members[name]["live"]["state"] for name in ("Frank", "Gina", "Hugo")} == {
        "Frank": "restarting",
        "Gina": "lost",  # its heartbeat is past its 10 s
        "Hugo": "stopped",  # ended: never lost
    }
    anyio.run(board.remove, TEAM, "Gina")
    assert "Gina" not in listed(project, settings)


def test_the_board_skips_a_row_it_cannot_read(relay_home: Path, board: SqliteBoard) -> None:
    board.publish_now(_status("Ivy"))
    with sqlite3.connect(board.path) as db:
        db.execute("INSERT INTO statuses VALUES (?, ?, ?)", (TEAM, "Zed", b"{not json"))
    assert [status.name for status in board.statuses_now(TEAM)] == ["Ivy"]


def test_a_plain_relay_agents_answers_without_click_exactly_as_click_does(
    project: Path, relay_home: Path, board: SqliteBoard
) -> None:
    """`relay agents` and `relay agents --json` take the console script's quick path (no
    click imported: the floor of a command); their output is byte for byte what click's
    command prints (reached here through --team), hostile text shown visibly in both."""
    from relay.services.messaging.mailbox import SqliteMailbox

    mailbox = SqliteMailbox(relay_home / "state" / "messages.db")
    for name in ("Ann", "Bo"):
        mailbox.register_agent(name, team=TEAM, session_id=f"s-{name}", cwd=str(project))
    mailbox.close()
    long_ago = utc_millis(-3 * 86400)
    board.publish_now(
        _status(
            "Ann",
            since=long_ago,
            started=long_ago,
            ttl=10 * 86400.0,
            last_line="building \x1b[31mred\x1b[0m",
            tool="Bash",
        )
    )
    quick = {"RELAY_TEAM": TEAM}
    for json_option in ([], ["--json"]):
        plain = _relay_env(project, quick, "agents", *json_option)
        through_click = _relay_env(project, {}, "agents", "--team", TEAM, *json_option)
        assert plain.returncode == through_click.returncode == 0, plain.stderr
        # A mailbox-only member's age is seconds since it registered: it may tick between.
        seconds = re.compile(r"\b\d+s\b")
        assert seconds.sub("Ns", plain.stdout) == seconds.sub("Ns", through_click.stdout)
        assert plain.stderr == through_click.stderr
    assert (
        "\x1b" not in plain.stdout
        and "team default: 2 agents, 0 humans" in _relay_env(project, quick, "agents").stdout
    )
    imports = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-c",
            "import sys; sys.argv = ['relay', 'agents']\nfrom relay.cli.entry import run\nrun()",
        ],
        cwd=project,
        env={**os.environ, **quick},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert imports.returncode == 0 and "Ann" in imports.stdout
    assert not [line for line in imports.stderr.splitlines() if line.endswith("| click")]


def test_relay_agents_falls_back_to_click_for_what_its_quick_path_does_not_read(
    project: Path, relay_home: Path
) -> None:
    """Settings it cannot read: the quick path prints nothing and click's command says
    what is wrong, once, with relay's exit code for bad input."""
    (relay_home / "settings.json").write_text('{"messaging": {"team": 5}}')
    done = _relay_env(project, {"RELAY_TEAM": ""}, "agents")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("relay:") == 1
    assert "settings.json:1:" in done.stderr and "messaging.team" in done.stderr


def _relay_env(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY, *args],
        cwd=project,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_reads_as() -> None:
    now = datetime.now(UTC)
    fresh = _status("a", heartbeat=utc_millis())
    stale = _status("a", heartbeat=(now - timedelta(seconds=11)).isoformat())
    assert reads_as(fresh, now=now) == "working"
    assert reads_as(fresh, now=now, alive=False) == "lost"
    assert reads_as(stale, now=now) == "lost"
    assert reads_as(_status("a", state="exited", heartbeat="bad"), now=now) == "exited"
    assert reads_as(_status("a", heartbeat="not a time"), now=now) == "lost"


def test_team_members_merges_the_mailbox_and_the_board() -> None:
    agents = [
        Agent(name="pat", team=TEAM, state="offline", host="h", last_seen="t", kind="human"),
        Agent(name="Bob", team=TEAM, state="live", host="h", last_seen="t", pid=7),
    ]
    members = team_members(TEAM, agents, [_status("Bob", state="idle"), _status("Ann")])
    assert [(m.name, m.kind, m.now, m.state) for m in members] == [
        ("Ann", "agent", "working", "live"),  # on the board only: live while it runs
        ("Bob", "agent", "idle", "live"),
        ("pat", "human", "offline", "offline"),
    ]


def _status(name: str, **fields: Any) -> AgentStatus:
    now = utc_millis()
    values: dict[str, Any] = {
        "team": TEAM,
        "name": name,
        "state": "working",
        "since": now,
        "heartbeat": now,
        "machine": "here",
        "pid": os.getpid(),
    }
    values.update(fields)
    return AgentStatus(**values)

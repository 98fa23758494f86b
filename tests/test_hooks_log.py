"""The hook log read back: `relay hooks log`, `relay hooks replay`, the cap and old logs."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import relay.engine.telemetry as telemetry_module
from relay.cli.main import cli
from relay.config.discovery import load_settings
from relay.engine.hooklog import HookLog, HookLogError, UnknownLogEventError
from relay.engine.replay import compare, replay
from relay.engine.system import HookSystem
from relay.engine.telemetry import Telemetry, resolve_max_events

ANSWER = str(Path(__file__).resolve().parent / "resources" / "engine" / "answer.py")
PY = sys.executable
OLD_SCHEMA = """
CREATE TABLE events (
    id INTEGER PRIMARY KEY, time TEXT NOT NULL, session_id TEXT, event TEXT NOT NULL,
    input TEXT NOT NULL, decision TEXT NOT NULL, duration_ms REAL NOT NULL
);
CREATE TABLE hook_calls (
    id INTEGER PRIMARY KEY,
    event_id INTEGER NOT NULL REFERENCES events(id) ON DELETE CASCADE,
    time TEXT NOT NULL, event TEXT NOT NULL, hook TEXT NOT NULL, source TEXT NOT NULL,
    exit_code INTEGER, signal TEXT, timed_out INTEGER NOT NULL, duration_ms REAL NOT NULL,
    decision TEXT, error TEXT, stdout_truncated INTEGER NOT NULL, stderr_truncated INTEGER NOT NULL
);
CREATE INDEX hook_calls_event ON hook_calls(event_id);
"""
"""The log as relay wrote it before it kept each event's result."""


def answer_hook(
    output: object = "", code: int = 0, stderr: str = "", **fields: Any
) -> dict[str, Any]:
    text = output if isinstance(output, str) else json.dumps(output)
    return {"command": PY, "args": [ANSWER, text, str(code), stderr], **fields}


def python_hook(code: str, **fields: Any) -> dict[str, Any]:
    return {"command": PY, "args": ["-c", code], **fields}


def write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return path


def invoke(args: list[str], stdin: str = "") -> Any:
    return CliRunner().invoke(cli, args, input=stdin)


def log_file(relay_home: Path) -> Path:
    return relay_home / "state" / "telemetry.db"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


@pytest.fixture(autouse=True)
def _in_the_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`relay hooks log` shows the project it is run in (the events below are its own)."""
    monkeypatch.chdir(project)


@pytest.fixture
def logged(project: Path, relay_home: Path) -> HookSystem:
    """Five events: 1 SessionStart, 2 BeforeTool (deny, error, ok), 3 Idle (timeout),
    4 Notification (killed by a signal), 5 SessionStart."""
    write_json(
        relay_home / "settings.json",
        {
            "hooks": {
                "SessionStart": [{"hooks": [answer_hook("hello", name="greeter")]}],
                "PreToolUse": [
                    {"matcher": "Bash", "hooks": [answer_hook("", 2, "no rm", name="guard")]}
                ],
                "BeforeTool": [
                    {
                        "hooks": [
                            answer_hook("", 1, "boom", name="broken"),
                            answer_hook({"decision": "allow"}, name="fine"),
                        ]
                    }
                ],
                "Idle": [
                    {
                        "hooks": [
                            python_hook("import time; time.sleep(30)", name="sleeper", timeout=0.3)
                        ]
                    }
                ],
                "Notification": [
                    {
                        "hooks": [
                            python_hook(
                                "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
                                name="killed",
                            )
                        ]
                    }
                ],
            }
        },
    )
    system = HookSystem(cwd=project)
    system.run("SessionStart", {"source": "startup"})
    system.run("BeforeTool", {"tool_name": "Bash", "tool_input": {"command": "rm -rf /"}})
    system.run("Idle", {"idle_seconds": 30})
    system.run("Notification", {"notification_type": "info", "message": "hi"})
    system.run("SessionStart", {"source": "resume"})
    system.close()
    return system


def log_json(*args: str) -> list[dict[str, Any]]:
    result = invoke(["hooks", "log", "--json", *args])
    assert result.exit_code == 0, result.output
    events: list[dict[str, Any]] = json.loads(result.stdout)
    return events


def shape(events: list[dict[str, Any]]) -> list[tuple[int, str, list[str]]]:
    return [
        (event["id"], event["event"], [call["hook"] for call in event["hook_calls"]])
        for event in events
    ]


# -- relay hooks log -----------------------------------------------------------------------


def test_log_lists_events_newest_first_with_input_and_result(logged: HookSystem) -> None:
    events = log_json()
    assert shape(events) == [
        (5, "SessionStart", ["greeter"]),
        (4, "Notification", ["killed"]),
        (3, "Idle", ["sleeper"]),
        (2, "BeforeTool", ["guard", "broken", "fine"]),
        (1, "SessionStart", ["greeter"]),
    ]
    tool = events[3]
    assert tool["input"]["tool_input"] == {"command": "rm -rf /"}
    assert tool["input"]["hook_event_name"] == "BeforeTool"
    assert (tool["decision"], tool["result"]["decision"], tool["result"]["reason"]) == (
        "deny",
        "deny",
        "no rm",
    )
    assert [hook["exit_code"] for hook in tool["result"]["hooks"]] == [2, 1, 0]
    guard, broken, fine = tool["hook_calls"]
    assert (guard["exit_code"], guard["decision"], guard["error"]) == (2, "deny", None)
    assert (broken["exit_code"], broken["error"]) == (1, "hook exited with code 1: boom")
    assert fine["decision"] == "allow"
    assert events[0]["result"]["inject"] == "hello"
    assert events[2]["hook_calls"][0]["timed_out"] is True
    assert events[1]["hook_calls"][0]["signal"] == "SIGKILL"


def test_log_filters(logged: HookSystem) -> None:
    assert shape(log_json("--event", "PreToolUse")) == [
        (2, "BeforeTool", ["guard", "broken", "fine"])
    ]
    assert shape(log_json("--event", "SessionStart")) == [
        (5, "SessionStart", ["greeter"]),
        (1, "SessionStart", ["greeter"]),
    ]
    assert shape(log_json("--hook", "guard")) == [(2, "BeforeTool", ["guard"])]
    # Failed: error, timeout, signal; not the exit-2 deny.
    assert shape(log_json("--failed")) == [
        (4, "Notification", ["killed"]),
        (3, "Idle", ["sleeper"]),
        (2, "BeforeTool", ["broken"]),
    ]
    assert shape(log_json("--failed", "--hook", "guard")) == []
    assert shape(log_json("--failed", "--event", "BeforeTool")) == [(2, "BeforeTool", ["broken"])]
    assert [event["id"] for event in log_json("--limit", "2")] == [5, 4]
    assert [event["id"] for event in log_json("--failed", "--limit", "1")] == [4]


def test_log_text_groups_calls_under_their_event(logged: HookSystem) -> None:
    result = invoke(["hooks", "log", "--event", "BeforeTool"])
    assert result.exit_code == 0, result.output
    heading, *calls = result.stdout.splitlines()
    assert heading.startswith("#2  ") and "  BeforeTool  deny  " in heading
    assert [line.split()[:3] for line in calls] == [
        ["guard", "exit", "2"],
        ["broken", "exit", "1"],
        ["fine", "exit", "0"],
    ]
    assert calls[0].endswith("ms  deny")
    assert calls[1].endswith("error: hook exited with code 1: boom")
    assert len({line.index("exit") for line in calls}) == 1  # aligned
    failed = invoke(["hooks", "log", "--failed"]).stdout
    assert "timed out" in failed and "SIGKILL" in failed
    assert failed.count("#") == 3 and "\n\n#3" in failed


def test_the_log_shows_this_project_unless_all(
    logged: HookSystem, project: Path, tmp_path: Path, relay_home: Path
) -> None:
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    (other / "src").mkdir()
    elsewhere = HookSystem(cwd=other / "src")
    elsewhere.run("SessionStart", {"source": "startup", "cwd": str(other / "src")})
    elsewhere.close()
    here = [event["input"]["cwd"] for event in log_json("--limit", "50")]
    assert here and set(here) == {str(project)}
    there = log_json("--cwd", str(other), "--limit", "50")
    assert [event["input"]["cwd"] for event in there] == [str(other / "src")]
    everywhere = log_json("--all", "--limit", "50")
    assert len(everywhere) == len(here) + 1
    (tmp_path / "third" / ".git").mkdir(parents=True)
    empty = invoke(["hooks", "log", "--cwd", str(tmp_path / "third")])
    assert empty.stdout == (
        f"no logged hook calls match in {tmp_path / 'third'} (--all: every project)\n"
    )


def test_no_log_yet_and_nothing_created(relay_home: Path) -> None:
    result = invoke(["hooks", "log"])
    assert (result.exit_code, result.stdout) == (0, "no hook calls logged yet\n")
    assert json.loads(invoke(["hooks", "log", "--json"]).stdout) == []
    assert not log_file(relay_home).exists()


def test_no_match(logged: HookSystem) -> None:
    result = invoke(["hooks", "log", "--all", "--hook", "nobody"])
    assert (result.exit_code, result.stdout) == (0, "no logged hook calls match\n")


def test_unknown_event_filter_exits_1(relay_home: Path) -> None:
    result = invoke(["hooks", "log", "--event", "Nope"])
    assert result.exit_code == 1 and "--event: unknown event 'Nope'" in result.stderr


def test_corrupt_log_exits_1_naming_the_file(relay_home: Path, tmp_path: Path) -> None:
    path = log_file(relay_home)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not a database" * 100)
    for args in (["hooks", "log"], ["hooks", "replay", "1"]):
        result = invoke(args)
        assert result.exit_code == 1, args
        assert f"relay: error: hook log {path}: not a readable SQLite database" in result.stderr
        assert "Traceback" not in result.output
    relay = shutil.which("relay", path=str(Path(sys.executable).parent))
    assert relay is not None
    done = subprocess.run(
        [relay, "hooks", "log", "--json"],
        capture_output=True,
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        timeout=30,
        check=False,
    )
    assert done.returncode == 1
    assert str(path).encode() in done.stderr and b"Traceback" not in done.stderr
    assert done.stdout == b""


def test_a_log_file_without_tables_is_empty(relay_home: Path) -> None:
    path = log_file(relay_home)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    assert HookLog(path).events() == []
    assert HookLog(path).id_range() is None


def test_locked_log_is_an_error_not_a_hang(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    system = HookSystem(cwd=tmp_path, telemetry=Telemetry(path))
    system.register("SessionStart", lambda event: None, name="hello")
    system.run("SessionStart", {})
    system.close()
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        # Only a log taken out of WAL mode by someone else can lock readers out.
        holder.execute("PRAGMA journal_mode=DELETE")
        holder.execute("BEGIN EXCLUSIVE")
        started = time.monotonic()
        with pytest.raises(HookLogError) as caught:
            HookLog(path, timeout=0.2).events()
        assert time.monotonic() - started < 30  # a hang would never end
        assert caught.value.file == str(path) and "busy" in caught.value.reason
    finally:
        holder.close()


def test_reading_while_a_write_is_open_sees_what_is_committed(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    system = HookSystem(cwd=tmp_path, telemetry=Telemetry(path))
    system.register("SessionStart", lambda event: None, name="hello")
    system.run("SessionStart", {})
    system.close()
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(
            "INSERT INTO events (time, event, input, decision, duration_ms)"
            " VALUES ('t', 'Idle', '{}', 'allow', 0)"
        )
        events = HookLog(path).events()  # a reader kept waiting would fail: busy
        assert [event.id for event in events] == [1]
    finally:
        writer.close()


WRITER = """
import sys, time
from relay.engine.system import HookSystem
system = HookSystem(cwd=sys.argv[1])
system.register("SessionStart", lambda event: {"inject": "x"}, name="one")
system.register("SessionStart", lambda event: None, name="two")
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    system.run("SessionStart", {})
system.close()
"""


def test_reading_while_another_process_writes(tmp_path: Path, relay_home: Path) -> None:
    env = {**os.environ, "RELAY_HOME": str(relay_home), "RELAY_LOG_MAX_EVENTS": "40"}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), "1.5"], env=env)
    try:
        path = log_file(relay_home)
        reads = 0
        deadline = time.monotonic() + 20
        while writer.poll() is None and time.monotonic() < deadline:
            events = HookLog(path).events(limit=None)
            # One snapshot per read: pruning never leaves an event without its calls.
            assert all(len(event.hook_calls) == 2 for event in events)
            assert len(events) <= 40
            reads += 1 if events else 0
            time.sleep(0.01)
        assert writer.wait(timeout=20) == 0
    finally:
        writer.kill()
        writer.wait()
    assert reads > 0
    result = invoke(["hooks", "log", "--all", "--limit", "3"])  # the writer's own cwd
    assert result.exit_code == 0 and result.stdout.count("#") == 3


# -- the cap -------------------------------------------------------------------------------


def test_the_cap_bounds_the_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_LOG_MAX_EVENTS", "20")
    system = HookSystem(cwd=tmp_path)
    system.register("SessionStart", lambda event: None, name="hello")
    for _ in range(100):
        system.run("SessionStart", {})
    system.close()
    assert system.telemetry is not None and system.telemetry.max_events == 20
    events = HookLog(system.telemetry.path).events(limit=None)
    ids = [event.id for event in events]
    # The newest are kept: at most 20, and at least 18 (the oldest tenth goes in one step).
    assert 18 <= len(ids) <= 20 and ids == list(range(100, 100 - len(ids), -1))
    with sqlite3.connect(system.telemetry.path) as db:
        assert db.execute("SELECT COUNT(*) FROM hook_calls").fetchone() == (len(ids),)


def test_pruning_deletes_rarely(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry_module, "BATCH_SECONDS", 0)
    monkeypatch.setattr(telemetry_module, "BATCH_MAX", 1)  # one event per write, however fast
    statements: list[str] = []

    class Traced(Telemetry):
        def _connect(self) -> sqlite3.Connection:
            connection = super()._connect()
            connection.set_trace_callback(statements.append)
            return connection

    log = Traced(tmp_path / "t.db", max_events=100)
    system = HookSystem(cwd=tmp_path, telemetry=log)
    system.register("SessionStart", lambda event: None, name="hello")
    for _ in range(250):
        system.run("SessionStart", {})
    system.close()
    writes = sum(statement.startswith("BEGIN") for statement in statements)
    # Distinct: the trace repeats a DELETE's text for each row its cascade reaches.
    deletes = len({statement for statement in statements if statement.startswith("DELETE")})
    assert writes > 100  # many small writes...
    assert 1 <= deletes <= 16  # ...but a DELETE only when a tenth of the cap has to go
    count = HookLog(log.path).events(limit=None)
    assert 90 <= len(count) <= 100


def test_the_log_is_bounded_in_bytes_however_large_the_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """60 events of 100 KB each (6 MB) in a log bounded to 1 MiB: each entry is cut to
    ENTRY_MAX_BYTES (the long string says how much went, the cwd is whole), the oldest
    events go, and the files on disk stay within the bound plus one batch."""
    from relay.engine.telemetry import ENTRY_MAX_BYTES

    monkeypatch.setenv("RELAY_LOG_MAX_BYTES", str(1 << 20))
    monkeypatch.setattr(telemetry_module, "BATCH_SECONDS", 0)
    monkeypatch.setattr(telemetry_module, "BATCH_MAX", 5)
    system = HookSystem(cwd=tmp_path)
    system.register("PreToolUse", lambda event: None, name="hello")
    for index in range(60):
        command = f"{index} " + "x" * 100_000
        system.run("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": command}})
    system.close()
    assert system.telemetry is not None
    path = system.telemetry.path
    on_disk = sum(
        os.path.getsize(file) for file in (path, Path(f"{path}-wal")) if os.path.exists(file)
    )
    assert on_disk <= (1 << 20) + 5 * 2 * ENTRY_MAX_BYTES + (256 << 10)
    events = HookLog(path).events(limit=None)
    ids = [event.id for event in events]
    assert 10 <= len(ids) < 60 and ids == list(range(60, 60 - len(ids), -1))  # the newest
    with sqlite3.connect(path) as db:
        sizes = db.execute("SELECT max(length(CAST(input AS BLOB))) FROM events").fetchone()
    assert sizes[0] <= ENTRY_MAX_BYTES
    newest = events[0].input
    assert newest["cwd"] == str(tmp_path)
    command = newest["tool_input"]["command"]
    assert command.startswith("59 xxx") and command.endswith(" more characters not logged]")


def test_max_events_setting(
    project: Path, relay_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RELAY_LOG_MAX_EVENTS", raising=False)
    assert resolve_max_events() == 10_000
    write_json(relay_home / "settings.json", {"log": {"maxEvents": 700}})
    # A project file cannot shrink the user's log.
    write_json(project / ".relay" / "settings.json", {"log": {"maxEvents": 1}})
    assert resolve_max_events(load_settings(project).files) == 700
    extra = write_json(tmp_path / "extra.json", {"log": {"maxEvents": 900}})
    assert resolve_max_events(load_settings(project, [extra]).files) == 900
    monkeypatch.setenv("RELAY_LOG_MAX_EVENTS", "30")
    assert resolve_max_events(load_settings(project, [extra]).files) == 30
    assert Telemetry(tmp_path / "t.db").max_events == 30
    monkeypatch.setenv("RELAY_LOG_MAX_EVENTS", "lots")
    assert resolve_max_events(load_settings(project).files) == 700


# -- an old log ----------------------------------------------------------------------------


def test_old_log_is_read_and_migrated_by_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
        db.execute(
            "INSERT INTO events VALUES (1, '2024-01-01T00:00:00.000Z', 's1', 'SessionStart',"
            ' \'{"session_id": "s1", "cwd": "/", "timestamp": "2024-01-01T00:00:00.000Z",'
            ' "hook_event_name": "SessionStart", "source": "startup"}\', \'allow\', 1.5)'
        )
        db.execute(
            "INSERT INTO hook_calls VALUES (1, 1, '2024-01-01T00:00:00.000Z', 'SessionStart',"
            " 'hello', 'python', NULL, NULL, 0, 1.0, NULL, NULL, 0, 0)"
        )
    db.close()
    (old,) = HookLog(path).events()
    assert (old.id, old.result, [call.hook for call in old.hook_calls]) == (1, None, ["hello"])
    with sqlite3.connect(path) as db:  # reading did not migrate it
        assert "result" not in {row[1] for row in db.execute("PRAGMA table_info(events)")}
    db.close()

    system = HookSystem(cwd=tmp_path, telemetry=Telemetry(path))
    system.register("SessionStart", lambda event: {"inject": "hi"}, name="hello")
    # Replaying the old event compares what its columns kept: decision and hook calls.
    replayed = replay(HookLog(path).event(1), system)
    system.close()
    assert replayed.before == {
        "hook_event_name": "SessionStart",
        "decision": "allow",
        "hooks": [
            {
                "name": "hello",
                "source": "python",
                "exit_code": None,
                "signal": None,
                "timed_out": False,
                "error": None,
            }
        ],
    }
    assert replayed.changes == []
    new, old = HookLog(path).events()
    assert (new.id, old.id, old.result) == (2, 1, None)
    assert new.result is not None and new.result["inject"] == "hi"
    assert new.input["session_id"] == "s1"  # the logged input, replayed as it was


# -- relay hooks replay --------------------------------------------------------------------


def test_replay_shows_what_changed(project: Path, tmp_path: Path, relay_home: Path) -> None:
    settings = tmp_path / "s.json"

    def hooks(decision: str, *extra: dict[str, Any]) -> None:
        guard = answer_hook(
            {"decision": decision, "reason": f"guard says {decision}"}, name="guard"
        )
        write_json(settings, {"hooks": {"PreToolUse": [{"hooks": [guard, *extra]}]}})

    hooks("allow", answer_hook("", 1, "flaky", name="flaky"))
    event = json.dumps({"tool_name": "Bash", "tool_input": {"command": "ls"}})
    ran = invoke(
        ["hooks", "run", "PreToolUse", "--settings", str(settings), "--cwd", str(project)], event
    )
    assert ran.exit_code == 0, ran.output

    unchanged = invoke(["hooks", "replay", "1", "--settings", str(settings), "--cwd", str(project)])
    assert unchanged.exit_code == 0, unchanged.output
    assert "no changes: decision allow, 2 hooks, as logged" in unchanged.stdout

    hooks("deny", answer_hook({"systemMessage": "checked"}, name="newcomer"))
    result = invoke(["hooks", "replay", "1", "--settings", str(settings), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) >= {"id", "before", "after", "changes"} and out["id"] == 1
    assert (out["before"]["decision"], out["after"]["decision"]) == ("allow", "deny")
    changes = {
        (change["kind"], change["hook"], change["field"]): change for change in out["changes"]
    }
    assert changes["field", None, "decision"]["after"] == "deny"
    assert changes["field", None, "reason"] == {
        "kind": "field",
        "field": "reason",
        "hook": None,
        "source": None,
        "before": "guard says allow",
        "after": "guard says deny",
    }
    assert changes["field", None, "systemMessage"]["after"] == "checked"
    assert ("hook removed", "flaky", None) in changes
    assert ("hook added", "newcomer", None) in changes
    assert changes["hook", "guard", "output"]["after"] == {
        "decision": "deny",
        "reason": "guard says deny",
    }
    assert out["after"]["tool_input"] == {"command": "ls"}

    text = invoke(["hooks", "replay", "1", "--settings", str(settings)])
    assert text.exit_code == 0
    lines = text.stdout.splitlines()
    assert lines[0].startswith("replayed event 1 (BeforeTool, logged ")
    assert '  decision: "allow" -> "deny"' in lines
    assert f"  hook flaky ({settings}): removed" in lines
    assert f"  hook newcomer ({settings}): added" in lines
    # Each replay went through the engine, so each is logged too.
    assert [event["id"] for event in log_json()] == [4, 3, 2, 1]


def test_replay_of_an_unknown_id(project: Path, relay_home: Path) -> None:
    result = invoke(["hooks", "replay", "1"])
    assert result.exit_code == 1 and "no event 1 in the hook log" in result.stderr
    assert "the log is empty" in result.stderr
    system = HookSystem(cwd=project)
    system.register("SessionStart", lambda event: None, name="hello")
    for _ in range(3):
        system.run("SessionStart", {})
    system.close()
    result = invoke(["hooks", "replay", "7"])
    assert result.exit_code == 1
    assert "no event 7 in the hook log" in result.stderr
    assert "the log holds events 1 to 3" in result.stderr
    with pytest.raises(UnknownLogEventError) as caught:
        HookLog(log_file(relay_home)).event(0)
    assert (caught.value.event_id, caught.value.first, caught.value.last) == (0, 1, 3)


def test_replay_through_the_installed_command(
    project: Path, tmp_path: Path, relay_home: Path
) -> None:
    relay = shutil.which("relay", path=str(Path(sys.executable).parent))
    assert relay is not None
    settings = write_json(
        tmp_path / "s.json",
        {"hooks": {"SessionStart": [{"hooks": [answer_hook("morning", name="greeter")]}]}},
    )
    env = {
        **os.environ,
        "RELAY_HOME": str(relay_home),
        "RELAY_SYSTEM_SETTINGS": str(tmp_path / "none.json"),
    }

    def run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [relay, *args], input=stdin, capture_output=True, env=env, timeout=30, check=False
        )

    assert (
        run(
            "hooks", "run", "SessionStart", "--settings", str(settings), "--cwd", str(project)
        ).returncode
        == 0
    )
    write_json(
        settings,
        {"hooks": {"SessionStart": [{"hooks": [answer_hook("evening", name="greeter")]}]}},
    )
    done = run("hooks", "replay", "1", "--settings", str(settings), "--json")
    assert done.returncode == 0, done.stderr
    changes = json.loads(done.stdout)["changes"]
    assert {
        "kind": "field",
        "field": "inject",
        "hook": None,
        "source": None,
        "before": "morning",
        "after": "evening",
    } in changes
    listed = run("hooks", "log", "--hook", "greeter")
    assert listed.returncode == 0 and listed.stdout.decode().count("greeter") == 2


def test_compare_is_pure() -> None:
    before = {"decision": "allow", "hooks": [{"name": "a", "source": "f", "exit_code": 0}]}
    after = {
        "decision": "allow",
        "inject": "x",
        "hooks": [
            {"name": "a", "source": "f", "exit_code": 3, "error": "hook exited with code 3"},
            {"name": "a", "source": "f", "exit_code": 0},
        ],
    }
    changes = compare(before, after)
    # `inject` and the hook's `error` were not in `before`: not compared.
    assert [(c.kind, c.hook, c.field, c.before, c.after) for c in changes] == [
        ("hook", "a", "exit_code", 0, 3),
        ("hook added", "a", None, None, None),
    ]

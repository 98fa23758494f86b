"""`relay hooks list`: every registered hook with its state, grouped by event in plan order."""

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

from relay.cli.hooks.listing import hook_rows
from relay.cli.main import cli
from relay.engine.system import HookSystem

ANSWER = str(Path(__file__).resolve().parent / "resources" / "engine" / "answer.py")
PY = sys.executable


def answer_hook(output: str = "", **fields: Any) -> dict[str, Any]:
    return {"command": PY, "args": [ANSWER, output], **fields}


def write_json(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


@pytest.fixture
def registered(project: Path, relay_home: Path) -> Path:
    """User hooks (one disabled by name, one by `enabled: false`) and an untrusted project hook."""
    write_json(
        relay_home / "settings.json",
        {
            "hooks": {
                "PreToolUse": [{"matcher": "Bash", "hooks": [answer_hook(name="claude-guard")]}],
                "BeforeTool": [
                    {
                        "matcher": "run_shell_command",
                        "hooks": [
                            answer_hook(name="guard"),
                            answer_hook(name="off", enabled=False),
                        ],
                    }
                ],
                "SessionStart": [{"hooks": [answer_hook(name="greeter")]}],
            },
            "hooksConfig": {"disabled": ["greeter"]},
        },
    )
    write_json(
        project / ".relay" / "settings.json",
        {
            "hooks": {
                "BeforeTool": [{"hooks": [{"command": "./check.sh", "name": "project-check"}]}]
            }
        },
    )
    return project


def invoke(args: list[str]) -> Any:
    return CliRunner().invoke(cli, args)


def test_json_lists_every_hook_in_plan_order(registered: Path, relay_home: Path) -> None:
    result = invoke(["hooks", "list", "--cwd", str(registered), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    user = str(relay_home / "settings.json")
    project = str(registered / ".relay" / "settings.json")
    assert [
        (row["canonical"], row["event"], row["name"], row["scope"], row["enabled"], row["trusted"])
        for row in rows
    ] == [
        ("SessionStart", "SessionStart", "greeter", "user", False, True),
        # BeforeTool: project before user (plan order), file order within the user file.
        ("BeforeTool", "BeforeTool", "project-check", "project", True, False),
        ("BeforeTool", "PreToolUse", "claude-guard", "user", True, True),
        ("BeforeTool", "BeforeTool", "guard", "user", True, True),
        ("BeforeTool", "BeforeTool", "off", "user", False, True),
    ]
    guard = rows[3]
    assert guard == {
        "event": "BeforeTool",
        "canonical": "BeforeTool",
        "matcher": "run_shell_command",
        "name": "guard",
        "command": f"{PY} {ANSWER} ",
        "source": user,
        "scope": "user",
        "dialect": "relay",
        "timeout": 60.0,
        "enabled": True,
        "trusted": True,
        "runs": True,
        "broken": None,
        "failClosed": False,
    }
    assert rows[1]["source"] == project and rows[1]["runs"] is False
    assert rows[2]["dialect"] == "claude" and rows[2]["matcher"] == "Bash"
    # Listing is not running: no untrusted-hook warning, and no hook log written.
    assert result.stderr == ""
    assert not (relay_home / "state" / "telemetry.db").exists()


def test_text_is_an_aligned_table_grouped_by_event(registered: Path) -> None:
    result = invoke(["hooks", "list", "--cwd", str(registered)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "SessionStart"
    assert lines[1].split() == [
        "NAME",
        "REGISTERED",
        "AS",
        "MATCHER",
        "SCOPE",
        "STATUS",
        "COMMAND",
        "SOURCE",
    ]
    assert lines[2].split()[:5] == ["greeter", "SessionStart", "*", "user", "disabled"]
    heading = lines.index("BeforeTool")
    table = lines[heading + 1 : heading + 6]
    assert [line.split()[0] for line in table] == [
        "NAME",
        "project-check",
        "claude-guard",
        "guard",
        "off",
    ]
    assert "untrusted" in table[1] and "PreToolUse" in table[2] and " on " in table[3]
    # Aligned: every column starts at the same place on every line of the table.
    status = table[0].index("STATUS")
    assert {line[status:].split()[0] for line in table[1:]} == {"untrusted", "on", "disabled"}
    assert "5 hooks (2 disabled, 1 untrusted)" in lines
    assert any("relay trust" in line for line in lines)


@pytest.mark.parametrize("name", ["PreToolUse", "BeforeTool"])
def test_event_filter_takes_either_name(registered: Path, name: str) -> None:
    result = invoke(["hooks", "list", "--cwd", str(registered), "--event", name, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [row["name"] for row in rows] == ["project-check", "claude-guard", "guard", "off"]
    assert {row["event"] for row in rows} == {"BeforeTool", "PreToolUse"}


def test_runtime_hooks_come_first(project: Path, relay_home: Path) -> None:
    write_json(
        relay_home / "settings.json",
        {"hooks": {"SessionStart": [{"hooks": [answer_hook(name="from-file")]}]}},
    )
    system = HookSystem(cwd=project, telemetry=False)
    system.register("SessionStart", lambda event: None, name="in-process")
    system.register_command("UserPromptSubmit", "echo hi", name="ad-hoc", matcher="x")
    rows = hook_rows(system.registry)
    assert [(row.name, row.event, row.source, row.scope, row.runs) for row in rows] == [
        ("in-process", "SessionStart", "python", "runtime", True),
        ("from-file", "SessionStart", str(relay_home / "settings.json"), "user", True),
        ("ad-hoc", "UserPromptSubmit", "runtime", "runtime", True),
    ]
    assert rows[2].canonical == "BeforeAgent" and rows[2].command == "echo hi"
    assert [row.name for row in hook_rows(system.registry, "BeforeAgent")] == ["ad-hoc"]


def test_hooks_switched_off_are_listed_as_off(project: Path, relay_home: Path) -> None:
    write_json(
        relay_home / "settings.json",
        {
            "hooks": {"Stop": [{"hooks": [answer_hook(name="stopper")]}]},
            "hooksConfig": {"enabled": False},
        },
    )
    result = invoke(["hooks", "list", "--cwd", str(project)])
    assert result.exit_code == 0, result.output
    assert "stopper  Stop" in result.stdout and " off " in result.stdout
    assert "all hooks are off" in result.stdout
    rows = json.loads(invoke(["hooks", "list", "--cwd", str(project), "--json"]).stdout)
    assert (rows[0]["enabled"], rows[0]["runs"]) == (True, False)


def test_settings_warnings_go_to_stderr(project: Path, tmp_path: Path) -> None:
    extra = write_json(
        tmp_path / "extra.json",
        {"hooks": {"Idle": [{"hooks": [answer_hook(name="idler", timeot=3)]}]}},
    )
    result = invoke(["hooks", "list", "--cwd", str(project), "--settings", str(extra), "--json"])
    assert result.exit_code == 0, result.output
    assert [row["name"] for row in json.loads(result.stdout)] == ["idler"]
    assert "relay: warning:" in result.stderr and "timeot" in result.stderr


def test_nothing_registered(project: Path) -> None:
    result = invoke(["hooks", "list", "--cwd", str(project)])
    assert (result.exit_code, result.stdout) == (0, "no hooks registered\n")
    result = invoke(["hooks", "list", "--cwd", str(project), "--event", "Stop"])
    assert result.stdout == "no hooks registered for AfterAgent\n"
    assert json.loads(invoke(["hooks", "list", "--cwd", str(project), "--json"]).stdout) == []


def test_unknown_event_and_missing_settings_exit_1(project: Path, tmp_path: Path) -> None:
    result = invoke(["hooks", "list", "--cwd", str(project), "--event", "BeforeTol"])
    assert result.exit_code == 1
    assert "--event: unknown event 'BeforeTol'" in result.stderr
    assert "BeforeTool" in result.stderr
    missing = tmp_path / "nope.json"
    result = invoke(["hooks", "list", "--cwd", str(project), "--settings", str(missing)])
    assert result.exit_code == 1 and str(missing) in result.stderr


def test_installed_command(registered: Path, tmp_path: Path, relay_home: Path) -> None:
    relay = shutil.which("relay", path=str(Path(sys.executable).parent))
    assert relay is not None
    env = {
        **os.environ,
        "RELAY_HOME": str(relay_home),
        "RELAY_SYSTEM_SETTINGS": str(tmp_path / "none.json"),
    }
    done = subprocess.run(
        [relay, "hooks", "list", "--event", "PreToolUse", "--json"],
        cwd=registered,
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [row["name"] for row in json.loads(done.stdout)] == [
        "project-check",
        "claude-guard",
        "guard",
        "off",
    ]

"""Nothing broken stays quiet: every command that reads settings names a broken file or hook
entry, where, and what still runs; one bad entry takes out that entry only, and a broken
failClosed entry denies its events. Through the installed `relay`, on real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

RELAY = str(Path(sys.executable).parent / "relay")
DENY_RM = "#!/bin/sh\ncase \"$(cat)\" in *rm\\ -rf*) echo 'no rm -rf' >&2; exit 2;; esac\nexit 0\n"

# The project file as a newcomer writes it: a guard, and a lint hook with a typo in its
# timeout (a string). Line 6, column 50 is where the bad value's key starts.
PROJECT = """{
  "hooks": {
    "PreToolUse": [
      {"matcher": "Bash", "hooks": [
        {"name": "guard", "command": "./guard.sh"},
        {"name": "lint", "command": "./lint.sh", "timeout": "10"}
      ]}
    ]
  }
}
"""
LINT_ERROR = ".relay/settings.json:6:50: hooks.PreToolUse[0].hooks[1].timeout: expected number"


@pytest.fixture
def project(tmp_path: Path, relay_home: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / ".relay").mkdir()
    (root / ".relay" / "settings.json").write_text(PROJECT)
    guard = root / "guard.sh"
    guard.write_text(DENY_RM)
    guard.chmod(0o755)
    return root


def relay(
    cwd: Path, *args: str, stdin: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY, *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def bash_event(project: Path, command: str, tool: str = "Bash") -> str:
    event: dict[str, Any] = {
        "session_id": "s",
        "cwd": str(project),
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {"command": command},
    }
    return json.dumps(event)


def test_hooks_list_lists_what_it_can_then_each_error_and_exits_1(
    project: Path, relay_home: Path
) -> None:
    (relay_home / "settings.json").write_text('{"hooks": {"Stop": [\n')  # malformed
    listed = relay(project, "hooks", "list")
    assert listed.returncode == 1, listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines() if line.startswith("  ")}
    assert "untrusted" in rows["guard"]  # the rest of the file is still there
    assert " broken " in rows["lint"]
    assert "2 hooks (1 untrusted, 1 broken)" in listed.stdout
    errors = listed.stderr.splitlines()
    lint = next(line for line in errors if LINT_ERROR in line)
    assert lint.startswith("relay: error: ")
    assert "hook lint does not run until this is fixed: the file's other hooks still run" in lint
    user = next(line for line in errors if str(relay_home / "settings.json") in line)
    assert "settings.json:1:21: invalid JSON" in user and "none of the hooks in" in user
    as_json = relay(project, "hooks", "list", "--json")
    assert as_json.returncode == 1
    by_name = {row["name"]: row for row in json.loads(as_json.stdout)}
    assert LINT_ERROR in by_name["lint"]["broken"] and by_name["guard"]["broken"] is None
    assert by_name["lint"]["runs"] is False


def test_one_broken_entry_leaves_the_guard_of_its_file_running(project: Path) -> None:
    trusted = relay(project, "trust", "--yes")
    # The guard is trusted; the broken entry cannot be, and trust says so and exits 1.
    assert trusted.returncode == 1
    assert "trusted 1 hook(s)" in trusted.stdout
    assert "BROKEN" in trusted.stdout and LINT_ERROR in trusted.stdout
    assert "1 hook(s) with a broken settings entry not trusted: lint" in trusted.stderr
    ran = relay(
        project,
        "hooks",
        "run",
        "--dialect",
        "claude",
        "PreToolUse",
        stdin=bash_event(project, "rm -rf /"),
    )
    assert ran.returncode == 0, ran.stderr
    answer = json.loads(ran.stdout)
    decision = answer["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny"  # the guard ran: the typo did not stop it
    assert decision["permissionDecisionReason"] == "no rm -rf"
    # The user hears about the entry that did not run, where a host shows it.
    assert LINT_ERROR in answer["systemMessage"]
    assert "hook lint does not run" in answer["systemMessage"]
    plain = relay(project, "hooks", "run", "PreToolUse", stdin=bash_event(project, "ls"))
    assert plain.returncode == 0
    result = json.loads(plain.stdout)
    assert result["decision"] == "allow"
    assert [error["hook"] for error in result["errors"]] == ["lint"]
    assert LINT_ERROR in plain.stderr
    tried = relay(project, "hooks", "test", "PreToolUse", "--set", 'tool_input.command="ls"')
    assert f"not run: its settings entry is broken: {project}/{LINT_ERROR}" in tried.stdout


def test_a_broken_fail_closed_entry_denies_the_events_it_matches(
    project: Path, relay_home: Path
) -> None:
    (relay_home / "settings.json").write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {
                            "matcher": "Bash",
                            "hooks": [
                                {
                                    "name": "strict",
                                    "command": "true",
                                    "failClosed": True,
                                    "signal": "SIGNOPE",
                                }
                            ],
                        }
                    ],
                    "Stop": [{"hooks": [{"name": "note", "command": "echo noted"}]}],
                }
            }
        )
    )
    (project / ".relay" / "settings.json").unlink()

    def claude(event: str, stdin: str) -> dict[str, Any]:
        ran = relay(project, "hooks", "run", "--dialect", "claude", event, stdin=stdin)
        assert ran.returncode == 0, ran.stderr
        answer: dict[str, Any] = json.loads(ran.stdout)
        return answer

    # A host's call sets aside what is broken in every file (the user's too) and reports it.
    denied = claude("PreToolUse", bash_event(project, "ls"))["hookSpecificOutput"]
    assert denied["permissionDecision"] == "deny"
    reason = denied["permissionDecisionReason"]
    assert "hook strict failed and is failClosed" in reason
    assert "hooks.PreToolUse[0].hooks[0].signal: unknown signal 'SIGNOPE'" in reason
    # Its matcher still counts: another tool is not denied, and the file's Stop hook runs.
    read = claude("PreToolUse", bash_event(project, "x", "Read"))
    assert "permissionDecision" not in read.get("hookSpecificOutput", {})
    assert claude("Stop", "{}") == {"systemMessage": "noted"}
    # `relay hooks run` for a script (relay's own answer) stops at an error in the user's
    # own file, as before; `hooks list` shows the entry.
    plain = relay(project, "hooks", "run", "PreToolUse", stdin=bash_event(project, "ls"))
    assert plain.returncode == 1 and "unknown signal 'SIGNOPE'" in plain.stderr
    listed = relay(project, "hooks", "list")
    assert listed.returncode == 1 and "broken, denies" in listed.stdout
    # In a project file (set aside for every caller), the same entry denies in relay's answer.
    (project / ".relay" / "settings.json").write_text((relay_home / "settings.json").read_text())
    (relay_home / "settings.json").unlink()
    result = json.loads(
        relay(project, "hooks", "run", "PreToolUse", stdin=bash_event(project, "ls")).stdout
    )
    assert result["decision"] == "deny" and "is failClosed" in result["reason"]


def test_trust_refuses_a_file_it_cannot_read_and_says_why(project: Path) -> None:
    (project / ".relay" / "settings.json").write_text('{"hooks": {"PreToolUse": [}}\n')
    trusted = relay(project, "trust", "--yes")
    assert trusted.returncode == 1
    assert "CANNOT READ" in trusted.stdout
    assert ".relay/settings.json:1:27: invalid JSON" in trusted.stdout
    assert "no project hooks" not in trusted.stdout
    assert "cannot trust the hooks of a settings file relay cannot read" in trusted.stderr


def test_doctor_and_install_name_the_broken_entry(project: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home)}
    env.pop("CLAUDE_CONFIG_DIR", None)
    doctor = relay(project, "doctor", "--no-measure", env=env)
    assert doctor.returncode == 1
    failing = [line for line in doctor.stdout.splitlines() if line.startswith("FAIL  settings")]
    assert len(failing) == 1 and LINT_ERROR in failing[0]
    assert "hook lint does not run" in failing[0]
    installed = relay(project, "install", "claude", "--project", "--no-mcp", env=env)
    assert installed.returncode == 0, installed.stderr
    assert LINT_ERROR in installed.stderr and "hook lint does not run" in installed.stderr

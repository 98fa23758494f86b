"""`relay hooks new`: a working hook in each language, registered in its scope's file (the rest
of that file kept as it was), tried through the very `relay hooks test` line it prints; and
the refusals (a file or name that exists, an unknown event, a broken settings file)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from relay.cli.main import cli

RELAY = Path(sys.executable).parent / "relay"
LANGUAGES = ["sh", "python", "node", "perl"]
INTERPRETERS = {"sh": "sh", "python": "python3", "node": "node", "perl": "perl"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


def invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def new(project: Path, *args: str) -> dict[str, Any]:
    done = invoke("hooks", "new", *args, "--cwd", str(project), "--json")
    assert done.exit_code == 0, done.output
    made: dict[str, Any] = json.loads(done.stdout)
    return made


def relay(project: Path, words: list[str]) -> subprocess.CompletedProcess[str]:
    """The installed `relay`, run in the project as a person would type WORDS."""
    assert words[0] == "relay"
    return subprocess.run(
        [str(RELAY), *words[1:]],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def needs(language: str) -> None:
    if shutil.which(INTERPRETERS[language]) is None:
        pytest.skip(f"{INTERPRETERS[language]} is not installed")


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_new_guard_denies_through_the_line_it_prints(project: Path, language: str) -> None:
    needs(language)
    made = new(project, "guard", "--event", "PreToolUse", "--matcher", "Bash", "--lang", language)
    script = Path(made["file"])
    assert script.parent == project / ".relay" / "hooks" and script.name.startswith("guard.")
    assert os.stat(script).st_mode & stat.S_IXUSR
    assert script.read_text().startswith("#!")
    settings = json.loads((project / ".relay" / "settings.json").read_text())
    assert settings == {
        "hooks": {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"command": made["command"], "name": "guard"}]}
            ]
        }
    }
    assert made["trust_needed"] is True
    checked = relay(project, ["relay", "hooks", "validate"])
    assert checked.stdout.endswith("0 errors, 0 warnings\n"), checked.stdout
    assert invoke("trust", "--yes", "--cwd", str(project)).exit_code == 0
    denied = relay(project, made["test"])  # `… --hook guard --expect deny`
    assert denied.returncode == 0, denied.stdout + denied.stderr
    assert "decision: deny  (guard: no rm -rf here)" in denied.stdout
    assert "⚠" not in denied.stdout  # no warning: the hook is as relay wants it
    allowed = relay(project, ["relay", "hooks", "test", "PreToolUse", "--hook", "guard", "--json"])
    trial = json.loads(allowed.stdout)
    assert trial["result"]["decision"] == "allow" and trial["result"]["errors"] == []
    assert trial["hooks"][0]["output"] == {}  # no opinion on `npm test`


@pytest.mark.parametrize("language", LANGUAGES)
def test_each_language_answers_each_kind_of_event(project: Path, language: str) -> None:
    needs(language)
    made = [
        new(project, "context", "--event", "SessionStart", "--lang", language),
        new(project, "files", "--event", "PreToolUse", "--matcher", "Write", "--lang", language),
        new(project, "note", "--event", "Notification", "--lang", language),
    ]
    assert made[1]["test"] == [
        *("relay", "hooks", "test", "PreToolUse", "--tool", "Write"),
        *("--set", 'tool_input.file_path=".env"', "--hook", "files", "--expect", "deny"),
        *("--cwd", str(project)),
    ]
    assert invoke("trust", "--yes", "--cwd", str(project)).exit_code == 0
    trials = []
    for hook in made:
        done = relay(project, [*hook["test"], "--json"])
        trial = json.loads(done.stdout)
        assert done.returncode == 0, trial
        assert trial["result"]["errors"] == [] and trial["hooks"][0]["warnings"] == []
        trials.append(trial)
    assert trials[0]["result"]["inject"] == "context: run the tests before you commit"


def test_the_printed_text_says_what_was_written_and_how_to_try_it(project: Path) -> None:
    done = invoke("hooks", "new", "guard", "--event", "PreToolUse", "--cwd", str(project))
    assert done.exit_code == 0, done.output
    assert done.stdout == (
        f"created {project}/.relay/hooks/guard.sh (sh, executable)\n"
        f"created {project}/.relay/settings.json: guard for PreToolUse\n"
        "project hooks run once trusted: review it and run `relay trust`\n"
        "try it: relay hooks test PreToolUse --set 'tool_input.command=\"rm -rf /\"' "
        f"--hook guard --expect deny --cwd {project}\n"
    )


def test_local_scope_registers_in_the_personal_file_keeping_its_text(project: Path) -> None:
    local = project / ".relay" / "settings.local.json"
    local.parent.mkdir()
    before = '{\n    "hooksConfig": {"disabled": ["old"]},\n    "session": {"idleSeconds": 5}\n}\n'
    local.write_text(before)
    made = new(project, "ctx", "--event", "SessionStart", "--scope", "local")
    assert Path(made["file"]) == project / ".relay" / "hooks" / "ctx.sh"
    assert made["settings"] == str(local) and made["settings_created"] is False
    after = local.read_text()
    assert after.startswith('{\n    "hooksConfig": {"disabled": ["old"]},\n    "session"')
    assert json.loads(after)["hooks"] == {
        "SessionStart": [{"hooks": [{"command": made["command"], "name": "ctx"}]}]
    }
    assert not (project / ".relay" / "settings.json").exists()


def test_user_scope_writes_under_relay_home_and_needs_no_trust(
    project: Path, relay_home: Path
) -> None:
    made = new(
        project, "hello", "--event", "UserPromptSubmit", "--scope", "user", "--lang", "python"
    )
    assert Path(made["file"]) == relay_home / "hooks" / "hello.py"
    assert made["trust_needed"] is False
    assert json.loads((relay_home / "settings.json").read_text())["hooks"]["UserPromptSubmit"]
    done = relay(project, made["test"])
    assert done.returncode == 0, done.stdout + done.stderr


def test_nothing_is_overwritten_and_no_name_is_taken_twice(project: Path) -> None:
    new(project, "guard", "--event", "PreToolUse")
    settings = project / ".relay" / "settings.json"
    registered = settings.read_text()
    again = invoke("hooks", "new", "guard", "--event", "PreToolUse", "--cwd", str(project))
    assert again.exit_code == 1
    assert "guard.sh exists: relay hooks new never overwrites a file" in again.stderr
    other_language = invoke(
        "hooks",
        "new",
        "guard",
        "--event",
        "SessionStart",
        "--lang",
        "python",
        "--cwd",
        str(project),
    )
    assert other_language.exit_code == 1
    assert f"a hook named 'guard' exists already in {settings}" in other_language.stderr
    assert not (project / ".relay" / "hooks" / "guard.py").exists()
    assert settings.read_text() == registered


def test_an_unknown_event_gets_the_closest_name(project: Path) -> None:
    done = invoke("hooks", "new", "guard", "--event", "PreToolUes", "--cwd", str(project))
    assert done.exit_code == 2
    assert "unknown event 'PreToolUes' (did you mean 'PreToolUse'?)" in done.stderr
    assert not (project / ".relay").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["../x", "--event", "Stop"], "cannot name a hook file"),
        (
            ["x", "--event", "UserPromptSubmit", "--matcher", "Bash"],
            "UserPromptSubmit has no matcher",
        ),
        (["x", "--event", "PreToolUse", "--matcher", "("], "--matcher: invalid regular expression"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    project: Path, args: list[str], message: str
) -> None:
    done = invoke("hooks", "new", *args, "--cwd", str(project))
    assert done.exit_code == 1 and message in done.stderr
    assert not (project / ".relay").exists()


def test_a_broken_settings_file_is_named_and_no_hook_file_is_left(project: Path) -> None:
    settings = project / ".relay" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"hooks": {"PreToolUse": [}\n')
    done = invoke("hooks", "new", "guard", "--event", "PreToolUse", "--cwd", str(project))
    assert done.exit_code == 1
    assert f"{settings}:1:" in done.stderr and "invalid JSON" in done.stderr
    assert not (project / ".relay" / "hooks").exists()
    assert settings.read_text() == '{"hooks": {"PreToolUse": [}\n'


def test_a_missing_interpreter_is_said(project: Path) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no node on it
    done = subprocess.run(
        [str(RELAY), "hooks", "new", "j", "--event", "Stop", "--lang", "node"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (
        done.stderr == "relay: warning: node is not on PATH: the hook fails until it is installed\n"
    )
    assert done.stdout.splitlines()[-1] == "try it: relay hooks test Stop --hook j"

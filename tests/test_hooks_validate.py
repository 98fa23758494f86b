"""`relay hooks validate` and the loader's collecting mode: every error and warning, with where."""

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

from relay.cli.main import cli
from relay.config.loader import check_settings, check_settings_file, parse_settings
from relay.config.model import HookEntry
from relay.errors import SettingsError

SEVERAL_ERRORS = """{
  "hooks": {
    "BeforeTool": [
      {
        "matcher": "(",
        "hooks": [
          {"command": "", "timeout": "ten", "asyn": true},
          {"timeout": 5}
        ]
      }
    ],
    "BeforeTol": []
  },
  "hooksConfig": {"disabled": "guard"},
  "patterns": {"deploy": "./deploy.sh"},
  "extra": 1
}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


def write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else json.dumps(document, indent=2))
    return path


def invoke(args: list[str]) -> Any:
    return CliRunner().invoke(cli, args)


# --- the library: check_settings collects, parse_settings still raises the first ------------


def test_every_error_of_a_file_is_collected_with_its_place() -> None:
    report = check_settings(SEVERAL_ERRORS.encode(), file="s.json", scope="project")
    assert report.settings is None and not report.ok
    found = sorted((error.line, error.column, error.path, error.message) for error in report.errors)
    assert found == [
        (5, 9, "hooks.BeforeTool[0].matcher", found[0][3]),
        (7, 12, "hooks.BeforeTool[0].hooks[0].command", "command is empty"),
        (7, 27, "hooks.BeforeTool[0].hooks[0].timeout", "expected number, got string"),
        (8, 11, "hooks.BeforeTool[0].hooks[1]", "missing required field 'command'"),
        (14, 19, "hooksConfig.disabled", "expected array, got string"),
        (
            15,
            16,
            "patterns.deploy",
            "expected \"builtin\" or a hook object, got string './deploy.sh'",
        ),
    ]
    assert found[0][3].startswith("invalid regular expression '('")
    assert [(warning.path, warning.line) for warning in report.warnings] == [
        ("hooks.BeforeTool[0].hooks[0].asyn", 7),
        ("extra", 16),
        ("hooks.BeforeTol", 12),  # events are checked once the whole file is read
    ]


def test_parse_settings_raises_the_first_error_check_settings_collects() -> None:
    report = check_settings(SEVERAL_ERRORS.encode(), file="s.json", scope="user")
    with pytest.raises(SettingsError) as caught:
        parse_settings(SEVERAL_ERRORS.encode(), file="s.json", scope="user")
    first = report.errors[0]
    assert (caught.value.path, caught.value.message, caught.value.line) == (
        first.path,
        first.message,
        first.line,
    )


def test_a_field_with_its_own_error_is_not_also_missing() -> None:
    document = {"hooks": {"Stop": [{"hooks": [{"command": 3}]}]}}
    report = check_settings(json.dumps(document).encode(), file="s.json", scope="user")
    assert [(error.path, error.message) for error in report.errors] == [
        ("hooks.Stop[0].hooks[0].command", "expected string, got number")
    ]


def test_a_valid_file_has_settings_and_warnings() -> None:
    document = {"hooks": {"Stop": [{"hooks": [{"command": "a", "async": True}]}]}}
    report = check_settings(json.dumps(document).encode(), file="s.json", scope="user")
    assert report.ok and report.errors == []
    assert report.settings is not None
    assert report.settings.hooks["Stop"][0].hooks == [HookEntry(command="a")]
    assert [warning.path for warning in report.warnings] == ["hooks.Stop[0].hooks[0].async"]


def test_malformed_json_is_one_error_with_line_and_column() -> None:
    report = check_settings(b'{\n  "hooks": {,\n  "x": [}\n}', file="s.json", scope="user")
    (error,) = report.errors
    assert (error.line, error.column, error.path) == (2, 13, None)
    assert error.message.startswith("invalid JSON")
    assert report.warnings == []


def test_an_unreadable_file_is_one_error(tmp_path: Path) -> None:
    report = check_settings_file(tmp_path / "missing.json", "settings")
    (error,) = report.errors
    assert error.file == str(tmp_path / "missing.json")
    assert "cannot read" in error.message


# --- the command ---------------------------------------------------------------------------


def test_several_errors_in_one_file_are_all_printed(project: Path) -> None:
    settings = write(project / ".relay" / "settings.json", SEVERAL_ERRORS)
    result = invoke(["hooks", "validate", "--cwd", str(project)])
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert f"{settings}:7:12: error: hooks.BeforeTool[0].hooks[0].command: command is empty" in (
        lines
    )
    assert (
        f"{settings}:7:27: error: hooks.BeforeTool[0].hooks[0].timeout: "
        "expected number, got string" in lines
    )
    assert f"{settings}:14:19: error: hooksConfig.disabled: expected array, got string" in lines
    assert (
        f"{settings}:7: warning: hooks.BeforeTool[0].hooks[0].asyn: unknown key 'asyn' ignored"
        in lines
    )
    assert sum(": error: " in line for line in lines) == 6
    assert sum(": warning: " in line for line in lines) == 3
    assert lines[-1] == "1 file, 6 errors, 3 warnings"
    # Errors, then warnings, each in file order.
    error_lines = [int(line.split(":")[1]) for line in lines if ": error: " in line]
    assert error_lines == sorted(error_lines)
    warning_lines = [int(line.split(":")[1]) for line in lines if ": warning: " in line]
    assert warning_lines == [7, 12, 16]


def test_errors_in_two_files_are_each_reported(project: Path, relay_home: Path) -> None:
    user = write(relay_home / "settings.json", {"session": {"idleSeconds": "30"}})
    local = write(
        project / ".relay" / "settings.local.json",
        {"hooks": {"BeforeTool": [{"hooks": [{"command": "a", "signal": "TERM"}]}]}},
    )
    result = invoke(["hooks", "validate", "--cwd", str(project)])
    assert result.exit_code == 1
    assert f"{user}:3:5: error: session.idleSeconds: expected number, got string" in result.stdout
    assert f"{local}:" in result.stdout and "unknown signal 'TERM'" in result.stdout
    assert result.stdout.splitlines()[-1] == "2 files, 2 errors, 0 warnings"


def test_warnings_only_exit_0(project: Path) -> None:
    settings = write(
        project / ".relay" / "settings.json",
        {"hooks": {"PreToolUse": [{"hooks": [{"command": "a", "timeout": 5000, "async": True}]}]}},
    )
    result = invoke(["hooks", "validate", "--cwd", str(project)])
    assert result.exit_code == 0, result.output
    assert f"{settings}:" in result.stdout and "did you mean milliseconds?" in result.stdout
    assert result.stdout.splitlines()[-1] == "1 file, 0 errors, 2 warnings"


def test_malformed_json_stops_that_file_but_not_the_others(project: Path, relay_home: Path) -> None:
    write(relay_home / "settings.json", '{\n  "hooks": {\n    "Stop": [,]\n  }\n}\n')
    write(project / ".relay" / "settings.json", {"hooks": {"Stop": "nope"}, "typo": 1})
    result = invoke(["hooks", "validate", "--cwd", str(project)])
    assert result.exit_code == 1
    user = relay_home / "settings.json"
    assert f"{user}:3:14: error: invalid JSON: " in result.stdout
    assert "hooks.Stop: expected array, got string" in result.stdout
    assert result.stdout.splitlines()[-1] == "2 files, 2 errors, 1 warning"


def test_clean_files_say_ok(project: Path, relay_home: Path) -> None:
    user = write(relay_home / "settings.json", {"hooks": {}})
    result = invoke(["hooks", "validate", "--cwd", str(project)])
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [f"{user}: ok (user)", "1 file, 0 errors, 0 warnings"]


def test_no_settings_files(project: Path) -> None:
    result = invoke(["hooks", "validate", "--cwd", str(project)])
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        f"no settings files apply in {project}",
        "0 files, 0 errors, 0 warnings",
    ]


def test_explicit_files_replace_the_discovered_set(
    project: Path, relay_home: Path, tmp_path: Path
) -> None:
    write(relay_home / "settings.json", {"session": {"idleSeconds": -1}})  # not checked
    shared = write(project / ".relay" / "settings.json", {"hooks": {}})
    other = write(tmp_path / "other.json", {"hooks": {"Stop": [{"hooks": [{"command": ""}]}]}})
    missing = tmp_path / "missing.json"
    result = invoke(
        [
            "hooks",
            "validate",
            "--json",
            "--cwd",
            str(project),
            str(shared),
            str(other),
            str(missing),
        ]
    )
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["ok"] is False
    assert [(file["file"], file["scope"]) for file in out["files"]] == [
        (str(shared), "project"),  # a discovered file keeps its scope
        (str(other), "settings"),
        (str(missing), "settings"),
    ]
    assert out["files"][0] == {
        "file": str(shared),
        "scope": "project",
        "errors": [],
        "warnings": [],
    }
    assert out["files"][1]["errors"] == [
        {
            "message": "command is empty",
            "path": "hooks.Stop[0].hooks[0].command",
            "line": 7,
            "column": 13,
        }
    ]
    assert "cannot read settings file" in out["files"][2]["errors"][0]["message"]


def test_discovered_set_in_json(project: Path, relay_home: Path) -> None:
    write(relay_home / "settings.json", {"hooks": {"BeforeTol": []}})
    local = write(project / ".relay" / "settings.local.json", '{\n  "hooks": [}')
    result = invoke(["hooks", "validate", "--json", "--cwd", str(project)])
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert [file["scope"] for file in out["files"]] == ["user", "project-local"]
    (warning,) = out["files"][0]["warnings"]
    assert warning["path"] == "hooks.BeforeTol" and warning["line"] == 3
    assert warning["column"] is None
    (error,) = out["files"][1]["errors"]
    assert (error["line"], error["column"], error["path"]) == (2, 13, None)
    assert out["files"][1]["file"] == str(local)


def test_installed_command_validates(project: Path, relay_home: Path) -> None:
    relay = shutil.which("relay", path=str(Path(sys.executable).parent))
    assert relay is not None
    write(project / ".relay" / "settings.json", SEVERAL_ERRORS)
    env = {**os.environ, "RELAY_HOME": str(relay_home)}
    done = subprocess.run(
        [relay, "hooks", "validate", "--cwd", str(project)],
        capture_output=True,
        check=False,
        env=env,
        timeout=30,
    )
    assert done.returncode == 1
    assert done.stdout.decode().splitlines()[-1] == "1 file, 6 errors, 3 warnings"
    write(project / ".relay" / "settings.json", {"hooks": {}})
    done = subprocess.run(
        [relay, "hooks", "validate", "--cwd", str(project)],
        capture_output=True,
        check=False,
        env=env,
        timeout=30,
    )
    assert done.returncode == 0, done.stdout


def test_a_script_that_is_not_executable_is_reported_and_its_run_says_how_to_fix_it(
    project: Path,
) -> None:
    script = project / ".relay" / "hooks" / "guard.sh"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\necho ok\n")
    script.chmod(0o644)
    runnable = project / ".relay" / "hooks" / "fine.sh"
    runnable.write_text("#!/bin/sh\necho ok\n")
    runnable.chmod(0o755)
    hooks = [
        {"command": "$CLAUDE_PROJECT_DIR/.relay/hooks/guard.sh", "name": "guard"},
        {"command": ".relay/hooks/fine.sh"},
        {"command": "sh .relay/hooks/guard.sh"},  # run by sh: no execute bit needed
    ]
    settings = write(project / ".relay" / "settings.json", {"hooks": {"Stop": [{"hooks": hooks}]}})
    result = invoke(["hooks", "validate", "--cwd", str(project)])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stdout.splitlines() if ": warning: " in line]
    assert warnings == [
        f"{settings}:7: warning: hooks.Stop[0].hooks[0].command: {script} is not executable;"
        f" every run would fail with permission denied (to fix: chmod +x {script})"
    ]
    as_json = json.loads(invoke(["hooks", "validate", "--json", "--cwd", str(project)]).stdout)
    assert "chmod +x" in as_json["files"][0]["warnings"][0]["message"]
    # And the run itself says so.
    from relay.engine.system import HookSystem

    system = HookSystem(cwd=project, telemetry=False, isolate=())
    system.registry  # noqa: B018 - built, so the hooks can be trusted below
    from relay.config.trust import TrustStore

    TrustStore().trust(
        project, [(h.fingerprint, h.name) for h in system.registry.untrusted if h.fingerprint]
    )
    system.close()
    ran = HookSystem(cwd=project, telemetry=False).run("Stop", {})
    (error,) = [e for e in ran.errors if e.hook == "guard"]
    assert error.message == (
        f"could not start: permission denied: {script} is not executable"
        f" (to fix: chmod +x {script})"
    )


def test_validate_takes_settings_files(project: Path, tmp_path: Path) -> None:
    extra = write(tmp_path / "extra.json", {"hooks": {"Stop": [{"hooks": [{"command": ""}]}]}})
    result = invoke(["hooks", "validate", "--settings", str(extra), "--cwd", str(project)])
    assert result.exit_code == 1
    (error,) = [line for line in result.stdout.splitlines() if ": error: " in line]
    assert error.startswith(f"{extra}:")
    assert error.endswith(": error: hooks.Stop[0].hooks[0].command: command is empty")
    assert result.stdout.splitlines()[-1] == "1 file, 1 error, 0 warnings"

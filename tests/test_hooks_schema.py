"""`relay hooks schema`: the JSON Schemas in spec/schemas/, printed or written out."""

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

SPEC = Path(__file__).resolve().parent.parent / "spec" / "schemas"


def invoke(args: list[str]) -> Any:
    return CliRunner().invoke(cli, ["hooks", "schema", *args])


def spec_text(name: str) -> str:
    return (SPEC / name).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("name", "file"),
    [
        ("BeforeTool", "BeforeTool"),
        ("PreToolUse", "BeforeTool"),
        ("Stop", "AfterAgent"),
        ("Idle", "Idle"),
    ],
)
def test_event_input_schema(name: str, file: str) -> None:
    result = invoke([name])
    assert result.exit_code == 0, result.output
    assert result.stdout == spec_text(f"events/{file}.json")


@pytest.mark.parametrize("args", [["--output"], ["BeforeTool", "--output"], ["Stop", "--output"]])
def test_output_schema_is_the_same_for_every_event(args: list[str]) -> None:
    result = invoke(args)
    assert result.exit_code == 0, result.output
    assert result.stdout == spec_text("hook-output.json")


def test_result_schema() -> None:
    result = invoke(["--result"])
    assert (result.exit_code, result.stdout) == (0, spec_text("result.json"))


def test_index_names_every_schema() -> None:
    result = invoke([])
    assert result.exit_code == 0, result.output
    on_disk = sorted(str(path.relative_to(SPEC)) for path in SPEC.rglob("*.json"))
    for name in on_disk:
        assert name in result.stdout
    assert "relay hooks schema BeforeTool" in result.stdout and "PreToolUse" in result.stdout
    assert "relay hooks schema --output" in result.stdout
    assert "--dir" in result.stdout


def test_dir_writes_what_spec_holds(tmp_path: Path) -> None:
    target = tmp_path / "out" / "schemas"
    result = invoke(["--dir", str(target)])
    assert result.exit_code == 0, result.output
    written = sorted(str(path.relative_to(target)) for path in target.rglob("*.json"))
    expected = sorted(str(path.relative_to(SPEC)) for path in SPEC.rglob("*.json"))
    assert written == expected
    for name in expected:
        assert (target / name).read_text(encoding="utf-8") == spec_text(name), name
    assert sorted(result.stdout.splitlines()) == sorted(str(target / name) for name in expected)


def test_unknown_event_exits_1_with_the_valid_names() -> None:
    result = invoke(["BeforeTol"])
    assert result.exit_code == 1
    assert (
        "EVENT: unknown event 'BeforeTol' (did you mean 'BeforeTool'?); valid events:"
        in result.stderr
    )
    assert "PreToolUse" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""
    # --output still checks the event.
    assert invoke(["BeforeTol", "--output"]).exit_code == 1


def test_a_pass_through_event_has_the_fields_every_event_carries() -> None:
    result = invoke(["SubagentStop"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.stdout)
    assert schema["title"] == "SubagentStop event (Claude Code, passed through)"
    assert "Claude Code" in schema["description"]
    assert {"session_id", "cwd", "hook_event_name"} <= set(schema["properties"])
    assert schema["additionalProperties"] is True


@pytest.mark.parametrize("args", [["BeforeTool", "--dir", "x"], ["--output", "--result"]])
def test_conflicting_arguments_are_usage_errors(args: list[str]) -> None:
    result = invoke(args)
    assert result.exit_code == 2
    assert "Usage:" in result.output


def test_installed_command(tmp_path: Path) -> None:
    relay = shutil.which("relay", path=str(Path(sys.executable).parent))
    assert relay is not None
    env = {**os.environ, "RELAY_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [relay, "hooks", "schema", "SessionStart"],
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == spec_text("events/SessionStart.json")
    assert json.loads(done.stdout)["title"] == "SessionStart event"

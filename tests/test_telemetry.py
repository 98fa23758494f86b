"""The hook-call log: bounded, and never a reason for a hook run to fail."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import anyio
import pytest

from relay.engine.system import HookSystem
from relay.engine.telemetry import Telemetry


def system_with_hook(tmp_path: Path, telemetry: Telemetry | bool = True) -> HookSystem:
    system = HookSystem(cwd=tmp_path, telemetry=telemetry)
    system.register("SessionStart", lambda event: {"inject": "hi"}, name="hello")
    return system


def test_log_is_bounded(tmp_path: Path) -> None:
    log = Telemetry(tmp_path / "t.db", max_events=5)
    system = system_with_hook(tmp_path, log)
    for _ in range(12):
        anyio.run(system.fire, "SessionStart", {})
    system.close()
    with sqlite3.connect(tmp_path / "t.db") as db:
        assert db.execute("SELECT COUNT(*) FROM events").fetchone() == (5,)
        assert db.execute("SELECT COUNT(*) FROM hook_calls").fetchone() == (5,)
        assert db.execute("SELECT DISTINCT hook, source FROM hook_calls").fetchall() == [
            ("hello", "python")
        ]


def test_unwritable_log_warns_once_and_hooks_still_run(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the log's folder should be")
    system = system_with_hook(tmp_path, Telemetry(blocker / "t.db"))
    results = [anyio.run(system.fire, "SessionStart", {}) for _ in range(3)]
    system.close()
    assert [result.inject for result in results] == ["hi", "hi", "hi"]
    err = capfd.readouterr().err
    assert err.count("cannot be written") == 1 and str(blocker / "t.db") in err


def test_corrupt_log_does_not_break_hooks(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    corrupt = tmp_path / "t.db"
    corrupt.write_bytes(b"this is not a database" * 100)
    system = system_with_hook(tmp_path, Telemetry(corrupt))
    assert anyio.run(system.fire, "SessionStart", {}).inject == "hi"
    system.close()
    assert "cannot be written" in capfd.readouterr().err


def test_debug_log_on_stderr(tmp_path: Path) -> None:
    import subprocess

    (tmp_path / ".git").mkdir()
    settings = tmp_path / "s.json"
    settings.write_text(
        '{"hooks": {"SessionStart": [{"hooks": [{"command": "uname", "name": "greeter"}]}]}}'
    )
    env = {"RELAY_HOME": str(tmp_path / "home"), "RELAY_DEBUG": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "relay.cli.main",
            "hooks",
            "run",
            "SessionStart",
            "--settings",
            str(settings),
            "--cwd",
            str(tmp_path),
        ],
        input=b"{}",
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert b"SessionStart greeter: direct exit=0" in done.stderr

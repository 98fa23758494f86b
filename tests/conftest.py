"""Shared fixtures: every test gets its own RELAY_HOME and no system settings."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["browser"]  # the dashboard's tests: Chromium, a page, a relay dashboard


@pytest.fixture(autouse=True)
def relay_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point RELAY_HOME (user config and all state) at a fresh folder; stop the resident
    server a test's hook client may have started there (it would idle for 15 minutes)."""
    home = tmp_path / "relay-home"
    home.mkdir()
    monkeypatch.setenv("RELAY_HOME", str(home))
    monkeypatch.setenv("RELAY_SYSTEM_SETTINGS", str(tmp_path / "no-system-settings.json"))
    monkeypatch.delenv("RELAY_DEBUG", raising=False)
    monkeypatch.delenv("RELAY_SETTINGS", raising=False)
    yield home
    from relay.server import client

    path = client.socket_path()
    if os.path.exists(path):
        client.control(path, "stop")


@pytest.fixture
def team_default(relay_home: Path) -> None:
    """For tests that address the team `default` (use with `pytest.mark.usefixtures`): set
    it, as an administrator would (the system settings file), since a project has a team
    of its own otherwise."""
    pinned = json.dumps({"messaging": {"team": "default"}})
    for path in {Path(os.environ["RELAY_SYSTEM_SETTINGS"]), relay_home / "no-system-settings.json"}:
        path.write_text(pinned)


# ---- the suite leaves no process behind --------------------------------------------------

RUN_MARKER = "RELAY_TEST_RUN"
"""In the environment of the test run and so of every process it starts (unless a test gives
a process an environment of its own): what finds a process the suite left behind."""
LEFTOVER_GRACE = 10.0
"""Seconds processes of the run get to end after the last test before they count as left."""


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get(RUN_MARKER):  # xdist's workers inherit the controller's
        os.environ[RUN_MARKER] = f"{os.getpid()}-{time.time_ns()}"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Once, in the process that ran the session (xdist's controller, after its workers
    ended): every process still running with this run's marker is a leftover, and fails
    the run with its pid and command line."""
    if hasattr(session.config, "workerinput"):
        return
    deadline = time.monotonic() + LEFTOVER_GRACE
    left = _leftovers()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _leftovers()
    if left:
        lines = "\n".join(f"  pid {pid}: {command}" for pid, command in left)
        sys.stderr.write(f"\nthe test run left {len(left)} process(es) behind:\n{lines}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _leftovers() -> list[tuple[int, str]]:
    marker = f"\0{RUN_MARKER}={os.environ[RUN_MARKER]}\0".encode()
    me, found = os.getpid(), []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as environ:
                if marker not in b"\0" + environ.read():
                    continue
            with open(f"/proc/{name}/stat", "rb") as stat:
                if stat.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue  # ended; its parent has not reaped it yet
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue  # gone meanwhile, or another user's
        found.append((int(name), command.strip()[:200]))
    return found

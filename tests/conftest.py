"""Shared fixtures: every test gets its own RELAY_HOME and no system settings."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest


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

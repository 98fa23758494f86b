"""Shared fixtures: every test gets its own RELAY_HOME and no system settings."""

from __future__ import annotations

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

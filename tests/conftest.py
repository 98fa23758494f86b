"""Shared fixtures: every test gets its own RELAY_HOME and no system settings."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def relay_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point RELAY_HOME (user config and all state) at a fresh folder."""
    home = tmp_path / "relay-home"
    home.mkdir()
    monkeypatch.setenv("RELAY_HOME", str(home))
    monkeypatch.setenv("RELAY_SYSTEM_SETTINGS", str(tmp_path / "no-system-settings.json"))
    monkeypatch.delenv("RELAY_DEBUG", raising=False)
    monkeypatch.delenv("RELAY_SETTINGS", raising=False)
    return home

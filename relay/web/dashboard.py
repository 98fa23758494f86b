"""What every page of the dashboard is given: the team and its sources, and the feed."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relay.web.feed import Feed

if TYPE_CHECKING:
    from relay.config.discovery import SettingsSet
    from relay.fleet.model import StatusBoard
    from relay.services.messaging.messenger import Messenger


@dataclass
class Dashboard:
    """One `relay dashboard` server's view of its team (its pages read through this)."""

    messenger: Messenger
    """The team's messaging (connected to NATS when the settings say so)."""
    board: StatusBoard
    """The team's status board (this machine's SQLite, or NATS)."""
    settings: SettingsSet
    """The settings, as found from `cwd`."""
    project: Path
    """The project the dashboard was started in (the settings' root, else `cwd`)."""
    cwd: Path
    user: str
    """The human at the browser: who the page's messages are from ($USER)."""
    machine: str
    """This machine's label (statuses carry it)."""
    hook_log: Path
    """The hook log's database."""
    feed: Feed = field(default_factory=Feed)
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    """The token every action must carry (the X-Relay-CSRF header)."""

    @property
    def team(self) -> str:
        return self.messenger.team

    def publish(self, kind: str, data: Any) -> int:
        """Send event `kind` (`PAGE.WHAT`) with `data` to every open page."""
        return self.feed.publish(kind, data)

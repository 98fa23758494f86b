"""The team as every view shows it: the mailbox's known agents and humans, merged with the
status board's live state (STYLE §19: `relay agents` and `relay watch` read it here)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import msgspec

from relay.errors import RelayError
from relay.fleet.model import ENDED_STATES, AgentStatus, StatusBoard
from relay.services.messaging.model import Agent

if TYPE_CHECKING:
    from relay.fleet.board import SqliteBoard
    from relay.services.messaging.messenger import Messenger


class TeamMember(Agent, kw_only=True):
    """One name of the team: its mailbox entry (`Agent`: its presence in `state`), and its
    live status on the board, if a session or a supervisor reported one."""

    live: AgentStatus | None = None
    """Its status on the board (None: not reported by a session or a supervisor)."""

    @property
    def now(self) -> str:
        """What it is doing: its live state (starting, working, idle, waiting, restarting,
        exited, stopped, lost), else its mailbox presence (live, idle, busy, offline)."""
        return self.live.state if self.live is not None else self.state

    @property
    def since(self) -> str | None:
        """When it entered that state (for a name off the board: when it was last seen)."""
        return self.live.since if self.live is not None else self.last_seen


def team_members(team: str, agents: list[Agent], statuses: list[AgentStatus]) -> list[TeamMember]:
    """The team's names, sorted: the mailbox's `agents` merged with the board's `statuses`."""
    live = {status.name: status for status in statuses}
    members: dict[str, TeamMember] = {}
    for agent in agents:
        fields = msgspec.structs.asdict(agent)
        members[agent.name] = TeamMember(**fields, live=live.pop(agent.name, None))
    for name, status in live.items():  # on the board only (its mailbox was unavailable)
        running = status.state not in ENDED_STATES and status.state != "lost"
        members[name] = TeamMember(
            name=name,
            team=team,
            state="live" if running else "offline",
            host=status.machine,
            pid=status.pid,
            started_ticks=status.started_ticks,
            last_seen=status.heartbeat,
            session_id=status.session_id,
            live=status,
        )
    return [members[name] for name in sorted(members)]


async def read_team(
    messenger: Messenger, board: StatusBoard
) -> tuple[list[TeamMember], str | None]:
    """The team of `messenger`: its known agents merged with the board's statuses; and why
    the board could not be read (its members then come from the mailbox alone), or None."""
    agents = await messenger.agents()
    try:
        statuses = await board.statuses(messenger.team)
    except RelayError as exc:
        return team_members(messenger.team, agents, []), f"live state unavailable: {exc}"
    return team_members(messenger.team, agents, statuses), None


def read_team_now(messenger: Messenger, board: SqliteBoard) -> tuple[list[TeamMember], str | None]:
    """`read_team` without an event loop, for this machine's mailbox and board (the quick
    path of `relay agents`: no asyncio to load)."""
    agents = messenger.mailbox.agents(messenger.team)
    try:
        statuses = board.statuses_now(messenger.team)
    except RelayError as exc:
        return team_members(messenger.team, agents, []), f"live state unavailable: {exc}"
    return team_members(messenger.team, agents, statuses), None


def age(since: str | None, now: datetime | None = None) -> str:
    """How long ago `since` (ISO 8601) was, shortly: 12s, 5m, 3h, 2d; "-" when unknown."""
    if not since:
        return "-"
    try:
        then = datetime.fromisoformat(since)
    except ValueError:
        return "-"
    if then.tzinfo is None:
        return "-"
    seconds = max(0.0, ((now or datetime.now(UTC)) - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def shown_state(member: TeamMember) -> str:
    """Its state as a listing shows it: an ended run with its exit code (`exited(3)`)."""
    live = member.live
    if live is not None and live.state in ENDED_STATES and live.exit_code is not None:
        return f"{live.state}({live.exit_code})"
    return member.now


def uptime(member: TeamMember, now: datetime | None = None) -> str:
    """How long its current run has been going ("-" when none is)."""
    live = member.live
    if live is None or live.state in ENDED_STATES or live.state == "lost":
        return "-"
    return age(live.started, now)

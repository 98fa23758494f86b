"""The team of agents as data: the team file's shape, and each agent's live status.

No I/O here. `teamfile.py` reads a `relay.team.toml` into a `Team`; `relay up` starts its
agents; every running session and the supervisor report an `AgentStatus` to a
`StatusBoard` (SQLite on one machine, a NATS KV bucket with a TTL across machines), which
`relay agents`, `relay watch` and `relay dashboard` read (DESIGN §13, spec/fleet.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, Protocol

import msgspec

TEAM_FILE_NAME = "relay.team.toml"
"""The team file `relay up` looks for at the project root when no FILE is given."""

RestartPolicy = Literal["never", "on-failure", "always"]
"""When the supervisor starts an agent again after it ended: never; when it exited with
a code other than 0 (or a signal); or whenever it ended (not after `relay down`)."""

AgentState = Literal[
    "starting", "working", "idle", "waiting", "restarting", "exited", "stopped", "lost"
]
"""An agent's state, as `relay agents` shows it:

- starting: its session is being set up (SessionStart has not finished);
- working: it printed output, or a tool ran, within the idle threshold;
- idle: quiet past the idle threshold;
- waiting: waiting for the human (a permission prompt, a question; from the host's
  Notification hooks or the screen);
- restarting: it ended and the supervisor starts it again after a back-off;
- exited: it ended and will not be started again (`exit_code` says how);
- stopped: `relay down` or `relay stop` ended it;
- lost: no heartbeat within the heartbeat's time to live (its machine or relay died).
"""

HostKind = Literal["claude", "gemini", "codex", "other"]

ENDED_STATES: frozenset[str] = frozenset({"exited", "stopped"})
"""States an agent is left in when nothing runs it: never read as lost."""
HEARTBEAT_SECONDS = 3.0
"""How often a live session says it is alive."""
HEARTBEAT_TTL = 10.0
"""The default time to live of a heartbeat: older, and the agent reads as lost."""
LAST_LINE_LIMIT = 200
"""The most characters of an agent's last output line kept in its status."""


class Restart(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=True):
    """An agent's restart policy: the policy, the first back-off, its ceiling (it doubles
    on each restart in a row) and how many restarts in a row before it gives up."""

    policy: RestartPolicy = "on-failure"
    backoff: float = 1.0
    """Seconds before the first restart."""
    max_backoff: float = 60.0
    limit: int = 5
    """Restarts in a row (each within `healthy` seconds of its start) before the agent
    is left exited."""
    healthy: float = 60.0
    """Seconds an agent must run for its next failure to count as a first one again."""


class AgentSpec(msgspec.Struct, kw_only=True, frozen=True):
    """One agent of the team file."""

    name: str
    command: list[str]
    """The program and its arguments (`claude`, `gemini`, `codex` or any program)."""
    cwd: str | None = None
    """Its working folder, relative to the team file's folder; None: that folder."""
    worktree: bool = False
    """A git worktree and branch of its own (`relay/NAME`), made on its first start and kept."""
    task: str | None = None
    """Given to `relay run --task` and typed as its first prompt."""
    env: dict[str, str] = msgspec.field(default_factory=dict)
    style: str | None = None
    """`relay run --style` (auto, plain, claude, gemini)."""
    restart: Restart = Restart()
    machine: str | None = None
    """The machine label that runs it (None: every machine's `relay up` may)."""
    line: int | None = None
    """Where it is defined in the team file (1-based), for messages."""


class Team(msgspec.Struct, kw_only=True, frozen=True):
    """A team file, read and checked."""

    name: str
    file: str
    """The team file's absolute path."""
    root: str
    """The folder that relative paths are read from (the team file's folder)."""
    agents: list[AgentSpec]


class AgentStatus(msgspec.Struct, kw_only=True):
    """What one agent of a team is doing now: one record per (team, name), replaced as it
    changes and on every heartbeat."""

    team: str
    name: str
    state: AgentState
    since: str
    """When it entered this state (ISO 8601 UTC)."""
    heartbeat: str
    """When its session or supervisor last said it was alive (ISO 8601 UTC)."""
    machine: str
    """The machine label (`relay up --machine`, else the host name)."""
    host_kind: HostKind = "other"
    pid: int | None = None
    """The pid of its `relay run` on `machine`."""
    started_ticks: int | None = None
    """That process's start time (clock ticks since boot): a reused pid is not this agent."""
    project: str | None = None
    command: list[str] = msgspec.field(default_factory=list)
    started: str | None = None
    """When the current run started (for uptime)."""
    last_line: str | None = None
    """Its last line of output, made visible (relay.protocol.display) and at most 200
    characters."""
    tool: str | None = None
    """The tool it is in (from PreToolUse/PostToolUse hooks, for a host with relay installed)."""
    messages_in: int = 0
    messages_out: int = 0
    exit_code: int | None = None
    """How its last run ended: its exit code, or -N for signal N."""
    restarts: int = 0
    """Times the supervisor started it again."""
    supervised: bool = False
    """Started by `relay up` (so `relay restart` and the dashboard may restart it)."""
    session_id: str | None = None
    """Its `relay run` session's id ($RELAY_SESSION_ID), when a session reported it."""
    ttl: float = HEARTBEAT_TTL
    """Seconds after `heartbeat` that the agent reads as lost if nothing was said since (a
    supervisor that publishes `restarting` may give the back-off's length plus a margin)."""


def reads_as(status: AgentStatus, *, now: datetime, alive: bool | None = None) -> AgentState:
    """The state `status` reads as at `now`: lost when its heartbeat is past its time to
    live, or when `alive` is False (its relay process is known gone), unless it had ended."""
    if status.state in ENDED_STATES or status.state == "lost":
        return status.state
    if alive is False:
        return "lost"
    try:
        beat = datetime.fromisoformat(status.heartbeat)
    except ValueError:
        return "lost"  # a heartbeat nobody can read proves nothing
    if beat.tzinfo is None or (now - beat).total_seconds() > status.ttl:
        return "lost"
    return status.state


class StatusBoard(Protocol):
    """Where a team's statuses are kept and read (async: the NATS one talks to a server;
    the SQLite one runs its queries in a worker thread)."""

    async def publish(self, status: AgentStatus) -> None:
        """Record `status` (replacing the agent's previous one) and its heartbeat."""
        ...

    async def statuses(self, team: str) -> list[AgentStatus]:
        """The team's agents, by name; an agent past its heartbeat's time to live reads as
        `lost` (unless it had exited or stopped)."""
        ...

    async def remove(self, team: str, name: str) -> None:
        """Forget an agent's status."""
        ...

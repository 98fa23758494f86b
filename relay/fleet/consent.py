"""Whether the user has seen what a team file starts.

A team file is a project file, hostile until trusted (DESIGN §7): a cloned repository's
`relay.team.toml` could start anything. `relay up` starts a team file's agents only once
the user has seen them: the first time, and again whenever what it would run changes
(an agent's command, folder, worktree, task, environment or restart policy), it shows
each agent's command and asks (or, off a terminal, refuses and says to run `relay up
--yes`). What was agreed to is kept per file as a digest of what it runs.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import msgspec

from relay.config.paths import state_dir
from relay.fleet.model import Team
from relay.protocol.display import visible

MAX_FILES = 1000
"""Team files remembered; past it the oldest agreement is forgotten."""


def _store() -> Path:
    return state_dir() / "fleet" / "agreed.json"


def fingerprint(team: Team) -> str:
    """A digest of what the team file runs (not of its comments or layout)."""
    agents = [msgspec.structs.replace(agent, line=None) for agent in team.agents]
    return hashlib.sha256(msgspec.json.encode([team.name, agents])).hexdigest()


def _agreed() -> dict[str, str]:
    try:
        data = msgspec.json.decode(_store().read_bytes(), type=dict[str, str])
    except (OSError, msgspec.DecodeError):
        return {}
    return data


def agreed(team: Team) -> bool:
    return _agreed().get(team.file) == fingerprint(team)


def agree(team: Team) -> None:
    """Remember that the user agreed to what `team` runs (OSError when it cannot be kept)."""
    from relay.fleet.records import write_atomically

    known = _agreed()
    known.pop(team.file, None)
    known[team.file] = fingerprint(team)
    while len(known) > MAX_FILES:
        known.pop(next(iter(known)))
    write_atomically(_store(), msgspec.json.encode(known))


def describe(team: Team) -> list[str]:
    """What the team file would start, one line per agent (terminal-safe)."""
    import shlex

    lines = []
    for agent in team.agents:
        where = (
            " (own git worktree)" if agent.worktree else f" (in {agent.cwd})" if agent.cwd else ""
        )
        machine = f" on {agent.machine}" if agent.machine else ""
        env = f" with {', '.join(sorted(agent.env))} set" if agent.env else ""
        lines.append(visible(f"  {agent.name}{machine}: {shlex.join(agent.command)}{where}{env}"))
    return lines


def on_terminal() -> bool:
    """Whether a person can answer: the question is read from a terminal."""
    return os.isatty(0)

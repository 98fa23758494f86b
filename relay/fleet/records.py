"""What `relay up` leaves on disk for each agent it started: how to start it (the launch)
and how its supervisor is doing (the supervisor's record), in relay's private state folder.

    state/fleet/TEAM/NAME.launch.json      written by `relay up`, read by the supervisor
    state/fleet/TEAM/NAME.supervisor.json  written by the supervisor as it goes
    state/fleet/TEAM/NAME.log              a headless supervisor's own notes and stderr
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Literal

import msgspec

from relay.config.paths import private_dir, state_dir
from relay.engine.processes import process_alive
from relay.fleet.model import Restart

Mode = Literal["tmux", "headless"]
SupervisorState = Literal["running", "restarting", "exited", "stopped"]


class Launch(msgspec.Struct, kw_only=True, frozen=True):
    """How a supervisor starts its agent, fixed by `relay up` (a changed team file takes
    effect at the next `relay up` of a stopped agent, as with `docker compose up`)."""

    team: str
    name: str
    run: list[str]
    """The whole `relay run …` command line the supervisor starts."""
    cwd: str
    env: dict[str, str] = msgspec.field(default_factory=dict)
    """The whole environment of the run: `relay up`'s own with the agent's `env` on top
    (kept here, in a 0600 file, rather than on a command line that `ps` shows, and
    rather than taken from a tmux server that may have been started elsewhere)."""
    restart: Restart = Restart()
    mode: Mode = "headless"
    grace: float = 15.0
    """Seconds `relay down` waits after SIGTERM (SessionEnd) before it kills."""
    team_file: str | None = None
    machine: str


class SupervisorRecord(msgspec.Struct, kw_only=True):
    """A supervisor's account of its agent."""

    pid: int
    started_ticks: int | None
    state: SupervisorState
    child: int | None = None
    """The pid of the `relay run` it started last (None between runs)."""
    runs: int = 0
    restarts_in_a_row: int = 0
    exit_code: int | None = None
    """How the last run ended: its exit code, or -N for signal N."""
    next_start: float | None = None
    """When a restart is due (time.time()), while restarting."""
    mode: Mode = "headless"


def team_folder(team: str) -> Path:
    return state_dir() / "fleet" / team


def launch_path(team: str, name: str) -> Path:
    return team_folder(team) / f"{name}.launch.json"


def record_path(team: str, name: str) -> Path:
    return team_folder(team) / f"{name}.supervisor.json"


def log_path(team: str, name: str) -> Path:
    return team_folder(team) / f"{name}.log"


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` (a reader sees the old file or the new); OSError leaves
    nothing half-written."""
    private_dir(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise


def read_launch(path: Path) -> Launch:
    return msgspec.json.decode(path.read_bytes(), type=Launch)


def read_record(team: str, name: str) -> SupervisorRecord | None:
    """The supervisor's record; None when there is none or it cannot be read."""
    try:
        return msgspec.json.decode(record_path(team, name).read_bytes(), type=SupervisorRecord)
    except (OSError, msgspec.DecodeError):
        return None


def supervisor_alive(record: SupervisorRecord | None) -> bool:
    return record is not None and process_alive(record.pid, record.started_ticks)


def supervised_names(team: str) -> list[str]:
    """The agents of `team` that `relay up` has launched on this machine, by name."""
    folder = team_folder(team)
    if not folder.is_dir():
        return []
    return sorted(path.name.removesuffix(".launch.json") for path in folder.glob("*.launch.json"))

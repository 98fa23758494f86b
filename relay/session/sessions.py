"""Which `relay run` sessions are running: one small JSON file each in relay's state folder.

`relay sessions` lists them (dropping entries whose relay process is gone, checked by pid
and process start time, so a reused pid is not taken for a live session); `relay stop
NAME` asks one to end.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
from collections.abc import Mapping
from pathlib import Path

import msgspec

from relay.config.paths import private_dir, state_dir
from relay.engine.processes import process_alive
from relay.errors import RelayError, did_you_mean
from relay.services.messaging.model import Whereabouts


class SessionRecord(msgspec.Struct, kw_only=True):
    """A running session."""

    name: str
    pid: int
    started_ticks: int | None
    agent_pid: int | None = None
    command: list[str]
    cwd: str
    started: str
    session_id: str | None = None
    """The session's id ($RELAY_SESSION_ID in its agent's environment); None in a record
    an older relay wrote."""
    team: str | None = None
    """The team the agent is in ($RELAY_TEAM in its environment); None in a record an older
    relay wrote."""


class SessionError(RelayError):
    """A session that cannot be registered or found."""


def sessions_dir() -> Path:
    """Where session records live."""
    return state_dir() / "sessions"


def hooked_marker(session_id: str, env: Mapping[str, str] | None = None) -> Path:
    """The file that says a session's agent runs relay as its host's hooks (written by those
    hooks, which see the session's id in their environment): its directives then come
    from the assistant's own text at Stop, and the session leaves the screen's alone."""
    digest = hashlib.sha256(session_id.encode()).hexdigest()[:24]
    return state_dir(env) / "hosts" / f"run-{digest}.hooked"


def alive(record: SessionRecord) -> bool:
    """Whether the session's relay process is still the one that registered."""
    return process_alive(record.pid, record.started_ticks)


def holds_session(session_id: str, caller: int | None) -> bool:
    """Whether `caller` (a pid; None: this process) runs inside the live `relay run`
    session with this id: it descends from that session's relay process. An id in an
    environment is only a claim (other processes of the user can read it)."""
    from relay.engine.processes import descends_from

    return any(
        record.session_id == session_id
        and descends_from(record.pid, record.started_ticks, child=caller)
        for record in list_sessions()
    )


def list_sessions() -> list[SessionRecord]:
    """Live sessions, oldest first; records of dead ones are removed on the way."""
    folder = sessions_dir()
    if not folder.is_dir():
        return []
    records = []
    for path in sorted(folder.glob("*.json")):
        try:
            record = msgspec.json.decode(path.read_bytes(), type=SessionRecord)
        except (OSError, msgspec.DecodeError):
            continue  # written half-way by a crashed relay, or being replaced
        if alive(record):
            records.append(record)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return sorted(records, key=lambda record: record.started)


def whereabouts(name: str) -> list[Whereabouts]:
    """The teams of the live sessions named `name` (for an error that must say where an
    agent is when it is not in the team asked)."""
    return [
        Whereabouts(team=record.team, cwd=record.cwd, live=True)
        for record in list_sessions()
        if record.name == name and record.team is not None
    ]


def register(record: SessionRecord) -> Path:
    """Record a starting session; a live session of the same name is an error."""
    for other in list_sessions():
        if other.name == record.name:
            raise SessionError(
                f"a session named {record.name!r} is already running (pid {other.pid}); "
                "choose another --name or `relay stop` it"
            )
    folder = private_dir(sessions_dir())
    path = folder / f"{record.name}.json"
    rewrite(path, record)
    return path


def rewrite(path: Path, record: SessionRecord) -> None:
    """Write a session's record (atomically: a reader sees the old one or the new); raise
    OSError, leaving nothing half-written behind."""
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as stream:
            stream.write(msgspec.json.encode(record))
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            temporary.unlink()  # a full disk leaves no half-written record behind
        raise


def unregister(path: Path) -> None:
    """Forget a session that ended."""
    with contextlib.suppress(OSError):
        path.unlink()


def stop(name: str) -> SessionRecord:
    """Ask the named session to end (SIGTERM to its relay: SessionEnd with reason `stop`)."""
    for record in list_sessions():
        if record.name == name:
            os.kill(record.pid, signal.SIGTERM)
            return record
    names = [record.name for record in list_sessions()]
    running = ", ".join(names) or "none"
    hint = did_you_mean(name, names)
    raise SessionError(f"no running session named {name!r}{hint}; running: {running}")

"""Is a process still the one we recorded? pid plus start time, so a reused pid is not taken
for it (sessions, agents' presence)."""

from __future__ import annotations

import os


def process_start_ticks(pid: int) -> int | None:
    """When a process started (clock ticks since boot), to tell a reused pid apart."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19])


def process_alive(pid: int | None, started_ticks: int | None) -> bool:
    """Whether `pid` is running and is the process that started at `started_ticks`
    (None: the start time is unknown, the pid alone decides)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by someone else
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return True  # no /proc (not Linux): the signal said it exists
    if fields[0] == b"Z":
        return False  # it ended; its parent (maybe an init that never reaps) has not reaped it
    ticks = int(fields[19])
    return started_ticks is None or ticks == started_ticks


def descends_from(pid: int, started_ticks: int | None, *, child: int | None = None) -> bool:
    """Whether `child` (default: this process) is a descendant of the process `pid` that
    started at `started_ticks` (None: the pid alone decides): its chain of parents, read
    from /proc, reaches it. A process cannot choose its parents, so this proves that it was
    started inside that process's tree, as a claim in the environment cannot."""
    current = os.getpid() if child is None else child
    for _ in range(_MAX_DEPTH):
        parent = _parent(current)
        if parent is None or parent <= 0:
            return False
        if parent == pid:
            return started_ticks is None or process_start_ticks(pid) == started_ticks
        current = parent
    return False


def parent_of(pid: int) -> int | None:
    """The parent of process `pid`, from /proc; None when it cannot be read."""
    return _parent(pid)


_MAX_DEPTH = 256
"""Parents followed at most (a process tree is never this deep)."""


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None

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
    ticks = process_start_ticks(pid)
    return started_ticks is None or ticks is None or ticks == started_ticks

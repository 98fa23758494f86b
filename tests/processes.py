"""Whether a process the suite started still runs, read from /proc.

A process that has ended may stay a zombie until its parent reaps it (an orphan's reaper in
a PID namespace, as in CI, may never do so): a zombie, or one being torn down, has ended.
Reading /proc/PID/stat of a process at the moment it is reaped fails with ESRCH
(ProcessLookupError), not ENOENT: that too means it has ended.

Not a test module: tests import it as `from processes import alive` (pytest puts tests/ on
sys.path, next to conftest.py)."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while `pid` is a live process; False once it has ended (a zombie, or gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:  # no /proc here: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in (b"Z", b"X")

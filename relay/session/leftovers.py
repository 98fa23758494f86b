"""What a session's agent left running when it ended, found and ended (spec/session.md, "The end").

The agent runs in a session of its own, and what is left of its process group and
session is killed when it exits (relay.session.pty). A program may still start a helper
that leaves both, with `setsid` or a double fork: Codex starts `codex app-server
--managed-daemon` and its update loop that way, and they outlive Codex by minutes. Such
a process no longer descends from the agent, but it keeps the environment it was given,
and every process of the session carries `RELAY_SESSION_ID` with the session's id. So at
the end relay finds the processes whose environment holds that entry, asks them to end
(SIGTERM), and kills (SIGKILL) those still there after a grace; a helper may start
another meanwhile, so it looks again, a few times.

relay leaves, and says so, the services of its own that are meant to outlive any one
session: `relay serve` (the user's hook server, which exits when idle) and the
supervisors of a team started with `relay up`. A process that must outlive the session
drops the entry from its environment (`env -u RELAY_SESSION_ID setsid …`).

Processes are named through pidfds where the kernel has them: once a pidfd is open and
the process is seen to still carry the entry, a signal sent through it cannot reach a
process that took a reused pid. Linux only: with no /proc, nothing is found.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from dataclasses import dataclass

import anyio

from relay.engine.runner import open_pidfd

__all__ = ["Leftover", "end_leftovers", "find_leftovers"]

MARKER = "RELAY_SESSION_ID"
PASSES = 3
"""Rounds of finding and ending: a helper may start another while it is being ended."""
KEPT_SERVICES = (
    (("relay", "serve"), "relay's hook server, shared by every session; it exits when idle"),
    (("relay.fleet.supervise",), "a team agent's supervisor (`relay up`), meant to outlive it"),
)
"""Command lines (module arguments after `-m`) of relay's own services, left running."""


@dataclass(frozen=True)
class Leftover:
    """A process of the session still running after its agent ended."""

    pid: int
    command: str
    kept: str = ""
    """Why relay leaves it running ("" when it is ended)."""

    def describe(self) -> str:
        """`command (pid N)`, and why it is left, if it is."""
        said = f"{self.command} (pid {self.pid})"
        return f"{said}: {self.kept}" if self.kept else said


def find_leftovers(session_id: str, *, exclude: frozenset[int] = frozenset()) -> list[Leftover]:
    """The processes whose environment holds `RELAY_SESSION_ID=session_id`, but those in
    `exclude` (relay's own process, for one)."""
    entry = f"\0{MARKER}={session_id}\0".encode()
    found: list[Leftover] = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) in exclude:
            continue
        pid = int(name)
        argv = _marked_argv(pid, entry)
        if argv is None:
            continue
        command = " ".join(argv)[:200]
        found.append(Leftover(pid, command, _kept_reason(argv)))
    return found


def _marked_argv(pid: int, entry: bytes) -> list[str] | None:
    """The process's argv when its environment holds `entry`; None otherwise, or when
    it cannot be read (gone, or another user's)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            if entry not in b"\0" + environ.read() + b"\0":
                return None
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            raw = cmdline.read()
    except OSError:
        return None
    if not raw:
        return None  # a zombie, or a kernel thread: nothing to end
    return [part.decode(errors="replace") for part in raw.rstrip(b"\0").split(b"\0")]


def _kept_reason(argv: list[str]) -> str:
    """Why relay leaves this process running ("" when it does not): one of its services."""
    if "-m" not in argv:
        return ""
    module = argv[argv.index("-m") + 1 :]
    for prefix, reason in KEPT_SERVICES:
        if tuple(module[: len(prefix)]) == prefix:
            return reason
    return ""


async def end_leftovers(
    session_id: str, *, grace: float = 2.0, exclude: frozenset[int] = frozenset()
) -> tuple[list[Leftover], list[Leftover]]:
    """End what the session left running: SIGTERM, then SIGKILL after `grace` seconds.
    (the processes ended, those left running with the reason)."""
    exclude = exclude | {os.getpid()}
    ended: dict[int, Leftover] = {}
    kept: dict[int, Leftover] = {}
    for _ in range(PASSES):
        found = find_leftovers(session_id, exclude=exclude | set(kept))
        kept.update((left.pid, left) for left in found if left.kept)
        targets = [left for left in found if not left.kept]
        if not targets:
            break
        await _end(targets, session_id, grace)
        ended.update((left.pid, left) for left in targets)
    return list(ended.values()), list(kept.values())


async def _end(targets: list[Leftover], session_id: str, grace: float) -> None:
    """SIGTERM each, wait up to `grace` for all to go, SIGKILL the rest."""
    entry = f"\0{MARKER}={session_id}\0".encode()
    handles: list[tuple[int, int | None]] = []
    for left in targets:
        pidfd = open_pidfd(left.pid)
        # Still the marked process once its pidfd is open: signals through it reach it alone.
        if _marked_argv(left.pid, entry) is None:
            if pidfd is not None:
                os.close(pidfd)
            continue
        handles.append((left.pid, pidfd))
    try:
        for pid, pidfd in handles:
            _signal(pid, pidfd, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_running(pid, fd) for pid, fd in handles):
            await anyio.sleep(0.05)
        for pid, pidfd in handles:
            if _running(pid, pidfd):
                _signal(pid, pidfd, signal.SIGKILL)  # SIGKILL after grace: it may ignore SIGTERM
    finally:
        for _, pidfd in handles:
            if pidfd is not None:
                os.close(pidfd)


def _signal(pid: int, pidfd: int | None, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)


def _running(pid: int, pidfd: int | None) -> bool:
    """Whether the process has not exited (a zombie has: its parent reaps it)."""
    if pidfd is not None:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        return not poller.poll(0)
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[:1]
    except OSError:
        return False
    return state != [b"Z"]

"""Waking an idle host when mail arrives (spec/hosts.md §6, "Waking an idle host").

Claude Code runs a hook with `asyncRewake: true` in the background, and when it exits
with code 2 it wakes the model with the hook's output. relay installs one such hook on
SessionStart and Stop: `relay hooks wait-mail` waits, while the agent is idle, for mail
addressed to it; when some arrives it hands it over (MessageReceived hooks, claimed for
the session as the other hook paths do), prints it and exits 2, so the model reads it
at once; a fresh session receives mail without a key pressed. The acknowledgement is
recorded as it exits (the evidence: `handed to Claude Code's asyncRewake hook`).

Only an interactive host is waited for: a headless run (`claude -p`) ends with its turn,
and a waiter would hold it open. The host counts as interactive when it (the waiter's
parent, or the shell's parent) reads from a terminal.

One waiter per session: a second one (the next Stop while the first still waits) exits
at once. A waiter gives up after `MAX_WAIT` seconds with exit 0 (the next Stop starts
another) and stops as soon as its host is gone.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

from relay.config.paths import private_dir, state_dir
from relay.hosts.model import Host

MAX_WAIT = 3000.0
"""Seconds a waiter waits (its installed timeout is longer: it always ends by itself)."""
WAIT_TIMEOUT = 3600
"""The `timeout` written into the waiter's entry."""
POLL_SECONDS = 0.5
REWAKE = 2
"""The exit code that makes Claude Code wake the model with the hook's output."""


def wait_for_mail(
    host: Host,
    stdin: bytes,
    env: Mapping[str, str],
    cwd: Path,
    *,
    max_wait: float = MAX_WAIT,
    poll: float = POLL_SECONDS,
) -> tuple[int, str]:
    """Wait for the named agent's mail; (exit code, text for the model)."""
    name = env.get("RELAY_AGENT_NAME")
    if not name or not interactive_host():
        return 0, ""  # no one to write to, or a headless run that must not be held open
    try:
        event = json.loads(stdin or b"{}")
    except ValueError:
        event = {}
    host_session = str(event.get("session_id") or "") if isinstance(event, dict) else ""
    project = Path(str(event.get("cwd") or cwd)) if isinstance(event, dict) else cwd
    session = env.get("RELAY_SESSION_ID") or f"{host.name}:{host_session}"
    digest = hashlib.sha256(f"{host.name}\0{host_session}".encode()).hexdigest()[:24]
    lock_path = state_dir(env) / "hosts" / f"{host.name}-{digest}.waiter"
    private_dir(lock_path.parent)
    with lock_path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0, ""  # this session's waiter is already waiting
        return _wait(host, name, session, project, env, max_wait=max_wait, poll=poll)


def _wait(
    host: Host,
    name: str,
    session: str,
    project: Path,
    env: Mapping[str, str],
    *,
    max_wait: float,
    poll: float,
) -> tuple[int, str]:
    import anyio

    from relay.engine.system import HookSystem
    from relay.mcp.channel import Channel, ChannelError

    hooks = HookSystem(cwd=project, quiet=True, environ=env)
    channel = Channel(hooks, name=name, environ=env, session_id=session)
    parent = os.getppid()  # the host (or its shell): when it goes, this waiter goes
    deadline = time.monotonic() + max_wait
    mailbox = channel.messenger.mailbox
    try:
        seen = -1
        while time.monotonic() < deadline and os.getppid() == parent:
            version = mailbox.data_version()
            if version != seen:
                seen = version
                try:
                    mail = anyio.run(channel.take_mail, 10)
                except ChannelError:
                    mail = []
                if mail:
                    evidence = f"handed to {host.title}'s asyncRewake hook, which woke the model"
                    anyio.run(channel.acknowledge, mail, evidence)
                    texts = "\n\n".join(text for _, text in mail)
                    return REWAKE, f"relay has new messages for {name}:\n{texts}"
            time.sleep(poll)
        return 0, ""
    finally:
        channel.close()
        hooks.close()


def interactive_host() -> bool:
    """Whether the host that started this hook reads from a terminal (Linux: /proc)."""
    pid = os.getppid()
    for _ in range(2):  # the host, or the shell it ran the hook in
        try:
            if os.readlink(f"/proc/{pid}/fd/0").startswith(("/dev/pts/", "/dev/tty")):
                return True
            with open(f"/proc/{pid}/stat", "rb") as stat:
                pid = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False

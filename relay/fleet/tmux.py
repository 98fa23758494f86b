"""The tmux side of `relay up`: a session per team (`relay-TEAM`), a window per agent.

tmux is the multiplexer people already attach to: `relay attach NAME` is `tmux attach` to
the agent's window, and tmux's own detach (prefix d) leaves the agent running. relay uses
the user's default tmux server, so `tmux ls` shows the team; `$TMUX_TMPDIR` moves it as
tmux documents.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from relay.errors import RelayError

TIMEOUT = 10.0
"""Seconds any one tmux command may take."""


class TmuxError(RelayError):
    """tmux is missing or refused a command; says which and why."""


def session_name(team: str) -> str:
    """The tmux session of a team (team names hold only letters, digits, - and _)."""
    return f"relay-{team}"


def available() -> bool:
    return shutil.which("tmux") is not None


def _tmux(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("tmux")
    if binary is None:
        raise TmuxError(
            "tmux is not installed (relay up runs each agent in a tmux window); install it, "
            "or use relay up --headless"
        )
    env = {key: value for key, value in os.environ.items() if key != "TMUX"}  # may nest
    try:
        done = subprocess.run(
            [binary, *args],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TIMEOUT,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise TmuxError(f"tmux {args[0]} did not answer within {TIMEOUT:g} s") from exc
    if check and done.returncode != 0:
        raise TmuxError(f"tmux {args[0]} failed: {done.stderr.strip() or done.returncode}")
    return done


def has_session(team: str) -> bool:
    if not available():
        return False
    return _tmux("has-session", "-t", f"={session_name(team)}", check=False).returncode == 0


def windows(team: str) -> dict[str, bool]:
    """The team's windows: name -> whether its process has ended (the window remains)."""
    if not has_session(team):
        return {}
    done = _tmux(
        "list-windows",
        "-t",
        f"={session_name(team)}",
        "-F",
        "#{window_name}\t#{pane_dead}",
        check=False,
    )
    found = {}
    for line in done.stdout.splitlines():
        name, _, dead = line.partition("\t")
        found[name] = dead == "1"
    return found


def open_window(
    team: str, name: str, command: Sequence[str], *, cwd: str, env: Mapping[str, str]
) -> None:
    """Run `command` in the agent's window (made, or its ended process replaced), which
    stays open after it ends so its last words can be read."""
    session = session_name(team)
    variables = [part for key, value in env.items() for part in ("-e", f"{key}={value}")]
    existing = windows(team)
    if name in existing:
        _tmux("respawn-window", "-k", "-t", f"={session}:{name}", "-c", cwd, *variables, *command)
    elif existing or has_session(team):
        _tmux("new-window", "-d", "-t", f"={session}:", "-n", name, "-c", cwd, *variables, *command)
    else:
        _tmux(
            "new-session",
            "-d",
            "-s",
            session,
            "-n",
            name,
            "-x",
            "200",
            "-y",
            "50",
            "-c",
            cwd,
            *variables,
            *command,
        )
    _tmux("set-option", "-w", "-t", f"={session}:{name}", "remain-on-exit", "on", check=False)


def close_window(team: str, name: str) -> None:
    """Close the agent's window, and the team's session with its last window."""
    if name in windows(team):
        _tmux("kill-window", "-t", f"={session_name(team)}:{name}", check=False)


def attach_command(team: str, name: str) -> list[str]:
    """The tmux command that shows the agent's window: attach, or switch inside tmux."""
    target = f"={session_name(team)}:{name}"
    verb = ["switch-client", "-t", target] if os.environ.get("TMUX") else ["attach", "-t", target]
    binary = shutil.which("tmux") or "tmux"
    return [binary, *verb]

"""`relay up`, `down` and `restart`: start a team's agents under supervisors, stop them,
start them again (spec/fleet.md).

Each agent gets a supervisor (supervise.py) that runs `relay run --name NAME --team TEAM
… -- COMMAND` and restarts it by its policy: in the agent's window of the team's tmux
session, or detached with `--headless`. Running `relay up` again starts what is not
running and says what runs; nothing here waits on an agent longer than a bound.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from relay.errors import RelayError, did_you_mean
from relay.fleet import records, tmux
from relay.fleet.model import AgentSpec, Team
from relay.fleet.records import Launch, Mode

LIVE_TIMEOUT = 30.0
"""Seconds `relay up` waits for an agent's session to be live before it says it is not."""
DOWN_MARGIN = 10.0
"""Seconds past an agent's grace that `relay down` waits for its supervisor to end."""

Progress = Callable[[str, str], None]
"""`progress(agent name, what happened)`: how `relay up` and `relay down` tell as they go."""


class FleetError(RelayError):
    """A team that cannot be started, stopped or reached as asked; says which agent and why."""


@dataclass
class Outcome:
    """What became of one agent in `relay up`, `down` or `restart`."""

    name: str
    state: str
    """started, running (already), live, not-live, exited, stopped, restarted, skipped."""
    detail: str = ""


def machine_label(chosen: str | None = None) -> str:
    """This machine's label: `--machine`, else $RELAY_MACHINE, else the host name."""
    return chosen or os.environ.get("RELAY_MACHINE") or os.uname().nodename


def chosen_agents(team: Team, names: Sequence[str], machine: str) -> list[AgentSpec]:
    """The agents of `team` that this machine runs: those named (all by default), whose
    machine label is this machine's or unset. A name not in the file is an error."""
    known = [agent.name for agent in team.agents]
    for name in names:
        if name not in known:
            raise FleetError(
                f"{team.file}: no agent named {name!r}{did_you_mean(name, known)}; "
                f"the team file has: {', '.join(known) or 'none'}"
            )
    wanted = set(names) if names else set(known)
    return [
        agent for agent in team.agents if agent.name in wanted and agent.machine in (None, machine)
    ]


def relay_command() -> list[str]:
    """How a supervisor starts relay: this interpreter and this relay, whatever PATH says."""
    return [sys.executable, "-m", "relay"]


def launch_for(
    team: Team, agent: AgentSpec, *, cwd: Path, mode: Mode, machine: str, grace: float
) -> Launch:
    """The launch of `agent`: its `relay run` command line and environment."""
    run = [*relay_command(), "run", "--name", agent.name, "--team", team.name]
    if agent.task:
        run += ["--task", agent.task, "--prompt", agent.task]
    if agent.style:
        run += ["--style", agent.style]
    if mode == "headless":
        run.append("--headless")
    env = dict(os.environ)
    env.pop("TMUX", None)  # the agent's terminal is its window, not the caller's tmux
    env.pop("TMUX_PANE", None)
    env.update(agent.env)
    env["RELAY_MACHINE"] = machine
    return Launch(
        team=team.name,
        name=agent.name,
        run=[*run, "--", *agent.command],
        cwd=str(cwd),
        env=env,
        restart=agent.restart,
        mode=mode,
        grace=grace,
        team_file=team.file,
        machine=machine,
    )


def agent_folder(team: Team, agent: AgentSpec) -> Path:
    """Where the agent runs: its worktree (made on its first start), its `cwd`, or the
    team file's folder."""
    if agent.worktree:
        from relay.fleet.worktrees import ensure_worktree

        return ensure_worktree(team, agent)
    return Path(team.root, agent.cwd) if agent.cwd else Path(team.root)


def start(launch: Launch) -> None:
    """Write the launch and start its supervisor (a tmux window, or detached)."""
    path = records.launch_path(launch.team, launch.name)
    records.write_atomically(path, msgspec.json.encode(launch))
    supervise = [sys.executable, "-m", "relay.fleet.supervise", str(path)]
    if launch.mode == "tmux":
        tmux.open_window(launch.team, launch.name, supervise, cwd=launch.cwd, env={})
        return
    log = records.log_path(launch.team, launch.name)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        subprocess.Popen(
            supervise,
            cwd=launch.cwd,
            env=launch.env,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=fd,
            start_new_session=True,  # outlives `relay up`; the terminal's signals miss it
            close_fds=True,
        )
    finally:
        os.close(fd)


def running(team: str, name: str) -> records.SupervisorRecord | None:
    """The supervisor's record when it runs and supervises; None when none does (one that
    wrote `exited` or `stopped` is ending, whatever its pid still says)."""
    record = records.read_record(team, name)
    if record is None or record.state in ("exited", "stopped"):
        return None
    return record if records.supervisor_alive(record) else None


def up(
    team: Team,
    agents: Iterable[AgentSpec],
    *,
    mode: Mode,
    machine: str,
    grace: float,
    progress: Progress,
    wait: float = LIVE_TIMEOUT,
) -> list[Outcome]:
    """Start every agent of `agents` that does not run, and wait until each is live."""
    if mode == "tmux" and not tmux.available():
        raise FleetError(
            "tmux is not installed (relay up runs each agent in a tmux window); install "
            "it, or use relay up --headless"
        )
    outcomes: list[Outcome] = []
    to_start: list[tuple[AgentSpec, Path]] = []
    problems: list[str] = []
    for agent in agents:  # every folder first: a worktree that cannot be made starts nothing
        record = running(team.name, agent.name)
        if record is not None:
            outcomes.append(Outcome(agent.name, "running", f"supervisor pid {record.pid}"))
            progress(agent.name, f"already running (supervisor pid {record.pid})")
            continue
        try:
            to_start.append((agent, agent_folder(team, agent)))
        except (RelayError, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            problems.append(f"{agent.name}: {reason}")
    if problems:
        raise FleetError(f"{team.file}: nothing was started, since " + "; ".join(problems))
    started: list[str] = []
    for agent, folder in to_start:
        try:
            start(launch_for(team, agent, cwd=folder, mode=mode, machine=machine, grace=grace))
        except (RelayError, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            outcomes.append(Outcome(agent.name, "not-started", reason))
            progress(agent.name, f"not started: {reason}")
            continue
        started.append(agent.name)
        progress(agent.name, "starting")
    outcomes += wait_live(team.name, started, progress=progress, timeout=wait)
    return outcomes


def wait_live(team: str, names: list[str], *, progress: Progress, timeout: float) -> list[Outcome]:
    """Wait until each agent's session is registered (live), or its supervisor says it
    ended; report each as it gets there."""
    from relay.session.sessions import list_sessions

    deadline = time.monotonic() + timeout
    waiting = list(names)
    outcomes = []
    while waiting:
        live = {record.name: record for record in list_sessions()}
        for name in list(waiting):
            record = records.read_record(team, name)
            session = live.get(name)
            if session is not None and record is not None and session.pid == record.child:
                outcomes.append(Outcome(name, "live", f"pid {session.pid}"))
                progress(name, f"live (relay run pid {session.pid})")
                waiting.remove(name)
            elif record is not None and record.state == "exited":
                code = record.exit_code
                outcomes.append(Outcome(name, "exited", f"exit code {code}"))
                progress(name, f"exited (code {code}); see relay logs {name}")
                waiting.remove(name)
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for name in waiting:
        outcomes.append(Outcome(name, "not-live", f"not live within {timeout:g} s"))
        progress(name, f"not live within {timeout:g} s; see relay logs {name}")
    return outcomes


def down(team: str, names: Sequence[str], *, progress: Progress) -> list[Outcome]:
    """Stop the named agents of `team` that `relay up` started here (all by default):
    SIGTERM to each supervisor (its agent gets SessionEnd with reason stop), then wait for
    each to end; close their tmux windows."""
    launched = records.supervised_names(team)
    for name in names:
        if name not in launched:
            raise FleetError(
                f"no agent named {name!r}{did_you_mean(name, launched)} was started by relay "
                f"up in team {team} on this machine; started: {', '.join(launched) or 'none'}"
            )
    chosen = list(names) or launched
    stopping: dict[str, tuple[records.SupervisorRecord, float]] = {}
    outcomes = []
    for name in chosen:
        record = running(team, name)
        if record is None:
            outcomes.append(Outcome(name, "stopped", "was not running"))
            _close(team, name)
            continue
        grace = _grace(team, name)
        try:
            os.kill(record.pid, signal.SIGTERM)
        except OSError:
            continue  # ended meanwhile
        stopping[name] = (record, time.monotonic() + grace + DOWN_MARGIN)
        progress(name, "stopping (SessionEnd, reason stop)")
    while stopping:
        for name, (record, deadline) in list(stopping.items()):
            if not records.supervisor_alive(record):
                outcomes.append(Outcome(name, "stopped"))
                progress(name, "stopped")
            elif time.monotonic() > deadline:
                _kill(record)
                outcomes.append(Outcome(name, "stopped", "killed"))
                progress(name, "killed: its supervisor did not end in time")
            else:
                continue
            del stopping[name]
            _close(team, name)
        time.sleep(0.05)
    return outcomes


def restart(team: str, names: Sequence[str], *, progress: Progress) -> list[Outcome]:
    """Start the named agents again now: a running one ends (SessionEnd) and starts at
    once; one whose supervisor ended (exited, gave up) gets a new supervisor."""
    launched = records.supervised_names(team)
    outcomes = []
    for name in names:
        if name not in launched:
            raise FleetError(
                f"no agent named {name!r}{did_you_mean(name, launched)} was started by relay "
                f"up in team {team} on this machine; started: {', '.join(launched) or 'none'}"
            )
    for name in names:
        record = running(team, name)
        if record is not None:
            os.kill(record.pid, signal.SIGHUP)
            outcomes.append(Outcome(name, "restarted"))
            progress(name, "restarting")
            continue
        launch = records.read_launch(records.launch_path(team, name))
        start(launch)
        outcomes.append(Outcome(name, "started"))
        progress(name, "starting")
    return outcomes


def _grace(team: str, name: str) -> float:
    try:
        return records.read_launch(records.launch_path(team, name)).grace
    except (OSError, ValueError):
        return 15.0


def _kill(record: records.SupervisorRecord) -> None:
    for pid in (record.child, record.pid):
        if pid is None:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue


def _close(team: str, name: str) -> None:
    if tmux.available():
        tmux.close_window(team, name)

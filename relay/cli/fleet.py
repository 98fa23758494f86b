"""`relay up`, `down`, `restart`, `ps`, `attach`, `logs`: a team of agents from its file
(spec/fleet.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from relay.cli.options import cwd_option
from relay.protocol.display import visible

if TYPE_CHECKING:
    from relay.fleet.model import Team

team_option = click.option(
    "--team",
    envvar="RELAY_TEAM",
    help="The team (default: $RELAY_TEAM; else the team file's `team`; else messaging.team "
    "from the settings; else the git repository's).",
)
file_option = click.option(
    "-f",
    "--file",
    "team_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="The team file (default: relay.team.toml at the project root).",
)


def _load(
    start: Path, team_file: Path | None, *, check_programs: bool, machine: str | None = None
) -> Any:
    """The team file, read and checked (an error names the file, line and field); a file
    that names no team is the team of its folder (`messaging.team`, else the repository's)."""
    import msgspec

    from relay.fleet.teamfile import find_team_file, load_team

    path = team_file or find_team_file(start)
    if path is None:
        from relay.fleet.model import TEAM_FILE_NAME
        from relay.fleet.up import FleetError

        raise FleetError(
            f"no {TEAM_FILE_NAME} at the project root of {start} (give one with -f FILE); "
            "spec/fleet.md shows one"
        )
    team = load_team(path, check_programs=check_programs, machine=machine)
    if not team.name:
        team = msgspec.structs.replace(team, name=_default_team(Path(team.root)))
    return team


def _default_team(folder: Path) -> str:
    """The team of `folder` when neither --team nor a team file names one."""
    from relay.config.discovery import load_settings
    from relay.services.messaging.messenger import messaging_config
    from relay.services.messaging.model import team_for

    settings = load_settings(folder, ())
    return team_for(settings.root or folder, messaging_config(settings).team)


def _team_name(start: Path, team: str | None, team_file: Path | None) -> str:
    """The team a command acts on: --team, else the team file's, else the folder's."""
    if team:
        return team
    from relay.fleet.teamfile import find_team_file

    if team_file is not None or find_team_file(start) is not None:
        return str(_load(start, team_file, check_programs=False).name)
    return _default_team(start)


def _say(name: str, what: str) -> None:
    click.echo(visible(f"  {name:16} {what}"))


@click.command("up")
@click.argument("args", nargs=-1, metavar="[FILE] [NAME]...")
@click.option("--headless", is_flag=True, help="No terminals: agents run detached (logs only).")
@click.option(
    "--machine", help="This machine's label (default: $RELAY_MACHINE, else the host name)."
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=15.0,
    show_default=True,
    help="Seconds `relay down` gives an agent after SessionEnd before it kills it.",
)
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for each agent to be live.",
)
@click.option(
    "--yes",
    is_flag=True,
    help="Start a team file's agents without asking, though it is new or changed.",
)
@team_option
@cwd_option
def up_command(
    *,
    args: tuple[str, ...],
    yes: bool,
    team: str | None,
    headless: bool,
    machine: str | None,
    grace: float,
    wait: float,
    cwd: Path | None,
) -> None:
    """Start the team of FILE (default: relay.team.toml at the project root), or only the
    agents NAME…, each under `relay run` in a tmux window of its own (--headless: detached).
    Again: starts what is not running and says what runs."""
    import msgspec

    from relay.fleet import tmux
    from relay.fleet.up import chosen_agents, machine_label, up

    start = (cwd or Path.cwd()).resolve()
    team_file, names = _file_and_names(args)
    label = machine_label(machine)
    loaded: Team = _load(start, team_file, check_programs=True, machine=label)
    if team:
        from relay.services.messaging.model import check_name

        loaded = msgspec.structs.replace(loaded, name=check_name(team, what="team name"))
    _consent(loaded, yes=yes)
    agents = chosen_agents(loaded, names, label)
    where = "headless" if headless else f"tmux session {tmux.session_name(loaded.name)}"
    click.echo(visible(f"team {loaded.name} ({loaded.file}), machine {label}, {where}:"))
    if loaded.name != _default_team(Path(loaded.root)):
        # A project file cannot choose your own commands' team (spec/messaging.md, Teams).
        click.echo(
            visible(
                f"  (your own relay send/agents/messages here need --team {loaded.name}, "
                f"or export RELAY_TEAM={loaded.name})"
            )
        )
    if not agents:
        click.echo(f"  no agent of the team runs on machine {label}")
        return
    outcomes = up(
        loaded,
        agents,
        mode="headless" if headless else "tmux",
        machine=label,
        grace=grace,
        progress=_say,
        wait=wait,
    )
    failed = [outcome for outcome in outcomes if outcome.state not in ("live", "running")]
    first = agents[0].name
    hints = [f"relay logs -f {first}", "relay agents", "relay down"]
    if not headless:
        hints.insert(0, f"relay attach {first}")
    click.echo("  " + " · ".join(hints))
    if failed:
        raise click.exceptions.Exit(1)


def _consent(team: Team, *, yes: bool) -> None:
    """Start a team file's agents only once the user has seen what they run (the first
    time, and after a change): asked on a terminal, `--yes` elsewhere."""
    from relay.fleet import consent
    from relay.fleet.up import FleetError

    if consent.agreed(team):
        return
    shown = "\n".join(consent.describe(team))
    if not yes:
        if not consent.on_terminal():
            raise FleetError(
                f"{team.file} is new to relay, or what it starts changed since you last "
                f"started it; it starts:\n{shown}\nrelay up --yes starts them"
            )
        click.echo(visible(f"{team.file} is new to relay, or changed; it starts:"))
        click.echo(shown)
        if not click.confirm("Start these agents?", default=False):
            raise click.exceptions.Exit(1)
    try:
        consent.agree(team)
    except OSError as exc:
        click.echo(f"relay: cannot remember that you agreed ({exc.strerror or exc})", err=True)


def _file_and_names(args: tuple[str, ...]) -> tuple[Path | None, list[str]]:
    """`relay up [FILE] [NAME…]`: the first argument is the file when it names one (a
    `.toml`, or a file that exists)."""
    if args and (args[0].endswith(".toml") or os.path.isfile(args[0])):
        return Path(args[0]), list(args[1:])
    return None, list(args)


@click.command("down")
@click.argument("names", nargs=-1)
@team_option
@file_option
@cwd_option
def down_command(
    *, names: tuple[str, ...], team: str | None, team_file: Path | None, cwd: Path | None
) -> None:
    """Stop the team's agents that `relay up` started on this machine (or only NAME…):
    SessionEnd with reason stop, their grace period, then kill."""
    from relay.fleet.up import down

    start = (cwd or Path.cwd()).resolve()
    name = _team_name(start, team, team_file)
    click.echo(visible(f"team {name}:"))
    outcomes = down(name, names, progress=_say)
    if not outcomes:
        click.echo("  nothing was started by relay up here")


@click.command("restart")
@click.argument("names", nargs=-1, required=True)
@team_option
@file_option
@cwd_option
def restart_command(
    *, names: tuple[str, ...], team: str | None, team_file: Path | None, cwd: Path | None
) -> None:
    """Start the agents NAME… again now (a running one gets SessionEnd first)."""
    from relay.fleet.up import restart

    start = (cwd or Path.cwd()).resolve()
    name = _team_name(start, team, team_file)
    click.echo(visible(f"team {name}:"))
    restart(name, names, progress=_say)


@click.command("ps")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@team_option
@file_option
@cwd_option
def ps_command(
    *, as_json: bool, team: str | None, team_file: Path | None, cwd: Path | None
) -> None:
    """The agents `relay up` started on this machine, and their supervisors' state
    (`relay agents` shows what each agent is doing, across machines)."""
    import msgspec

    from relay.fleet import records

    start = (cwd or Path.cwd()).resolve()
    name = _team_name(start, team, team_file)
    rows = []
    for agent in records.supervised_names(name):
        record = records.read_record(name, agent)
        alive = records.supervisor_alive(record)
        state: str = record.state if record is not None else "unknown"
        if record is not None and not alive and state in ("running", "restarting"):
            state = "lost"  # its supervisor died without saying so
        rows.append(
            {
                "name": agent,
                "state": state,
                "mode": record.mode if record else None,
                "supervisor": record.pid if record and alive else None,
                "pid": record.child if record and alive else None,
                "runs": record.runs if record else 0,
                "exit_code": record.exit_code if record else None,
            }
        )
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(rows)))
        return
    click.echo(visible(f"team {name}: {len(rows)} agent(s) started by relay up here"))
    if rows:
        click.echo(f"  {'NAME':16} {'STATE':10} {'MODE':8} {'PID':>7} {'RUNS':>4}  LAST EXIT")
    for row in rows:
        last = "-" if row["exit_code"] is None else str(row["exit_code"])
        click.echo(
            visible(
                f"  {row['name']:16} {row['state']:10} {row['mode'] or '-':8} "
                f"{row['pid'] or '-':>7} {row['runs']:>4}  {last}"
            )
        )


@click.command("attach")
@click.argument("name")
@team_option
@file_option
@cwd_option
def attach_command(
    *, name: str, team: str | None, team_file: Path | None, cwd: Path | None
) -> None:
    """Show the agent NAME's terminal (its tmux window); tmux's detach (prefix d) leaves
    it running."""
    from relay.errors import did_you_mean
    from relay.fleet import records, tmux
    from relay.fleet.up import FleetError

    start = (cwd or Path.cwd()).resolve()
    team_name = _team_name(start, team, team_file)
    record = records.read_record(team_name, name)
    if record is None:
        started = records.supervised_names(team_name)
        raise FleetError(
            f"no agent named {name!r}{did_you_mean(name, started)} was started by relay up "
            f"in team {team_name} on this machine; started: {', '.join(started) or 'none'}"
        )
    if record.mode == "headless":
        raise FleetError(
            f"{name} runs headless (relay up --headless): it has no terminal to attach to; "
            f"relay logs -f {name} shows its output"
        )
    if name not in tmux.windows(team_name):
        raise FleetError(f"{name}'s tmux window is gone (relay up starts it again)")
    command = tmux.attach_command(team_name, name)
    os.execvp(command[0], command)


@click.command("logs")
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the session writes.")
@click.option("--since", help="Only entries newer than this: 90m, 12h, 7d, or an ISO time.")
@click.option("-n", "--tail", "tail", type=click.IntRange(min=0), help="Only the last N lines.")
@click.option(
    "--all", "show_all", is_flag=True, help="Also what relay typed in and its own notices."
)
@click.option("--json", "as_json", is_flag=True, help="Print the transcript's JSON lines.")
def logs_command(
    *,
    name: str,
    follow: bool,
    since: str | None,
    tail: int | None,
    show_all: bool,
    as_json: bool,
) -> None:
    """The session NAME's clean text (its transcript), across restarts; -f follows it."""
    import collections

    import msgspec

    from relay.fleet import logs

    transcript = logs.transcript_of(name)
    if not follow:  # a followed session may not have written its first line yet
        logs.check_exists(transcript, logs.names_with_logs())
    threshold = _since(since) if since else None
    entries = (
        logs.follow(transcript, since=threshold)
        if follow
        else logs.read(transcript, since=threshold)
    )

    def shown(entry: logs.Entry) -> bool:
        return show_all or entry.kind == "output"

    def echo(entry: logs.Entry) -> None:
        if as_json:
            click.echo(msgspec.json.encode(entry).decode())
            return
        mark = "" if entry.kind == "output" else f"[{entry.kind}] "
        for line in entry.text.splitlines() or [""]:
            click.echo(visible(f"{mark}{line}"))

    if tail is not None and not follow:
        kept: collections.deque[logs.Entry] = collections.deque(maxlen=tail or None)
        kept.extend(entry for entry in entries if shown(entry))
        for entry in kept if tail else []:
            echo(entry)
        return
    for entry in entries:
        if shown(entry):
            echo(entry)


def _since(text: str) -> str:
    """An ISO 8601 UTC time from `90m`, `12h`, `7d` (ago) or an ISO date/time."""
    from datetime import UTC, datetime, timedelta

    from relay.cli.messaging import _duration

    if text[:1].isdigit() and text[-1:].isalpha() and "-" not in text:
        moment = datetime.now(UTC) - timedelta(seconds=_duration(text))
    else:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError as exc:
            raise click.BadParameter(
                f"{text!r} is neither a duration (90m, 12h, 7d) nor an ISO date/time",
                param_hint="--since",
            ) from exc
        if moment.tzinfo is None:
            moment = moment.astimezone()
    from relay.timestamps import iso_millis

    return iso_millis(moment.astimezone(UTC))

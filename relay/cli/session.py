"""`relay run`, `relay sessions`, `relay stop`: wrap an agent CLI, list and stop sessions."""

from __future__ import annotations

import json
from pathlib import Path

import click

from relay.cli.options import cwd_option, settings_option, team_option
from relay.protocol.display import visible


@click.command(
    "run", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.option(
    "--name", help="The agent's name (default: the command's name); unique among live sessions."
)
@team_option
@settings_option
@cwd_option
@click.option("--headless", is_flag=True, help="Process output line by line even on a terminal.")
@click.option(
    "--idle-seconds",
    type=click.FloatRange(min=0, min_open=True),
    help="Quiet seconds before Idle fires.",
)
@click.option(
    "--style",
    type=click.Choice(["auto", "plain", "claude", "gemini", "codex"]),
    help="How the agent draws its own words, which decides the lines read as directives "
    "(default: session.style, auto: by the program's name).",
)
@click.option(
    "--no-inject",
    "no_inject",
    is_flag=True,
    help="Never type into the agent (for a shell or a REPL); messages wait in the inbox.",
)
@click.option(
    "--task",
    help="What the session is for: given to hooks in SessionStart's `task` (a trajectory's "
    "title, for one).",
)
@click.option(
    "--prompt",
    help="Typed into the agent as its first prompt once it is ready (after the start "
    "context); `relay up` gives an agent its task this way.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_context
def run(
    ctx: click.Context,
    *,
    name: str | None,
    team: str | None,
    task: str | None,
    prompt: str | None,
    settings_files: tuple[Path, ...],
    cwd: Path | None,
    headless: bool,
    idle_seconds: float | None,
    style: str | None,
    no_inject: bool,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND (an agent CLI) in a PTY with relay's hooks and directives.

    Example: relay run --name Alice --team shop --task "fix the login bug" -- claude
    """
    from relay.session.wrapper import Relay

    relay = Relay(
        name=name,
        settings=settings_files,
        cwd=cwd,
        headless=headless or None,
        idle_seconds=idle_seconds,
        style=style,
        inject=False if no_inject else None,
        task=task,
        prompt=prompt,
        team=team,
    )
    ctx.exit(relay.wrap(list(command)))


@click.command("sessions")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def sessions_command(as_json: bool) -> None:
    """List running `relay run` sessions."""
    import msgspec

    from relay.session.sessions import list_sessions

    records = list_sessions()
    if as_json:
        click.echo(json.dumps(msgspec.to_builtins(records)))
        return
    if not records:
        click.echo("no relay sessions running")
        return
    for record in records:
        command = " ".join(record.command)
        click.echo(
            visible(
                f"{record.name:16} team {record.team or '-':24} pid {record.pid:<7} "
                f"{record.started}  {command}  ({record.cwd})"
            )
        )


@click.command("stop")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the session asked to stop as JSON.")
def stop_command(name: str, as_json: bool) -> None:
    """Ask the session NAME to end (SessionEnd with reason `stop`)."""
    import msgspec

    from relay.session.sessions import stop

    record = stop(name)
    if as_json:
        click.echo(msgspec.json.encode(record).decode())
        return
    click.echo(f"asked {record.name} (pid {record.pid}) to stop")

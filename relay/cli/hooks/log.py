"""`relay hooks log` and `relay hooks replay`: read the hook log, and run a logged event again."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import msgspec

from relay.cli.options import cwd_option, settings_option
from relay.protocol.display import visible

if TYPE_CHECKING:
    from relay.engine.hooklog import HookLog, LoggedCall, LoggedEvent
    from relay.engine.replay import Change, Replay

VALUE_WIDTH = 100


@click.command("log")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Show the N most recent matching events.",
)
@click.option("--event", help="Only this event (canonical or Claude Code name).")
@click.option("--hook", "hook", metavar="NAME", help="Only calls of the hook named NAME.")
@click.option(
    "--failed", is_flag=True, help="Only failed calls: error, timeout, signal, exit other than 0/2."
)
@click.option("--agent", metavar="NAME", help="Only calls the agent named NAME made.")
@click.option(
    "--all", "every_project", is_flag=True, help="Events of every project, not only this one."
)
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="Oldest first, then print events as they are logged (Ctrl-C stops).",
)
@cwd_option
@click.option("--json", "as_json", is_flag=True, help="Print events with input, result and calls.")
def log(  # noqa: PLR0917 (click passes options positionally)
    limit: int,
    event: str | None,
    hook: str | None,
    failed: bool,
    agent: str | None,
    every_project: bool,
    follow: bool,
    cwd: Path | None,
    as_json: bool,
) -> None:
    """Show recent hook calls from the hook log, newest event first, each with the agent
    that made it (its name and session).

    The log is the user's, shared by every project: shown are the events of the project
    here (or of --cwd), by the cwd each event had; --all shows them all. --follow lists
    the recent ones oldest first, then each event as it is logged (with --json, one
    event a line).
    """
    from relay.config.paths import find_project_root
    from relay.engine.hooklog import HookLog
    from relay.engine.telemetry import log_path

    canonical = _canonical(event) if event is not None else None
    start = (cwd or Path.cwd()).absolute()
    project = None if every_project else str(find_project_root(start) or start)
    hook_log = HookLog(log_path())
    selection: dict[str, Any] = {
        "event": canonical, "hook": hook, "failed": failed, "project": project, "agent": agent
    }  # fmt: skip
    # Taken first: an event logged while the listing is read is followed, not lost.
    newest = (hook_log.id_range() or (0, 0))[1] if follow else 0
    events = hook_log.events(limit=limit, **selection)
    if follow:
        shown = list(reversed(events))
        after = shown[-1].id if shown else newest
        _follow(hook_log, shown, selection, after=after, as_json=as_json)
        return
    if as_json:
        click.echo(_json(events))
        return
    if not events:
        if hook_log.id_range() is None:
            click.echo("no hook calls logged yet")
        elif project is not None:
            click.echo(f"no logged hook calls match in {visible(project)} (--all: every project)")
        else:
            click.echo("no logged hook calls match")
        return
    for line in log_lines(events):
        click.echo(visible(line))  # logged inputs and hook errors are foreign text


def _follow(
    hook_log: HookLog,
    shown: list[LoggedEvent],
    selection: dict[str, Any],
    *,
    after: int,
    as_json: bool,
) -> None:
    """Print `shown`, then every event the selection takes logged after event `after`,
    as it is logged, until Ctrl-C."""
    for event in itertools.chain(shown, hook_log.follow(after=after, **selection)):
        if as_json:
            click.echo(msgspec.json.encode(event).decode())
        else:
            for line in log_lines([event]):
                click.echo(visible(line))


@click.command("replay")
@click.argument("event_id", metavar="ID", type=int)
@cwd_option
@settings_option
@click.option("--json", "as_json", is_flag=True, help='Print {"id", "before", "after", "changes"}.')
def replay(
    event_id: int, cwd: Path | None, settings_files: tuple[Path, ...], as_json: bool
) -> None:
    """Run logged event ID again with the current hooks and show what changed.

    The event's logged input goes through the same engine as `relay hooks run`, so the
    replay is logged as a new event.
    """
    from relay.engine.hooklog import HookLog
    from relay.engine.replay import replay as replay_event
    from relay.engine.replay import replay_directory
    from relay.engine.system import HookSystem
    from relay.engine.telemetry import log_path

    logged = HookLog(log_path()).event(event_id)
    system = HookSystem(cwd=cwd or replay_directory(logged), settings=settings_files)
    system.initialize()
    try:
        outcome = replay_event(logged, system)
    finally:
        system.close()
    for warning in system.warnings():
        click.echo(visible(f"relay: warning: {warning}"), err=True)
    if as_json:
        click.echo(_json(outcome))
        return
    for line in replay_lines(logged, outcome):
        click.echo(visible(line))


def log_lines(events: list[LoggedEvent]) -> Iterable[str]:
    """Each event's heading, then one aligned line per hook call under it."""
    width = max((len(call.hook) for event in events for call in event.hook_calls), default=0)
    exit_width = max((len(_exit(call)) for event in events for call in event.hook_calls), default=0)
    for index, event in enumerate(events):
        if index:
            yield ""
        agent = f"  agent {event.agent}" if event.agent else ""
        session = f"  session {event.session_id}" if event.session_id else ""
        yield (
            f"#{event.id}  {event.time}  {event.event}  {event.decision}"
            f"  {event.duration_ms:.1f} ms{agent}{session}"
        )
        for call in event.hook_calls:
            yield (
                f"  {call.hook.ljust(width)}  {_exit(call).ljust(exit_width)}"
                f"  {call.duration_ms:8.1f} ms  {_verdict(call)}"
            )


def replay_lines(logged: LoggedEvent, outcome: Replay) -> Iterable[str]:
    """A heading, then one line per change (or a line saying nothing changed)."""
    yield f"replayed event {outcome.id} ({outcome.event}, logged {logged.time}) with the current hooks"
    if logged.result is None:
        yield "  (logged by an older relay: only the decision and hook calls are compared)"
    if not outcome.changes:
        hooks = len(outcome.after.get("hooks") or [])
        yield (
            f"no changes: decision {outcome.after.get('decision')}, "
            f"{hooks} hook{'s' if hooks != 1 else ''}, as logged"
        )
        return
    for change in outcome.changes:
        yield "  " + _describe(change)


def _describe(change: Change) -> str:
    hook = f"hook {change.hook} ({change.source})"
    if change.kind == "hook added":
        return f"{hook}: added"
    if change.kind == "hook removed":
        return f"{hook}: removed"
    where = f"{hook} {change.field}" if change.kind == "hook" else str(change.field)
    return f"{where}: {_value(change.before)} -> {_value(change.after)}"


def _value(value: Any) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 1] + "…"


def _exit(call: LoggedCall) -> str:
    if call.timed_out:
        return "timed out"
    if call.signal is not None:
        return call.signal
    return f"exit {call.exit_code}" if call.exit_code is not None else "-"


def _verdict(call: LoggedCall) -> str:
    if call.error is not None:
        first_line = call.error.strip().splitlines()[0] if call.error.strip() else ""
        return f"error: {first_line}"
    return call.decision or "-"


def _canonical(event: str) -> str:
    from relay.errors import InputError
    from relay.protocol.dialects import UnknownEventError, canonical_name

    try:
        return canonical_name(event)
    except UnknownEventError as exc:
        raise InputError(str(exc), source="--event") from None


def _json(value: object) -> str:
    return msgspec.json.format(msgspec.json.encode(value), indent=2).decode()

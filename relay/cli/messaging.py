"""`relay send`, `relay agents`, `relay inbox`, `relay messages`: messaging from a terminal."""

from __future__ import annotations

import getpass
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from relay.cli.options import cwd_option, settings_option, team_option
from relay.cli.team_view import count, local_team, messenger_for, roster_text
from relay.protocol.display import visible

Result = TypeVar("Result")


def _with_messenger(
    cwd: Path | None,
    settings_files: tuple[Path, ...],
    team: str | None,
    work: Callable[[Any], Awaitable[Result]],
    *,
    who: str | None = None,
    network: bool = True,
    retry: str | None = None,
) -> Result:
    """Run `work(messenger)` with messaging as the settings configure it, in `team` (else
    the settings' or the repository's team): with the nats transport and `network`,
    connected (its reply subjects named for `who`, default $USER); reading the local
    mailbox needs no connection. A name unknown to the team is an error that says which
    other teams know it, and `retry` (see UnknownRecipientError) how to reach them."""
    import anyio

    messenger = messenger_for(cwd, settings_files, team)
    config = messenger.config

    async def run() -> Result:
        from relay.services.messaging.model import UnknownRecipientError

        try:
            return await connected()
        except UnknownRecipientError as exc:
            from relay.session.sessions import whereabouts

            running = await anyio.to_thread.run_sync(whereabouts, exc.recipient)
            raise await messenger.explain(exc, running, retry=retry) from None

    async def connected() -> Result:
        if not (network and messenger.uses_nats):
            return await work(messenger)
        from relay.config.model import NatsConfig
        from relay.services.messaging.nats import NatsMessaging, inbox_prefix

        nats_config = config.nats or NatsConfig()
        inbox = nats_config.inboxPrefix or inbox_prefix(messenger.team, who or _human())
        async with NatsMessaging(nats_config, team=messenger.team, inbox=inbox) as nats:
            messenger.nats = nats
            return await work(messenger)

    try:
        return anyio.run(run)
    finally:
        messenger.mailbox.close()


def _print_json(value: Any) -> None:
    import msgspec

    click.echo(json.dumps(msgspec.to_builtins(value), ensure_ascii=False))


def _human() -> str:
    return os.environ.get("USER") or getpass.getuser()


@click.command("send")
@click.argument("recipient")
@click.argument("message", nargs=-1)
@click.option("--thread", help="The thread the message belongs to.")
@click.option("--as", "sender", help="Send as this name (default: $USER).")
@click.option(
    "--queue", is_flag=True, help="Queue it even for an agent offline for more than 24 h."
)
@click.option("--json", "as_json", is_flag=True, help="Print the message sent as JSON.")
@team_option
@cwd_option
@settings_option
def send(
    *,
    recipient: str,
    message: tuple[str, ...],
    thread: str | None,
    sender: str | None,
    queue: bool,
    as_json: bool,
    team: str | None,
    cwd: Path | None,
    settings_files: tuple[Path, ...],
) -> None:
    """Send MESSAGE to the agent RECIPIENT (`*`: everyone in the team). No MESSAGE, or `-`: read stdin."""
    body = " ".join(message)
    if not message or body == "-":
        body = sys.stdin.read()
    name = sender or _human()
    from relay.services.messaging.model import check_name

    check_name(name)  # before any connection: `relay` and `*` are relay's own names

    async def work(messenger: Any) -> Any:
        return await messenger.send(name, recipient, body, thread, human=True, queue=queue)

    sent, recipients = _with_messenger(cwd, settings_files, team, work, who=name)
    if as_json:
        _print_json({"message": sent, "queued_for": recipients})
        return
    click.echo(f"queued [{sent.short_id}] for {', '.join(recipients)} (id {sent.id})")


def _duration(text: str) -> float:
    """Seconds of a duration such as 90m, 12h or 7d (a bare number is days)."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    unit = text[-1:].lower() if text[-1:].isalpha() else "d"
    number = text[:-1] if text[-1:].isalpha() else text
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in units or value < 0:
        raise click.BadParameter(f"{text!r} is not a duration such as 90m, 12h or 7d")
    return value * units[unit]


@click.group("agents", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.option(
    "--prune",
    is_flag=True,
    help="Remove agents and humans offline for longer than --older-than (default 7d).",
)
@click.option("--older-than", default="7d", show_default=True, help="For --prune: 90m, 12h, 7d…")
@click.option("--watch", is_flag=True, help="Keep the list live (the same as `relay watch`).")
@team_option
@cwd_option
@settings_option
@click.pass_context
def agents(
    context: click.Context,
    *,
    as_json: bool,
    prune: bool,
    older_than: str,
    watch: bool,
    team: str | None,
    cwd: Path | None,
    settings_files: tuple[Path, ...],
) -> None:
    """List the team's agents and humans (or --prune those long offline; `forget NAME`)."""
    if context.invoked_subcommand is not None:
        return
    if watch:
        from relay.cli.fleet_watch import watch as watch_command

        context.invoke(watch_command, once=False, team=team, cwd=cwd, settings_files=settings_files)
        return
    if prune:
        seconds = _duration(older_than)

        async def prune_work(messenger: Any) -> Any:
            import anyio.to_thread

            return messenger.team, await anyio.to_thread.run_sync(
                lambda: messenger.mailbox.prune(team=messenger.team, older_than=seconds)
            )

        team_name, removed = _with_messenger(cwd, settings_files, team, prune_work, network=False)
        if as_json:
            _print_json(removed)
        elif removed:
            click.echo(
                f"removed {len(removed)} offline for over {older_than} from team {team_name}: "
                f"{', '.join(removed)}"
            )
        else:
            click.echo(f"no agent of team {team_name} has been offline for over {older_than}")
        return

    async def work(messenger: Any) -> Any:
        from relay.errors import RelayError
        from relay.fleet.boards import open_board
        from relay.fleet.roster import read_team, team_members

        try:
            async with open_board(messenger.config, messenger.team, name=_human()) as board:
                return await read_team(messenger, board)
        except RelayError as exc:  # no board (a NATS user not allowed to read it): the names
            agents = await messenger.agents()
            return team_members(messenger.team, agents, []), f"live state unavailable: {exc}"

    messenger = messenger_for(cwd, settings_files, team)
    team_name = messenger.team
    if messenger.uses_nats:
        messenger.mailbox.close()
        found, problem = _with_messenger(cwd, settings_files, team, work)
    else:  # this machine's mailbox and board (open_board's own choice): no event loop to start
        found, problem = local_team(messenger)
    if problem is not None:
        click.echo(visible(f"relay: {problem}"), err=True)
    click.echo(roster_text(team_name, found, as_json=as_json), nl=False)


@agents.command("forget")
@click.argument("name")
@team_option
@cwd_option
@settings_option
def forget(
    *, name: str, team: str | None, cwd: Path | None, settings_files: tuple[Path, ...]
) -> None:
    """Remove NAME (not live) from the team; mail waiting for it becomes dead."""

    async def work(messenger: Any) -> Any:
        import anyio.to_thread

        return await anyio.to_thread.run_sync(
            lambda: messenger.mailbox.forget(name, team=messenger.team)
        )

    dropped = _with_messenger(
        cwd,
        settings_files,
        team,
        work,
        network=False,
        retry="relay agents forget --team {team} {name}",
    )
    waiting = f"; {dropped} waiting message(s) for it are now dead" if dropped else ""
    click.echo(visible(f"forgot {name}{waiting}"))


@click.command("inbox")
@click.argument("name", required=False)
@click.option("--all", "show_all", is_flag=True, help="Also acked, dead and denied messages.")
@click.option("--limit", type=click.IntRange(min=1), default=200, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@team_option
@cwd_option
@settings_option
def inbox(
    *,
    name: str | None,
    show_all: bool,
    limit: int,
    as_json: bool,
    team: str | None,
    cwd: Path | None,
    settings_files: tuple[Path, ...],
) -> None:
    """Messages for NAME (default: $RELAY_AGENT_NAME, else $USER): queued and handed, or --all."""
    who = name or os.environ.get("RELAY_AGENT_NAME") or _human()

    async def work(messenger: Any) -> Any:
        import anyio.to_thread

        states = None if show_all else ("queued", "handed")
        return messenger.team, await anyio.to_thread.run_sync(
            lambda: messenger.mailbox.inbox(who, team=messenger.team, states=states, limit=limit)
        )

    team_name, deliveries = _with_messenger(cwd, settings_files, team, work, network=False)
    if as_json:
        _print_json(deliveries)
        return
    waiting = "" if show_all else "waiting "
    if not deliveries:
        click.echo(visible(f"no {waiting}messages for {who} in team {team_name}"))
        return
    click.echo(
        visible(f"team {team_name}, {who}'s inbox: {count(len(deliveries), waiting + 'message')}")
    )
    for delivery in deliveries:
        message = delivery.message
        thread = f" [thread:{message.thread}]" if message.thread else ""
        why = f" ({delivery.reason})" if delivery.reason else ""
        click.echo(
            visible(
                f"{delivery.state:7} [{message.short_id}] {message.created_at}  "
                f"from {message.sender}{thread}: {_one_line(message.body)}{why}"
            )
        )


@click.command("messages")
@click.option("--from", "sender", metavar="NAME", help="Only messages from NAME.")
@click.option("--to", "recipient", metavar="NAME", help="Only messages to NAME (`*`: broadcasts).")
@click.option(
    "--since", metavar="T", help="Sent at or after T: 90m, 12h, 7d ago, or an ISO date/time."
)
@click.option("--until", metavar="T", help="Sent before T: 90m, 12h, 7d ago, or an ISO date/time.")
@click.option(
    "--grep", "text", metavar="WORDS", help="Only messages holding every word (full text)."
)
@click.option("--thread", help="Only this thread.")
@click.option(
    "--follow", "-f", is_flag=True, help="Then print matching messages as they come (Ctrl-C stops)."
)
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines, one message a line.")
@team_option
@cwd_option
@settings_option
def messages(
    *,
    sender: str | None,
    recipient: str | None,
    since: str | None,
    until: str | None,
    text: str | None,
    thread: str | None,
    follow: bool,
    limit: int,
    as_json: bool,
    team: str | None,
    cwd: Path | None,
    settings_files: tuple[Path, ...],
) -> None:
    """The team's message history, oldest first (the newest LIMIT that match); --follow
    keeps printing. With the nats transport the team's stream is read first (when this
    NATS user may read it), so messages between other machines' agents are shown too."""
    from relay.services.messaging.history import HistoryQuery, match_expression, moment

    if text is not None:
        match_expression(text)  # an empty or wordless search is an error before any work
    query = HistoryQuery(
        sender=sender,
        recipient=recipient,
        since=moment(since, option="--since") if since is not None else None,
        until=moment(until, option="--until") if until is not None else None,
        text=text,
        thread=thread,
    )

    def emit(found: list[Any]) -> None:
        for item in found:
            if as_json:
                _print_json(item.message)
            else:
                click.echo(_history_line(item.message))

    async def work(messenger: Any) -> None:
        from relay.services.messaging.timeline import Timeline

        async with Timeline(messenger, who=_human()) as timeline:
            for problem in timeline.problems:
                click.echo(visible(f"relay: warning: {problem}"), err=True)
            # Taken first: a message stored while the listing is read is followed, not lost.
            newest = await timeline.newest_seq() if follow else 0
            found = await timeline.search(query, limit=limit)
            if not as_json:
                header = _history_header(messenger.team, len(found), limit, query, follow=follow)
                click.echo(visible(header))
            emit(found)
            if follow:
                after = found[-1].seq if found else newest
                await timeline.follow(query, after=after, emit=emit)

    _with_messenger(cwd, settings_files, team, work, network=False)


def _history_header(team: str, count: int, limit: int, query: Any, *, follow: bool) -> str:
    """The first line of a listing: the team, how many messages, and what is shown."""
    filters = (query.sender, query.recipient, query.since, query.until, query.text, query.thread)
    matching = "matching " if any(value is not None for value in filters) else ""
    following = ", following (Ctrl-C to stop)" if follow else ""
    if count == 0:
        yet = "" if matching else " yet"
        return f"no {matching}messages{yet} in team {team}{following}"
    noun = "message" if count == 1 else "messages"
    more = f" (the newest {limit}; --limit for more)" if count == limit else ""
    return f"team {team}: {count} {matching}{noun}, oldest first{more}{following}"


def _history_line(message: Any) -> str:
    thread_note = f" [thread:{message.thread}]" if message.thread else ""
    return visible(
        f"{message.created_at} [{message.short_id}] {message.sender} -> "
        f"{message.recipient}{thread_note}: {_one_line(message.body)}"
    )


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"

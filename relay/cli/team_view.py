"""`relay agents` read and shown without click, so that the console script can answer a
plain `relay agents` before importing click (entry.py), as it does `relay hooks run`.

Only this machine's mailbox and board are read here; a team on NATS, and every option
but `--json`, go through click's command, which uses the same functions.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from relay.protocol.display import visible


def messenger_for(cwd: Path | None, settings_files: tuple[Path, ...], team: str | None) -> Any:
    """A `Messenger` as the settings configure it (`team`: instead of theirs)."""
    from relay.config.discovery import load_settings
    from relay.services.messaging.messenger import Messenger, messaging_config

    start = (cwd or Path.cwd()).resolve()
    settings = load_settings(start, settings_files)
    return Messenger(messaging_config(settings), project=settings.root or start, team=team)


def local_team(messenger: Any) -> tuple[list[Any], str | None]:
    """The team's members from this machine's mailbox and board (no event loop), and a
    problem to show beside them (the live state unreadable), or None. Closes the mailbox."""
    from relay.fleet.board import SqliteBoard
    from relay.fleet.roster import read_team_now

    try:
        board = SqliteBoard()
        try:
            return read_team_now(messenger, board)
        finally:
            board.close()
    finally:
        messenger.mailbox.close()


def roster_text(team: str, members: list[Any], *, as_json: bool) -> str:
    """What `relay agents [--json]` prints on stdout for `members` of `team`."""
    if as_json:
        import msgspec

        return json.dumps(msgspec.to_builtins(members), ensure_ascii=False) + "\n"
    if not members:
        return (
            f"no agents yet in team {team} (an agent joins with "
            f"`relay run --name NAME --team {team} -- COMMAND`)\n"
        )
    humans = sum(member.kind == "human" for member in members)
    lines = [
        f"team {team}: {count(len(members) - humans, 'agent')}, {count(humans, 'human')}",
        *member_rows(members),
    ]
    return "\n".join(lines) + "\n"


def member_rows(members: list[Any]) -> list[str]:
    """The `relay agents` table: live state, how long, where, what it does."""
    from relay.fleet.roster import age, shown_state, uptime

    now = datetime.now(UTC)
    rows = [
        f"{'NAME':16} {'KIND':5} {'STATE':10} {'FOR':>4} {'HOST':6} {'MACHINE':12} "
        f"{'PID':>7} {'IN':>4} {'OUT':>4} {'UP':>4}  {'TOOL':12} LAST LINE"
    ]
    for member in members:
        live = member.live
        host_kind = live.host_kind if live is not None else "-"
        machine = (live.machine if live is not None else member.host) or "-"
        tool = (live.tool if live is not None else None) or "-"
        line = (live.last_line if live is not None else None) or ""
        traffic = (live.messages_in, live.messages_out) if live is not None else ("-", "-")
        rows.append(
            visible(
                f"{member.name:16} {member.kind:5} {shown_state(member):10} "
                f"{age(member.since, now):>4} {host_kind:6} {machine[:12]:12} "
                f"{member.pid or '-':>7} {traffic[0]:>4} {traffic[1]:>4} "
                f"{uptime(member, now):>4}  {tool[:12]:12} {line}"
            ).rstrip()
        )
    return rows


def count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def quick_agents(argv: list[str]) -> int | None:
    """Answer `relay agents` or `relay agents --json` for this machine's team without
    click; None when click's command must answer (other options, a team on NATS, any
    error: click's command then says it in relay's words). Nothing is printed before
    everything has been read, so a fall back never prints twice."""
    if argv not in (["agents"], ["agents", "--json"]):
        return None
    try:
        messenger = messenger_for(None, (), os.environ.get("RELAY_TEAM") or None)
        if messenger.uses_nats:
            messenger.mailbox.close()
            return None
        members, problem = local_team(messenger)
        text = roster_text(messenger.team, members, as_json=argv[-1] == "--json")
    except Exception:  # click's command reads again and reports it in relay's words
        return None
    if problem is not None:
        sys.stderr.write(visible(f"relay: {problem}") + "\n")
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0

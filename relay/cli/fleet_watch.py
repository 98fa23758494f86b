"""`relay watch`: the team live, in place on a terminal (rich), or as lines elsewhere."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from relay.cli.options import cwd_option, settings_option, team_option

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from relay.fleet.watch import Happening, TeamFeed

LOOK_SECONDS = 0.05
"""How often the watch looks at the board (a change shows within about this): this
machine's board is read only when written, or once a second (relay.fleet.watch)."""
REDRAW_SECONDS = 1.0
"""The view is drawn again at least this often (its "for" and "up" times move on)."""
ACTIVITY_LINES = 12
STATE_STYLES = {
    "starting": "cyan",
    "working": "green",
    "idle": "dim",
    "waiting": "bold yellow",
    "restarting": "magenta",
    "exited": "dim",
    "stopped": "dim",
    "lost": "bold red",
}
KIND_STYLES = {"message": "blue", "deny": "yellow", "error": "red", "problem": "red"}


@click.command("watch")
@click.option("--once", is_flag=True, help="Show the team once and exit.")
@team_option
@cwd_option
@settings_option
def watch(
    *, once: bool, team: str | None, cwd: Path | None, settings_files: tuple[Path, ...]
) -> None:
    """The team live: agents and their states, messages as they flow, denies and hook
    errors as they happen. On a terminal it updates in place (q or Ctrl-C ends it);
    elsewhere it prints each change as a line."""
    from relay.cli.messaging import _with_messenger

    start = (cwd or Path.cwd()).resolve()

    async def work(messenger: Any) -> None:
        from relay.cli.messaging import _human
        from relay.config.paths import find_project_root
        from relay.engine.telemetry import log_path
        from relay.fleet.boards import open_board
        from relay.fleet.watch import TeamFeed

        async with open_board(messenger.config, messenger.team, name=_human()) as board:
            feed = TeamFeed(
                messenger, board, hook_log=log_path(), project=find_project_root(start) or start
            )
            if once:
                await _show_once(feed)
            elif sys.stdout.isatty():
                await _live_view(feed)
            else:
                await _lines(feed)

    _with_messenger(cwd, settings_files, team, work)


async def _show_once(feed: TeamFeed) -> None:
    await feed.look()
    # Not on a terminal: lines as long as they are (a program reads them, not a screen).
    width = None if sys.stdout.isatty() else 100_000
    _console(width).print(_view(feed, []))


async def _lines(feed: TeamFeed) -> None:
    """Each change as a line, until SIGINT, SIGTERM or SIGHUP."""
    import anyio

    async with anyio.create_task_group() as group:
        group.start_soon(_end_on_signals, group.cancel_scope)
        while True:
            for happening in await feed.look():
                click.echo(_line(happening))
            sys.stdout.flush()
            await anyio.sleep(LOOK_SECONDS)


async def _live_view(feed: TeamFeed) -> None:
    """The view in place on the terminal's alternate screen, until q, Ctrl-C or a signal;
    the terminal is left as it was."""
    import anyio
    from rich.live import Live

    activity: collections.deque[Happening] = collections.deque(maxlen=ACTIVITY_LINES)
    console = _console()
    await feed.look()  # the members are the table: not news
    shown: object = None
    drawn = 0.0
    with (
        _keys_one_by_one(sys.stdin.fileno()) as keys,
        Live(
            console=console,
            screen=True,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as live,
    ):
        async with anyio.create_task_group() as group:
            group.start_soon(_end_on_signals, group.cancel_scope)
            if keys is not None:
                group.start_soon(_end_on_q, keys, group.cancel_scope)
            while True:
                activity.extend(await feed.look())
                now = time.monotonic()
                signature = _signature(feed, activity)
                if signature != shown or now - drawn >= REDRAW_SECONDS:
                    live.update(_view(feed, activity, height=console.size.height), refresh=True)
                    shown, drawn = signature, now
                await anyio.sleep(LOOK_SECONDS)


def _console(width: int | None = None) -> Console:
    from rich.console import Console

    no_color = bool(os.environ.get("NO_COLOR")) or None
    return Console(highlight=False, no_color=no_color, width=width)


def _signature(feed: TeamFeed, activity: collections.deque[Happening]) -> object:
    """What the view shows, but the times: drawn again when it changes."""
    return (
        [
            (
                m.name,
                m.now,
                m.since,
                m.live and (m.live.tool, m.live.last_line, m.live.messages_in, m.live.messages_out),
            )
            for m in feed.members.values()
        ],
        list(activity),
    )


COLUMNS = (
    ("NAME", "<", 20), ("STATE", "<", 11), ("FOR", ">", 4), ("HOST", "<", 6),
    ("MACHINE", "<", 12), ("PID", ">", 7), ("IN", ">", 5), ("OUT", ">", 5), ("UP", ">", 4),
    ("TOOL", "<", 14),
)  # fmt: skip
"""The table's columns before LAST LINE: header, alignment, widest. Each row is laid out
here as one line of text: rich's Table measures every cell, 250 ms for 100 agents."""


def _view(
    feed: TeamFeed, activity: collections.abc.Iterable[Happening], *, height: int | None = None
) -> RenderableType:
    """The whole view: a title, the team's table, the latest happenings; within `height`
    lines (the rows that do not fit are counted in a last row)."""
    from datetime import UTC, datetime

    from rich.console import Group
    from rich.text import Text

    from relay.fleet.roster import age, shown_state, uptime
    from relay.protocol.display import visible

    now = datetime.now(UTC)
    title = Text.assemble(
        ("relay watch", "bold"),
        f" · team {visible(feed.team)} · {len(feed.members)} names · {now:%H:%M:%S} UTC · q quits",
    )
    rows: list[tuple[list[str], str, str]] = []
    for member in feed.members.values():
        live = member.live
        cells = [
            visible(member.name),
            shown_state(member),
            age(member.since, now),
            live.host_kind if live is not None else member.kind,
            visible((live.machine if live is not None else member.host) or "-"),
            str(member.pid or "-"),
            str(live.messages_in) if live is not None else "-",
            str(live.messages_out) if live is not None else "-",
            uptime(member, now),
            visible((live.tool if live is not None else None) or "-"),
        ]
        last = visible((live.last_line if live is not None else None) or "")
        rows.append((cells, last, STATE_STYLES.get(member.now, "")))
    widths = [
        min(widest, max([len(header), *(len(cells[index]) for cells, _, _ in rows)]))
        for index, (header, _, widest) in enumerate(COLUMNS)
    ]
    activity_lines = [
        Text(_line(happening), style=KIND_STYLES.get(happening.kind, ""), no_wrap=True)
        for happening in activity
    ]
    room = len(rows)
    if height is not None:
        room = max(1, height - 5 - len(activity_lines))  # title, blanks, header, "activity"
    shown, hidden = rows[:room], rows[room:]
    if hidden:
        shown = rows[: max(0, room - 1)]
    header = Text(_row([h for h, _, _ in COLUMNS], widths, "LAST LINE"), style="bold")
    table = [header]
    state_at = widths[0] + 2
    for cells, last, style in shown:
        line = Text(_row(cells, widths, last), no_wrap=True, overflow="ellipsis")
        line.stylize(style, state_at, state_at + widths[1])
        table.append(line)
    if hidden:
        table.append(Text(f"… and {len(rows) - len(shown)} more", style="dim"))
    return Group(title, Text(""), *table, Text(""), Text("activity", style="bold"), *activity_lines)


def _row(cells: list[str], widths: list[int], last: str) -> str:
    """One line of the table: each cell cut or padded to its column, then the last line."""
    parts = []
    for cell, width, (_, align, _) in zip(cells, widths, COLUMNS, strict=True):
        text = cell if len(cell) <= width else cell[: width - 1] + "…"
        parts.append(f"{text:{align}{width}}")
    return "  ".join([*parts, last]).rstrip()


def _line(happening: Happening) -> str:
    from relay.protocol.display import visible

    clock = happening.time[11:19] if len(happening.time) >= 19 else happening.time
    return visible(f"{clock} {happening.kind:7} {happening.text}")


@contextlib.contextmanager
def _keys_one_by_one(fd: int) -> Iterator[int | None]:
    """The terminal `fd` in cbreak mode (keys come one by one, Ctrl-C still interrupts),
    restored on exit; None when `fd` is not a terminal."""
    import termios
    import tty

    if not os.isatty(fd):
        yield None
        return
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def _end_on_q(fd: int, scope: Any) -> None:
    import anyio

    while True:
        await anyio.wait_readable(fd)
        try:
            keys = os.read(fd, 64)
        except OSError:
            return
        if not keys or b"q" in keys.lower():
            scope.cancel()
            return


async def _end_on_signals(scope: Any) -> None:
    import anyio

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as received:
        async for _ in received:
            scope.cancel()
            return

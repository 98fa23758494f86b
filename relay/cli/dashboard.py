"""`relay dashboard`: the team live in the browser (relay.web; spec/dashboard.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from relay.cli.options import cwd_option, settings_option, team_option
from relay.protocol.display import visible


@click.command("dashboard")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    help="The port to listen on (default: a free one).",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="The address to listen on; anything but loopback lets other machines try the token.",
)
@click.option("--no-open", is_flag=True, help="Print the URL; do not open a browser.")
@team_option
@cwd_option
@settings_option
def dashboard(
    *,
    port: int,
    host: str,
    no_open: bool,
    team: str | None,
    cwd: Path | None,
    settings_files: tuple[Path, ...],
) -> None:
    """The team live in your browser: agents, messages, hooks, memories. Serves a local
    page behind a random token (printed) until Ctrl-C."""
    from relay.cli.messaging import _human, _with_messenger
    from relay.web.security import is_loopback

    if not is_loopback(host):
        click.echo(
            visible(
                f"relay dashboard: warning: listening on {host}, not on loopback: anyone who "
                "can reach this machine and learns the URL's token can read the team and "
                "act as you"
            ),
            err=True,
        )
    start = (cwd or Path.cwd()).resolve()

    async def work(messenger: Any) -> None:
        from relay.config.discovery import load_settings
        from relay.engine.telemetry import log_path
        from relay.fleet.boards import machine_label, open_board
        from relay.web.dashboard import Dashboard
        from relay.web.pages import load_pages
        from relay.web.server import serve

        settings = load_settings(start, settings_files)
        user = _human()
        async with open_board(messenger.config, messenger.team, name=user) as board:
            dashboard = Dashboard(
                messenger=messenger,
                board=board,
                settings=settings,
                project=settings.root or start,
                cwd=start,
                user=user,
                machine=machine_label(),
                hook_log=log_path(),
            )
            pages = load_pages(dashboard)

            def ready(url: str) -> None:
                click.echo(visible(f"relay dashboard: team {messenger.team}"))
                click.echo(url)
                click.echo("Ctrl-C stops it.")
                sys.stdout.flush()
                if not no_open:
                    _open(url)

            await serve(dashboard, pages, host=host, port=port, on_ready=ready)
        click.echo("relay dashboard: stopped")

    _with_messenger(cwd, settings_files, team, work)


def _open(url: str) -> None:
    """The user's browser at `url`, without waiting for it (a text browser may hold the
    terminal)."""
    import threading
    import webbrowser

    def open_it() -> None:
        try:
            opened = webbrowser.open(url)
        except webbrowser.Error:
            opened = False
        if not opened:
            click.echo("relay dashboard: no browser could be opened; open the URL above", err=True)

    threading.Thread(target=open_it, daemon=True).start()

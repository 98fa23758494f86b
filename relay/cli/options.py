"""Options that many commands share, declared once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

cwd_option = click.option(
    "--cwd",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Find the project from this directory (default: here).",
)
settings_option = click.option(
    "--settings",
    "settings_files",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Add a settings file at user level, after the user file (repeatable).",
)

team_option = click.option(
    "--team",
    envvar="RELAY_TEAM",
    help="The team (default: $RELAY_TEAM, which `relay run` sets for its agent; else "
    "messaging.team from the settings; else the git repository's, one team for all its "
    "worktrees; else the project folder's).",
)


def json_option(help_text: str) -> Callable[[F], F]:
    """`--json` (as `as_json`), with a help text that says what it prints."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


class UsageError(click.UsageError):
    """A mistake in how a command was called: exit 2, in relay's own format
    (`relay: error: WHERE: what`, then where the help is), as every command reports."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{hint}: {message}" if hint else message)

    def show(self, file: Any = None) -> None:
        command = self.ctx.command_path if self.ctx is not None else "relay"
        from relay.protocol.display import visible

        prefix = click.style("relay: error:", fg="red", bold=True)
        message = visible(f"{self.format_message()} ({command} --help)")  # it quotes arguments
        click.echo(f"{prefix} {message}", err=True, file=file)

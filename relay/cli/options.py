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


def json_option(help_text: str) -> Callable[[F], F]:
    """`--json` (as `as_json`), with a help text that says what it prints."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)

"""Options that many commands share, declared once."""

from __future__ import annotations

from pathlib import Path

import click

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

"""`relay hooks import`: convert Claude Code or Gemini CLI hooks into relay settings."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import click

from relay.cli.options import cwd_option


@click.command("import")
@click.option(
    "--from",
    "agent",
    type=click.Choice(["claude", "gemini"]),
    required=True,
    help="The agent whose settings to read.",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read this file (repeatable) instead of the project's .claude/ or .gemini/ settings.",
)
@cwd_option
@click.option(
    "--write",
    is_flag=True,
    help="Add the hooks to the project's .relay/settings.json (existing hooks are kept).",
)
def import_hooks(agent: str, paths: tuple[Path, ...], cwd: Path | None, write: bool) -> None:
    """Convert the hooks of a Claude Code or Gemini CLI settings file into relay settings.

    Prints the relay settings on stdout and, on stderr, everything that was left out or
    changed. Claude Code hooks keep their event names, so they run as they did; Gemini CLI
    timeouts are converted from milliseconds to seconds.
    """
    from relay.config.importing import Agent, import_from, import_target, merge_into_file

    start = cwd or Path.cwd()
    imported = import_from(cast(Agent, agent), cwd=start, paths=paths)
    click.echo(imported.settings_text(), nl=False)
    sources = ", ".join(imported.files)
    click.echo(f"converted {imported.hook_count} hook(s) from {sources}", err=True)
    for line in imported.report:
        click.echo(f"  {line}", err=True)
    if not write:
        return
    merged = merge_into_file(imported.settings, import_target(start))
    for line in merged.report:
        click.echo(f"  {line}", err=True)
    verb = "created" if merged.created else "updated" if merged.added else "unchanged:"
    click.echo(
        f"{verb} {merged.file}: {merged.added} group(s) added, {merged.skipped} already there",
        err=True,
    )
    if merged.added:
        click.echo(
            "project hooks run only once trusted: review and trust them with `relay trust`",
            err=True,
        )

"""`relay hooks new`: write a working hook, register it, and say how to try it."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import click

from relay.cli.options import UsageError, cwd_option, json_option


@click.command("new")
@click.argument("name")
@click.option("--event", required=True, help="The event it answers (PreToolUse, SessionStart, …).")
@click.option(
    "--lang",
    "language",
    type=click.Choice(["sh", "python", "node", "perl"]),
    default="sh",
    show_default=True,
    help="The language of the hook file.",
)
@click.option("--matcher", help="Run it only where this matches (a tool name for tool events).")
@click.option(
    "--scope",
    type=click.Choice(["project", "local", "user"]),
    help="project: .relay/hooks/NAME.EXT in .relay/settings.json (shared); local: the same "
    "file, registered in .relay/settings.local.json (yours); user: $RELAY_HOME/hooks/, in "
    "$RELAY_HOME/settings.json. Default: project inside a project, else user.",
)
@cwd_option
@json_option("Print what was written as JSON (file, settings, command, test, …).")
def new(  # noqa: PLR0917 (click passes options positionally)
    name: str,
    event: str,
    language: str,
    matcher: str | None,
    scope: str | None,
    cwd: Path | None,
    as_json: bool,
) -> None:
    """Write a working hook NAME for EVENT and register it.

    The file reads the event on stdin and answers JSON: a deny rule to edit for a tool
    event, context for the agent where the event takes it, no opinion elsewhere. It never
    overwrites a file or takes a name a hook has. Prints the `relay hooks test` line that
    runs it.
    """
    import msgspec

    from relay.config.scaffold import Language, NewScope, create_hook
    from relay.protocol.dialects import UnknownEventError
    from relay.protocol.display import visible

    try:
        made = create_hook(
            name,
            event,
            language=cast(Language, language),
            matcher=matcher,
            scope=cast("NewScope | None", scope),
            cwd=cwd,
        )
    except UnknownEventError as exc:
        raise UsageError(str(exc), hint="--event") from None
    if as_json:
        click.echo(msgspec.json.encode(made, enc_hook=str).decode())
        return
    where = Path.cwd()
    shown = f" (matcher {made.matcher})" if made.matcher else ""
    click.echo(visible(f"created {_near(made.file, where)} ({made.language}, executable)"))
    verb = "created" if made.settings_created else "registered in"
    click.echo(
        visible(f"{verb} {_near(made.settings, where)}: {made.name} for {made.event}{shown}")
    )
    if made.interpreter_missing:
        click.echo(
            f"relay: warning: {made.interpreter_missing} is not on PATH: the hook fails until "
            "it is installed",
            err=True,
        )
    if made.trust_needed:
        click.echo("project hooks run once trusted: review it and run `relay trust`")
    import shlex

    click.echo(visible("try it: " + " ".join(shlex.quote(word) for word in made.test)))


def _near(path: Path, where: Path) -> str:
    """PATH relative to the working folder (not --cwd: the person's shell is here) when it
    is inside it, else as it is."""
    try:
        return str(path.relative_to(where.resolve()))
    except ValueError:
        return str(path)

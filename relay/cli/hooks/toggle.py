"""`relay hooks enable` / `relay hooks disable`: edit hooksConfig.disabled of one settings file."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import click

from relay.cli.options import cwd_option, json_option

SCOPE_CHOICE = click.Choice(["user", "project", "local"])


def _toggle(
    name: str, scope: str | None, cwd: Path | None, *, disabled: bool, force: bool, as_json: bool
) -> None:
    import msgspec

    from relay.config.editing import ToggleScope, set_hook_disabled
    from relay.protocol.display import visible

    result = set_hook_disabled(
        name, disabled, scope=cast(ToggleScope | None, scope), cwd=cwd, force=force
    )
    hint = f" (did you mean {result.suggestion!r}?)" if result.suggestion else ""

    def say(text: str) -> None:  # the name is an argument, the files' names a project's
        click.echo(visible(text), err=text.startswith("relay: "))

    if as_json:
        click.echo(msgspec.json.encode(result, enc_hook=str).decode())
    elif result.action == "unknown":
        say(
            f"relay: error: no hook named {name!r} in the settings that apply here{hint}; "
            f"nothing changed (relay hooks list shows the names; --force disables it anyway)"
        )
    else:
        if not result.known:
            say(f"relay: warning: no hook named {name!r} in the settings that apply here{hint}")
        messages = {
            "disabled": f"disabled {name} in {result.file}",
            "enabled": f"enabled {name} in {result.file}",
            "already-disabled": f"{name} is already disabled in {result.file}; nothing changed",
            "not-disabled": f"{name} is not disabled in {result.file}; nothing changed",
        }
        say(messages[result.action])
        if result.outside_project:
            say(
                f"relay: warning: {name} is a user or system hook, which project settings "
                f"cannot turn off; it still runs. Use: relay hooks disable {name} --scope user"
            )
        for other in result.still_disabled_by:
            # hooksConfig.disabled is joined over every file: one entry anywhere keeps it off.
            say(f"relay: warning: {name} is still disabled in {other}")
    if result.action == "unknown":
        raise click.exceptions.Exit(1)


_SCOPE_HELP = (
    "The settings file to edit: user ($RELAY_HOME/settings.json), project "
    "(.relay/settings.json) or local (.relay/settings.local.json). "
    "Default: project inside a project, else user."
)


@click.command("disable")
@click.argument("name")
@click.option("--scope", type=SCOPE_CHOICE, help=_SCOPE_HELP)
@cwd_option
@click.option(
    "--force", is_flag=True, help="Disable NAME even though no hook here has that name yet."
)
@json_option("Print what was done as JSON (action, file, known, suggestion, …).")
def disable(name: str, scope: str | None, cwd: Path | None, force: bool, as_json: bool) -> None:
    """Stop the hook named NAME from running: add it to hooksConfig.disabled.

    Only that list changes; the rest of the file keeps its exact text. A name that no hook
    in the settings that apply here has is refused (exit 1, with the closest name).
    """
    _toggle(name, scope, cwd, disabled=True, force=force, as_json=as_json)


@click.command("enable")
@click.argument("name")
@click.option("--scope", type=SCOPE_CHOICE, help=_SCOPE_HELP)
@cwd_option
@json_option("Print what was done as JSON (action, file, still_disabled_by, …).")
def enable(name: str, scope: str | None, cwd: Path | None, as_json: bool) -> None:
    """Let the hook named NAME run again: remove it from hooksConfig.disabled.

    The lists of every settings file are joined: if another file still disables NAME,
    that file is named.
    """
    _toggle(name, scope, cwd, disabled=False, force=False, as_json=as_json)

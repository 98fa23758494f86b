"""`relay hooks enable` / `relay hooks disable`: edit hooksConfig.disabled of one settings file."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import click

from relay.cli.options import cwd_option, json_option

SCOPE_CHOICE = click.Choice(["user", "project", "local"])


def _toggle(
    name: str,
    scope: str | None,
    cwd: Path | None,
    *,
    disabled: bool,
    force: bool,
    as_json: bool,
    shared: bool,
) -> None:
    import msgspec

    from relay.config.editing import ToggleScope, set_hook_disabled
    from relay.protocol.display import visible

    result = set_hook_disabled(
        name, disabled, scope=cast(ToggleScope | None, scope), cwd=cwd, force=force, shared=shared
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
            say(f"relay: warning: {name} is still disabled in {other}{_fix_in(name, other)}")
    if result.action == "unknown":
        raise click.exceptions.Exit(1)


def _fix_in(name: str, file: str) -> str:
    """The command that enables NAME in FILE too, for the files a scope names."""
    path = Path(file)
    if path.parent.name == ".relay" and path.name == "settings.json":
        return f" (the project's shared file: relay hooks enable {name} --shared)"
    if path.parent.name == ".relay" and path.name == "settings.local.json":
        return f" (relay hooks enable {name} --scope local)"
    from relay.config.paths import relay_home

    if path == relay_home() / "settings.json":
        return f" (relay hooks enable {name} --scope user)"
    return ""


_SCOPE_HELP = (
    "The settings file to edit: user ($RELAY_HOME/settings.json), project "
    "(.relay/settings.json) or local (.relay/settings.local.json). Default: your own file: "
    "local for a project hook, user for a user hook and outside a project."
)
_SHARED_HELP = "Edit the project's shared, committed file (.relay/settings.json): for everyone."


@click.command("disable")
@click.argument("name")
@click.option("--scope", type=SCOPE_CHOICE, help=_SCOPE_HELP)
@click.option("--shared", is_flag=True, help=_SHARED_HELP)
@cwd_option
@click.option(
    "--force", is_flag=True, help="Disable NAME even though no hook here has that name yet."
)
@json_option("Print what was done as JSON (action, file, known, suggestion, …).")
def disable(  # noqa: PLR0917 (click passes options positionally)
    name: str, scope: str | None, shared: bool, cwd: Path | None, force: bool, as_json: bool
) -> None:
    """Stop the hook named NAME from running: add it to hooksConfig.disabled.

    Only that list changes; the rest of the file keeps its exact text. A name that no hook
    in the settings that apply here has is refused (exit 1, with the closest name).
    """
    _toggle(name, scope, cwd, disabled=True, force=force, as_json=as_json, shared=shared)


@click.command("enable")
@click.argument("name")
@click.option("--scope", type=SCOPE_CHOICE, help=_SCOPE_HELP)
@click.option("--shared", is_flag=True, help=_SHARED_HELP)
@cwd_option
@json_option("Print what was done as JSON (action, file, still_disabled_by, …).")
def enable(name: str, scope: str | None, shared: bool, cwd: Path | None, as_json: bool) -> None:
    """Let the hook named NAME run again: remove it from hooksConfig.disabled.

    The lists of every settings file are joined: if another file still disables NAME,
    that file is named.
    """
    _toggle(name, scope, cwd, disabled=False, force=False, as_json=as_json, shared=shared)

"""`relay hooks import`: convert Claude Code or Gemini CLI hooks into relay settings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import click

from relay.cli.options import cwd_option, json_option
from relay.protocol.display import json_visible, visible

if TYPE_CHECKING:
    from relay.config.importing import ImportResult, ImportScope, ImportSource, MergeResult


@click.command("import")
@click.option(
    "--from",
    "agent",
    type=click.Choice(["claude", "gemini"]),
    required=True,
    help="The agent whose settings to read.",
)
@click.option(
    "--scope",
    type=click.Choice(["project", "user"]),
    default="project",
    show_default=True,
    help="project: the project's .claude/ or .gemini/ settings into .relay/ (a personal "
    ".claude/settings.local.json into .relay/settings.local.json); user: ~/.claude/ or "
    "~/.gemini/settings.json into $RELAY_HOME/settings.json.",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Read this file (repeatable) instead of the host's settings of the scope.",
)
@cwd_option
@click.option(
    "--write",
    is_flag=True,
    help="Add the hooks to relay's settings files (the hooks already there are kept).",
)
@json_option("Print the result as JSON: the converted settings, or what --write did.")
def import_hooks(  # noqa: PLR0917 (click passes options positionally)
    agent: str,
    scope: str,
    paths: tuple[Path, ...],
    cwd: Path | None,
    write: bool,
    as_json: bool,
) -> None:
    """Convert the hooks of a Claude Code or Gemini CLI settings file into relay settings.

    Prints the relay settings on stdout and, on stderr, everything that was left out or
    changed; with --write, adds them to relay's files and prints what it added. Claude Code
    hooks keep their event names, so they run as they did; Gemini CLI timeouts are
    converted from milliseconds to seconds. Hooks without a name get one from their script.
    """
    from relay.config.importing import Agent, import_sources, write_import

    start = cwd or Path.cwd()
    chosen = cast("ImportScope", scope)
    sources = _sources(agent, chosen, start, paths)
    imported = import_sources(cast(Agent, agent), sources, required=bool(paths))
    merged = write_import(imported) if write else None
    if as_json:
        click.echo(_json(imported, merged, agent, chosen))
        return
    sources_read = ", ".join(imported.files)
    # A host's settings, maybe a project's: its hook names and commands made visible.
    click.echo(visible(f"converted {imported.hook_count} hook(s) from {sources_read}"), err=True)
    for line in imported.report:
        click.echo(visible(f"  {line}"), err=True)
    if merged is None:
        _print_settings(imported)
        return
    for result in merged:
        _print_merge(result)
    if any(result.added for result in merged) and chosen == "project":
        click.echo("project hooks run only once trusted: review and trust them with `relay trust`")
    if imported.hook_count:
        click.echo(visible(_originals_note(imported, agent, chosen)))


def _sources(
    agent: str, scope: ImportScope, cwd: Path, paths: tuple[Path, ...]
) -> list[ImportSource]:
    """The host files to read and the relay file each one's hooks go to."""
    from relay.config.importing import ImportSource, relay_target
    from relay.hosts import host
    from relay.hosts.install import target

    chosen = host(agent)
    shared = relay_target(scope, cwd)
    personal = relay_target(scope, cwd, personal=True)
    if paths:
        # A file named like the host's personal one (settings.local.json) stays personal.
        return [
            ImportSource(
                path=path,
                target=personal
                if scope == "project" and path.name == chosen.local_file
                else shared,
            )
            for path in paths
        ]
    where = target(chosen, scope, cwd)
    sources = [ImportSource(path=where.file, target=shared)]
    if where.local_file is not None:
        sources.append(ImportSource(path=where.local_file, target=personal))
    return sources


def _print_settings(imported: ImportResult) -> None:
    """Without --write: each relay file's converted settings on stdout, announced on stderr
    when there is more than one (a project's shared and personal files). The JSON is exact,
    with the characters a terminal would act on written as JSON escapes."""
    if len(imported.parts) <= 1:
        if imported.parts:
            click.echo(
                visible(f"for {imported.parts[0].target} (--write adds them there)"), err=True
            )
        click.echo(json_visible(imported.settings_text()), nl=False)
        return
    for part in imported.parts:
        click.echo(visible(f"for {part.target} (--write adds them there):"), err=True)
        click.echo(json_visible(part.settings_text()), nl=False)


def _print_merge(result: MergeResult) -> None:
    verb = "created" if result.created else "updated" if result.added else "unchanged:"
    added = f"{len(result.names)} hook(s) added"
    if result.names:
        added += f" ({', '.join(result.names)})"
    click.echo(visible(f"{verb} {result.file}: {added}, {result.present} already there"))
    for line in result.report:
        click.echo(visible(f"  {line}"), err=True)


def _originals_note(imported: ImportResult, agent: str, scope: ImportScope) -> str:
    from relay.hosts import host

    title = host(agent).title
    where = _install_scope(scope)
    return (
        f"{title} still runs the original hooks in {', '.join(imported.files)}: remove them "
        f"there, or run `relay install {agent}{where} --import`, which makes relay {title}'s "
        "hook layer and moves them out, so nothing runs twice "
        f"(`relay uninstall {agent}{where}` puts them back)"
    )


def _install_scope(scope: ImportScope) -> str:
    """The `relay install` option for a scope (install's default is the user's)."""
    return "" if scope == "user" else " --project"


def _json(
    imported: ImportResult, merged: list[MergeResult] | None, agent: str, scope: ImportScope
) -> str:
    import msgspec

    from relay.config.importing import settings_document

    document: dict[str, Any] = {
        "from": agent,
        "scope": scope,
        "files": imported.files,
        "hooks": imported.hook_count,
        "report": imported.report,
        "written": merged is not None,
    }
    if merged is None:
        document["targets"] = [
            {
                "file": part.target,
                "sources": part.files,
                "names": part.hook_names,
                "settings": settings_document(part.settings),
            }
            for part in imported.parts
        ]
    else:
        document["targets"] = [
            {
                "file": result.file,
                "created": result.created,
                "added": result.names,
                "present": result.present,
                "renamed": result.renamed,
                "report": result.report,
            }
            for result in merged
        ]
    # The host keeps running what was imported until they are moved out of its files.
    document["originals"] = {
        "files": imported.files if imported.hook_count else [],
        "move_with": f"relay install {agent}{_install_scope(scope)} --import",
    }
    return msgspec.json.encode(document).decode()

"""`relay memory …`: save, search, list, forget, export and import memories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import click

from relay.cli.lazy import LazyGroup
from relay.cli.options import cwd_option, settings_option
from relay.protocol.display import visible


@click.group(cls=LazyGroup, lazy={})
def memory() -> None:
    """The memory agents keep across sessions (the built-in @memory: namespace)."""


def _service(cwd: Path | None, settings_files: tuple[Path, ...]) -> tuple[Any, str]:
    """The configured memory backend and this project's root."""
    from relay.config.discovery import load_settings
    from relay.config.paths import find_project_root
    from relay.services.memory.backends import memory_config, open_memory

    start = cwd or Path.cwd()
    settings = load_settings(start, settings_files)
    project = settings.root or find_project_root(start) or start
    return open_memory(memory_config(settings)), str(Path(project).resolve())


def _print_json(value: Any) -> None:
    import msgspec

    click.echo(json.dumps(msgspec.to_builtins(value), ensure_ascii=False))


@memory.command("save")
@click.argument("content", nargs=-1, required=True)
@click.option("--global", "is_global", is_flag=True, help="Visible in every project.")
@click.option("--agent", help="Who saved it.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print the memory saved as JSON (with "existing": true when it was there).',
)
@cwd_option
@settings_option
def save(
    *,
    content: tuple[str, ...],
    is_global: bool,
    agent: str | None,
    as_json: bool,
    cwd: Path | None,
    settings_files: tuple[Path, ...],
) -> None:
    """Save CONTENT (`#tag` words become tags); the same content again answers with the
    memory already saved (`"existing": true` in --json)."""
    import msgspec

    from relay.services.memory.namespace import saved_answer, tags_of

    service, project = _service(cwd, settings_files)
    text = " ".join(content)
    saved = service.save(
        text, tags=tags_of(text), agent=agent, project=None if is_global else project
    )
    if as_json:
        _print_json({**msgspec.to_builtins(saved.memory), "existing": saved.existing})
    else:
        click.echo(saved_answer(saved))


@memory.command("search")
@click.argument("query", nargs=-1, required=True)
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the hits as JSON (memory and score).")
@cwd_option
@settings_option
def search(
    query: tuple[str, ...],
    limit: int,
    as_json: bool,
    cwd: Path | None,
    settings_files: tuple[Path, ...],
) -> None:
    """Memories of this project (and global ones) matching QUERY, best first."""
    service, project = _service(cwd, settings_files)
    hits = service.search(" ".join(query), project=project, limit=limit)
    if as_json:
        _print_json(hits)
        return
    if not hits:
        click.echo(f"No memory matches “{' '.join(query)}”.")
    for hit in hits:
        _print_memory(hit.memory, extra=f"  (score {hit.score:.2f})")


@memory.command("list")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the memories as JSON.")
@cwd_option
@settings_option
def list_memories(
    limit: int, as_json: bool, cwd: Path | None, settings_files: tuple[Path, ...]
) -> None:
    """Memories of this project and global ones, newest first."""
    service, project = _service(cwd, settings_files)
    memories = service.list(project=project, limit=limit)
    if as_json:
        _print_json(memories)
        return
    if not memories:
        click.echo("No memories yet.")
    for item in memories:
        _print_memory(item)


@memory.command("forget")
@click.argument("memory_id", metavar="ID")
@cwd_option
@settings_option
@click.option(
    "--json", "as_json", is_flag=True, help='Print {"id", "forgotten": true|false} as JSON.'
)
@click.pass_context
def forget(
    ctx: click.Context,
    memory_id: str,
    cwd: Path | None,
    settings_files: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Forget the memory ID."""
    service, _ = _service(cwd, settings_files)
    forgotten = service.delete(memory_id)
    if as_json:
        click.echo(json.dumps({"id": memory_id, "forgotten": forgotten}))
        ctx.exit(0 if forgotten else 1)
    if forgotten:
        click.echo(f"✓ Forgot memory [{memory_id}]")
    else:
        click.echo(f"No memory with id {memory_id}.", err=True)
        ctx.exit(1)


@memory.command("export")
@click.option(
    "--output",
    "-o",
    type=click.File("w", encoding="utf-8"),
    default="-",
    help="File (default: stdout).",
)
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Every project's memories, not only this project's and global ones.",
)
@cwd_option
@settings_option
def export(
    output: IO[str], everything: bool, cwd: Path | None, settings_files: tuple[Path, ...]
) -> None:
    """The memories `list` shows (this project's and global ones), or with --all every
    memory of the store, as JSON Lines, oldest first (ids, tags and dates kept)."""
    from relay.services.memory.jsonl import write_jsonl
    from relay.services.memory.model import visible_in

    service, project = _service(cwd, settings_files)
    memories = service.export() if everything else visible_in(service.export(), project)
    count = write_jsonl(memories, output)
    scope = "" if everything else " (this project's and global ones; --all for every project)"
    click.echo(f"exported {count} memories{scope}", err=True)


@memory.command("import")
@click.argument("source", type=click.File("r", encoding="utf-8"), default="-")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the counts as JSON (added, present, updated)."
)
@cwd_option
@settings_option
def import_memories(
    source: IO[str], as_json: bool, cwd: Path | None, settings_files: tuple[Path, ...]
) -> None:
    """Memories from JSON Lines (as `relay memory export` writes them); ids, tags and
    dates kept. Says how many were added and how many were already there."""
    from relay.services.memory.jsonl import read_jsonl

    service, _ = _service(cwd, settings_files)
    counts = service.import_memories(read_jsonl(source))
    if as_json:
        _print_json(counts)
        return
    line = (
        f"imported {counts.total} memories: {counts.added} added, {counts.present} already present"
    )
    if counts.updated:
        line += f", {counts.updated} updated (same id, other content, tags or dates)"
    click.echo(line)


def _print_memory(item: Any, extra: str = "") -> None:
    from relay.services.memory.namespace import unwritten_tags

    # Only the tags the content does not already show: `#tag` words saved are both.
    tags = " ".join("#" + tag for tag in unwritten_tags(item))
    where = "global" if item.project is None else "project"
    content = visible(item.content).replace("\n", "\n    ")
    click.echo(
        f"[{item.id}] {item.created_at[:19]} ({where}){extra}\n    {content}"
        + (f"\n    {visible(tags)}" if tags else "")
    )

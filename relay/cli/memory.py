"""`relay memory …`: save, search, list, forget, export and import memories."""

from __future__ import annotations

import json
import os
import sys
import time
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
    """The configured memory backend and this project's key."""
    service, project, _, _ = _open(cwd, settings_files)
    return service, project


def _open(cwd: Path | None, settings_files: tuple[Path, ...]) -> tuple[Any, str, Any, Any]:
    """The configured memory backend, this project's key (spec/memory.md "Which project";
    its old memories moved over, which is said on stderr), the `memory` settings and the
    team sharing (None: team memory is off)."""
    from relay.config.discovery import load_settings
    from relay.config.paths import find_project_root
    from relay.services.memory.backends import memory_config, open_memory
    from relay.services.memory.projects import memory_project
    from relay.services.memory.sharing import team_sharing

    start = cwd or Path.cwd()
    settings = load_settings(start, settings_files)
    project = settings.root or find_project_root(start) or start
    config = memory_config(settings)
    # In a `relay run --team` session, its team ($RELAY_TEAM), as its messages use.
    sharing = team_sharing(settings, Path(project), os.environ.get("RELAY_TEAM") or None)
    service = open_memory(config, sharing, progress=_EmbeddingProgress())
    key, notices = memory_project(service, project)
    for notice in notices:
        click.echo(visible(f"relay: {notice}"), err=True)
    return service, key, config, sharing


class _EmbeddingProgress:
    """How far the store is in embedding a backlog (a store from before embeddings, or a
    new model), on stderr: the count, the rate and the time left; one line rewritten on
    a terminal, else a line when it starts, every PROGRESS_EVERY seconds and at the end."""

    PROGRESS_EVERY = 10.0

    def __init__(self) -> None:
        self._started = self._said = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done == 0:
            self._started = now
        line = f"relay: embedding memories for search by meaning: {done:,} of {total:,}"
        elapsed = now - self._started
        if done and elapsed > 0:
            rate = done / elapsed
            line += f", {rate:,.0f} a second"
            if done < total:
                line += f", about {_duration((total - done) / rate)} left"
        if sys.stderr.isatty():
            click.echo(f"\r{line}\x1b[K", err=True, nl=done >= total)
        elif done in (0, total) or now - self._said >= self.PROGRESS_EVERY:
            click.echo(line, err=True)
            self._said = now


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"


def _print_json(value: Any) -> None:
    import msgspec

    click.echo(json.dumps(msgspec.to_builtins(value), ensure_ascii=False))


@memory.command("save")
@click.argument("content", nargs=-1, required=True)
@click.option(
    "--project",
    "scope",
    flag_value="project",
    help="This project's only (the default unless memory.scope says otherwise).",
)
@click.option("--global", "scope", flag_value="global", help="Visible in every project.")
@click.option(
    "--team",
    "scope",
    flag_value="team",
    help="Shared with every machine of the team (memory.transport nats; spec/memory-team.md).",
)
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
    scope: str | None,
    agent: str | None,
    as_json: bool,
    cwd: Path | None,
    settings_files: tuple[Path, ...],
) -> None:
    """Save CONTENT (`#tag` words become tags); the same content again answers with the
    memory already saved (`"existing": true` in --json). Where: --project, --global or
    --team, else the memory.scope setting. A team save that the server did not take yet
    says so (`"shared": false` in --json) and is shared by the next save or sync."""
    import msgspec

    from relay.services.memory.namespace import save_in, saved_answer, tags_of
    from relay.services.memory.sharing import SharedMemory

    service, project, config, sharing = _open(cwd, settings_files)
    text = " ".join(content)
    saved = save_in(
        service,
        text,
        scope=scope or config.scope,
        project=project,
        agent=agent,
        team=sharing.team if sharing is not None else None,
        tags=tags_of(text),
    )
    if as_json:
        extra: dict[str, Any] = {"existing": saved.existing}
        if isinstance(saved, SharedMemory):
            extra |= {"shared": saved.shared, "problem": saved.problem}
        _print_json({**msgspec.to_builtins(saved.memory), **extra})
    else:
        click.echo(visible(saved_answer(saved)))  # a team's problem may quote a server


@memory.command("search")
@click.argument("query", nargs=-1, required=True)
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True)
@click.option(
    "--explain",
    is_flag=True,
    help="Show why each memory ranked: its place and score by words (BM25), by meaning"
    " (cosine similarity), the recency lift and the query's words among its tags.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print the hits as JSON (memory and score; with --explain, "explain" too).',
)
@cwd_option
@settings_option
def search(
    *,
    query: tuple[str, ...],
    limit: int,
    explain: bool,
    as_json: bool,
    cwd: Path | None,
    settings_files: tuple[Path, ...],
) -> None:
    """Memories of this project (and global ones) matching QUERY, best first: by its
    words and by its meaning (spec/memory.md, "Hybrid search")."""
    service, project = _service(cwd, settings_files)
    hits = service.search(" ".join(query), project=project, limit=limit, explain=explain)
    notice = getattr(service, "semantic_notice", None)
    if notice:
        click.echo(visible(f"relay: note: {notice}"), err=True)
    if as_json:
        _print_json(hits)
        return
    if not hits:
        click.echo(visible(f"No memory matches “{' '.join(query)}”."))
    for hit in hits:
        _print_memory(hit.memory, extra=f"  (score {hit.score:.2f})")
        if explain:
            from relay.services.memory.sqlite import score_formula

            click.echo(f"    {_explained(hit.explain)}")
            for line in score_formula(hit):
                click.echo(f"    how: {visible(line)}")


def _explained(ranking: Any) -> str:
    """One line saying why a hit ranked (MemoryHit.explain)."""
    from relay.services.memory.sqlite import explain_parts

    return "why: " + " · ".join(visible(part) for part in explain_parts(ranking))


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
    """Forget the memory ID (a team memory: on every machine of the team)."""
    from relay.services.memory.namespace import forget_answer
    from relay.services.memory.sharing import SharedForget

    service, _ = _service(cwd, settings_files)
    share = getattr(service, "forget", None)  # TeamMemory: says whether the team heard
    result = (
        share(memory_id) if share is not None else SharedForget(forgotten=service.delete(memory_id))
    )
    forgotten = result.forgotten
    if as_json:
        answer: dict[str, Any] = {"id": memory_id, "forgotten": forgotten}
        if result.team is not None:
            answer |= {"team": result.team, "shared": result.shared, "problem": result.problem}
        click.echo(json.dumps(answer))
        ctx.exit(0 if forgotten else 1)
    if forgotten:
        click.echo(visible(forget_answer(result, memory_id)))
    else:
        click.echo(visible(f"No memory with id {memory_id}."), err=True)
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


@memory.command("sync")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.5),
    default=10.0,
    show_default=True,
    help="Seconds it may take.",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
@cwd_option
@settings_option
def sync(timeout: float, as_json: bool, cwd: Path | None, settings_files: tuple[Path, ...]) -> None:
    """Share this machine's waiting team saves and forgets, and apply the team's new ones
    (memory.transport nats; spec/memory-team.md). Exit 1 when the server cannot be reached."""
    from relay.errors import RelayError
    from relay.services.memory.sharing import NOT_SET_UP

    service, _, _, sharing = _open(cwd, settings_files)
    run_sync = getattr(service, "sync", None)
    if sharing is None or run_sync is None:
        raise RelayError(NOT_SET_UP)
    try:
        report = run_sync(timeout=timeout)
    except RelayError:
        raise
    except Exception as exc:  # a notice like an unreachable server, not a crash (exit 3)
        click.echo(f"team memory: not synced: {type(exc).__name__}: {visible(str(exc))}", err=True)
        raise SystemExit(1) from None
    if as_json:
        _print_json(report)
    else:
        for line in _sync_lines(report):
            click.echo(visible(line))
    if report.unreachable is not None:
        if not as_json:
            click.echo(f"team memory: not synced: {visible(report.unreachable)}", err=True)
        raise SystemExit(1)


def _sync_lines(report: Any) -> list[str]:
    """What a sync did, for a person."""
    lines = [
        f"team {report.team}: {len(report.saved)} saved, {len(report.forgotten)} forgotten, "
        f"{report.unchanged} unchanged (up to #{report.sequence} of {report.stream}); "
        f"{report.published} published, {report.waiting} waiting"
    ]
    lines += [f"  saved [{memory_id}]" for memory_id in report.saved]
    lines += [f"  forgot [{memory_id}]" for memory_id in report.forgotten]
    lines += [f"problem: {problem}" for problem in report.problems]
    return lines


def _print_memory(item: Any, extra: str = "") -> None:
    from relay.services.memory.namespace import unwritten_tags

    # Only the tags the content does not already show: `#tag` words saved are both.
    tags = " ".join("#" + tag for tag in unwritten_tags(item))
    where = "global" if item.project is None else "project"
    if getattr(item, "team", None) is not None:
        where = f"team {item.team}"
    content = visible(item.content).replace("\n", "\n    ")
    click.echo(
        f"[{item.id}] {item.created_at[:19]} ({where}){extra}\n    {content}"
        + (f"\n    {visible(tags)}" if tags else "")
    )

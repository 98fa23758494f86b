"""`relay hooks list`: every registered hook, runnable or not, grouped by event in plan order."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import click
import msgspec

from relay.cli.options import cwd_option, settings_option

if TYPE_CHECKING:
    from relay.engine.registry import Registry

COMMAND_WIDTH = 60


class HookRow(msgspec.Struct, kw_only=True):
    """One registered hook as `relay hooks list --json` prints it."""

    event: str
    """The event name it is registered under (a Claude Code name stays one)."""
    canonical: str
    matcher: str | None
    name: str
    command: str
    source: str
    """The settings file, or "python" / "runtime" for a hook added in code."""
    scope: str
    dialect: str
    timeout: float
    enabled: bool
    trusted: bool
    runs: bool
    """Enabled, trusted, not broken, and hooks not switched off by `hooksConfig.enabled: false`."""
    broken: str | None = None
    """Why its settings entry cannot be used (file:line:column: path: what); null when it can."""
    failClosed: bool = False


def hook_rows(registry: Registry, event: str | None = None) -> list[HookRow]:
    """The registry's hooks (for one canonical event, or all), grouped by event, in plan order."""
    from relay.protocol.dialects import known_event_names

    position = {name: index for index, name in enumerate(known_event_names())}
    hooks = [hook for hook in registry.hooks if event is None or hook.canonical == event]
    # A stable sort: within an event, the registry's plan order stays.
    hooks.sort(key=lambda hook: position.get(hook.canonical, len(position)))
    return [
        HookRow(
            event=hook.event,
            canonical=hook.canonical,
            matcher=hook.matcher.text,
            name=hook.name,
            command=hook.command,
            source=hook.source,
            scope=hook.scope,
            dialect=hook.dialect,
            timeout=hook.timeout,
            enabled=hook.enabled,
            trusted=hook.trusted,
            runs=registry.enabled and hook.runnable,
            broken=str(hook.broken.errors[0]) if hook.broken and hook.broken.errors else None,
            failClosed=hook.fail_closed,
        )
        for hook in hooks
    ]


@click.command("list")
@click.option("--event", help="Only this event's hooks (canonical or Claude Code name).")
@cwd_option
@settings_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of hooks.")
def list_hooks(
    event: str | None, cwd: Path | None, settings_files: tuple[Path, ...], as_json: bool
) -> None:
    """List every registered hook: enabled or not, trusted or not, and where it comes from.

    Exits 1 when a settings file or hook entry is broken: what could be read is listed,
    then each error.
    """
    from relay.config.model import SCOPE_ORDER
    from relay.engine.system import HookSystem
    from relay.errors import InputError
    from relay.protocol.dialects import UnknownEventError, canonical_name
    from relay.protocol.display import visible

    canonical = None
    if event is not None:
        try:
            canonical = canonical_name(event)
        except UnknownEventError as exc:
            raise InputError(str(exc), source="--event") from None
    # Every scope's broken file set aside, not raised: list what can be read, then say why
    # the rest cannot.
    system = HookSystem(
        cwd=cwd or Path.cwd(),
        settings=settings_files,
        telemetry=False,
        isolate=frozenset(SCOPE_ORDER),
    )
    system.initialize()
    # Settings warnings only: untrusted hooks are listed as such, not skipped, here.
    for warning in system.settings.warnings:
        click.echo(visible(f"relay: warning: {warning}"), err=True)
    rows = hook_rows(system.registry, canonical)
    if as_json:
        click.echo(msgspec.json.format(msgspec.json.encode(rows), indent=2).decode())
    elif not rows:
        click.echo(f"no hooks registered for {canonical}" if canonical else "no hooks registered")
    else:
        for line in table(rows):
            click.echo(line)
        if not system.registry.enabled:
            click.echo("all hooks are off: hooksConfig.enabled is false in a settings file")
    problems = system.settings.problems()
    for problem in problems:
        click.echo(visible(f"relay: error: {problem}"), err=True)
    if problems:
        click.get_current_context().exit(1)


def table(rows: list[HookRow]) -> Iterable[str]:
    """Aligned text lines: an event heading, then one line per hook, then a count. Names,
    matchers, commands and files come from settings a project wrote: made visible."""
    from relay.protocol.display import visible

    header = ("NAME", "REGISTERED AS", "MATCHER", "SCOPE", "STATUS", "COMMAND", "SOURCE")
    cells = [
        tuple(
            visible(cell, one_line=True)
            for cell in (
                row.name,
                row.event,
                row.matcher or "*",
                row.scope,
                _status(row),
                _shorten(visible(row.command, one_line=True)),
                row.source,
            )
        )
        for row in rows
    ]
    widths = [max(len(line[column]) for line in [header, *cells]) for column in range(6)]

    def aligned(line: tuple[str, ...]) -> str:
        padded = [text.ljust(width) for text, width in zip(line, widths, strict=False)]
        return "  " + "  ".join([*padded, line[-1]]).rstrip()

    current = None
    for row, line in zip(rows, cells, strict=True):
        if row.canonical != current:
            if current is not None:
                yield ""
            current = row.canonical
            yield visible(row.canonical)
            yield aligned(header)
        yield aligned(line)
    counts = [f"{len(rows)} hook{'s' if len(rows) != 1 else ''}"]
    for status in ("disabled", "untrusted", "broken"):
        number = sum(status in _status(row) for row in rows)
        if number:
            counts.append(f"{number} {status}")
    yield ""
    yield counts[0] + (f" ({', '.join(counts[1:])})" if counts[1:] else "")
    if any(not row.trusted for row in rows):
        yield "untrusted hooks run once you review them and run `relay trust` in the project"


def _status(row: HookRow) -> str:
    if row.broken is not None:
        # It never runs; a failClosed one denies the events it matches instead.
        return "broken, denies" if row.failClosed and row.enabled else "broken"
    reasons = [
        word
        for word, applies in (("disabled", not row.enabled), ("untrusted", not row.trusted))
        if applies
    ]
    if reasons:
        return ", ".join(reasons)
    return "on" if row.runs else "off"


def _shorten(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= COMMAND_WIDTH else line[: COMMAND_WIDTH - 1] + "…"

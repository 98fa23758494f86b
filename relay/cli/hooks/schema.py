"""`relay hooks schema`: the JSON Schemas of event inputs, hook output and the result (spec/schemas/)."""

from __future__ import annotations

from pathlib import Path

import click

OUTPUT_FILE = "hook-output.json"
RESULT_FILE = "result.json"


@click.command("schema")
@click.argument("event", required=False)
@click.option("--output", "output", is_flag=True, help="The hook output schema (what hooks print).")
@click.option("--result", "result", is_flag=True, help="The merged result schema.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write every schema under DIR (as spec/schemas/) and print the paths.",
)
def schema(event: str | None, output: bool, result: bool, directory: Path | None) -> None:
    """Print a JSON Schema: EVENT's input, or with --output what a hook prints.

    With no argument, list the schemas. EVENT is a canonical name (BeforeTool) or a Claude
    Code name (PreToolUse). The hook output schema is the same for every event, so
    `EVENT --output` prints it too (after checking EVENT).
    """
    from relay.protocol.dialects import CLAUDE_PASS_THROUGH_MATCHERS
    from relay.protocol.schema import (
        all_schemas,
        event_schema,
        pass_through_schema,
        render,
        write_schemas,
    )

    if output and result:
        raise click.UsageError("--output and --result name different schemas: give one")
    if directory is not None:
        if event is not None or output or result:
            raise click.UsageError("--dir writes every schema: leave out EVENT, --output, --result")
        for path in write_schemas(directory):
            click.echo(str(path))
        return
    canonical = _schema_event(event) if event is not None else None
    schemas = all_schemas()
    if canonical is not None and canonical in CLAUDE_PASS_THROUGH_MATCHERS and not output:
        click.echo(render(pass_through_schema(canonical)), nl=False)
        return
    if output:
        click.echo(render(schemas[OUTPUT_FILE]), nl=False)
    elif result:
        click.echo(render(schemas[RESULT_FILE]), nl=False)
    elif canonical is not None:
        click.echo(render(event_schema(canonical)), nl=False)
    else:
        for line in _index(list(schemas)):
            click.echo(line)


def _schema_event(name: str) -> str:
    """The canonical event whose input schema `name` asks for; InputError if there is none."""
    from relay.errors import InputError
    from relay.protocol.dialects import UnknownEventError, canonical_name

    try:
        return canonical_name(name)
    except UnknownEventError as exc:
        raise InputError(str(exc), source="EVENT") from None


def _index(files: list[str]) -> list[str]:
    """One line per schema: how to print it, and its file under spec/schemas/."""
    from relay.protocol.dialects import CLAUDE_ALIASES

    entries: list[tuple[str, str, str]] = []
    for file in files:
        if file.startswith("events/"):
            event = Path(file).stem
            alias = CLAUDE_ALIASES.get(event)
            note = f"{event} event input" + (f" (Claude Code: {alias})" if alias else "")
            entries.append((f"relay hooks schema {event}", file, note))
        elif file == OUTPUT_FILE:
            entries.append(("relay hooks schema --output", file, "what a hook prints on stdout"))
        elif file == RESULT_FILE:
            entries.append(("relay hooks schema --result", file, "the merged result of an event"))
    width = max(len(command) for command, _, _ in entries)
    file_width = max(len(file) for _, file, _ in entries)
    return [
        "JSON Schemas (write them all with `relay hooks schema --dir DIR`):",
        *(
            f"  {command.ljust(width)}  {file.ljust(file_width)}  {note}"
            for command, file, note in entries
        ),
    ]

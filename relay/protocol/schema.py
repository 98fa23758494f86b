"""JSON Schema export of the protocol Structs (the source of spec/schemas/)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from relay.protocol.events import EVENT_TYPES, Event
from relay.protocol.output import AggregatedResult, HookOutput

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _schema(cls: type[msgspec.Struct], title: str, description: str) -> dict[str, Any]:
    (ref,), components = msgspec.json.schema_components([cls], ref_template="#/$defs/{name}")
    name = ref["$ref"].rsplit("/", 1)[1]
    root = dict(components.pop(name))
    root.pop("title", None)
    root.pop("description", None)  # the class's docstring: `description` says it here
    schema: dict[str, Any] = {
        "$schema": SCHEMA_DIALECT,
        "title": title,
        "description": description,
        **root,
    }
    if components:
        schema["$defs"] = dict(sorted(components.items()))
    return schema


def event_schema(name: str) -> dict[str, Any]:
    """The JSON Schema of one event's input, as a hook reads it on stdin."""
    cls: type[Event] = EVENT_TYPES[name]
    schema = _schema(cls, f"{name} event", (cls.__doc__ or "").strip())
    # Hooks may receive fields relay does not know yet (forward compatibility).
    schema["additionalProperties"] = True
    return schema


def pass_through_schema(name: str) -> dict[str, Any]:
    """The schema of a Claude Code event that relay passes through unchanged: the fields
    every event carries, and whatever Claude Code sends with it (it documents those)."""
    schema = _schema(
        Event,
        f"{name} event (Claude Code, passed through)",
        f"Claude Code's {name} event, passed to hooks as Claude Code sends it: the fields "
        "every event carries are listed; the others are Claude Code's (see its hooks "
        "reference).",
    )
    schema["additionalProperties"] = True
    return schema


def all_schemas() -> dict[str, dict[str, Any]]:
    """Every schema under its file name in spec/schemas/."""
    files = {f"events/{name}.json": event_schema(name) for name in EVENT_TYPES}
    files["hook-output.json"] = _schema(
        HookOutput,
        "Hook output",
        "What a hook prints on stdout: one JSON object, every field optional.",
    )
    files["result.json"] = _schema(
        AggregatedResult,
        "Aggregated result",
        "The merged answer for one event, as `relay hooks run` prints it.",
    )
    return files


def render(schema: dict[str, Any]) -> str:
    """A schema as stable, indented JSON text."""
    return msgspec.json.format(msgspec.json.encode(schema), indent=2).decode() + "\n"


def write_schemas(directory: Path) -> list[Path]:
    """Write every schema under `directory`; return the files written."""
    written = []
    for name, schema in all_schemas().items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(schema), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":  # python -m relay.protocol.schema [DIR]
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "spec/schemas")
    for path in write_schemas(target):
        print(path)

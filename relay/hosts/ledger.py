"""What `relay install` added to each host file, kept in relay's state for `relay uninstall`.

relay's hook entries and its MCP server entry say by their form that they are relay's (see
relay.hosts.install); what does not (a `mcp__relay` permission, an `enabledMcpjsonServers`
item, an object or array created to hold an entry, the file itself) is relay's only when
relay added it, and this ledger is where that is written down: uninstall takes out
exactly what install added, and deletes a file only if relay created it.

One JSON file per host file, `<state dir>/installed/<hash of the path>.json`; only relay
writes there (a repository cannot plant one).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

from relay.config.loader import FieldPath
from relay.config.paths import private_dir, state_dir
from relay.config.sockets import fnv1a64


class FileRecord(msgspec.Struct, kw_only=True):
    """What relay added to one host file."""

    file: str
    created: bool = False
    """relay created the file (it did not exist when relay first wrote to it)."""
    containers: list[list[str | int]] = msgspec.field(default_factory=list)
    """Objects and arrays relay created to hold its entries (removed once empty)."""
    items: list[tuple[list[str | int], str]] = msgspec.field(default_factory=list)
    """Array items relay added: (the array's path, the item)."""
    adopted: bool = False
    """relay's entries were in the file before this record began (an older relay, which kept
    none, wrote them): the containers they leave empty are taken to be relay's too."""

    def created_container(self, path: FieldPath) -> bool:
        """Whether relay created the object or array at `path` (or, for a record adopted from
        an older relay, may have)."""
        return self.adopted or list(path) in self.containers

    def added_item(self, path: FieldPath, item: str) -> bool:
        """Whether relay added `item` to the array at `path`."""
        return (list(path), item) in [(list(where), value) for where, value in self.items]

    def merged(
        self, *, created: bool, containers: list[FieldPath], items: list[tuple[FieldPath, str]]
    ) -> FileRecord:
        """This record with what one more edit added."""
        known = list(self.containers)
        known += [list(path) for path in containers if list(path) not in known]
        added = [(list(where), value) for where, value in self.items]
        added += [(list(path), item) for path, item in items if (list(path), item) not in added]
        return FileRecord(
            file=self.file,
            created=self.created or created,
            containers=known,
            items=added,
            adopted=self.adopted,
        )


_DECODER = msgspec.json.Decoder(FileRecord)


def record_path(file: Path, env: Mapping[str, str] | None = None) -> Path:
    """Where the record of `file` is kept."""
    name = f"{fnv1a64(str(file.absolute()).encode())}.json"
    return state_dir(env) / "installed" / name


def load(file: Path, env: Mapping[str, str] | None = None) -> FileRecord | None:
    """The record of `file`; None when relay has none (never installed, or an older relay)."""
    try:
        record = _DECODER.decode(record_path(file, env).read_bytes())
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return record if record.file == str(file.absolute()) else None


def save(record: FileRecord, env: Mapping[str, str] | None = None) -> None:
    """Write the record (0600, in a 0700 folder)."""
    path = record_path(Path(record.file), env)
    private_dir(path.parent, top=state_dir(env))
    staged = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as stream:
        stream.write(json.dumps(msgspec.to_builtins(record), indent=2) + "\n")
    os.replace(staged, path)


def forget(file: Path, env: Mapping[str, str] | None = None) -> None:
    """Drop the record of `file` (relay has taken out everything it added)."""
    record_path(file, env).unlink(missing_ok=True)

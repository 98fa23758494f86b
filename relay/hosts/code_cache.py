"""What relay read from a host's code, kept per file of that code.

Reading a host's build (Claude Code's native binary is hundreds of megabytes) takes
seconds; what was read is kept in a JSON file of relay's cache folder, under the code
file's path, size and modification time, and read again only when one of them changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import msgspec

from relay.config.paths import private_dir

T = TypeVar("T")


def read_cached(
    path: Path, cache: Path | None, read: Callable[[Path], T], kind: type[T], tag: str = ""
) -> T:
    """`read(path)`, or what it gave before for this very file (same path, size and
    modification time) as kept in the JSON file `cache`. `tag` tells apart readings of
    one file for different questions. Raises what `read` raises, and OSError when the file
    cannot be looked at. A cache that cannot be read or written costs only the reading."""
    info = path.stat()
    prefix = f"{tag}{path}|"
    key = f"{prefix}{info.st_size}|{info.st_mtime_ns}"
    entries: dict[str, object] = {}
    if cache is not None:
        try:
            loaded = json.loads(cache.read_bytes())
            entries = loaded if isinstance(loaded, dict) else {}
            return msgspec.convert(entries[key], kind)
        except (OSError, ValueError, KeyError, msgspec.ValidationError):
            pass  # no usable entry for this file: read the file
    value = read(path)
    if cache is not None:
        entries = {k: v for k, v in entries.items() if not k.startswith(prefix)}
        entries[key] = msgspec.to_builtins(value)
        try:
            private_dir(cache.parent, top=cache.parent)
            temporary = cache.with_name(f".{cache.name}.{os.getpid()}")
            temporary.write_bytes(json.dumps(entries).encode())
            os.replace(temporary, cache)
        except OSError:
            pass  # a cache that cannot be written only costs the next reader the same seconds
    return value

"""A session's transcript: JSON lines of output, injections and messages, bounded by rotation."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import IO

import msgspec

from relay.protocol.codec import utc_timestamp

MAX_BYTES = 64 * 1024 * 1024
"""When the transcript passes this size it is rotated: the old one is kept as `.1`."""


class Transcript:
    """Appends `{"time", "kind", "text"}` lines; never more than about twice MAX_BYTES on disk."""

    def __init__(self, path: Path, *, max_bytes: int = MAX_BYTES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._file: IO[bytes] | None = None
        self._size = 0

    def record(self, kind: str, text: str) -> None:
        """One entry (a batch of output lines is one entry, its lines joined by newlines)."""
        line = msgspec.json.encode({"time": utc_timestamp(), "kind": kind, "text": text}) + b"\n"
        if self._file is None or self._size + len(line) > self.max_bytes:
            self._open(
                rotate=self._file is not None or self._current_size() + len(line) > self.max_bytes
            )
        assert self._file is not None
        self._file.write(line)
        self._size += len(line)

    def close(self) -> None:
        """Flush and close."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _current_size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def _open(self, *, rotate: bool) -> None:
        self.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if rotate:
            with contextlib.suppress(OSError):
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._file = self.path.open("ab")
        self._size = self._current_size()

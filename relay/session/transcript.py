"""A session's transcript: JSON lines of output, injections and messages, bounded by rotation."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import msgspec

from relay.config.paths import PRIVATE_FILE_MODE, private_dir
from relay.protocol.codec import utc_timestamp

MAX_BYTES = 64 * 1024 * 1024
"""When the transcript passes this size it is rotated: the old one is kept as `.1`."""
FLUSH_BYTES = 1 << 20
"""Pending entries past this size are written at once, whatever the flush timer."""


class Transcript:
    """Appends `{"time", "kind", "text"}` lines; never more than about twice MAX_BYTES on disk.

    Entries are kept in memory and written in batches by `flush` (the session flushes a
    few times a second, off the output path, and at its end; a batch past FLUSH_BYTES is
    written at once), to a 0600 file. When a write fails (a full disk, a removed folder),
    `on_problem` is told once and the transcript stops there: the session goes on, and
    the lines already written stay whole (a batch written in part is cut off again).
    """

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = MAX_BYTES,
        on_problem: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.on_problem = on_problem
        self._fd: int | None = None
        self._size = 0
        self._failed = False
        self._pending: list[bytes] = []
        self._pending_size = 0

    def record(self, kind: str, text: str) -> None:
        """One entry (a batch of output lines is one entry, its lines joined by newlines)."""
        if self._failed:
            return
        line = msgspec.json.encode({"time": utc_timestamp(), "kind": kind, "text": text}) + b"\n"
        self._pending.append(line)
        self._pending_size += len(line)
        if self._pending_size >= FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write the entries recorded since the last flush."""
        if not self._pending or self._failed:
            return
        entries = self._pending
        batch = b"".join(entries)
        self._pending = []
        self._pending_size = 0
        try:
            if self._fd is None or self._size + len(batch) > self.max_bytes:
                self._open(
                    rotate=self._fd is not None
                    or self._current_size() + len(batch) > self.max_bytes
                )
            assert self._fd is not None
            try:
                self._append(self._fd, batch)
            except OSError:
                # The disk may hold part of the batch: as many whole entries as fit.
                for entry in entries:
                    self._append(self._fd, entry)
        except OSError as exc:
            self._failed = True
            self.close()
            if self.on_problem is not None:
                reason = exc.strerror or str(exc)
                self.on_problem(f"the transcript {self.path} cannot be written ({reason}); stopped")

    def close(self) -> None:
        """Write what is pending and close the file."""
        self.flush()
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _append(self, fd: int, line: bytes) -> None:
        """Write all of `line` (whole lines), or cut the file back to where it was and
        raise OSError."""
        written = 0
        try:
            while written < len(line):
                written += os.write(fd, line[written:])
        except OSError:
            if written:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, self._size)
            raise
        self._size += written

    def _current_size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def _open(self, *, rotate: bool) -> None:
        self.close()
        private_dir(self.path.parent)
        if rotate:
            with contextlib.suppress(OSError):
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self._fd = os.open(self.path, flags, PRIVATE_FILE_MODE)
        os.fchmod(self._fd, PRIVATE_FILE_MODE)
        self._size = os.fstat(self._fd).st_size

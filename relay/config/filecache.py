"""What relay derived from a file (parsed settings, a script's sha256), kept while the file
stays the same, so a resident server re-validates each call with a stat instead of a read.

A file is "the same" while its identity (device, inode, size, mtime, ctime) is: ctime
changes with every write and every metadata change and cannot be set back by a user, so
an edit that restores size and mtime (`touch -d`) is still seen. Timestamps are only as
fine as the kernel's clock tick, so a file changed within RACY_SECONDS of being read is
not cached at all (git's "racy clean" rule): an edit in the same tick as our read, with
the same size, would otherwise go unnoticed.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

Identity = tuple[int, int, int, int, int]
RACY_SECONDS = 2.0
MAX_ENTRIES = 4096


def identity_of(status: os.stat_result) -> Identity:
    """A file's identity: device, inode, size, mtime and ctime (ns)."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


class FileCache(Generic[T]):
    """`derive(bytes)` of files by path, recomputed when a file's identity changes. Thread-safe."""

    def __init__(self, derive: Callable[[Path, bytes], T], *, limit: int | None = None) -> None:
        """`limit`: read at most this many bytes and one more, so `derive` can tell a file
        that is too large without the whole of it being read."""
        self._derive = derive
        self._limit = -1 if limit is None else limit + 1
        self._entries: dict[str, tuple[Identity, T]] = {}
        self._lock = threading.Lock()

    def get(self, path: Path, status: os.stat_result | None = None) -> T:
        """The derived value of the file at `path`; OSError when it cannot be read.
        `status`: the file's stat, when the caller has just taken it."""
        key = str(path)
        with self._lock:
            cached = self._entries.get(key)
        if cached is not None and cached[0] == identity_of(status or os.stat(key)):
            return cached[1]  # a stat, no open: what a server pays per file per call
        with open(key, "rb") as stream:
            status = os.fstat(stream.fileno())
            identity = identity_of(status)
            if cached is not None and cached[0] == identity:
                return cached[1]
            value = self._derive(path, stream.read(self._limit))
        newest = max(status.st_mtime_ns, status.st_ctime_ns) / 1e9
        if time.time() - newest >= RACY_SECONDS:
            with self._lock:
                if len(self._entries) >= MAX_ENTRIES:
                    self._entries.clear()  # bounded: a server must not grow without end
                self._entries[key] = (identity, value)
        return value

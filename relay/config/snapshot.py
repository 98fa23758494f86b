"""Private copies of the checked files a trusted hook's script loads (DESIGN §7: no gap
between check and exec).

A trusted Python script imports modules beside it, or from folders of the project it
puts on its search path. Its interpreter opens them by path when it reaches the import,
long after the trust check hashed them: a file renamed over one in between would run
unchecked. So relay copies the modules the hook's fingerprint holds, from the bytes it
hashes, into a folder of its own state (private, content-addressed), and the pinned
script's imports from the project are served from there (relay.engine.interpreters).

A snapshot is named by the names and hashes it holds: made once from one read of each
file, whose hash must be the fingerprint's, then reused by every call that checks the
same files; the copies never change (Python caches their bytecode beside them, in the
snapshot, checked against the copy as usual).
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

from relay.config.paths import private_dir, state_dir

MODULE_SUFFIXES = (".py", ".pyc", ".so", ".js", ".cjs", ".mjs", ".json", ".node")
"""What Python's path finder loads from a folder (sources, bytecode, extension modules),
and Node's `require` (scripts, JSON, addons)."""
MAX_SNAPSHOTS = 256
"""Snapshots kept; older ones go when a new one is made (each is made again when needed)."""


class SnapshotError(Exception):
    """A file changed between its hash and its copy: the hook must not run now."""


def snapshot_of(root: Path, hashes: Mapping[str, str]) -> str:
    """The folder holding the checked copies of the project's modules among `hashes`
    (path relative to root -> sha256 from the trusted fingerprint), laid out as in the
    project; made on first use. Raises SnapshotError or OSError."""
    chosen = modules_among(hashes)
    if not chosen:
        return _no_snapshot(*_state_values())  # a folder that need not exist serves nothing
    key = hashlib.sha256(msgspec.json.encode(chosen)).hexdigest()[:32]
    top = _state_folder() / "pinned"
    folder = top / key
    if os.path.isdir(folder):
        return str(folder)
    import tempfile  # only when a snapshot is made

    private_dir(top)
    building = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=top))
    try:
        for name, digest in chosen:
            _copy_checked(Path(root, name), building / name, digest)
        try:
            os.rename(building, folder)
        except OSError:
            if not os.path.isdir(folder):
                raise
            import shutil

            shutil.rmtree(building, ignore_errors=True)  # another call made it first
    except BaseException:
        import shutil

        shutil.rmtree(building, ignore_errors=True)
        raise
    _forget_old(top)
    return str(folder)


def modules_among(hashes: Mapping[str, str]) -> list[tuple[str, str]]:
    """The files among `hashes` a snapshot copies (name, sha256), sorted: none, and the
    snapshot is a folder that need not exist, named without looking at the filesystem."""
    return sorted(
        (name, digest)
        for name, digest in hashes.items()
        if digest and name.endswith(MODULE_SUFFIXES)
    )


def _state_folder() -> Path:
    """state_dir() of this process, from the variables it depends on (kept per their values:
    a server takes a snapshot for every call of a trusted hook)."""
    values = {
        name: value for name, value in zip(_STATE_VARIABLES, _state_values(), strict=True) if value
    }
    return state_dir(values) if "HOME" in values else state_dir()


def _state_values() -> tuple[str | None, ...]:
    return tuple(map(os.environ.get, _STATE_VARIABLES))


@functools.lru_cache(maxsize=16)
def _no_snapshot(*values: str | None) -> str:
    """The snapshot folder of no file, for these values of _STATE_VARIABLES."""
    key = hashlib.sha256(msgspec.json.encode([])).hexdigest()[:32]
    return str(_state_folder() / "pinned" / key)


_STATE_VARIABLES = ("RELAY_HOME", "HOME", "XDG_STATE_HOME")


def _copy_checked(source: Path, target: Path, digest: str) -> None:
    """Copy one file from a single read, checking its hash against the fingerprint's (the
    copy is in the folder being built: a mismatch leaves nothing behind)."""
    import stat

    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    # O_NONBLOCK: a FIFO put there since the check must not hang relay.
    descriptor = os.open(source, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise SnapshotError(f"{source} is no longer a regular file")
        written = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o400)
        hashed = hashlib.sha256()
        with os.fdopen(written, "wb") as stream:
            while chunk := os.read(descriptor, 1 << 20):
                hashed.update(chunk)
                stream.write(chunk)
    finally:
        os.close(descriptor)
    if hashed.hexdigest() != digest:
        raise SnapshotError(f"{source} changed while it was checked")


def _forget_old(top: Path) -> None:
    """Keep at most MAX_SNAPSHOTS snapshots (the least recently made go), and no folder
    left half-built by a process that died an hour ago or more."""
    import shutil
    import time

    try:
        listed = list(os.scandir(top))
        ages = {entry.path: entry.stat(follow_symlinks=False).st_mtime for entry in listed}
    except OSError:
        return
    entries = [entry for entry in listed if not entry.name.startswith(".")]
    stale = [entry for entry in listed if entry.name.startswith(".")]
    for entry in stale:
        if time.time() - ages[entry.path] > 3600:
            shutil.rmtree(entry.path, ignore_errors=True)
    entries.sort(key=lambda entry: ages[entry.path])
    for entry in entries[: max(0, len(entries) - MAX_SNAPSHOTS)]:
        shutil.rmtree(entry.path, ignore_errors=True)

"""The git repository a project belongs to, read from the files git leaves (never by running
git: a host's hook pays for this on every event), for the team a project is in by default.

A checkout holds `.git`: the repository's own folder, or a file `gitdir: PATH` naming it:
a linked worktree's admin folder (`<common>/worktrees/NAME`, whose `commondir` file names
the repository's common folder and whose `gitdir` file names the checkout's `.git` back),
a submodule's folder, or one made with `--separate-git-dir`. Every one of these files is
untrusted input (an unpacked archive may hold any `.git`): read only when it is a regular
file, at most a few KiB, never followed more than one step, and a linked worktree counts
only when the repository names it back, so a `.git` file cannot claim another project's
repository.
"""

from __future__ import annotations

import os
import stat

import msgspec

from relay.config.paths import shared_temporary

MAX_POINTER_BYTES = 8192
"""A `.git`, `commondir` or `gitdir` file longer than this is not git's (a path is at most 4 KiB)."""


class Repository(msgspec.Struct, kw_only=True, frozen=True):
    """Where a project sits in its git repository."""

    checkout: str
    """The folder holding `.git` (the nearest one at or above the project)."""
    common: str
    """The repository's git common folder, shared by all its worktrees."""
    main: str | None
    """The main worktree's root when git's layout tells it (the common folder is
    `<main>/.git`); None for a bare repository or a git folder elsewhere."""


def find_repository(project: str) -> Repository | None:
    """The repository of `project` (an absolute path), or None when it is in none that can
    be read and trusted."""
    try:
        checkout = _nearest_checkout(project)
        if checkout is None:
            return None
        dot_git = os.path.join(checkout, ".git")
        if os.path.isdir(dot_git):
            return Repository(checkout=checkout, common=dot_git, main=checkout)
        return _linked(checkout, dot_git)
    except (OSError, ValueError):  # an unreadable folder, a NUL in a path: no repository
        return None


def _nearest_checkout(project: str) -> str | None:
    here = project
    while True:
        # Not a shared temporary folder: Codex's sandbox makes an empty /tmp/.git.
        if os.path.lexists(os.path.join(here, ".git")) and not shared_temporary(here):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _linked(checkout: str, dot_git: str) -> Repository | None:
    """A checkout whose `.git` is a file naming its git folder."""
    gitdir = _pointer(dot_git, prefix=b"gitdir: ")
    if gitdir is None or not os.path.isdir(gitdir):
        return None
    gitdir = os.path.realpath(gitdir)
    commondir = os.path.join(gitdir, "commondir")
    common = _pointer(commondir, prefix=b"")
    if common is None and os.path.lexists(commondir):
        return None  # there, but not a file git wrote
    if common is None:
        # The checkout's own git folder (a submodule's, a --separate-git-dir one): the
        # repository is shared only with a bare folder kept inside the checkout (the
        # `.bare` layout), which no other project can point at.
        if os.path.dirname(gitdir) != os.path.realpath(checkout):
            return None
        return Repository(checkout=checkout, common=gitdir, main=None)
    common = os.path.realpath(common)
    # A linked worktree: its admin folder lies in the common folder, which names it back.
    if os.path.dirname(gitdir) != os.path.join(common, "worktrees") or not os.path.isdir(common):
        return None
    back = _pointer(os.path.join(gitdir, "gitdir"), prefix=b"")
    if back is None or os.path.realpath(back) != os.path.realpath(dot_git):
        return None
    main = os.path.dirname(common) if os.path.basename(common) == ".git" else None
    return Repository(checkout=checkout, common=common, main=main)


def _pointer(path: str, *, prefix: bytes) -> str | None:
    """The path a small git file holds (after `prefix`, on its first line), relative to the
    file's folder; None if the file is not a regular file of that shape."""
    data = _read_small(path)
    if data is None or not data.startswith(prefix) or b"\0" in data:
        return None
    line = data[len(prefix) :].split(b"\n", 1)[0].rstrip(b"\r \t")
    if not line:
        return None
    return os.path.join(os.path.dirname(path), os.fsdecode(line))


def _read_small(path: str) -> bytes | None:
    """A regular file's bytes, or None when it is missing, not a regular file (a FIFO would
    block, /dev/zero never ends) or longer than MAX_POINTER_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while size <= MAX_POINTER_BYTES:
            chunk = os.read(fd, MAX_POINTER_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks) if size <= MAX_POINTER_BYTES else None

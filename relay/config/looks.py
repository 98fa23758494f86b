"""What a trust check looked at on the filesystem, so that a resident server can tell
whether the same check would give the same verdict now (relay serve keeps trust checks:
relay.engine.registry).

A project hook's verdict depends on more than the files it reaches: where relay looked
for what it loads and found nothing, which names a folder held, what a glob matched,
where a symbolic link led, which trust store files existed. Every such look made by
relay.config.reach, relay.config.trust and relay.engine.interpreters goes through `look`
(a function of the filesystem and its arguments, with a comparable answer); while a
check runs `recording()`, each look is recorded with the answer it gave. `Looks.same`
makes every recorded look again and compares: the kept verdict stands only when every
answer is the same.

What cannot be looked again cheaply (a `git ls-files` of the tree) makes the record
unkeepable, and so does a file whose content was read and that changed within the racy
window (filecache.RACY_SECONDS: its identity cannot stand for its bytes).
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from relay.config.filecache import RACY_SECONDS

T = TypeVar("T")
Answer = object
_RECORDER: ContextVar[Looks | None] = ContextVar("relay_looks", default=None)
MAX_LOOKS = 4096
"""A check that looks more than this is not kept (checking it again would cost as much)."""


class Looks:
    """The looks one check made, each with its answer."""

    __slots__ = ("_seen", "unkeepable")

    def __init__(self) -> None:
        self._seen: dict[tuple[Callable[..., object], tuple[object, ...]], object] = {}
        self.unkeepable: str | None = None
        """Why the check cannot be kept (None: it can)."""

    def __len__(self) -> int:
        return len(self._seen)

    def add(
        self, function: Callable[..., object], args: tuple[object, ...], answer: object
    ) -> None:
        """Record one look and its answer."""
        key = (function, args)
        earlier = self._seen.get(key, _NONE)
        if earlier is _NONE:
            if len(self._seen) >= MAX_LOOKS:
                self.refuse(f"it looks at more than {MAX_LOOKS} things")
            self._seen[key] = answer
        elif earlier != answer:
            self.refuse("what it looked at changed while it was checked")

    def prune(self) -> None:
        """Leave out the looks another recorded look answers for: a path `identity` found
        (a stat that succeeded, with its type) exists, and is a folder or not."""
        for (function, args), answer in list(self._seen.items()):
            if function is identity and isinstance(answer, tuple):
                if self._seen.get((exists, args)) is True:
                    del self._seen[(exists, args)]
                if self._seen.get((is_folder, args), _NONE) == stat.S_ISDIR(answer[0]):
                    del self._seen[(is_folder, args)]

    def refuse(self, why: str) -> None:
        """This check cannot be kept: `why`."""
        if self.unkeepable is None:
            self.unkeepable = why

    def same(self) -> bool:
        """Whether every look gives the answer it gave (and the record can be kept)."""
        if self.unkeepable is not None:
            return False
        try:
            for (function, args), answer in self._seen.items():
                if function(*args) != answer:
                    return False
        except Exception:  # a look is not meant to fail; if one does, the check is made again
            return False
        return True


_NONE = object()


@contextmanager
def recording() -> Iterator[Looks]:
    """Record the looks made in this context (this thread or task) until it ends."""
    looks = Looks()
    token = _RECORDER.set(looks)
    try:
        yield looks
    finally:
        _RECORDER.reset(token)
        looks.prune()


def look(function: Callable[..., T], *args: object) -> T:
    """`function(*args)`, recorded where a check is being recorded. `function` looks at
    the filesystem only, never raises, and gives an answer that compares equal when what
    it looked at is the same."""
    answer = function(*args)
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.add(function, args, answer)
    return answer


def noted(function: Callable[..., object], args: tuple[object, ...], answer: object) -> None:
    """Record a look made otherwise (`function(*args)` would give `answer` now: the fstat
    of a file opened and read, for `identity`). A file read that changed within the racy
    window makes the record unkeepable: its identity cannot stand for its bytes."""
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.add(function, args, answer)
        if function is identity:
            _refuse_racy(recorder, answer)


def unkeepable(why: str) -> None:
    """The check being recorded made a look that cannot be made again cheaply."""
    recorder = _RECORDER.get()
    if recorder is not None:
        recorder.refuse(why)


# ---- the looks --------------------------------------------------------------------------

FileAnswer = tuple[int, int, int, int, int, int] | str


def identity(path: str) -> FileAnswer:
    """What a path leads to (symbolic links followed): its type and mode, device, inode,
    size, mtime and ctime; or why it cannot be stat-ed."""
    try:
        status = os.stat(path)
    except (OSError, ValueError) as exc:
        return failure(exc)
    return of_status(status)


def link_identity(path: str) -> FileAnswer:
    """`identity` of the path itself (a symbolic link is not followed)."""
    try:
        status = os.lstat(path)
    except (OSError, ValueError) as exc:
        return failure(exc)
    return of_status(status)


def of_status(status: os.stat_result) -> FileAnswer:
    """`identity`'s answer for a stat taken otherwise."""
    return (
        status.st_mode,
        status.st_dev,
        status.st_ino,
        status.st_size,
        status.st_mtime_ns,
        status.st_ctime_ns,
    )


def _refuse_racy(recorder: Looks, answer: object) -> None:
    if isinstance(answer, tuple) and stat.S_ISREG(answer[0]):
        newest = max(answer[4], answer[5]) / 1e9
        if time.time() - newest < RACY_SECONDS:
            recorder.refuse("a file it read changed within the racy window")


def exists(path: str) -> bool:
    """Whether anything is at `path` (a dangling symbolic link counts)."""
    try:
        return os.path.lexists(path)
    except (OSError, ValueError):  # a name too long, or with a NUL byte
        return False


def is_folder(path: str) -> bool:
    """Whether `path` leads to a folder (symbolic links followed)."""
    try:
        return os.path.isdir(path)
    except (OSError, ValueError):
        return False


def is_link(path: str) -> bool:
    """Whether `path` is a symbolic link."""
    try:
        return os.path.islink(path)
    except (OSError, ValueError):
        return False


def resolved(path: str) -> str | None:
    """Where `path` leads, every symbolic link resolved (Path.resolve's answer); None for
    a loop or a bad name."""
    known = _kernels_path(path)
    if known is not None:
        return known
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return None
    try:
        os.stat(real)  # as Path.resolve: a loop is an error, a missing path is not
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
    except ValueError:
        return None
    return real


def real_path(path: str) -> str:
    """os.path.realpath of `path` (it does not fail: what cannot be resolved is kept)."""
    known = _kernels_path(path)
    if known is not None:
        return known
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return path


def _kernels_path(path: str) -> str | None:
    """Where an existing `path` leads, as the kernel resolved it opening it (a few system
    calls, where os.path.realpath makes one per component in Python); None when it cannot
    be opened or /proc cannot say (os.path.realpath answers then)."""
    try:
        descriptor = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (OSError, ValueError, AttributeError):
        return None
    try:
        real = os.readlink(f"/proc/self/fd/{descriptor}")
    except OSError:
        return None
    finally:
        os.close(descriptor)
    if not real.startswith("/") or real.endswith(" (deleted)"):
        return None  # not a path (a pseudo-file), or one /proc marks: ask realpath
    return real


def link_target(path: str) -> str | None:
    """What a symbolic link says (None: not a link, or unreadable)."""
    try:
        return os.readlink(path)
    except (OSError, ValueError):
        return None


def listing(folder: str, follow: bool) -> tuple[tuple[str, bool], ...] | str:
    """A folder's entries, sorted, each with whether it is a folder (`follow`: a symbolic
    link to a folder counts as one); or why it cannot be listed."""
    try:
        with os.scandir(folder) as entries:
            listed = []
            for entry in entries:
                try:
                    is_dir = entry.is_dir(follow_symlinks=follow)
                except OSError:
                    is_dir = False
                listed.append((entry.name, is_dir))
    except (OSError, ValueError) as exc:
        return failure(exc)
    return tuple(sorted(listed))


def names(folder: str) -> tuple[str, ...] | str:
    """os.listdir of a folder, sorted; or why it cannot be listed."""
    try:
        return tuple(sorted(os.listdir(folder)))
    except (OSError, ValueError) as exc:
        return failure(exc)


def failure(exc: BaseException) -> str:
    """`identity`'s answer for a path that cannot be stat-ed or opened (`exc`)."""
    if isinstance(exc, OSError):
        return f"errno {exc.errno}"
    return type(exc).__name__

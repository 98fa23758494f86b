"""Which project a folder is, by something every clone of it shares rather than its path
(spec/memory.md, "Which project"): the memories of a project follow it to another path,
another machine, a worktree.

A folder in a git repository is the project of that repository's first commit: the root
of the first-parent chain of the repository's HEAD (the main worktree's, so every
worktree of a repository agrees; with several root commits, the one its main line
started from). The key is `git:<commit>`, with `/<folder>` for a project root below the
checkout's top (a `.relay/` in a subfolder) and `#<name>` when `.relay/project-name`
names one (a fork that wants to be a project of its own).

That commit is read with git, once per repository and machine: the answer is kept in the
repository's git folder (`relay-project`), signed with a key that only this machine's
state holds, so another process, or the same repository moved, reads one small file. A
`.git` is untrusted input (an unpacked archive may hold anything): the commit is checked
against its hash and must have no parent, so a repository can claim only a history it
holds, and a name in `.relay/project-name` only splits that history's project in two,
never joins another.

Where no such commit can be read (not a git repository, a repository with no commit yet,
a shallow clone, git missing), the key is the project's path, as it was before identities
travelled (the main checkout's for a worktree); those memories move to the travelling key
once one can be read (`legacy`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
import subprocess
import threading

import msgspec

from relay.config.paths import PRIVATE_FILE_MODE, PROJECT_DIR_NAME, private_dir, state_dir
from relay.services.messaging.repository import Repository, find_repository

GIT_SECONDS = 10.0
"""How long reading a repository's first commit may take (once per repository and machine)."""
MARKER_NAME = "relay-project"
"""The file in a repository's git common folder that keeps its first commit, signed."""
KEY_FILE = "project-key"
"""This machine's signing key for markers, in the state folder (0600)."""
NAME_FILE = "project-name"
"""`.relay/project-name`: a name that makes a checkout a project of its own within its history."""
PREFIX = "git:"
"""How every travelling key starts; a path key starts with `/`."""
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
TRAVELLING_KEY = re.compile(
    r"git:(?:[0-9a-f]{40}|[0-9a-f]{64})(?:/[^\x00-\x1f#]{1,1024})?(?:#[A-Za-z0-9][A-Za-z0-9_.-]{0,63})?\Z"
)
"""A key another machine may send (team memory): a travelling one, never a path."""
_COMMIT = re.compile(rb"[0-9a-f]{40}\Z|[0-9a-f]{64}\Z")
_MARKER_VERSION = b"relay-project 1"
_SMALL = 4096


class ProjectIdentity(msgspec.Struct, kw_only=True, frozen=True):
    """What project a folder is, for memories."""

    key: str
    """What the project's memories are stored under: `git:…` (shared by every clone and
    worktree), or the project's path when nothing shared can be read (`why`)."""
    root: str
    """The project's root folder, as given (made absolute)."""
    why: str | None = None
    """Why the key is a path (None: it travels)."""
    legacy: tuple[str, ...] = ()
    """Path keys this project's memories may be stored under from before (its root, the
    main checkout and every worktree of its repository, with and without symbolic links
    resolved): moved to `key` once it travels."""
    note: str | None = None
    """A problem with `.relay/project-name` (ignored), for the user to fix."""

    @property
    def travels(self) -> bool:
        """Whether the key is shared by the project's clones (not its path)."""
        return self.why is None


class _Commit(msgspec.Struct, frozen=True):
    commit: str | None
    why: str | None


_lock = threading.Lock()
_commits: dict[tuple[str, int, int, bool], _Commit] = {}
"""The first commit of each repository this process has read, by its git common folder
(path, device, inode, shallow or not)."""


def project_identity(root: str | os.PathLike[str]) -> ProjectIdentity:
    """The identity of the project whose root folder is `root` (find_project_root's answer).
    Cheap after the first call for a repository in a process: a few stats and small reads."""
    path = os.path.abspath(root)
    found = find_repository(path)
    if found is None:
        return ProjectIdentity(
            key=_real(path), root=path, why="not in a git repository", legacy=_with_real(path)
        )
    inside = os.path.relpath(path, found.checkout)
    places = _checkouts(found)
    legacy = _with_real(path, *(os.path.normpath(os.path.join(place, inside)) for place in places))
    home = _real(os.path.normpath(os.path.join(found.main, inside)) if found.main else path)
    first = _first_commit(found.common)
    if first.commit is None:
        return ProjectIdentity(key=home, root=path, why=first.why, legacy=legacy)
    key = PREFIX + first.commit
    if inside != ".":
        key += "/" + inside.replace(os.sep, "/")
    name, note = _project_name(path)
    if name is not None:
        key += "#" + name
    if TRAVELLING_KEY.match(key) is None:  # a folder name with control characters
        return ProjectIdentity(
            key=home, root=path, why="the folder's name cannot travel", legacy=legacy
        )
    return ProjectIdentity(key=key, root=path, legacy=legacy, note=note)


def _real(path: str) -> str:
    """`path` with symbolic links resolved (a path key names the folder, not a way to it)."""
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return path


def _with_real(*paths: str) -> tuple[str, ...]:
    """The paths and their symbolic links resolved (an older relay stored either)."""
    out: dict[str, None] = {}
    for path in paths:
        out[path] = None
        try:
            out[os.path.realpath(path)] = None
        except (OSError, ValueError):
            continue
    return tuple(out)


def _checkouts(found: Repository) -> list[str]:
    """The repository's checkouts: this one, the main one, and every linked worktree that
    names the repository back (a worktree list in an untrusted `.git` cannot claim a
    folder of another repository)."""
    places = [found.checkout]
    if found.main is not None:
        places.append(found.main)
    try:
        names = sorted(os.listdir(os.path.join(found.common, "worktrees")))
    except (OSError, ValueError):
        names = []
    for name in names[:256]:
        data = _read_small(os.path.join(found.common, "worktrees", name, "gitdir"))
        if data is None:
            continue
        dot_git = os.fsdecode(data.split(b"\n", 1)[0].strip())
        if not os.path.isabs(dot_git) or "\0" in dot_git:
            continue
        checkout = os.path.dirname(dot_git)
        other = find_repository(checkout)
        if (
            other is not None
            and _same(other.checkout, checkout)
            and _same(other.common, found.common)
        ):
            places.append(checkout)
    return places


def _same(one: str, other: str) -> bool:
    return one == other or _real(one) == _real(other)


def _project_name(root: str) -> tuple[str | None, str | None]:
    """The name in `.relay/project-name`, and a note when the file is there but unusable."""
    path = os.path.join(root, PROJECT_DIR_NAME, NAME_FILE)
    if not os.path.lexists(path):
        return None, None
    data = _read_small(path)
    text = data.decode("utf-8", "replace").strip() if data is not None else ""
    if NAME_PATTERN.match(text) is None:
        return None, (
            f"{path}: ignored: a project name is 1 to 64 letters, digits, '.', '_' or '-' "
            "on one line"
        )
    return text, None


def _first_commit(common: str) -> _Commit:
    """The repository's first commit, from this process's memory, the signed marker in its
    git folder, or git (then kept in both)."""
    common = os.path.realpath(common)
    shallow = os.path.lexists(os.path.join(common, "shallow"))
    try:
        info = os.stat(common)
    except (OSError, ValueError):
        return _Commit(None, "its git folder cannot be read")
    # A repository made again at the same path, or unshallowed, is asked again.
    stamp = (common, info.st_dev, info.st_ino, shallow)
    with _lock:
        known = _commits.get(stamp)
    if known is not None:
        return known
    if shallow:
        found = _Commit(
            None, "a shallow clone: its first commit is not here (git fetch --unshallow)"
        )
    else:
        key = _signing_key()
        found = _Commit(_read_marker(common, key), None)
        if found.commit is None and os.path.lexists(
            os.path.join(common, "objects", "info", "alternates")
        ):
            # Objects borrowed from another repository on this disk: a hostile `.git`
            # could borrow another project's first commit, real content and all.
            found = _Commit(None, "it borrows objects from another repository (alternates)")
        elif found.commit is None:
            found = _ask_git(common)
            if found.commit is not None and key is not None:
                _write_marker(common, key, found.commit)
    with _lock:
        _commits[stamp] = found
    return found


def _ask_git(common: str) -> _Commit:
    """The root of the first-parent chain of the repository's HEAD, checked: its object
    hashes to its name and names no parent (grafts and replacements cannot fake one)."""
    environment = {
        **os.environ,
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
        "GIT_NO_LAZY_FETCH": "1",
    }
    for name in (
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    ):
        environment.pop(name, None)
    # The repository's own config is untrusted: what could run a program is overridden
    # (the command line wins), and no transport is allowed, so a partial clone's missing
    # object is never fetched through a remote (or an ssh command) it names.
    base = [
        "git",
        "--no-pager",
        "--git-dir",
        common,
        "-c",
        "core.fsmonitor=false",
        "-c",
        "protocol.allow=never",
        "-c",
        "core.sshCommand=false",
    ]
    try:
        listed = subprocess.run(
            [*base, "rev-list", "--first-parent", "--max-parents=0", "HEAD", "--"],
            capture_output=True,
            timeout=GIT_SECONDS,
            env=environment,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        lines = listed.stdout.split()
        if listed.returncode != 0 or len(lines) != 1 or _COMMIT.match(lines[0]) is None:
            first = listed.stderr.decode("utf-8", "replace").strip().splitlines()
            return _Commit(
                None,
                "git cannot read its first commit"
                + (f" ({first[0]})" if first else " (no commit yet)"),
            )
        commit = lines[0].decode()
        shown = subprocess.run(
            [*base, "cat-file", "commit", commit],
            capture_output=True,
            timeout=GIT_SECONDS,
            env=environment,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        return _Commit(None, "git is not installed")
    except (OSError, subprocess.SubprocessError) as exc:
        return _Commit(None, f"git cannot read its first commit ({exc})")
    body = shown.stdout
    digest = hashlib.sha1 if len(commit) == 40 else hashlib.sha256
    named = digest(b"commit %d\0" % len(body) + body).hexdigest()
    header = body.split(b"\n\n", 1)[0]
    if shown.returncode != 0 or named != commit or b"\nparent " in b"\n" + header:
        return _Commit(None, "its first commit does not match its hash")
    return _Commit(commit, None)


def _signature(key: bytes, common: str, commit: str) -> str:
    message = b"\0".join([_MARKER_VERSION, os.fsencode(common), commit.encode()])
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _read_marker(common: str, key: bytes | None) -> str | None:
    """The first commit a marker this machine signed for this git folder holds, else None."""
    if key is None:
        return None
    data = _read_small(os.path.join(common, MARKER_NAME))
    if data is None:
        return None
    parts = data.strip().split(b" ")
    if len(parts) != 4 or b" ".join(parts[:2]) != _MARKER_VERSION:
        return None
    commit, signature = parts[2], parts[3]
    if _COMMIT.match(commit) is None:
        return None
    expected = _signature(key, common, commit.decode())
    if not hmac.compare_digest(expected.encode(), signature):
        return None
    return commit.decode()


def _write_marker(common: str, key: bytes, commit: str) -> None:
    """Keep the first commit in the git folder (best effort: a read-only repository is
    asked again by the next process)."""
    line = b" ".join([_MARKER_VERSION, commit.encode(), _signature(key, common, commit).encode()])
    final = os.path.join(common, MARKER_NAME)
    temporary = f"{final}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, line + b"\n")
        finally:
            os.close(fd)
        os.replace(temporary, final)
    except OSError:
        try:
            os.unlink(temporary)
        except OSError:
            return


def _signing_key() -> bytes | None:
    """This machine's key for markers (made on first use), or None when the state folder
    cannot hold one."""
    path = state_dir() / KEY_FILE
    data = _read_small(str(path))
    if data is not None and len(data) == 32:
        return data
    try:
        private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except FileExistsError:
        # Another process made it a moment ago (or it is not 32 bytes: then no marker).
        data = _read_small(str(path))
        return data if data is not None and len(data) == 32 else None
    except OSError:
        return None
    key = secrets.token_bytes(32)
    try:
        os.write(fd, key)
    except OSError:
        return None
    finally:
        os.close(fd)
    return key


def _read_small(path: str) -> bytes | None:
    """A regular file's bytes when it is at most a few KiB (untrusted files: never a FIFO,
    never a device, never followed through a symbolic link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _SMALL:
            return None
        data = os.read(fd, _SMALL + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= _SMALL else None

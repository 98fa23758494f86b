"""Find the settings files that apply to a working directory and load them (DESIGN §5)."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import msgspec

from relay.config.filecache import RACY_SECONDS, FileCache, identity_of
from relay.config.loader import (
    MAX_SETTINGS_BYTES,
    SettingsReport,
    check_settings,
)
from relay.config.model import (
    SCOPE_ORDER,
    TRUST_REQUIRED,
    BrokenHook,
    ConfigWarning,
    LoadedSettings,
    Scope,
)
from relay.config.paths import (
    PROJECT_DIR_NAME,
    cached_path,
    child,
    project_root_and_folder,
    relay_home,
    state_file,
    system_settings_path,
)
from relay.config.validated import load_remembered
from relay.errors import SettingsError


class BrokenSettings(msgspec.Struct, kw_only=True):
    """A settings file that exists but cannot be used: none of its hooks run."""

    file: str
    scope: Scope
    error: SettingsError
    text: bytes = b""
    """Its bytes, when readable: to tell which events it meant to hook (see `mentions`)."""

    def mentions(self, *names: str) -> bool:
        """Whether the file's text names any of these events (it probably hooked them)."""
        return any(f'"{name}"'.encode() in self.text for name in names)


class SettingsSet(msgspec.Struct, kw_only=True):
    """Every settings file that applies, loaded, in merge order."""

    root: Path | None
    """The project root (paths.find_project_root), if any."""
    files: list[LoadedSettings]
    """System, user, --settings files in the order given, project, project-local."""
    broken: list[BrokenSettings] = msgspec.field(default_factory=list)
    """Files that could not be used (see `load_settings`): their hooks do not run."""
    witness: Witness | None = None
    """What the stats behind this set told (`settings_witness`), None when that cannot
    stand for its contents (a file changed within RACY_SECONDS, a file in error)."""

    @property
    def warnings(self) -> list[ConfigWarning]:
        """The warnings of every file, in merge order."""
        return [warning for loaded in self.files for warning in loaded.warnings]

    @property
    def broken_hooks(self) -> list[tuple[LoadedSettings, BrokenHook]]:
        """The hooks left out of the files in use because of an error, with their file."""
        return [(loaded, hook) for loaded in self.files for hook in loaded.broken]

    def problems(self) -> list[str]:
        """One line per broken file and per broken hook: what is wrong, where, and what
        still runs."""
        lines = [
            f"{broken.error}; none of the hooks in {broken.file} run until it is fixed "
            "(the other settings files' hooks do)"
            for broken in self.broken
        ]
        lines.extend(hook.describe() for _, hook in self.broken_hooks)
        return lines


S = TypeVar("S", bound=msgspec.Struct)

Witness = tuple[object, ...]
"""The project root found, whether it holds `.relay/`, and every settings file looked for
with its identity (filecache.identity_of; None where there is none): equal witnesses mean
the same files with the same contents."""

SETTINGS_VARIABLE = "RELAY_SETTINGS"
"""Extra settings files (os.pathsep-separated), as if given with --settings first. `relay
run` sets it for the agent, so hooks the wrapped agent runs see the session's settings."""

SettingsCache = FileCache[SettingsReport]
"""Parsed settings files kept between calls (the server's), re-validated by a stat."""


def settings_cache() -> SettingsCache:
    """An empty cache of parsed settings files."""
    return FileCache(
        lambda path, data: check_settings(data, file=str(path), scope="user"),
        limit=MAX_SETTINGS_BYTES,
    )


def settings_from_environment(env: Mapping[str, str] | None = None) -> list[Path]:
    """The files named by $RELAY_SETTINGS."""
    value = (os.environ if env is None else env).get(SETTINGS_VARIABLE, "")
    return [Path(part) for part in value.split(os.pathsep) if part]


def discover(
    cwd: Path | None = None, extra: Sequence[Path] = (), *, env: Mapping[str, str] | None = None
) -> list[tuple[Path, Scope]]:
    """The settings files that exist for `cwd`, with their scopes, in merge order; raise
    SettingsError for a named file that is missing or a folder that cannot be searched."""
    found: list[tuple[Path, Scope]] = []
    for path, scope, error, _ in _candidates(cwd, extra, env)[1]:
        if error is not None:
            raise error
        found.append((path, scope))
    return found


def load_settings(
    cwd: Path | None = None,
    extra: Sequence[Path] = (),
    *,
    env: Mapping[str, str] | None = None,
    cache: SettingsCache | None = None,
    isolate: Collection[str] = TRUST_REQUIRED,
) -> SettingsSet:
    """Discover and load every settings file for `cwd`.

    A file of a scope in `isolate` that cannot be used is set aside in `broken` (its
    hooks do not run; the others do), and a hook entry of it with an error in the file's
    own `broken` list (that hook does not run, or denies if failClosed): by default the
    project's files, because a cloned repository must never switch off the user's own
    hooks (DESIGN §5). Any error in a file of another scope raises SettingsError; hosts'
    calls isolate every scope and report instead.
    """
    start = Path(os.getcwd()) if cwd is None else cwd
    files: list[LoadedSettings] = []
    broken: list[BrokenSettings] = []
    root, candidates, witness = _candidates(start, extra, env)
    for path, scope, error, status in candidates:
        try:
            if error is not None:
                raise error
            loaded = _load(path, scope, cache, env, status)
            if loaded.broken and scope not in isolate:
                raise loaded.broken[0].errors[0]  # not set aside: an error, as for the file
            files.append(loaded)
        except SettingsError as exc:
            if scope not in isolate:
                raise
            broken.append(BrokenSettings(file=str(path), scope=scope, error=exc, text=_peek(path)))
    return SettingsSet(root=root, files=files, broken=broken, witness=witness)


def settings_witness(
    cwd: Path, extra: Sequence[Path] = (), *, env: Mapping[str, str] | None = None
) -> Witness | None:
    """What `load_settings(cwd, extra, env=env)` would stand on, by stats alone (its
    SettingsSet's `witness`): the project root search and a stat of every settings file,
    none of them read. None when it cannot stand for their contents."""
    return _candidates(cwd, extra, env)[2]


def settings_problems(cwd: Path, *, env: Mapping[str, str] | None = None) -> list[str]:
    """What is broken in the settings files for `cwd` (every scope): one line per broken file
    or hook entry, saying where and what still runs (SettingsSet.problems)."""
    return load_settings(cwd, env=env, isolate=frozenset(SCOPE_ORDER)).problems()


def _load(
    path: Path,
    scope: Scope,
    cache: SettingsCache | None,
    env: Mapping[str, str] | None,
    status: os.stat_result | None,
) -> LoadedSettings:
    if cache is None:
        # A one-shot process: a file validated before decodes in one pass (validated.py).
        return load_remembered(path, scope, state_file("settings-verdicts", env))
    try:
        report = cache.get(path, status)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SettingsError(f"cannot read settings file: {reason}", file=str(path)) from None
    if report.usable is None:
        raise report.errors[0]
    return LoadedSettings(
        file=str(path),
        scope=scope,
        settings=report.usable,
        warnings=report.warnings,
        broken=report.broken,
    )


def _peek(path: Path) -> bytes:
    try:
        with path.open("rb") as stream:
            return stream.read(1 << 20)
    except OSError:
        return b""


Candidate = tuple[Path, Scope, SettingsError | None, os.stat_result | None]
"""A settings file, its scope, the error that makes it unusable before it is even read (a
named file missing, a folder we may not search), else its stat."""


def _candidates(
    cwd: Path | None, extra: Sequence[Path], env: Mapping[str, str] | None
) -> tuple[Path | None, list[Candidate], Witness | None]:
    """The project root, the settings files for `cwd` in merge order (`Candidate`), and
    their `Witness`."""
    # The paths are built once per distinct folder (paths.child, cached_path), their files
    # looked at anew by every call: only what a stat cannot miss is kept.
    start = os.getcwd() if cwd is None else os.path.expanduser(cwd)
    candidates: list[tuple[Path, Scope]] = [
        (system_settings_path(env), "system"),
        (child(relay_home(env), "settings.json"), "user"),
    ]
    named: list[tuple[Path, Scope]] = []
    for path in [*settings_from_environment(env), *extra]:
        named.append((path.expanduser().absolute(), "settings"))
    found_root = project_root_and_folder(start)
    root = None if found_root is None else cached_path(found_root[0])
    project: list[tuple[Path, Scope]] = []
    if root is not None and found_root is not None and found_root[1]:  # it has a .relay/
        project.append((child(root, PROJECT_DIR_NAME, "settings.json"), "project"))
        project.append((child(root, PROJECT_DIR_NAME, "settings.local.json"), "project-local"))
    found: list[Candidate] = []
    seen: set[tuple[int, int]] = set()
    looked: list[object] = [found_root]
    racy = time.time() - RACY_SECONDS
    for path, scope in [*candidates, *named, *project]:
        try:
            # Named on the command line: a missing file is a mistake, not an absent layer.
            status = _file_status(path, named=scope == "settings")
        except SettingsError as exc:
            found.append((path, scope, exc, None))
            looked = []  # an error stands for nothing
            continue
        if looked:
            if status is not None and max(status.st_mtime_ns, status.st_ctime_ns) / 1e9 > racy:
                looked = []  # changed too recently for its identity to stand for its bytes
            else:
                looked.append((path, scope, None if status is None else identity_of(status)))
        # The same file reached twice (RELAY_HOME inside a project, a --settings that is the
        # user file) is loaded once, at its first, most trusted, place.
        if status is not None and (status.st_dev, status.st_ino) not in seen:
            seen.add((status.st_dev, status.st_ino))
            found.append((path, scope, None, status))
    return root, found, tuple(looked) if looked else None


def _file_status(path: Path, *, named: bool = False) -> os.stat_result | None:
    """The stat of a settings file that is there, None when there is none; one we may not
    look at is an error naming it."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        if named:
            raise SettingsError("settings file not found", file=str(path)) from None
        return None
    except NotADirectoryError:
        if named:
            raise SettingsError("settings file not found", file=str(path)) from None
        return None
    except OSError as exc:  # e.g. PermissionError on a folder on the way
        raise SettingsError(
            f"cannot read settings file: {exc.strerror or exc}", file=str(path)
        ) from None
    if not stat.S_ISREG(status.st_mode):
        if named:
            raise SettingsError("not a file", file=str(path))
        return None
    return status


def most_specific(sections: Sequence[S], default: S) -> S:
    """One settings section from several files given in merge order: for each field, the
    value of the most specific (last) file that sets it to something other than the default."""
    defaults = msgspec.structs.asdict(default)
    chosen = default
    for section in sections:
        changed = {
            key: value
            for key, value in msgspec.structs.asdict(section).items()
            if value != defaults[key]
        }
        chosen = msgspec.structs.replace(chosen, **changed)
    return chosen


def section_of(
    settings: SettingsSet,
    section: str,
    default: S,
    *,
    user_only: Sequence[str] = (),
) -> S:
    """The settings section named `section`, field by field from the most specific file;
    the `user_only` fields are read only from files the user controls (never from a
    project file, which is not trusted to choose a program to run or a server to use)."""
    sections: list[S] = []
    for loaded in settings.files:
        chosen: S = getattr(loaded.settings, section)
        if loaded.scope in TRUST_REQUIRED and user_only:
            chosen = msgspec.structs.replace(
                chosen, **{name: getattr(default, name) for name in user_only}
            )
        sections.append(chosen)
    return most_specific(sections, default)

"""Find the settings files that apply to a working directory and load them (DESIGN §5)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

import msgspec

from relay.config.loader import load_settings_file
from relay.config.model import TRUST_REQUIRED, ConfigWarning, LoadedSettings, Scope
from relay.config.paths import PROJECT_DIR_NAME, find_project_root, relay_home, system_settings_path
from relay.errors import SettingsError


class SettingsSet(msgspec.Struct, kw_only=True):
    """Every settings file that applies, loaded, in merge order."""

    root: Path | None
    """The project root (nearest ancestor with `.relay/` or `.git`), if any."""
    files: list[LoadedSettings]
    """System, user, --settings files in the order given, project, project-local."""

    @property
    def warnings(self) -> list[ConfigWarning]:
        """The warnings of every file, in merge order."""
        return [warning for loaded in self.files for warning in loaded.warnings]


S = TypeVar("S", bound=msgspec.Struct)

SETTINGS_VARIABLE = "RELAY_SETTINGS"
"""Extra settings files (os.pathsep-separated), as if given with --settings first. `relay
run` sets it for the agent, so hooks the wrapped agent runs see the session's settings."""


def settings_from_environment() -> list[Path]:
    """The files named by $RELAY_SETTINGS."""
    value = os.environ.get(SETTINGS_VARIABLE, "")
    return [Path(part) for part in value.split(os.pathsep) if part]


def discover(cwd: Path | None = None, extra: Sequence[Path] = ()) -> list[tuple[Path, Scope]]:
    """The settings files that exist for `cwd`, with their scopes, in merge order."""
    start = Path(os.getcwd()) if cwd is None else cwd
    candidates: list[tuple[Path, Scope]] = [
        (system_settings_path(), "system"),
        (relay_home() / "settings.json", "user"),
    ]
    for path in [*settings_from_environment(), *extra]:
        # Named on the command line: a missing file is a mistake, not an absent layer.
        if not _is_file(path.expanduser(), named=True):
            raise SettingsError("not a file", file=str(path))
        candidates.append((path.expanduser().absolute(), "settings"))
    root = find_project_root(start)
    if root is not None:
        candidates.append((root / PROJECT_DIR_NAME / "settings.json", "project"))
        candidates.append((root / PROJECT_DIR_NAME / "settings.local.json", "project-local"))
    found: list[tuple[Path, Scope]] = []
    seen: set[Path] = set()
    for path, scope in candidates:
        if not _is_file(path):
            continue
        # The same file reached twice (RELAY_HOME inside a project, a --settings that is the
        # user file) is loaded once, at its first, most trusted, place.
        real = path.resolve()
        if real not in seen:
            seen.add(real)
            found.append((path, scope))
    return found


def load_settings(cwd: Path | None = None, extra: Sequence[Path] = ()) -> SettingsSet:
    """Discover and load every settings file for `cwd`; raise SettingsError on the first bad one."""
    start = Path(os.getcwd()) if cwd is None else cwd
    files = [load_settings_file(path, scope) for path, scope in discover(start, extra)]
    return SettingsSet(root=find_project_root(start), files=files)


def _is_file(path: Path, *, named: bool = False) -> bool:
    """Whether a settings file is there; one we may not look at is an error naming it."""
    try:
        if named and not path.exists():
            raise SettingsError("settings file not found", file=str(path))
        return path.is_file()
    except OSError as exc:  # e.g. PermissionError on a folder on the way
        raise SettingsError(
            f"cannot read settings file: {exc.strerror or exc}", file=str(path)
        ) from None


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

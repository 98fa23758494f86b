"""Where relay keeps user config and state, and where a project's root is (DESIGN §5)."""

from __future__ import annotations

import os
from pathlib import Path

APP_NAME = "agent-relay"
DEFAULT_SYSTEM_SETTINGS = Path("/etc/agent-relay/settings.json")
PROJECT_DIR_NAME = ".relay"


def relay_home() -> Path:
    """The user config folder: $RELAY_HOME, else the platform user config dir."""
    home = os.environ.get("RELAY_HOME")
    if home:
        return Path(home).expanduser()
    import platformdirs  # only when RELAY_HOME is unset: start-up time of `relay hooks run`

    return Path(platformdirs.user_config_dir(APP_NAME))


def state_dir() -> Path:
    """The folder for relay's state (trust store, databases). Not created here: the code
    that writes there creates it, so reading state never fails on an unusable folder."""
    home = os.environ.get("RELAY_HOME")
    # RELAY_HOME relocates all state too, so tests and sandboxes touch nothing else.
    if home:
        state = Path(home).expanduser() / "state"
    else:
        import platformdirs

        state = Path(platformdirs.user_state_dir(APP_NAME))
    return state


def system_settings_path() -> Path:
    """The system settings file: $RELAY_SYSTEM_SETTINGS, else /etc/agent-relay/settings.json."""
    path = os.environ.get("RELAY_SYSTEM_SETTINGS")
    return Path(path).expanduser() if path else DEFAULT_SYSTEM_SETTINGS


def find_project_root(start: Path) -> Path | None:
    """The nearest ancestor of `start` (itself included) holding `.relay/` or `.git`."""
    here = Path(os.path.abspath(start.expanduser()))
    for folder in (here, *here.parents):
        # `.git` may be a file: worktrees and submodules point to their git dir with one.
        if _present(folder / PROJECT_DIR_NAME, folder=True) or _present(folder / ".git"):
            return folder
    return None


def _present(path: Path, *, folder: bool = False) -> bool:
    # Python 3.11's is_dir()/exists() raise PermissionError for a folder we may not enter:
    # such a folder cannot be a project we can use, so it does not count.
    try:
        return path.is_dir() if folder else path.exists()
    except OSError:
        return False

"""Where relay keeps user config and state, and where a project's root is (DESIGN §5)."""

from __future__ import annotations

import functools
import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

APP_NAME = "agent-relay"
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
DEFAULT_SYSTEM_SETTINGS = Path("/etc/agent-relay/settings.json")
PROJECT_DIR_NAME = ".relay"
NO_PROJECT = "no .relay/ or .git above {}, outside shared temporary folders such as /tmp"
"""Why there is no project root for a folder (find_project_root), for an error message."""


def relay_home(env: Mapping[str, str] | None = None) -> Path:
    """The user config folder: $RELAY_HOME, else the platform user config dir.

    `env` is the environment to read (default: this process's); the server answers for
    clients whose environment it is given.
    """
    env = os.environ if env is None else env
    if _keyable(env):
        return _relay_home_for(env.get("RELAY_HOME"), env["HOME"], env.get("XDG_CONFIG_HOME"))
    return _relay_home(env)


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """The folder for relay's state (trust store, databases). Not created here: the code
    that writes there creates it, so reading state never fails on an unusable folder."""
    env = os.environ if env is None else env
    if _keyable(env):
        return _state_dir_for(env.get("RELAY_HOME"), env["HOME"], env.get("XDG_STATE_HOME"))
    return _state_dir(env)


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The folder for what relay can make again (what it read from a host's code, the
    programs it built): $RELAY_CACHE where set, else the platform's user cache folder
    (~/.cache/agent-relay). relay.native reads the same variables for its builds."""
    env = os.environ if env is None else env
    configured = env.get("RELAY_CACHE", "")
    if os.path.isabs(configured):
        return Path(configured)
    return Path(_platform_dir("user_cache_dir", "XDG_CACHE_HOME", ".cache", env))


def state_file(name: str, env: Mapping[str, str] | None = None) -> Path:
    """The file `name` in the state folder (`state_dir`)."""
    return child(state_dir(env), name)


@functools.lru_cache(maxsize=256)
def child(folder: Path, *names: str) -> Path:
    """`folder` / each of `names`, kept: a server builds the same few paths for every call
    (pathlib's joining costs more than the stat that follows)."""
    return folder.joinpath(*names)


# A client's environment is a plain mapping: its folders depend only on the variables
# below, so a server computes them once per distinct set of values. This process's own
# environment (and any platform but Linux, where platformdirs reads it) is read each time.


def _keyable(env: Mapping[str, str]) -> bool:
    return env is not os.environ and sys.platform == "linux" and "HOME" in env


@functools.lru_cache(maxsize=64)
def _relay_home_for(home: str | None, user_home: str, config: str | None) -> Path:
    return _relay_home(_environment(RELAY_HOME=home, HOME=user_home, XDG_CONFIG_HOME=config))


@functools.lru_cache(maxsize=64)
def _state_dir_for(home: str | None, user_home: str, state: str | None) -> Path:
    return _state_dir(_environment(RELAY_HOME=home, HOME=user_home, XDG_STATE_HOME=state))


@functools.lru_cache(maxsize=64)
def _system_settings_for(path: str | None, user_home: str) -> Path:
    return _system_settings(_environment(RELAY_SYSTEM_SETTINGS=path, HOME=user_home))


def _environment(**values: str | None) -> dict[str, str]:
    return {name: value for name, value in values.items() if value is not None}


def _relay_home(env: Mapping[str, str]) -> Path:
    home = env.get("RELAY_HOME")
    if home:
        return _expand_user(home, env)
    return Path(_platform_dir("user_config_dir", "XDG_CONFIG_HOME", ".config", env))


def _state_dir(env: Mapping[str, str]) -> Path:
    home = env.get("RELAY_HOME")
    # RELAY_HOME relocates all state too, so tests and sandboxes touch nothing else.
    if home:
        return _expand_user(home, env) / "state"
    return Path(_platform_dir("user_state_dir", "XDG_STATE_HOME", ".local/state", env))


def private_dir(path: Path, *, top: Path | None = None) -> Path:
    """Create `path` (with its parents) 0700 whatever the umask: relay's state holds
    prompts, tool commands and messages, readable by the user alone. When `path` is in
    `top` (default: the state folder), the folders from `top` down to `path` are
    tightened too (when they are the user's own), so a state folder an older relay made
    0755 becomes private; a folder elsewhere that existed is left as it is. Raises OSError."""
    top = state_dir() if top is None else top
    missing = [folder for folder in (path, *path.parents) if not folder.exists()]
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    mine = list(missing)  # what relay created is relay's; a folder of the user's is not
    if path == top or top in path.parents:
        mine += [top, *(folder for folder in path.parents if top in folder.parents), path]
    uid = os.getuid()
    for folder in dict.fromkeys(mine):
        info = folder.stat()
        if info.st_mode & 0o777 != PRIVATE_DIR_MODE and info.st_uid == uid:
            os.chmod(folder, PRIVATE_DIR_MODE)
    return path


def private_file(path: Path) -> Path:
    """Make `path` exist as a 0600 file (created empty; an existing one of the user's is
    tightened) before a library that creates files with the umask's mode (SQLite) opens
    it; SQLite gives its -wal and -shm files the database's mode. Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    try:
        info = os.fstat(fd)
        if info.st_mode & 0o777 != PRIVATE_FILE_MODE and info.st_uid == os.getuid():
            os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)
    return path


def system_settings_path(env: Mapping[str, str] | None = None) -> Path:
    """The system settings file: $RELAY_SYSTEM_SETTINGS, else /etc/agent-relay/settings.json."""
    env = os.environ if env is None else env
    if _keyable(env):
        return _system_settings_for(env.get("RELAY_SYSTEM_SETTINGS"), env["HOME"])
    return _system_settings(env)


def _system_settings(env: Mapping[str, str]) -> Path:
    path = env.get("RELAY_SYSTEM_SETTINGS")
    return _expand_user(path, env) if path else DEFAULT_SYSTEM_SETTINGS


def _expand_user(path: str, env: Mapping[str, str]) -> Path:
    if path.startswith("~") and env is not os.environ and env.get("HOME"):
        return cached_path(env["HOME"] + path[1:])
    if path.startswith("~"):
        return Path(path).expanduser()
    return cached_path(path)


@functools.lru_cache(maxsize=256)
def cached_path(text: str) -> Path:
    """Path(text), kept: a server builds the same few paths for every call."""
    return Path(text)


def _platform_dir(function: str, variable: str, fallback: str, env: Mapping[str, str]) -> str:
    """platformdirs' answer for this process, or its Linux rule applied to another environment."""
    if env is os.environ or sys.platform != "linux":
        import platformdirs  # only when RELAY_HOME is unset: start-up time of `relay hooks run`

        return str(getattr(platformdirs, function)(APP_NAME))
    base = env.get(variable, "").strip()
    if not base or not os.path.isabs(base):
        base = os.path.join(env.get("HOME") or os.path.expanduser("~"), fallback)
    return os.path.join(base, APP_NAME)


def find_project_root(start: str | Path) -> Path | None:
    """The nearest ancestor of `start` (itself included) holding `.relay/` or `.git`,
    passing over shared temporary folders (`shared_temporary`)."""
    root = project_root(os.path.expanduser(start))
    return None if root is None else cached_path(root)


def project_root(start: str) -> str | None:
    """`find_project_root` for a folder given as a string, answered as one."""
    found = project_root_and_folder(start)
    return None if found is None else found[0]


def project_root_and_folder(start: str) -> tuple[str, bool] | None:
    """`project_root`, and whether the root holds a `.relay/` folder (else it has no
    project settings files to look for)."""
    # Strings and os.path, not pathlib: a host pays for this walk on every event.
    here = os.path.abspath(start)
    while True:
        # `.git` may be a file: worktrees and submodules point to their git dir with one.
        # Neither is there for a folder we may not enter: such a folder cannot be a project
        # we can use, so it does not count. (os.path.isdir and exists, inlined: a host pays
        # for this walk on every event.)
        prefix = here if here.endswith("/") else here + "/"
        try:
            folder = stat.S_ISDIR(os.stat(prefix + PROJECT_DIR_NAME).st_mode)
        except (OSError, ValueError):
            folder = False
        if (folder or _exists(prefix + ".git")) and not shared_temporary(here):
            return here, folder
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def _exists(path: str) -> bool:
    try:
        os.stat(path)
    except (OSError, ValueError):
        return False
    return True


_SHARED = stat.S_ISVTX | stat.S_IWOTH


def shared_temporary(folder: str | Path) -> bool:
    """Whether `folder` is a shared temporary folder (world-writable with the sticky bit,
    as /tmp and /var/tmp are): never a project root, whatever it holds. Anyone may create
    `/tmp/.relay`, and Codex's sandbox creates an empty `/tmp/.git` while it runs: a
    session working in a scratch folder under /tmp is not in a project called /tmp."""
    try:
        return os.stat(folder).st_mode & _SHARED == _SHARED
    except OSError:
        return False

"""Where relay's private Unix sockets live, and who is at their other end: the folder
only this user can enter, names short enough for a socket, peer credentials. Standard
library only, and quick to import: relay's hook client (relay/server/client.py) loads it
on every host event, and the services that listen on sockets of their own (the memory
model's child) use it too.
"""

from __future__ import annotations

import os
import stat
import struct
import sys

TYPE_CHECKING = False  # not typing's: this module must load in a few milliseconds
if TYPE_CHECKING:
    import socket
    from collections.abc import Mapping

SOCKET_NAME_LIMIT = 100  # sun_path holds 108 bytes on Linux, 104 on macOS
APP = "agent-relay"


def package_dir() -> str:
    """The installed `relay` package's directory."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def version() -> str:
    """relay's version, read from relay/version.py without importing the package."""
    with open(os.path.join(package_dir(), "version.py"), encoding="utf-8") as stream:
        for line in stream:
            if line.startswith("VERSION = "):
                return line.split("=", 1)[1].strip().strip("\"'")
    return "unknown"


def identity() -> str:
    """This install: its version and where it is. A client talks only to a server of the
    same install, so an upgrade never leaves a client talking to old code."""
    return f"{version()}:{package_dir()}"


def fnv1a64(data: bytes) -> str:
    """FNV-1a, 64 bits, as 16 hex digits (a name, not a secret: the C client computes it too)."""
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def state_base(env: Mapping[str, str]) -> str:
    """The folder under which the socket directory lives (see socket_path)."""
    home = env.get("RELAY_HOME", "")
    if home:
        return os.path.join(_expand_home(home, env), "state")
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, APP)
    user_home = env.get("HOME") or os.path.expanduser("~")
    if sys.platform == "darwin":
        return os.path.join(user_home, "Library", "Application Support", APP)
    base = env.get("XDG_STATE_HOME", "")
    if not base or not os.path.isabs(base):
        base = os.path.join(user_home, ".local", "state")
    return os.path.join(base, APP)


def private_dir_ok(folder: str) -> bool:
    """Whether `folder` is a directory that only this user owns and can enter."""
    try:
        status = os.lstat(folder)
    except OSError:
        return False
    return (
        stat.S_ISDIR(status.st_mode)
        and status.st_uid == os.getuid()
        and status.st_mode & 0o077 == 0
    )


def make_private_dir(folder: str) -> bool:
    """Create `folder` (and its parents) for this user alone; False when it is not private."""
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError:
        return False
    return private_dir_ok(folder)


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket (None where unsupported)."""
    credentials = _peer_credentials(sock)
    return None if credentials is None else credentials[1]


def peer(sock: socket.socket) -> tuple[int | None, int | None]:
    """The pid and uid of the process at the other end of a Unix socket, in one system
    call (`peer_pid`, `peer_uid`)."""
    credentials = _peer_credentials(sock)
    if credentials is None:
        return None, None
    return (credentials[0] if credentials[0] > 0 else None), credentials[1]


def peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process at the other end of a Unix socket (None where unsupported)."""
    credentials = _peer_credentials(sock)
    return None if credentials is None or credentials[0] <= 0 else credentials[0]


def _peer_credentials(sock: socket.socket) -> tuple[int, int, int] | None:
    import socket

    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    credentials = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", credentials)
    return int(pid), int(uid), int(gid)


def _expand_home(path: str, env: Mapping[str, str]) -> str:
    # Only `~` and `~/…`, from $HOME (as the C client does).
    if (path == "~" or path.startswith("~/")) and env.get("HOME"):
        return env["HOME"] + path[1:]
    return path

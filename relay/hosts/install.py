"""Installing relay into a host's settings, and taking it out again.

`relay install <host>` writes one entry per event into the host's settings file: a hook
group with no matcher (every tool) whose command is relay's client with `--dialect <host>
<Event>`. The edit is minimal (JsonText: only the spans it changes; layout, order and
other keys kept), idempotent (an entry that is already there is left alone; one whose
client path is stale is updated in place), and reversible: `relay uninstall` removes
exactly the entries recognised as relay's, and the containers it emptied.

Which events: those the installed host knows. relay reads the host's own code (its
package's bundle or native binary) for each event name relay has for that host, so an
older host never receives an event key it does not know (a host may reject a whole
settings file for one). Where the host cannot be found, relay's table for the version it
was checked against is used, and the caller is told.
"""

from __future__ import annotations

import copy
import json
import mmap
import os
import re
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from relay.config.editing import JsonText, new_settings_text
from relay.config.paths import find_project_root, state_dir
from relay.errors import RelayError, SettingsError
from relay.hosts.model import Host
from relay.hosts.waiter import WAIT_TIMEOUT
from relay.native import BuildError
from relay.protocol.decoding import json_type_name
from relay.server.build import (
    NATIVE_NAME,
    PYTHON_NAME,
    build_native_client,
    client_info,
    write_python_client,
)
from relay.server.client import identity

Scope = Literal["user", "project"]
ClientKind = Literal["native", "python"]

HOST_TIMEOUT_SECONDS = 600
"""The timeout written into relay's entry: relay bounds its own hooks, so the host's bound
only has to be longer than theirs (Claude Code's own default for a command hook)."""
CLIENT_NAMES = frozenset({NATIVE_NAME, PYTHON_NAME})
_SCAN_LIMIT = 1 << 30  # a host file bigger than 1 GiB is not read


class InstallError(RelayError):
    """Installing into (or removing from) a host's settings failed; nothing was written."""


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """Where relay goes for one host and scope."""

    host: Host
    scope: Scope
    folder: Path
    """The host's folder: its per-user one, or `<project>/<config_dir>`."""

    @property
    def file(self) -> Path:
        """The settings file relay's entries go into."""
        return self.folder / self.host.settings_file

    @property
    def local_file(self) -> Path | None:
        """The project's personal settings file beside it (project scope), if the host has one."""
        if self.scope != "project" or self.host.local_file is None:
            return None
        return self.folder / self.host.local_file


def target(host: Host, scope: Scope, cwd: Path, env: Mapping[str, str] | None = None) -> Target:
    """The settings relay is installed into for `host` at `scope`, seen from `cwd`."""
    env = os.environ if env is None else env
    if scope == "project":
        root = find_project_root(cwd) or cwd
        return Target(host=host, scope=scope, folder=root / host.config_dir)
    configured = env.get(host.config_dir_env) if host.config_dir_env else None
    if configured:
        return Target(host=host, scope=scope, folder=Path(configured).expanduser())
    home = env.get("HOME") or str(Path.home())
    return Target(host=host, scope=scope, folder=Path(home) / host.config_dir)


# --- the client ------------------------------------------------------------------------------


class Client(msgspec.Struct, frozen=True, kw_only=True):
    """The program a host runs for each event: relay's native client, or the Python one."""

    argv: tuple[str, ...]
    kind: ClientKind
    note: str = ""
    """Why it is the Python client (no compiler, a failed build), for the user."""

    def command(self, host: Host, event: str) -> str:
        """The shell command for one event (hosts run it through `sh -c`)."""
        words = (*self.argv, "--dialect", host.name, event)
        return " ".join(shlex.quote(word) for word in words)


def client_folder(env: Mapping[str, str] | None = None) -> Path:
    """Where the clients live: `<state dir>/bin`."""
    return state_dir(env) / "bin"


def current_client(env: Mapping[str, str] | None = None) -> Client | None:
    """The client already built for this install, without building anything."""
    folder = client_folder(env)
    native = folder / NATIVE_NAME
    if native.exists():
        info = client_info(native)
        if info and info.get("install") == identity() and info.get("python") == sys.executable:
            return Client(argv=(str(native),), kind="native")
    script = folder / PYTHON_NAME
    if script.exists():
        return Client(argv=(sys.executable, "-I", "-S", str(script)), kind="python")
    return None


def ensure_client(env: Mapping[str, str] | None = None, *, native: bool = True) -> Client:
    """This install's client: the native one when it can be built, else the Python one."""
    existing = current_client(env)
    if existing is not None and (existing.kind == "native" or not native):
        return existing
    folder = client_folder(env)
    note = "the native client was not asked for"
    if native:
        try:
            return Client(argv=(str(build_native_client(folder)),), kind="native")
        except BuildError as exc:
            note = f"no native client ({exc}); events cost a Python start-up more"
    script = write_python_client(folder)
    return Client(argv=(sys.executable, "-I", "-S", str(script)), kind="python", note=note)


def is_relay_command(command: object, host: Host | None = None) -> bool:
    """Whether a host hook's command is one of relay's entries (for `host`, if given).

    relay's client (`relay-hook`, `relay-hook.py`) or `relay hooks run`, with `--dialect`.
    """
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    names = [os.path.basename(word) for word in words]
    ours = (
        any(name in CLIENT_NAMES for name in names[:4])
        or (bool(names) and names[0] == "relay" and words[1:3] == ["hooks", "run"])
        or is_waiter_command(command)
    )
    if not ours or "--dialect" not in words:
        return False
    if host is None:
        return True
    dialect = words[words.index("--dialect") + 1 : words.index("--dialect") + 2]
    return dialect == [host.name]


WAITER_EVENTS = frozenset({"SessionStart", "Stop"})
"""Claude Code events that start relay's mail waiter (relay.hosts.waiter): in the
background (`asyncRewake`), so that mail wakes an idle agent."""


def waiter_command(host: Host) -> str:
    words = (sys.executable, "-m", "relay", "hooks", "wait-mail", "--dialect", host.name)
    return " ".join(shlex.quote(word) for word in words)


def is_waiter_command(command: object) -> bool:
    """Whether a hook's command is relay's mail waiter (`… -m relay hooks wait-mail`)."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return words[1:5] == ["-m", "relay", "hooks", "wait-mail"]


def _waiter_group(host: Host) -> dict[str, Any]:
    hook = {
        "type": "command",
        "command": waiter_command(host),
        "asyncRewake": True,
        "timeout": WAIT_TIMEOUT,
    }
    return {"hooks": [hook]}


def _wants_waiter(host: Host, event: str) -> bool:
    return host.name == "claude" and event in WAITER_EVENTS


# --- which events ----------------------------------------------------------------------------


class HostEvents(msgspec.Struct, frozen=True, kw_only=True):
    """The events to install, and where that list came from."""

    events: tuple[str, ...]
    executable: str | None
    """The host program found on PATH (None: not found)."""
    source: str
    """How the list was made, for the user."""


def host_events(host: Host, env: Mapping[str, str] | None = None) -> HostEvents:
    """The events of relay's table for `host` that the installed host knows."""
    env = os.environ if env is None else env
    executable = shutil.which(host.executable, path=env.get("PATH"))
    if executable is None:
        return HostEvents(
            events=host.events,
            executable=None,
            source=f"{host.executable} not found on PATH: the events of {host.title} "
            f"{host.version}",
        )
    found = _names_in_files(_host_files(Path(executable)), host.events)
    if not found:
        return HostEvents(
            events=host.events,
            executable=executable,
            source=f"no event names found in {executable}: the events of {host.title} "
            f"{host.version}",
        )
    events = tuple(event for event in host.events if event in found)
    return HostEvents(
        events=events,
        executable=executable,
        source=f"the {len(events)} of relay's {len(host.events)} {host.title} events that "
        f"{executable} knows",
    )


def _host_files(executable: Path) -> Iterator[Path]:
    """The host's own code: its npm package and the platform packages beside it."""
    real = executable.resolve()
    package = next((p for p in real.parents if (p / "package.json").is_file()), None)
    if package is None:
        yield real
        return
    folders = [package]
    # Native builds ship as optional dependencies beside it: @scope/name-linux-x64 …
    folders += sorted(p for p in package.parent.glob(package.name + "-*") if p.is_dir())
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if (
                path.is_file()
                and not path.is_symlink()
                and (path.suffix in (".js", ".mjs", ".cjs", ".exe", "") or os.access(path, os.X_OK))
            ):
                yield path


def _names_in_files(files: Iterator[Path], names: tuple[str, ...]) -> set[str]:
    """Which of `names` occur quoted ('Name', "Name" or `Name`) in any of `files`."""
    pattern = re.compile(
        rb"[\"'`](" + b"|".join(re.escape(name.encode()) for name in names) + rb")[\"'`]"
    )
    found: set[str] = set()
    for path in files:
        try:
            size = path.stat().st_size
            if not size or size > _SCAN_LIMIT:
                continue
            with (
                path.open("rb") as stream,
                mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as data,
            ):
                for match in pattern.finditer(data):
                    found.add(match.group(1).decode())
                    if len(found) == len(names):
                        return found
        except (OSError, ValueError):
            continue
    return found


# --- editing the host's settings -------------------------------------------------------------


class Change(msgspec.Struct, kw_only=True):
    """What an install or uninstall did (or would do) to one settings file."""

    file: Path
    text: str | None
    """The new text; None when the file is to be removed."""
    changed: bool
    added: list[str] = msgspec.field(default_factory=list)
    updated: list[str] = msgspec.field(default_factory=list)
    kept: list[str] = msgspec.field(default_factory=list)
    removed: list[str] = msgspec.field(default_factory=list)
    foreign: list[str] = msgspec.field(default_factory=list)
    """Events whose other (non-relay) hooks still run beside relay."""


def read_text(path: Path) -> str | None:
    """The file's text; None when it does not exist. InstallError when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InstallError(f"{path}: cannot read: {exc}") from None


def install_text(
    text: str | None, host: Host, events: tuple[str, ...], client: Client, *, file: str
) -> Change:
    """The host settings text with relay's entry for each of `events`."""
    path = Path(file)
    if text is None or not text.strip():
        document = {
            "hooks": {
                event: [
                    _group(host, client, event),
                    *([_waiter_group(host)] if _wants_waiter(host, event) else []),
                ]
                for event in events
            }
        }
        return Change(file=path, text=new_settings_text(document), changed=True, added=list(events))
    editable = _editable(text, file)
    expected = copy.deepcopy(editable.value)
    change = Change(file=path, text=text, changed=False)
    hooks = _container(editable, ("hooks",), dict)
    if hooks is None:
        editable.insert((), "hooks", {})
        expected["hooks"] = {}
    for event in events:
        command = client.command(host, event)
        groups = _container(editable, ("hooks", event), list)
        if groups is None:
            entries = [_group(host, client, event)]
            if _wants_waiter(host, event):
                entries.append(_waiter_group(host))
            editable.insert(("hooks",), event, entries)
            expected["hooks"][event] = copy.deepcopy(entries)
            change.added.append(event)
            continue
        found = list(_relay_hooks(groups, host))
        if any(hook.get("command") == command for _, _, hook in found):
            change.kept.append(event)
        elif found:
            group_index, hook_index, _ = found[0]
            where = ("hooks", event, group_index, "hooks", hook_index, "command")
            editable.replace(where, command)
            expected["hooks"][event][group_index]["hooks"][hook_index]["command"] = command
            change.updated.append(event)
        else:
            editable.append(("hooks", event), _group(host, client, event))
            expected["hooks"][event].append(_group(host, client, event))
            change.added.append(event)
        if _wants_waiter(host, event):
            _ensure_waiter(editable, expected, host, event)
        if _foreign_hooks(expected["hooks"][event], host):
            change.foreign.append(event)
    change.text = _checked(editable, expected, file)
    change.changed = change.text != text
    return change


def _ensure_waiter(editable: JsonText, expected: dict[str, Any], host: Host, event: str) -> None:
    """relay's mail waiter in `event`, current (its Python path updated in place)."""
    wanted = waiter_command(host)
    found = list(
        _hooks_in(expected["hooks"][event], lambda hook: is_waiter_command(hook.get("command")))
    )
    if any(hook.get("command") == wanted for _, _, hook in found):
        return
    if found:
        group_index, hook_index, _ = found[0]
        editable.replace(("hooks", event, group_index, "hooks", hook_index, "command"), wanted)
        expected["hooks"][event][group_index]["hooks"][hook_index]["command"] = wanted
        return
    editable.append(("hooks", event), _waiter_group(host))
    expected["hooks"][event].append(_waiter_group(host))


def uninstall_text(text: str | None, host: Host, *, file: str) -> Change:
    """The host settings text without relay's entries (and the containers they leave empty)."""
    return remove_hooks_text(
        text, lambda hook: is_relay_command(hook.get("command"), host), file=file
    )


def remove_hooks_text(
    text: str | None, chosen: Callable[[dict[str, Any]], bool], *, file: str
) -> Change:
    """The host settings text without the hooks `chosen` picks, and the groups, event
    arrays and `hooks` object they leave empty. `removed` lists the events touched."""
    path = Path(file)
    change = Change(file=path, text=text, changed=False)
    if text is None or not text.strip():
        return change
    editable = _editable(text, file)
    expected = copy.deepcopy(editable.value)
    hooks = _container(editable, ("hooks",), dict)
    if not hooks:
        return change
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        found = list(_hooks_in(groups, chosen))
        if not found:
            continue
        change.removed.append(event)
        # From the last one back, so earlier indexes stay valid.
        for group_index, hook_index, _ in reversed(found):
            group_hooks = expected["hooks"][event][group_index]["hooks"]
            if len(group_hooks) == 1:
                editable.remove(("hooks", event, group_index))
                del expected["hooks"][event][group_index]
            else:
                editable.remove(("hooks", event, group_index, "hooks", hook_index))
                del group_hooks[hook_index]
        if not expected["hooks"][event]:
            editable.remove(("hooks", event))
            del expected["hooks"][event]
    if change.removed and not expected["hooks"]:
        editable.remove(("hooks",))
        del expected["hooks"]
    change.text = _checked(editable, expected, file)
    change.changed = change.text != text
    return change


def append_groups_text(text: str | None, groups: dict[str, list[Any]], *, file: str) -> Change:
    """The host settings text with `groups` appended per event (one already there identically
    is skipped): how hooks moved out by `--import` are put back."""
    if text is None or not text.strip():
        return Change(
            file=Path(file),
            text=new_settings_text({"hooks": groups}),
            changed=True,
            added=list(groups),
        )
    editable = _editable(text, file)
    expected = copy.deepcopy(editable.value)
    change = Change(file=Path(file), text=text, changed=False)
    if _container(editable, ("hooks",), dict) is None:
        editable.insert((), "hooks", {})
        expected["hooks"] = {}
    for event, moved in groups.items():
        present = _container(editable, ("hooks", event), list)
        if present is None:
            editable.insert(("hooks",), event, list(moved))
            expected["hooks"][event] = list(moved)
            change.added.append(event)
            continue
        for group in moved:
            if group in expected["hooks"][event]:
                continue
            editable.append(("hooks", event), group)
            expected["hooks"][event].append(group)
            if event not in change.added:
                change.added.append(event)
    change.text = _checked(editable, expected, file)
    change.changed = change.text != text
    return change


def installed_events(text: str | None, host: Host) -> dict[str, list[str]]:
    """Per event, the commands of relay's entries in a host settings text (unreadable: {})."""
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    hooks = value.get("hooks") if isinstance(value, dict) else None
    if not isinstance(hooks, dict):
        return {}
    entries = {
        event: [
            str(hook["command"])
            for _, _, hook in _relay_hooks(groups, host)
            if not is_waiter_command(hook.get("command"))
        ]
        for event, groups in hooks.items()
        if isinstance(groups, list)
    }
    return {event: commands for event, commands in entries.items() if commands}


def write_text(path: Path, text: str | None) -> None:
    """Replace the file atomically (same mode as before, else 0600 for a new one; through
    a symbolic link, its target)."""
    try:
        if text is None:
            path.unlink(missing_ok=True)
            return
        if path.is_symlink():
            path = path.resolve()  # a dotfiles link stays a link: its target is edited
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o600
        staged = path.with_name(f".{path.name}.relay-{os.getpid()}")
        staged.write_text(text, encoding="utf-8")
        staged.chmod(mode)
        staged.replace(path)
    except OSError as exc:
        raise InstallError(f"{path}: cannot write: {exc}") from None


def _group(host: Host, client: Client, event: str) -> dict[str, Any]:
    hook: dict[str, Any] = {"type": "command", "command": client.command(host, event)}
    hook.update(dict(host.entry_extra))
    seconds = host.entry_timeouts.get(event, HOST_TIMEOUT_SECONDS)
    hook["timeout"] = seconds * host.timeout_scale
    return {"hooks": [hook]}


def _relay_hooks(groups: list[Any], host: Host) -> Iterator[tuple[int, int, dict[str, Any]]]:
    return _hooks_in(groups, lambda hook: is_relay_command(hook.get("command"), host))


def _hooks_in(
    groups: list[Any], chosen: Callable[[dict[str, Any]], bool]
) -> Iterator[tuple[int, int, dict[str, Any]]]:
    for group_index, group in enumerate(groups):
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list):
            continue
        for hook_index, hook in enumerate(inner):
            if isinstance(hook, dict) and chosen(hook):
                yield group_index, hook_index, hook


def _foreign_hooks(groups: list[Any], host: Host) -> bool:
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        for hook in inner if isinstance(inner, list) else ():
            if not (isinstance(hook, dict) and is_relay_command(hook.get("command"), host)):
                return True
    return False


def _editable(text: str, file: str) -> JsonText:
    try:
        document = JsonText(text, file=file)
    except SettingsError as exc:
        raise InstallError(f"{exc} (fix the file, then run this again)") from None
    if not isinstance(document.value, dict):
        raise InstallError(
            f"{file}: expected a JSON object, got {_a(json_type_name(document.value))}"
        )
    return document


def _container(document: JsonText, path: tuple[str, ...], kind: type) -> Any:
    if not document.has(path):
        return None
    value = document.at(path)
    if not isinstance(value, kind):
        line, _ = document.location(path)
        where = f"{document.file}:{line}" if line else document.file
        expected = "an object" if kind is dict else "an array"
        raise InstallError(
            f"{where}: {'.'.join(path)} is {_a(json_type_name(value))}, expected {expected}; "
            "relay leaves the file as it is"
        )
    return value


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _checked(document: JsonText, expected: Any, file: str) -> str:
    if document.value != expected:
        raise InstallError(f"{file}: internal error: the edit changed more than intended")
    return document.text

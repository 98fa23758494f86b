"""Installing relay into a host's settings, and taking it out again.

`relay install <host>` writes one entry per event into the host's settings file: a hook
group with no matcher (every tool) whose command is relay's client with `--dialect <host>
<Event>`. The edit is minimal (JsonText: only the spans it changes; layout, order, other
keys and comments kept), idempotent (an entry that is already there is left alone; one
whose client path is stale is updated in place), and reversible: `relay uninstall`
removes exactly what install added, and no more.

relay's entries say they are relay's by their exact form (`is_relay_entry`); an entry the
user wrote, even one that runs relay, is never changed, removed or trusted. What has no
such form (a permission, a file or container relay created) is relay's only where relay's
record says relay added it (relay.hosts.ledger).

Which events: those the installed host knows. relay reads the host's own code (its
package's bundle or native binary) for each event name relay has for that host, so an
older host never receives an event key it does not know (a host may reject a whole
settings file for one). Where the host cannot be found, relay's table for the version it
was checked against is used, and the caller is told.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import hashlib
import mmap
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

import msgspec

from relay.config.editing import JsonText, decode_with_comments, new_settings_text
from relay.config.loader import FieldPath
from relay.config.paths import cache_dir, find_project_root, private_dir, state_dir
from relay.config.sockets import identity
from relay.errors import RelayError, SettingsError
from relay.hosts import ledger
from relay.hosts.code_cache import read_cached
from relay.hosts.ledger import FileRecord
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

Scope = Literal["user", "project"]
ClientKind = Literal["native", "python"]

HOST_TIMEOUT_SECONDS = 600
"""The timeout written into relay's entry: relay bounds its own hooks, so the host's bound
only has to be longer than theirs (Claude Code's own default for a command hook)."""
CLIENT_NAMES = frozenset({NATIVE_NAME, PYTHON_NAME})
ENTRY_PREFIX = "exec"
"""The first word of relay's entries. Entries written before it (the client's path first)
are relay's too: `relay install` brings them up to this form."""
_SCAN_LIMIT = 1 << 30  # a host file bigger than 1 GiB is not read


class InstallError(RelayError):
    """Installing into (or removing from) a host's settings failed; nothing was written."""


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """Where relay goes for one host and scope."""

    host: Host
    scope: Scope
    folder: Path
    """The host's folder: its per-user one, or `<project>/<config_dir>`."""
    root: Path | None = None
    """The project (project scope): nothing is written outside it."""

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
        return Target(host=host, scope=scope, folder=root / host.config_dir, root=root)
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
        """The shell command for one event. Hosts run it through `sh -c`, and `exec` has
        the shell become the client instead of starting it as a child and waiting (dash,
        Debian's sh, forks even for a single command: about 0.2 ms of every event)."""
        words = (ENTRY_PREFIX, *self.argv, "--dialect", host.name, event)
        return " ".join(shlex.quote(word) for word in words)


def editable_checkout() -> Path | None:
    """The source checkout this relay runs from when it is an editable install (`pip
    install -e`), else None: the host's entries then run that checkout's code, and stop
    working when it is moved, deleted or switched to a broken branch."""
    import importlib.metadata
    import json

    try:
        text = importlib.metadata.distribution("agent-relay").read_text("direct_url.json")
        origin = json.loads(text or "{}")
    except (importlib.metadata.PackageNotFoundError, ValueError, OSError):
        return None
    if not isinstance(origin, dict) or not (origin.get("dir_info") or {}).get("editable"):
        return None
    url = str(origin.get("url", ""))
    return Path(url.removeprefix("file://")) if url.startswith("file://") else None


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
    try:
        # 0700 whatever the umask: a folder others could write to would let them swap the
        # program every host event runs.
        private_dir(folder, top=state_dir(env))
    except OSError as exc:
        raise InstallError(f"{folder}: cannot create: {exc}") from None
    note = "the native client was not asked for"
    if native:
        try:
            return Client(argv=(str(build_native_client(folder)),), kind="native")
        except BuildError as exc:
            note = f"no native client ({exc}); events cost a Python start-up more"
    script = write_python_client(folder)
    return Client(argv=(sys.executable, "-I", "-S", str(script)), kind="python", note=note)


def is_relay_entry(hook: object, host: Host, event: str) -> bool:
    """Whether a hook entry is relay's own for `event`: exactly the form install writes.

    That is `{"type": "command", "command": …, "timeout": …}` (plus the host's own extra
    fields), whose command is, word for word and quoted as relay quotes it, an absolute
    `exec` (or, as entries were written before, nothing), an absolute path to relay's
    client (`relay-hook`, or `python -I -S …/relay-hook.py`), then `--dialect <host>
    <event>` and nothing else. An entry the user wrote, even one that
    runs relay (`relay hooks run … --settings strict.json`), has another form and is
    never changed or removed by install and uninstall.
    """
    if not isinstance(hook, dict) or hook.get("type") != "command":
        return False
    extra = dict(host.entry_extra)
    if set(hook) - {"type", "command", "timeout", *extra}:
        return False
    if any(key in hook and hook[key] != value for key, value in extra.items()):
        return False
    words = _entry_words(hook.get("command"))
    if words is None or words[-3:] != ["--dialect", host.name, event]:
        return False
    head = words[:-3]
    if len(head) == 1:
        return os.path.isabs(head[0]) and os.path.basename(head[0]) == NATIVE_NAME
    return (
        len(head) == 4
        and os.path.isabs(head[0])
        and head[1:3] == ["-I", "-S"]
        and os.path.isabs(head[3])
        and os.path.basename(head[3]) == PYTHON_NAME
    )


def is_damaged_entry(hook: object, host: Host, event: str, folder: Path) -> bool:
    """Whether a hook entry is relay's own but damaged: install's form in every part (its
    fields, relay's quoting, this install's client in `folder` by its full path) except
    its last three words, which are not `--dialect <host> <event>` (a hand edit to
    `--dialect claud Stop` makes the client exit 2 on every event). Install repairs such an
    entry and uninstall removes it; one with another client path, or other words, is the
    user's (see `is_relay_entry`)."""
    if not isinstance(hook, dict) or hook.get("type") != "command":
        return False
    extra = dict(host.entry_extra)
    if set(hook) - {"type", "command", "timeout", *extra}:
        return False
    words = _entry_words(hook.get("command"))
    if words is None or len(words) < 4 or words[-3:] == ["--dialect", host.name, event]:
        return False
    head = words[:-3]
    native = str(folder / NATIVE_NAME)
    script = str(folder / PYTHON_NAME)
    return head == [native] or (len(head) == 4 and head[1:] == ["-I", "-S", script])


def runs_relay(command: object) -> bool:
    """Whether a hook's command looks like it runs relay (relay's client, `relay hooks
    run`, the mail waiter) with a `--dialect`: for telling the user about entries of theirs
    that run relay; never a reason to change, remove or trust one."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    if words[:1] == [ENTRY_PREFIX]:
        words = words[1:]
    names = [os.path.basename(word) for word in words]
    ours = (
        any(name in CLIENT_NAMES for name in names[:4])
        or (bool(names) and names[0] == "relay" and words[1:3] == ["hooks", "run"])
        or "wait-mail" in words[:6]
    )
    return ours and "--dialect" in words


def _entry_words(command: object) -> list[str] | None:
    """The words of a command written as relay writes its entries, without the leading
    `exec` (which entries written before it lack): None for any other form."""
    words = _canonical_words(command)
    if words is not None and words[0] == ENTRY_PREFIX:
        return words[1:] or None
    return words


def _canonical_words(command: object) -> list[str] | None:
    """The words of a command written as relay writes commands (each word quoted only as
    `shlex.quote` does, one space between): no shell syntax can hide in it."""
    if not isinstance(command, str):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    return words if words and shlex.join(words) == command else None


WAITER_EVENTS = frozenset({"SessionStart", "Stop"})
"""Claude Code events that start relay's mail waiter (relay.hosts.waiter): in the
background (`asyncRewake`), so that mail wakes an idle agent."""


def waiter_command(host: Host) -> str:
    words = (sys.executable, "-m", "relay", "hooks", "wait-mail", "--dialect", host.name)
    return " ".join(shlex.quote(word) for word in words)


def is_waiter_entry(hook: object, host: Host) -> bool:
    """Whether a hook entry is relay's mail waiter, in exactly the form install writes."""
    if not isinstance(hook, dict) or hook.get("type") != "command":
        return False
    if set(hook) - {"type", "command", "asyncRewake", "timeout"}:
        return False
    words = _canonical_words(hook.get("command"))
    return (
        words is not None
        and len(words) == 7
        and os.path.isabs(words[0])
        and words[1:] == ["-m", "relay", "hooks", "wait-mail", "--dialect", host.name]
    )


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
    found = _names_in_files(
        _host_files(Path(executable)), host.events, cache_dir(env) / "host-events.json"
    )
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


def _names_in_files(files: Iterator[Path], names: tuple[str, ...], cache: Path) -> set[str]:
    """Which of `names` occur quoted ('Name', "Name" or `Name`) in any of `files`, each
    file's answer kept in the JSON file `cache` (code_cache: reading a host's native build
    takes seconds)."""
    pattern = re.compile(
        rb"[\"'`](" + b"|".join(re.escape(name.encode()) for name in names) + rb")[\"'`]"
    )
    tag = f"{len(names)}:{_names_digest(names)}|"

    def read(path: Path) -> list[str]:
        size = path.stat().st_size
        if not size or size > _SCAN_LIMIT:
            return []
        with (
            path.open("rb") as stream,
            mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            seen: set[str] = set()
            for match in pattern.finditer(data):
                seen.add(match.group(1).decode())
                if len(seen) == len(names):
                    break
        return sorted(seen)

    found: set[str] = set()
    for path in files:
        try:
            found.update(read_cached(path, cache, read, list[str], tag))
        except (OSError, ValueError):
            continue
        if len(found) == len(names):
            break
    return found


def _names_digest(names: tuple[str, ...]) -> str:
    """A short digest of `names`, which tells apart readings of one file for other tables."""
    return hashlib.sha256("\0".join(names).encode()).hexdigest()[:16]


# --- editing the host's settings -------------------------------------------------------------


class Change(msgspec.Struct, kw_only=True):
    """What an install or uninstall did (or would do) to one settings file."""

    file: Path
    text: str | None
    """The new text; None when the file is to be removed."""
    changed: bool
    added: list[str] = msgspec.field(default_factory=list)
    updated: list[str] = msgspec.field(default_factory=list)
    repaired: list[str] = msgspec.field(default_factory=list)
    """Events whose damaged entry of relay's (`is_damaged_entry`) was repaired in place."""
    kept: list[str] = msgspec.field(default_factory=list)
    removed: list[str] = msgspec.field(default_factory=list)
    foreign: list[str] = msgspec.field(default_factory=list)
    """Events whose other (non-relay) hooks still run beside relay."""
    theirs: list[str] = msgspec.field(default_factory=list)
    """Events with an entry of the user's own that runs relay: left as it is."""
    created_file: bool = False
    """The file did not exist: this edit creates it."""
    containers: list[FieldPath] = msgspec.field(default_factory=list)
    """Objects and arrays this edit creates to hold relay's entries."""
    items: list[tuple[FieldPath, str]] = msgspec.field(default_factory=list)
    """Array items this edit adds (none for hook entries, which say they are relay's)."""
    found_relay: bool = False
    """relay's own entries were in the file before this edit."""


class Edit(Protocol):
    """One file's edit, as install and uninstall compute it."""

    @property
    def file(self) -> Path: ...
    @property
    def text(self) -> str | None: ...
    @property
    def changed(self) -> bool: ...
    @property
    def created_file(self) -> bool: ...
    @property
    def containers(self) -> list[FieldPath]: ...
    @property
    def items(self) -> list[tuple[FieldPath, str]]: ...
    @property
    def found_relay(self) -> bool: ...


E = TypeVar("E", bound=Edit)


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
        return Change(
            file=path,
            text=new_settings_text(document),
            changed=True,
            added=list(events),
            created_file=text is None,
            containers=[("hooks",), *(("hooks", event) for event in events)],
        )
    editable = _editable(text, file)
    expected = copy.deepcopy(editable.value)
    change = Change(file=path, text=text, changed=False)
    hooks = _container(editable, ("hooks",), dict)
    if hooks is None:
        editable.insert((), "hooks", {})
        expected["hooks"] = {}
        change.containers.append(("hooks",))
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
            change.containers.append(("hooks", event))
            continue
        folder = Path(client.argv[-1]).parent
        if _repair(editable, expected, host, event, command=command, folder=folder):
            change.repaired.append(event)
        groups = expected["hooks"][event]
        found = list(_relay_hooks(groups, host, event))
        change.found_relay = change.found_relay or bool(found)
        if event in change.repaired:
            change.found_relay = True
            if _wants_waiter(host, event):
                _ensure_waiter(editable, expected, host, event)
            continue
        if any(hook.get("command") == command for _, _, hook in found):
            change.kept.append(event)
        elif found:
            # relay's own entry with another client's path (another relay install, or a
            # teammate's in a shared project file): only its command is brought up to date.
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
        if _their_relay_hooks(expected["hooks"][event], host, event):
            change.theirs.append(event)
        if _foreign_hooks(expected["hooks"][event], host, event):
            change.foreign.append(event)
    change.text = _checked(editable, expected, file)
    change.changed = change.text != text
    return change


def _repair(
    editable: JsonText,
    expected: dict[str, Any],
    host: Host,
    event: str,
    *,
    command: str,
    folder: Path,
) -> bool:
    """relay's damaged entries for `event` taken out, the first one put right in place when
    relay has no sound entry there (True then: repaired)."""
    groups = expected["hooks"][event]
    damaged = list(
        _hooks_in(groups, lambda group, hook: _damaged(group, hook, host, event, folder))
    )
    if not damaged:
        return False
    repair = not any(_relay_hooks(groups, host, event))
    if repair:
        group_index, hook_index, _ = damaged.pop(0)
        where = ("hooks", event, group_index, "hooks", hook_index, "command")
        editable.replace(where, command)
        groups[group_index]["hooks"][hook_index]["command"] = command
    _drop(editable, expected, event, damaged)
    return repair


def _drop(
    editable: JsonText,
    expected: dict[str, Any],
    event: str,
    hooks: list[tuple[int, int, dict[str, Any]]],
) -> None:
    """Take these hooks of `event` out, and the groups they leave empty."""
    # From the last one back, so earlier indexes stay valid.
    for group_index, hook_index, _ in reversed(hooks):
        group_hooks = expected["hooks"][event][group_index]["hooks"]
        if len(group_hooks) == 1:
            editable.remove(("hooks", event, group_index))
            del expected["hooks"][event][group_index]
        else:
            editable.remove(("hooks", event, group_index, "hooks", hook_index))
            del group_hooks[hook_index]


def _ensure_waiter(editable: JsonText, expected: dict[str, Any], host: Host, event: str) -> None:
    """relay's mail waiter in `event`, current (its Python path updated in place)."""
    wanted = waiter_command(host)
    found = list(
        _hooks_in(expected["hooks"][event], lambda group, hook: _waiter(group, hook, host))
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


def uninstall_text(
    text: str | None,
    host: Host,
    *,
    file: str,
    record: FileRecord | None = None,
    env: Mapping[str, str] | None = None,
) -> Change:
    """The host settings text without relay's entries, and without the containers relay
    created that they leave empty (with no record of what relay created, as an older relay
    left things: the event arrays and `hooks` they leave empty). A file relay created that
    is left holding nothing is removed (`text` None)."""
    folder = client_folder(env)
    change = remove_hooks_text(
        text,
        lambda event, group, hook: (
            _relay_hook(group, hook, host, event)
            or _waiter(group, hook, host)
            or _damaged(group, hook, host, event, folder)
        ),
        file=file,
        prune=None if record is None else record.created_container,
    )
    left = change.text
    if record is not None and record.created and change.removed and left is not None:
        change.text = None if decode_host_json(left, file=file) == {} else left
    return change


def remove_hooks_text(
    text: str | None,
    chosen: Callable[[str, dict[str, Any], dict[str, Any]], bool],
    *,
    file: str,
    prune: Callable[[FieldPath], bool] | None = None,
) -> Change:
    """The host settings text without the hooks `chosen(event, group, hook)` picks, the
    groups they leave empty, and the event arrays and `hooks` object they leave empty that
    `prune` names (all of them when `prune` is None). `removed` lists the events touched."""
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
        found = list(_hooks_in(groups, functools.partial(chosen, event)))
        if not found:
            continue
        change.removed.append(event)
        _drop(editable, expected, event, found)
        if not expected["hooks"][event] and (prune is None or prune(("hooks", event))):
            editable.remove(("hooks", event))
            del expected["hooks"][event]
    if change.removed and not expected["hooks"] and (prune is None or prune(("hooks",))):
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


def _hooks_object(text: str | None) -> dict[str, Any]:
    """The `hooks` object of a host settings text ({} when unreadable or absent)."""
    if text is None or not text.strip():
        return {}
    try:
        value = decode_host_json(text, file="")
    except SettingsError:
        return {}
    hooks = value.get("hooks") if isinstance(value, dict) else None
    return hooks if isinstance(hooks, dict) else {}


def installed_events(text: str | None, host: Host) -> dict[str, list[str]]:
    """Per event, the commands of relay's entries in a host settings text (unreadable: {})."""
    entries = {
        event: [str(hook["command"]) for _, _, hook in _relay_hooks(groups, host, event)]
        for event, groups in _hooks_object(text).items()
        if isinstance(groups, list)
    }
    return {event: commands for event, commands in entries.items() if commands}


def damaged_entries(text: str | None, host: Host, folder: Path) -> dict[str, list[str]]:
    """Per event, the commands of relay's damaged entries (`is_damaged_entry`) in a host
    settings text, for `folder`'s client (unreadable: {})."""
    entries = {
        event: [
            str(hook.get("command"))
            for _, _, hook in _hooks_in(
                groups, functools.partial(_damaged, host=host, event=event, folder=folder)
            )
        ]
        for event, groups in _hooks_object(text).items()
        if isinstance(groups, list)
    }
    return {event: commands for event, commands in entries.items() if commands}


def their_relay_entries(text: str | None, host: Host) -> dict[str, list[str]]:
    """Per event, the commands of the user's own entries that run relay (not relay's form)."""
    entries = {
        event: [
            str(hook.get("command"))
            for _, _, hook in _hooks_in(groups, functools.partial(_theirs, host=host, event=event))
        ]
        for event, groups in _hooks_object(text).items()
        if isinstance(groups, list)
    }
    return {event: commands for event, commands in entries.items() if commands}


def decode_host_json(text: str, *, file: str) -> Any:
    """A host settings file's value: JSON, `//` and `/* */` comments allowed (Gemini CLI
    reads its settings so), no key twice in one object. SettingsError when it is not."""
    return decode_with_comments(text, file=file)


# --- writing --------------------------------------------------------------------------------

_ATTEMPTS = 5
_LOCK_WAIT = 60.0


@contextlib.contextmanager
def install_lock(
    env: Mapping[str, str] | None = None, *, waiting: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Held by every relay install and uninstall while it edits host files, so that two of
    relay's own writers never interleave (others are caught by `update_file`'s re-read);
    `waiting` is told once, with a sentence, when another holds it."""
    try:
        folder = private_dir(state_dir(env) / "locks", top=state_dir(env))
        fd = os.open(folder / "install.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise InstallError(f"cannot take relay's install lock: {exc}") from None
    try:
        deadline = time.monotonic() + _LOCK_WAIT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if waiting is not None:
                    waiting(
                        f"waiting for another relay install or uninstall to finish "
                        f"(it holds {folder / 'install.lock'})"
                    )
                    waiting = None
                if time.monotonic() > deadline:
                    raise InstallError(
                        f"another relay install or uninstall has held {folder / 'install.lock'} "
                        f"for {_LOCK_WAIT:.0f} s; try again once it is done"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def check_inside(where: Target, path: Path) -> None:
    """For a project install, refuse a file that is (or is reached through) a symbolic link
    out of the project, or a link to nothing: relay writes nothing outside the project, and
    creates no file at a link's target (a cloned repository chooses its links)."""
    if where.root is None:
        return
    root = Path(os.path.realpath(where.root))
    real = Path(os.path.realpath(path))
    if real != root and root not in real.parents:
        raise InstallError(
            f"{path} leads out of the project (to {real}) through a symbolic link; relay "
            "writes nothing outside the project: remove the link, or install with --user"
        )
    if path.is_symlink() and not path.exists():
        raise InstallError(
            f"{path} is a symbolic link to {real}, which does not exist; relay does not "
            "create files through links: remove the link"
        )


def apply_edits(
    edits: list[tuple[Path, Callable[[str | None], E]]],
    where: Target,
    *,
    dry_run: bool = False,
    undo: bool = False,
    env: Mapping[str, str] | None = None,
) -> list[E]:
    """Compute every edit first (so one that fails leaves every file as it was), then write
    each with `update_file`, and keep relay's record of what it added (`undo`: forget it
    once relay's parts are out). Returns the edits as written (or as they would be)."""
    for path, _ in edits:
        check_inside(where, path)
    planned = [compute(read_text(path)) for path, compute in edits]
    if dry_run:
        return planned
    done: list[E] = []
    for path, compute in edits:
        edit = update_file(path, compute, where=where)
        done.append(edit)
        if edit.changed and not undo:
            record = ledger.load(path, env) or FileRecord(
                file=str(path.absolute()), adopted=edit.found_relay
            )
            ledger.save(
                record.merged(
                    created=edit.created_file, containers=edit.containers, items=edit.items
                ),
                env,
            )
    if undo:
        for path in dict.fromkeys(path for path, _ in edits):
            ledger.forget(path, env)
    return done


def update_file(
    path: Path, compute: Callable[[str | None], E], *, where: Target | None = None
) -> E:
    """Read the file, compute its edit, and replace it only if nobody changed it meanwhile
    (else read it again and recompute): another program's update made between relay's read
    and its write is not lost. InstallError if it keeps changing."""
    if where is not None:
        check_inside(where, path)
    folder_mode = 0o755 if where is not None and where.scope == "project" else 0o700
    for _ in range(_ATTEMPTS):
        before = read_text(path)
        edit = compute(before)
        if not edit.changed or _replace_if_unchanged(path, before, edit.text, folder_mode):
            return edit
    raise InstallError(
        f"{path}: another program changed it each time relay was about to write it "
        f"({_ATTEMPTS} tries); nothing was written, run this again"
    )


def write_text(path: Path, text: str | None) -> None:
    """Replace the file at once (same mode as before, else 0600 for a new one; through a
    symbolic link, its target), whatever is there now."""
    _replace_if_unchanged(path, read_text(path), text, 0o700)


def _replace_if_unchanged(
    path: Path, before: str | None, text: str | None, folder_mode: int
) -> bool:
    """Put `text` in place of the file (None: remove it) if it still holds `before`."""
    if path.is_symlink():
        path = Path(os.path.realpath(path))  # a dotfiles link stays a link: its target is edited
    staged: Path | None = None
    try:
        if text is not None:
            _make_folders(path.parent, folder_mode)
            try:
                mode = path.stat().st_mode & 0o777
            except FileNotFoundError:
                mode = 0o600
            staged = path.with_name(f".{path.name}.relay-{os.getpid()}")
            fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as stream:
                stream.write(text)
            os.chmod(staged, mode)
        # Compared as late as possible: the window for a lost update is this line and the next.
        if read_text(path) != before:
            return False
        if staged is None:
            path.unlink(missing_ok=True)
        else:
            staged.replace(path)
            staged = None
        return True
    except OSError as exc:
        raise InstallError(f"{path}: cannot write: {exc}") from None
    finally:
        if staged is not None:
            staged.unlink(missing_ok=True)


def _make_folders(folder: Path, mode: int) -> None:
    """Create `folder` and its missing parents with `mode` (never wider: a umask of 000
    must not leave a host's folder writable by everyone)."""
    missing = [parent for parent in (folder, *folder.parents) if not parent.exists()]
    for parent in reversed(missing):
        parent.mkdir(mode=mode, exist_ok=True)


def _group(host: Host, client: Client, event: str) -> dict[str, Any]:
    hook: dict[str, Any] = {"type": "command", "command": client.command(host, event)}
    hook.update(dict(host.entry_extra))
    seconds = host.entry_timeouts.get(event, HOST_TIMEOUT_SECONDS)
    hook["timeout"] = seconds * host.timeout_scale
    return {"hooks": [hook]}


def _plain_group(group: dict[str, Any]) -> bool:
    """A group for every tool, as relay writes its own (a matcher is the user's choice)."""
    return group.get("matcher") in (None, "", "*")


def _relay_hook(group: dict[str, Any], hook: dict[str, Any], host: Host, event: str) -> bool:
    return _plain_group(group) and is_relay_entry(hook, host, event)


def _damaged(
    group: dict[str, Any], hook: dict[str, Any], host: Host, event: str, folder: Path
) -> bool:
    return _plain_group(group) and is_damaged_entry(hook, host, event, folder)


def _waiter(group: dict[str, Any], hook: dict[str, Any], host: Host) -> bool:
    return _plain_group(group) and is_waiter_entry(hook, host)


def _theirs(group: dict[str, Any], hook: dict[str, Any], host: Host, event: str) -> bool:
    return runs_relay(hook.get("command")) and not (
        _relay_hook(group, hook, host, event) or _waiter(group, hook, host)
    )


def _relay_hooks(
    groups: list[Any], host: Host, event: str
) -> Iterator[tuple[int, int, dict[str, Any]]]:
    return _hooks_in(groups, lambda group, hook: _relay_hook(group, hook, host, event))


def _hooks_in(
    groups: list[Any], chosen: Callable[[dict[str, Any], dict[str, Any]], bool]
) -> Iterator[tuple[int, int, dict[str, Any]]]:
    for group_index, group in enumerate(groups):
        inner = group.get("hooks") if isinstance(group, dict) else None
        if not isinstance(inner, list):
            continue
        for hook_index, hook in enumerate(inner):
            if isinstance(hook, dict) and chosen(group, hook):
                yield group_index, hook_index, hook


def _their_relay_hooks(groups: list[Any], host: Host, event: str) -> bool:
    return any(_hooks_in(groups, lambda group, hook: _theirs(group, hook, host, event)))


def _foreign_hooks(groups: list[Any], host: Host, event: str) -> bool:
    for group in groups:
        inner = group.get("hooks") if isinstance(group, dict) else None
        for hook in inner if isinstance(inner, list) else ():
            if not (
                isinstance(hook, dict)
                and (_relay_hook(group, hook, host, event) or _waiter(group, hook, host))
            ):
                return True
    return False


def _editable(text: str, file: str) -> JsonText:
    try:
        document = JsonText(text, file=file, comments=True)
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

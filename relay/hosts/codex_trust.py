"""Codex's hook trust: Codex runs a hook only once its hash is recorded as trusted, and
skips an untrusted one without a word (the tool just runs).

Codex lists its hooks, with each one's key and current hash, through `codex app-server`
(JSON-RPC over stdio, one object per line: `initialize`, `initialized`, `hooks/list`).
Trust is a table per hook in `$CODEX_HOME/config.toml`:

    [hooks.state."<key>"]
    trusted_hash = "sha256:…"

relay records it only for its own entries, and only with the user's consent. Which listed
hooks are relay's is decided by the file, not by what a command looks like: Codex's key
names the place of a hook in its file (`<file>:<event>:<group>:<hook>`), and a hook is
relay's only when that place holds relay's entry in exactly the form install writes
(relay.hosts.install.is_relay_entry), with the exact command of this install's client, and
Codex lists that same command. A look-alike planted in a repository's `.codex/hooks.json`
(`sh -c '…' relay-hook --dialect …`, `/opt/x/relay-hook --dialect x; curl …`) is never
trusted.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from relay.errors import RelayError, SettingsError
from relay.hosts.install import decode_host_json, is_relay_entry
from relay.hosts.model import Host

APP_SERVER_TIMEOUT = 30.0


class CodexError(RelayError):
    """Codex's app-server could not be asked, or config.toml could not be updated."""


class CodexHook(msgspec.Struct, frozen=True, kw_only=True):
    """One hook as Codex lists it."""

    key: str
    event: str
    command: str
    current_hash: str
    trust_status: str
    source_path: str

    @property
    def trusted(self) -> bool:
        """Whether Codex runs it (its recorded hash is the current one)."""
        return self.trust_status in ("trusted", "managed")


def codex_home(env: Mapping[str, str] | None = None) -> Path:
    """$CODEX_HOME, else ~/.codex."""
    env = os.environ if env is None else env
    configured = env.get("CODEX_HOME")
    if configured:
        return Path(configured).expanduser()
    return Path(env.get("HOME") or str(Path.home())) / ".codex"


def list_hooks(
    executable: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    *,
    timeout: float = APP_SERVER_TIMEOUT,
) -> list[CodexHook]:
    """The hooks Codex sees from `cwd`, through `codex app-server` `hooks/list`."""
    full_env = dict(os.environ if env is None else env)
    full_env["NO_COLOR"] = "1"
    try:
        process = subprocess.Popen(
            [executable, "app-server", "--listen", "stdio://"],
            cwd=cwd,
            env=full_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError as exc:
        raise CodexError(f"cannot run {executable} app-server: {exc}") from None
    try:
        rpc = _Rpc(process, time.monotonic() + timeout)
        rpc.request(1, "initialize", {"clientInfo": {"name": "relay", "version": "1"}})
        rpc.send({"jsonrpc": "2.0", "method": "initialized"})
        result = rpc.request(2, "hooks/list", {"cwds": [str(cwd)]})
    finally:
        if process.stdin:
            process.stdin.close()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout:
            process.stdout.close()
    entries = result.get("data") if isinstance(result, dict) else None
    hooks: list[CodexHook] = []
    for entry in entries if isinstance(entries, list) else ():
        for hook in entry.get("hooks") or () if isinstance(entry, dict) else ():
            if not isinstance(hook, dict) or not isinstance(hook.get("key"), str):
                continue
            hooks.append(
                CodexHook(
                    key=hook["key"],
                    event=str(hook.get("eventName", "")),
                    command=str(hook.get("command") or ""),
                    current_hash=str(hook.get("currentHash", "")),
                    trust_status=str(hook.get("trustStatus", "")),
                    source_path=str(hook.get("sourcePath", "")),
                )
            )
    return hooks


class _Rpc:
    """Just enough JSON-RPC over a child's stdio, every read bounded by one deadline."""

    def __init__(self, process: subprocess.Popen[bytes], deadline: float) -> None:
        self.process = process
        self.deadline = deadline
        self.buffer = b""

    def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.flush()
        except OSError as exc:
            raise CodexError(f"codex app-server went away: {exc}") from None

    def request(self, number: int, method: str, params: dict[str, Any]) -> Any:
        self.send({"jsonrpc": "2.0", "id": number, "method": method, "params": params})
        while True:
            message = self._message()
            if message.get("id") != number or "method" in message:
                continue  # a notification, or a request of the server's own
            if "error" in message:
                raise CodexError(f"codex app-server: {method}: {message['error']}")
            return message.get("result")

    def _message(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        stream = self.process.stdout
        with selectors.DefaultSelector() as selector:
            selector.register(stream, selectors.EVENT_READ)
            while True:
                line, newline, rest = self.buffer.partition(b"\n")
                if newline:
                    self.buffer = rest
                    try:
                        value = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(value, dict):
                        return value
                    continue
                remaining = self.deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    raise CodexError("codex app-server did not answer in time")
                chunk = os.read(stream.fileno(), 65536)
                if not chunk:
                    raise CodexError("codex app-server exited without answering")
                self.buffer += chunk


def relay_hooks(
    listed: Iterable[CodexHook],
    file: Path,
    text: str | None,
    host: Host,
    command: Callable[[str], str] | None = None,
) -> list[CodexHook]:
    """The hooks of `listed` that are relay's entries in `file`, whose text is `text` (read
    around the listing): the place each key names holds relay's entry for that event, word
    for word the command Codex lists, and (with `command`) exactly `command(event)`."""
    try:
        document = decode_host_json(text or "", file=str(file)) if text else None
    except SettingsError:
        return []
    hooks = document.get("hooks") if isinstance(document, dict) else None
    if not isinstance(hooks, dict):
        return []
    events = {_snake(event): event for event in host.events}
    ours: list[CodexHook] = []
    for hook in listed:
        if not _same_file(hook.source_path, file):
            continue
        parts = hook.key.rsplit(":", 3)  # <file>:<event_snake_case>:<group>:<hook>
        if len(parts) != 4 or not (parts[2].isdigit() and parts[3].isdigit()):
            continue
        source, snake, group_index, hook_index = parts[0], parts[1], int(parts[2]), int(parts[3])
        event = events.get(snake)
        if event is None or not _same_file(source, file):
            continue
        entry = _at(hooks, event, group_index, hook_index)
        if entry is None:
            continue
        group, found = entry
        if group.get("matcher") not in (None, "", "*") or not is_relay_entry(found, host, event):
            continue
        if found["command"] != hook.command:
            continue
        if command is not None and found["command"] != command(event):
            continue
        ours.append(hook)
    return ours


def _snake(event: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", event).lower()


def _at(
    hooks: dict[str, Any], event: str, group_index: int, hook_index: int
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    groups = hooks.get(event)
    if not isinstance(groups, list) or group_index >= len(groups):
        return None
    group = groups[group_index]
    inner = group.get("hooks") if isinstance(group, dict) else None
    if not isinstance(inner, list) or hook_index >= len(inner):
        return None
    found = inner[hook_index]
    return (group, found) if isinstance(found, dict) else None


def _same_file(left: str, right: Path) -> bool:
    try:
        return os.path.samefile(left, right)
    except OSError:
        return os.path.abspath(left) == os.path.abspath(right)


# --- config.toml -----------------------------------------------------------------------------


def _header(key: str) -> str:
    return f"[hooks.state.{json.dumps(key)}]"


def _table(key: str) -> re.Pattern[str]:
    """The table for `key`: its header line and every line up to the next table."""
    return re.compile(
        r"^[ \t]*" + re.escape(_header(key)) + r"[ \t]*(?:#[^\n]*)?\n?(?:(?![ \t]*\[).*\n?)*",
        re.MULTILINE,
    )


def trusted_text(text: str, hooks: Iterable[CodexHook], *, file: str) -> str:
    """config.toml's text with `trusted_hash` recorded for each hook (other text kept)."""
    _parse(text, file)
    for hook in hooks:
        text = _table(hook.key).sub("", text)
        if text and not text.endswith("\n"):
            text += "\n"
        separator = "\n" if text.strip() else ""
        text += f"{separator}{_header(hook.key)}\ntrusted_hash = {json.dumps(hook.current_hash)}\n"
    recorded = _parse(text, file).get("hooks", {}).get("state", {})
    for hook in hooks:
        if recorded.get(hook.key, {}).get("trusted_hash") != hook.current_hash:
            raise CodexError(f"{file}: internal error: the trust of {hook.key} was not recorded")
    return text


def untrusted_text(text: str, keys: Iterable[str], *, file: str) -> str:
    """config.toml's text without the trust tables of `keys`."""
    _parse(text, file)
    for key in keys:
        text = _table(key).sub("", text)
    _parse(text, file)
    return text


def _parse(text: str, file: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CodexError(f"{file}: not valid TOML ({exc}); relay leaves it as it is") from None

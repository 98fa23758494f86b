"""Registering `relay mcp` in a host's own MCP configuration (spec/mcp.md, "In the hosts").

`relay install <host>` registers relay's MCP server under the name `relay`, beside the
hooks, and `relay uninstall` takes it out again; like the hooks, the edit is minimal,
idempotent and reversible, and only an entry recognised as relay's is ever changed.

| host | user scope | project scope |
|---|---|---|
| Claude Code | `~/.claude.json` (`$CLAUDE_CONFIG_DIR/.claude.json`) `mcpServers` | `<project>/.mcp.json` `mcpServers`, approved in `.claude/settings.local.json` `enabledMcpjsonServers` |
| Gemini CLI | `~/.gemini/settings.json` `mcpServers` | `<project>/.gemini/settings.json` `mcpServers` |
| Codex CLI | `$CODEX_HOME/config.toml` `[mcp_servers.relay]` | `<project>/.codex/config.toml` |

Claude Code also gets `mcp__relay` in the hooks file's `permissions.allow`, so that the
agent may call relay's tools without asking each time (what a tool may do is relay's
own policy: `directives` in relay's settings, spec/directives.md §10); Gemini CLI's entry
is `trust: true` for the same reason.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from relay.config.editing import JsonText, new_settings_text
from relay.config.paths import find_project_root
from relay.errors import SettingsError
from relay.hosts.install import InstallError, Target, read_text, write_text

SERVER_NAME = "relay"
CLAUDE_PERMISSION = f"mcp__{SERVER_NAME}"


class McpChange(msgspec.Struct, kw_only=True):
    """One file's edit for relay's MCP server."""

    file: Path
    text: str | None
    what: str
    """What was done, for the user: "added", "already there", "updated", "removed"."""

    @property
    def changed(self) -> bool:
        return self.what not in ("already there", "not there")


def server_command() -> tuple[str, list[str]]:
    """The command that starts relay's MCP server from this install."""
    return sys.executable, ["-m", "relay", "mcp"]


def is_relay_server(entry: object) -> bool:
    """Whether an MCP server entry is relay's (`… -m relay mcp`, or `relay mcp`)."""
    if not isinstance(entry, dict):
        return False
    command, args = entry.get("command"), entry.get("args")
    if not isinstance(command, str) or not isinstance(args, list):
        return False
    words = [command, *(str(arg) for arg in args)]
    if os.path.basename(command) == "relay":
        return words[1:2] == ["mcp"]
    return "-m" in words and words[words.index("-m") + 1 : words.index("-m") + 3] == [
        "relay",
        "mcp",
    ]


def entry_for(host_name: str) -> dict[str, Any]:
    command, args = server_command()
    entry: dict[str, Any] = {"command": command, "args": args}
    if host_name == "claude":
        entry = {"type": "stdio", **entry}
    if host_name == "gemini":
        entry["trust"] = True
    return entry


# -- where -------------------------------------------------------------------------------


def mcp_file(where: Target, env: Mapping[str, str] | None = None) -> Path:
    """The file that holds the host's MCP servers for this target."""
    env = os.environ if env is None else env
    name = where.host.name
    if name == "claude":
        if where.scope == "project":
            return where.folder.parent / ".mcp.json"
        configured = env.get("CLAUDE_CONFIG_DIR")
        home = Path(configured).expanduser() if configured else Path(env.get("HOME") or Path.home())
        return home / ".claude.json"
    if name == "codex":
        return where.folder / "config.toml"
    return where.file


def project_root(cwd: Path) -> Path:
    return find_project_root(cwd) or cwd


# -- JSON files --------------------------------------------------------------------------


def install_json(text: str | None, entry: dict[str, Any], *, file: Path) -> McpChange:
    """`mcpServers.relay` set to `entry` (another server of that name is left alone)."""
    if text is None or not text.strip():
        return McpChange(
            file=file, text=new_settings_text({"mcpServers": {SERVER_NAME: entry}}), what="added"
        )
    document = _editable(text, file)
    expected = copy.deepcopy(document.value)
    servers = _object(document, ("mcpServers",))
    if servers is None:
        document.insert((), "mcpServers", {SERVER_NAME: entry})
        expected["mcpServers"] = {SERVER_NAME: entry}
        what = "added"
    elif SERVER_NAME not in servers:
        document.insert(("mcpServers",), SERVER_NAME, entry)
        expected["mcpServers"][SERVER_NAME] = entry
        what = "added"
    elif not is_relay_server(servers[SERVER_NAME]):
        raise InstallError(
            f"{file}: an MCP server named {SERVER_NAME!r} is already there and is not relay's; "
            "relay leaves it as it is (rename it, or install with --no-mcp)"
        )
    elif servers[SERVER_NAME] == entry:
        return McpChange(file=file, text=text, what="already there")
    else:
        document.replace(("mcpServers", SERVER_NAME), entry)
        expected["mcpServers"][SERVER_NAME] = entry
        what = "updated"
    return McpChange(file=file, text=_checked(document, expected, file), what=what)


def uninstall_json(text: str | None, *, file: Path) -> McpChange:
    """Without relay's `mcpServers.relay` (and `mcpServers` when that leaves it empty)."""
    if text is None or not text.strip():
        return McpChange(file=file, text=text, what="not there")
    document = _editable(text, file)
    servers = _object(document, ("mcpServers",))
    if not servers or not is_relay_server(servers.get(SERVER_NAME)):
        return McpChange(file=file, text=text, what="not there")
    expected = copy.deepcopy(document.value)
    if len(servers) == 1:
        document.remove(("mcpServers",))
        del expected["mcpServers"]
    else:
        document.remove(("mcpServers", SERVER_NAME))
        del expected["mcpServers"][SERVER_NAME]
    new = _checked(document, expected, file)
    # A file left holding nothing (the `.mcp.json` install created) goes altogether.
    return McpChange(file=file, text=None if expected == {} else new, what="removed")


def add_to_list(text: str | None, path: tuple[str, ...], item: str, *, file: Path) -> McpChange:
    """`item` in the array at `path` (created with its parents where missing)."""
    if text is None or not text.strip():
        value: Any = [item]
        for key in reversed(path):
            value = {key: value}
        return McpChange(file=file, text=new_settings_text(value), what="added")
    document = _editable(text, file)
    expected = copy.deepcopy(document.value)
    for depth in range(len(path)):
        here = path[: depth + 1]
        last = depth == len(path) - 1
        if not document.has(here):
            value = [item]
            for key in reversed(path[depth + 1 :]):
                value = {key: value}
            document.insert(here[:-1], here[-1], value)
            _set(expected, here, value)
            return McpChange(file=file, text=_checked(document, expected, file), what="added")
        if not last:
            _object(document, here)
    present = document.at(path)
    if not isinstance(present, list):
        raise InstallError(f"{file}: {'.'.join(path)} is not an array; relay leaves it as it is")
    if item in present:
        return McpChange(file=file, text=text, what="already there")
    document.append(path, item)
    _get(expected, path).append(item)
    return McpChange(file=file, text=_checked(document, expected, file), what="added")


def remove_from_list(
    text: str | None, path: tuple[str, ...], item: str, *, file: Path
) -> McpChange:
    """Without `item` in the array at `path` (and the containers that leaves empty)."""
    if text is None or not text.strip():
        return McpChange(file=file, text=text, what="not there")
    document = _editable(text, file)
    if not document.has(path):
        return McpChange(file=file, text=text, what="not there")
    present = document.at(path)
    if not isinstance(present, list) or item not in present:
        return McpChange(file=file, text=text, what="not there")
    expected = copy.deepcopy(document.value)
    document.remove((*path, present.index(item)))
    _get(expected, path).remove(item)
    for depth in range(len(path), 0, -1):  # the containers it leaves empty
        here = path[:depth]
        if _get(expected, here):
            break
        document.remove(here)
        del _get(expected, here[:-1])[here[-1]]
    return McpChange(file=file, text=_checked(document, expected, file), what="removed")


def _editable(text: str, file: Path) -> JsonText:
    try:
        document = JsonText(text, file=str(file))
    except SettingsError as exc:
        raise InstallError(f"{exc} (fix the file, then run this again)") from None
    if not isinstance(document.value, dict):
        raise InstallError(f"{file}: expected a JSON object")
    return document


def _object(document: JsonText, path: tuple[str, ...]) -> dict[str, Any] | None:
    if not document.has(path):
        return None
    value = document.at(path)
    if not isinstance(value, dict):
        raise InstallError(
            f"{document.file}: {'.'.join(path)} is not an object; relay leaves the file as it is"
        )
    return value


def _get(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def _set(value: Any, path: tuple[str, ...], item: Any) -> None:
    _get(value, path[:-1])[path[-1]] = item


def _checked(document: JsonText, expected: Any, file: Path) -> str:
    if document.value != expected:
        raise InstallError(f"{file}: internal error: the edit changed more than intended")
    return document.text


# -- Codex's config.toml -------------------------------------------------------------------

_TABLE = re.compile(
    r"^[ \t]*\[mcp_servers\.(?:relay|\"relay\")\][ \t]*(?:#[^\n]*)?\n?(?:(?![ \t]*\[).*\n?)*",
    re.MULTILINE,
)


def install_toml(text: str | None, *, file: Path) -> McpChange:
    """config.toml with `[mcp_servers.relay]` (another server of that name is left alone)."""
    text = text or ""
    current = _toml(text, file).get("mcp_servers", {}).get(SERVER_NAME)
    command, args = server_command()
    wanted = {"command": command, "args": args}
    if current is not None and not is_relay_server(current):
        raise InstallError(
            f"{file}: an MCP server named {SERVER_NAME!r} is already there and is not relay's; "
            "relay leaves it as it is (rename it, or install with --no-mcp)"
        )
    if current is not None and {key: current.get(key) for key in wanted} == wanted:
        return McpChange(file=file, text=text, what="already there")
    kept = _TABLE.sub("", text) if current is not None else text
    if kept and not kept.endswith("\n"):
        kept += "\n"
    separator = "\n" if kept.strip() else ""
    table = (
        f"[mcp_servers.{SERVER_NAME}]\n"
        f"command = {json.dumps(command)}\n"
        f"args = [{', '.join(json.dumps(arg) for arg in args)}]\n"
    )
    new = f"{kept}{separator}{table}"
    recorded = _toml(new, file).get("mcp_servers", {}).get(SERVER_NAME, {})
    if {key: recorded.get(key) for key in wanted} != wanted:
        raise InstallError(f"{file}: internal error: relay's MCP server was not recorded")
    return McpChange(file=file, text=new, what="updated" if current is not None else "added")


def uninstall_toml(text: str | None, *, file: Path) -> McpChange:
    if not text:
        return McpChange(file=file, text=text, what="not there")
    current = _toml(text, file).get("mcp_servers", {}).get(SERVER_NAME)
    if not is_relay_server(current):
        return McpChange(file=file, text=text, what="not there")
    new = _TABLE.sub("", text)
    if new.endswith("\n\n") and not text.endswith("\n\n"):
        new = new[:-1]  # the blank line install put before its table, at the end
    if SERVER_NAME in _toml(new, file).get("mcp_servers", {}):
        raise InstallError(f"{file}: relay's MCP server is written in a form relay cannot remove")
    return McpChange(file=file, text=new, what="removed")


def _toml(text: str, file: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InstallError(f"{file}: not valid TOML ({exc}); relay leaves it as it is") from None


# -- the whole edit ----------------------------------------------------------------------


def install_mcp(where: Target, *, dry_run: bool = False) -> list[McpChange]:
    """Register relay's MCP server for `where`'s host and scope; the edits made."""
    host = where.host.name
    file = mcp_file(where)
    text = read_text(file)
    changes = [
        install_toml(text, file=file)
        if host == "codex"
        else install_json(text, entry_for(host), file=file)
    ]
    if host == "claude":
        changes.append(
            add_to_list(
                read_text(where.file), ("permissions", "allow"), CLAUDE_PERMISSION, file=where.file
            )
        )
        if where.scope == "project":
            local = where.local_file or where.folder / "settings.local.json"
            changes.append(
                add_to_list(read_text(local), ("enabledMcpjsonServers",), SERVER_NAME, file=local)
            )
    if not dry_run:
        for change in changes:
            if change.changed:
                write_text(change.file, change.text)
    return changes


def uninstall_mcp(where: Target, *, dry_run: bool = False) -> list[McpChange]:
    """Take relay's MCP server (and what install added for it) out again."""
    host = where.host.name
    file = mcp_file(where)
    text = read_text(file)
    changes = [
        uninstall_toml(text, file=file) if host == "codex" else uninstall_json(text, file=file)
    ]
    if host == "claude":
        changes.append(
            remove_from_list(
                read_text(where.file), ("permissions", "allow"), CLAUDE_PERMISSION, file=where.file
            )
        )
        if where.scope == "project":
            local = where.local_file or where.folder / "settings.local.json"
            changes.append(
                remove_from_list(
                    read_text(local), ("enabledMcpjsonServers",), SERVER_NAME, file=local
                )
            )
    if not dry_run:
        for change in changes:
            if change.changed:
                write_text(change.file, change.text)
    return changes

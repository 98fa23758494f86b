"""Registering `relay mcp` in a host's own MCP configuration (spec/mcp.md, "In the hosts").

`relay install <host>` registers relay's MCP server under the name `relay`, beside the
hooks, and `relay uninstall` takes it out again; like the hooks, the edit is minimal,
idempotent and reversible, and only an entry in exactly the form relay writes is ever
changed. A server named `relay` of another form is the user's: install leaves it as it is
and stops before writing anything (`--no-mcp` installs the hooks alone).

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from relay.config.editing import JsonText, new_settings_text
from relay.config.loader import FieldPath
from relay.config.paths import find_project_root
from relay.errors import SettingsError
from relay.hosts import ledger
from relay.hosts.install import InstallError, Target
from relay.hosts.ledger import FileRecord

SERVER_NAME = "relay"
CLAUDE_PERMISSION = f"mcp__{SERVER_NAME}"


class McpChange(msgspec.Struct, kw_only=True):
    """One file's edit for relay's MCP server."""

    file: Path
    text: str | None
    what: str
    """What was done, for the user: "added", "already there", "updated", "removed"."""
    created_file: bool = False
    """The file did not exist: this edit creates it."""
    containers: list[FieldPath] = msgspec.field(default_factory=list)
    """Objects and arrays this edit creates."""
    items: list[tuple[FieldPath, str]] = msgspec.field(default_factory=list)
    """Array items this edit adds."""
    found_relay: bool = False
    """relay's own entry was in the file before this edit."""

    @property
    def changed(self) -> bool:
        return self.what not in ("already there", "not there", "kept")


def server_command() -> tuple[str, list[str]]:
    """The command that starts relay's MCP server from this install."""
    return sys.executable, ["-m", "relay", "mcp"]


def is_relay_server(entry: object) -> bool:
    """Whether an MCP server entry is relay's: exactly the form install writes (an absolute
    Python, `-m relay mcp`, and only the fields relay writes). A server the user wrote, even
    one that runs relay, is theirs."""
    if not isinstance(entry, dict) or set(entry) - {"type", "command", "args", "trust"}:
        return False
    command = entry.get("command")
    return (
        isinstance(command, str)
        and os.path.isabs(command)
        and entry.get("args") == ["-m", "relay", "mcp"]
        and entry.get("type", "stdio") == "stdio"
        and entry.get("trust", True) is True
    )


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
    """`mcpServers.relay` set to `entry`; InstallError when a server of that name is the
    user's (it is left as it is)."""
    if text is None or not text.strip():
        return McpChange(
            file=file,
            text=new_settings_text({"mcpServers": {SERVER_NAME: entry}}),
            what="added",
            created_file=text is None,
            containers=[("mcpServers",)],
        )
    document = _editable(text, file)
    expected = copy.deepcopy(document.value)
    servers = _object(document, ("mcpServers",))
    containers: list[FieldPath] = []
    if servers is None:
        document.insert((), "mcpServers", {SERVER_NAME: entry})
        expected["mcpServers"] = {SERVER_NAME: entry}
        containers.append(("mcpServers",))
        what = "added"
    elif SERVER_NAME not in servers:
        document.insert(("mcpServers",), SERVER_NAME, entry)
        expected["mcpServers"][SERVER_NAME] = entry
        what = "added"
    elif not is_relay_server(servers[SERVER_NAME]):
        raise _theirs(file)
    elif servers[SERVER_NAME] == entry:
        return McpChange(file=file, text=text, what="already there")
    else:
        document.replace(("mcpServers", SERVER_NAME), entry)
        expected["mcpServers"][SERVER_NAME] = entry
        what = "updated"
    new = _checked(document, expected, file)
    return McpChange(
        file=file, text=new, what=what, containers=containers, found_relay=what == "updated"
    )


def _theirs(file: Path) -> InstallError:
    return InstallError(
        f"{file}: an MCP server named {SERVER_NAME!r} is already there and relay did not "
        "write it; relay leaves it as it is and has changed nothing (install with --no-mcp "
        "to keep yours and install the hooks alone, or rename yours)"
    )


def uninstall_json(text: str | None, *, file: Path, record: FileRecord | None) -> McpChange:
    """Without relay's `mcpServers.relay` (and `mcpServers`, when relay created it and it is
    left empty; the file, when relay created it and it is left holding nothing)."""
    if text is None or not text.strip():
        return McpChange(file=file, text=text, what="not there")
    document = _editable(text, file)
    servers = _object(document, ("mcpServers",))
    if not servers or not is_relay_server(servers.get(SERVER_NAME)):
        return McpChange(file=file, text=text, what="not there")
    expected = copy.deepcopy(document.value)
    prune = record is None or record.created_container(("mcpServers",))
    if len(servers) == 1 and prune:
        document.remove(("mcpServers",))
        del expected["mcpServers"]
    else:
        document.remove(("mcpServers", SERVER_NAME))
        del expected["mcpServers"][SERVER_NAME]
    new = _checked(document, expected, file)
    gone = record is not None and record.created and expected == {}
    return McpChange(file=file, text=None if gone else new, what="removed")


def add_to_list(text: str | None, path: tuple[str, ...], item: str, *, file: Path) -> McpChange:
    """`item` in the array at `path` (created with its parents where missing)."""
    added: list[tuple[FieldPath, str]] = [(path, item)]
    if text is None or not text.strip():
        value: Any = [item]
        for key in reversed(path):
            value = {key: value}
        created = [path[: depth + 1] for depth in range(len(path))]
        return McpChange(
            file=file,
            text=new_settings_text(value),
            what="added",
            created_file=text is None,
            containers=list(created),
            items=added,
        )
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
            created = [path[: deeper + 1] for deeper in range(depth, len(path))]
            return McpChange(
                file=file,
                text=_checked(document, expected, file),
                what="added",
                containers=list(created),
                items=added,
            )
        if not last:
            _object(document, here)
    present = document.at(path)
    if not isinstance(present, list):
        raise InstallError(f"{file}: {'.'.join(path)} is not an array; relay leaves it as it is")
    if item in present:
        return McpChange(file=file, text=text, what="already there")
    document.append(path, item)
    _get(expected, path).append(item)
    return McpChange(file=file, text=_checked(document, expected, file), what="added", items=added)


def remove_from_list(
    text: str | None, path: tuple[str, ...], item: str, *, file: Path, record: FileRecord | None
) -> McpChange:
    """Without `item` in the array at `path`, if relay's record says relay added it (one the
    user had is theirs), and without the containers relay created that this leaves empty."""
    if text is None or not text.strip() or record is None or not record.added_item(path, item):
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
    for depth in range(len(path), 0, -1):  # the containers relay created and left empty
        here = path[:depth]
        if _get(expected, here) or not record.created_container(here):
            break
        document.remove(here)
        del _get(expected, here[:-1])[here[-1]]
    new = _checked(document, expected, file)
    gone = record.created and expected == {}
    return McpChange(file=file, text=None if gone else new, what="removed")


def _editable(text: str, file: Path) -> JsonText:
    try:
        document = JsonText(text, file=str(file), comments=True)
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
    """config.toml with `[mcp_servers.relay]`; InstallError when a server of that name is the
    user's (it is left as it is)."""
    created = text is None
    text = text or ""
    current = _toml(text, file).get("mcp_servers", {}).get(SERVER_NAME)
    command, args = server_command()
    wanted = {"command": command, "args": args}
    if current is not None and not (is_relay_server(current) and set(current) <= set(wanted)):
        raise _theirs(file)
    if current is not None and current == wanted:
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
    what = "updated" if current is not None else "added"
    return McpChange(file=file, text=new, what=what, created_file=created)


def uninstall_toml(text: str | None, *, file: Path, record: FileRecord | None) -> McpChange:
    """config.toml without relay's `[mcp_servers.relay]` (a file relay created and that is
    left empty goes)."""
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
    gone = record is not None and record.created and not new.strip()
    return McpChange(file=file, text=None if gone else new, what="removed")


def _toml(text: str, file: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InstallError(f"{file}: not valid TOML ({exc}); relay leaves it as it is") from None


# -- the whole edit ----------------------------------------------------------------------

McpEdit = tuple[Path, Callable[[str | None], McpChange]]


def install_edits(where: Target) -> list[McpEdit]:
    """The edits that register relay's MCP server for `where`'s host and scope."""
    host = where.host.name
    file = mcp_file(where)
    edits: list[McpEdit] = []
    if host == "codex":
        edits.append((file, lambda text: install_toml(text, file=file)))
    else:
        entry = entry_for(host)
        edits.append((file, lambda text: install_json(text, entry, file=file)))
    if host == "claude":
        allow = ("permissions", "allow")
        edits.append(
            (where.file, lambda text: add_to_list(text, allow, CLAUDE_PERMISSION, file=where.file))
        )
        if where.scope == "project":
            local = where.local_file or where.folder / "settings.local.json"
            servers = ("enabledMcpjsonServers",)
            edits.append((local, lambda text: add_to_list(text, servers, SERVER_NAME, file=local)))
    return edits


def uninstall_edits(where: Target, env: Mapping[str, str] | None = None) -> list[McpEdit]:
    """The edits that take out relay's MCP server and what install added for it."""
    host = where.host.name
    file = mcp_file(where)
    record = ledger.load(file, env)
    edits: list[McpEdit] = []
    if host == "codex":
        edits.append((file, lambda text: uninstall_toml(text, file=file, record=record)))
    else:
        edits.append((file, lambda text: uninstall_json(text, file=file, record=record)))
    if host == "claude":
        allow = ("permissions", "allow")
        hooks_record = ledger.load(where.file, env)
        edits.append(
            (
                where.file,
                lambda text: remove_from_list(
                    text, allow, CLAUDE_PERMISSION, file=where.file, record=hooks_record
                ),
            )
        )
        if where.scope == "project":
            local = where.local_file or where.folder / "settings.local.json"
            local_record = ledger.load(local, env)
            servers = ("enabledMcpjsonServers",)
            edits.append(
                (
                    local,
                    lambda text: remove_from_list(
                        text, servers, SERVER_NAME, file=local, record=local_record
                    ),
                )
            )
    return edits

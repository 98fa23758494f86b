"""`relay install --import`: the host's own hooks move into relay's settings, so that once
relay is the host's hook layer nothing runs twice; `relay uninstall` puts them back.

Each host file's hooks (all but relay's entries) are converted by relay's importer
(readable generated names, Gemini CLI's milliseconds as seconds), merged into the relay
settings file of the same scope (the user's into relay's user file, a project's into
`.relay/settings.json`, its personal `settings.local.json` into `.relay/settings.local.json`),
and only then taken out of the host file. What was taken out is kept in relay's state
(`imports/`), word for word, for `relay uninstall`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from relay.config.importing import Agent, convert, hooks_left_with_host, merge_into_file
from relay.config.paths import (
    PROJECT_DIR_NAME,
    find_project_root,
    private_dir,
    relay_home,
    state_dir,
)
from relay.config.sockets import fnv1a64
from relay.errors import SettingsError
from relay.hosts.install import (
    Change,
    InstallError,
    Target,
    append_groups_text,
    check_inside,
    decode_host_json,
    read_text,
    remove_hooks_text,
    runs_relay,
    update_file,
    write_text,
)


def record_path(host_file: Path, env: Mapping[str, str] | None = None) -> Path:
    """Where the hooks moved out of `host_file` are kept."""
    return state_dir(env) / "imports" / f"{fnv1a64(str(host_file.absolute()).encode())}.json"


def relay_file_for(where: Target, host_file: Path, env: Mapping[str, str] | None = None) -> Path:
    """The relay settings file that a host file's hooks move into."""
    if where.scope == "user":
        return relay_home(env) / "settings.json"
    root = find_project_root(where.folder.parent) or where.folder.parent
    local = where.local_file is not None and host_file == where.local_file
    return root / PROJECT_DIR_NAME / ("settings.local.json" if local else "settings.json")


def import_host_hooks(
    where: Target, *, dry_run: bool = False, env: Mapping[str, str] | None = None
) -> list[str]:
    """Move the host's hooks at `where` into relay's settings; lines to show the user."""
    lines: list[str] = []
    host = where.host
    agent: Agent = "gemini" if host.name == "gemini" else "claude"
    for host_file in (where.file, where.local_file):
        if host_file is None:
            continue
        check_inside(where, host_file)
        text = read_text(host_file)
        moved = _foreign_groups(text, host_file)
        staying = _host_only(agent, text, host_file)
        if staying:
            lines.append(
                f"left {len(staying)} hook(s) in {host_file} that relay cannot run "
                f"({host.title} goes on running them):"
            )
            lines.extend(f"  {line}" for line in staying)
        if not moved:
            continue
        converted = convert(agent, [(str(host_file), {"hooks": moved})])
        target_file = relay_file_for(where, host_file, env)
        count = converted.hook_count
        wanted = sum(len(group["hooks"]) for groups in moved.values() for group in groups)
        if count != wanted:
            lines.append(
                f"left the hooks of {host_file} where they are: {wanted - count} of {wanted} "
                "cannot be carried into relay"
            )
            lines.extend(f"  {line}" for line in converted.report)
            continue
        if dry_run:
            lines.append(f"would move {count} hook(s) from {host_file} into {target_file}")
            continue
        check_inside(where, target_file)
        merged = merge_into_file(converted.settings, target_file, generated=converted.generated)
        record = record_path(host_file, env)
        previous = _read_record(record)
        for event, groups in moved.items():
            previous.setdefault(event, []).extend(groups)
        try:
            private_dir(record.parent, top=state_dir(env))
        except OSError as exc:
            raise InstallError(f"{record.parent}: cannot create: {exc}") from None
        write_text(record, json.dumps({"file": str(host_file), "moved": previous}, indent=2))
        # Exactly the hooks recorded above: one added meanwhile by another program stays.
        update_file(
            host_file, functools.partial(_without_moved, moved=moved, file=host_file), where=where
        )
        lines.append(
            f"moved {count} {host.title} hook(s) from {host_file} into {target_file} "
            f"({merged.added} group(s) added, {merged.skipped} already there)"
        )
        lines.extend(f"  {line}" for line in converted.report)
        if where.scope == "project":
            lines.append("  project hooks run only once trusted: review them and run `relay trust`")
    if not lines:
        lines.append(f"no {host.title} hooks of its own to import")
    return lines


def restore_host_hooks(
    where: Target, *, dry_run: bool = False, env: Mapping[str, str] | None = None
) -> list[str]:
    """Put back the hooks `--import` moved out of the host's files (relay's copies stay)."""
    lines: list[str] = []
    for host_file in (where.file, where.local_file):
        if host_file is None:
            continue
        record = record_path(host_file, env)
        moved = _read_record(record)
        if not moved:
            continue
        count = sum(len(groups) for groups in moved.values())
        if dry_run:
            lines.append(f"would put {count} imported hook group(s) back into {host_file}")
            continue
        update_file(
            host_file,
            functools.partial(append_groups_text, groups=moved, file=str(host_file)),
            where=where,
        )
        record.unlink(missing_ok=True)
        lines.append(
            f"put {count} hook group(s) moved by --import back into {host_file}; "
            f"relay's copies stay in {relay_file_for(where, host_file, env)}"
        )
    return lines


def _foreign_groups(text: str | None, host_file: Path) -> dict[str, list[Any]]:
    """Per event, the groups of the host file with only the hooks that can move (not
    relay's own entries, nor any other entry that runs relay)."""
    if text is None or not text.strip():
        return {}
    try:
        document = decode_host_json(text, file=str(host_file))
    except SettingsError as exc:
        raise InstallError(f"{exc}; nothing imported") from None
    hooks = document.get("hooks") if isinstance(document, dict) else None
    if not isinstance(hooks, dict):
        return {}
    moved: dict[str, list[Any]] = {}
    for event, groups in hooks.items():
        if not isinstance(groups, list):
            continue
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
                continue
            inner = [hook for hook in group["hooks"] if _movable(hook)]
            if inner:
                moved.setdefault(event, []).append({**group, "hooks": inner})
    return moved


def _host_only(agent: Agent, text: str | None, host_file: Path) -> list[str]:
    """What `--import` leaves in the host file because relay cannot run it, one line each."""
    if text is None or not text.strip():
        return []
    try:
        document = decode_host_json(text, file=str(host_file))
    except SettingsError:
        return []  # _foreign_groups has said why the file cannot be read
    hooks = document.get("hooks") if isinstance(document, dict) else None
    return hooks_left_with_host(agent, str(host_file), hooks)


def _without_moved(text: str | None, *, moved: dict[str, list[Any]], file: Path) -> Change:
    """The host file's text without the hooks that were copied into relay."""

    def chosen(event: str, group: dict[str, Any], hook: dict[str, Any]) -> bool:
        return _movable(hook) and _was_moved(moved, event, group, hook)

    return remove_hooks_text(text, chosen, file=str(file))


def _movable(hook: object) -> bool:
    """A command hook of the host's own (prompt, agent or http hooks stay with the host, and
    so does any entry that runs relay: moved into relay, relay would run itself)."""
    return (
        isinstance(hook, dict)
        and hook.get("type", "command") == "command"
        and not runs_relay(hook.get("command"))
    )


def _was_moved(
    moved: dict[str, list[Any]], event: str, group: dict[str, Any], hook: dict[str, Any]
) -> bool:
    """Whether `hook`, in `group` under `event`, is one of those copied into relay."""
    return any(
        hook in copied["hooks"]
        and {k: v for k, v in copied.items() if k != "hooks"}
        == {k: v for k, v in group.items() if k != "hooks"}
        for copied in moved.get(event, ())
    )


def _read_record(path: Path) -> dict[str, list[Any]]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    moved = value.get("moved") if isinstance(value, dict) else None
    return moved if isinstance(moved, dict) else {}

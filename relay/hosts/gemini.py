"""Gemini CLI: its hook events and how it reads a hook's answer (checked against 0.61.0)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from relay.hosts.model import Host

EVENTS: tuple[str, ...] = (
    "SessionStart",
    "SessionEnd",
    "BeforeAgent",
    "AfterAgent",
    "BeforeModel",
    "AfterModel",
    "BeforeToolSelection",
    "BeforeTool",
    "AfterTool",
    "PreCompress",
    "Notification",
)

HOST = Host(
    name="gemini",
    title="Gemini CLI",
    dialect="relay",
    version="0.61.0",
    events=EVENTS,
    executable="gemini",
    config_dir=".gemini",
    timeout_scale=1000,
    entry_extra=(("name", "relay"),),
    context_events=frozenset({"SessionStart", "BeforeAgent", "AfterTool"}),
    # Gemini CLI reads `decision: "deny"|"block"` (and `continue: false`) on these; a deny
    # elsewhere is exit 2.
    block_events=frozenset(
        {
            "BeforeTool",
            "AfterTool",
            "BeforeAgent",
            "AfterAgent",
            "BeforeModel",
            "AfterModel",
            "BeforeToolSelection",
        }
    ),
    gate_events=frozenset({"BeforeTool", "BeforeAgent", "BeforeModel"}),
    # `ask` is read on BeforeTool only; elsewhere, and `defer` everywhere, an unknown
    # decision is an allow to Gemini CLI (see relay.hosts.model._gemini_decision).
    permission_values=frozenset({"allow", "deny"}),
    # A hook's allow skips nothing: the policy engine judges the (rewritten) call.
    allow_means="nothing",
    decision_style="gemini",
)


# --- folder trust ----------------------------------------------------------------------------
# Gemini CLI (0.61.0) trusts a folder or not; in an untrusted one it shows every MCP server,
# the user's too, as "Disabled" and does not start it, so relay's tools are missing there.
# How it decides, read from its bundle (packages/cli/src/config/trustedFolders.ts):
# GEMINI_RESTRICTED_MODE=true or GEMINI_CLI_TRUST_WORKSPACE=false: untrusted;
# GEMINI_CLI_TRUST_WORKSPACE=true: trusted; `security.folderTrust.enabled` false in the user's
# settings: every folder trusted (it is true by default); else the rule of
# trustedFolders.json (GEMINI_CLI_TRUSTED_FOLDERS_PATH, else ~/.gemini/, the home being
# GEMINI_CLI_HOME when set) with the longest path that holds the folder (TRUST_PARENT: its
# parent does), real paths compared: DO_NOT_TRUST is untrusted, no rule is untrusted too.

TRUST_LEVELS = ("TRUST_FOLDER", "TRUST_PARENT", "DO_NOT_TRUST")


class FolderTrust(msgspec.Struct, frozen=True, kw_only=True):
    """Whether Gemini CLI trusts a folder, and why."""

    trusted: bool
    reason: str
    file: str
    """Its trustedFolders.json."""


def folder_trust(folder: Path, env: Mapping[str, str] | None = None) -> FolderTrust:
    """Whether Gemini CLI, started in `folder`, trusts it (and so starts MCP servers there)."""
    env = os.environ if env is None else env
    home = Path(env.get("GEMINI_CLI_HOME") or env.get("HOME") or Path.home())
    file = Path(env.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH") or home / ".gemini/trustedFolders.json")
    if env.get("GEMINI_RESTRICTED_MODE") == "true":
        return FolderTrust(trusted=False, reason="GEMINI_RESTRICTED_MODE=true", file=str(file))
    if env.get("GEMINI_CLI_TRUST_WORKSPACE") in ("true", "false"):
        value = env["GEMINI_CLI_TRUST_WORKSPACE"]
        return FolderTrust(
            trusted=value == "true", reason=f"GEMINI_CLI_TRUST_WORKSPACE={value}", file=str(file)
        )
    settings = _json(home / ".gemini" / "settings.json")
    security = settings.get("security") if isinstance(settings, dict) else None
    trust = security.get("folderTrust") if isinstance(security, dict) else None
    if isinstance(trust, dict) and trust.get("enabled") is False:
        return FolderTrust(
            trusted=True, reason="folder trust is off (security.folderTrust)", file=str(file)
        )
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = "{}"
    except (OSError, UnicodeDecodeError) as exc:
        return FolderTrust(trusted=False, reason=f"{file}: cannot read: {exc}", file=str(file))
    from relay.config.editing import decode_with_comments
    from relay.errors import SettingsError

    try:
        rules = decode_with_comments(text, file=str(file)) if text.strip() else {}
    except SettingsError as exc:
        return FolderTrust(
            trusted=False,
            reason=f"{exc}: Gemini CLI refuses to start until it is fixed",
            file=str(file),
        )
    if not isinstance(rules, dict):
        rules = {}
    where = os.path.realpath(folder)
    best: tuple[int, str, str] | None = None
    for path, level in rules.items():
        if level not in TRUST_LEVELS:
            continue
        effective = os.path.dirname(path) if level == "TRUST_PARENT" else path
        real = os.path.realpath(os.path.expanduser(effective))
        inside = where == real or where.startswith(real.rstrip(os.sep) + os.sep)
        if inside and (best is None or len(path) > best[0]):
            best = (len(path), path, level)
    if best is None:
        return FolderTrust(trusted=False, reason=f"no rule in {file} holds it", file=str(file))
    _, path, level = best
    return FolderTrust(
        trusted=level != "DO_NOT_TRUST", reason=f"{file}: {path!r} is {level}", file=str(file)
    )


def _json(path: Path) -> Any:
    """A JSON file with comments, as Gemini CLI reads its own; None when missing or broken."""
    from relay.config.editing import decode_with_comments
    from relay.errors import SettingsError

    try:
        return decode_with_comments(path.read_text(encoding="utf-8"), file=str(path))
    except (OSError, UnicodeDecodeError, SettingsError):
        return None

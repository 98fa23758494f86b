"""OpenAI Codex CLI: its hook events and how it reads a hook's answer (checked against 0.169.0)."""

from __future__ import annotations

from relay.hosts.model import Host

EVENTS: tuple[str, ...] = (
    "PreToolUse",
    "PostToolUse",
    "PermissionRequest",
    "PreCompact",
    "PostCompact",
    "SessionStart",
    "SessionEnd",
    "SubagentStart",
    "SubagentStop",
    "UserPromptSubmit",
    "Stop",
)

HOST = Host(
    name="codex",
    title="Codex CLI",
    dialect="claude",
    version="0.169.0",
    events=EVENTS,
    executable="codex",
    config_dir=".codex",
    config_dir_env="CODEX_HOME",
    settings_file="hooks.json",
    context_events=frozenset({"SessionStart", "UserPromptSubmit", "PostToolUse"}),
    permission_events=frozenset({"PreToolUse"}),
    behavior_events=frozenset({"PermissionRequest"}),
    block_events=frozenset({"UserPromptSubmit", "PostToolUse", "Stop"}),
    gate_events=frozenset({"PreToolUse", "PermissionRequest", "UserPromptSubmit"}),
)

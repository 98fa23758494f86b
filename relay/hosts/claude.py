"""Claude Code: its hook events and how it reads a hook's answer (checked against 2.1.331)."""

from __future__ import annotations

from relay.hosts.model import Host

EVENTS: tuple[str, ...] = (
    "PreToolUse",
    "PostToolUse",
    "PostToolUseFailure",
    "PostToolBatch",
    "PermissionRequest",
    "PermissionDenied",
    "UserPromptSubmit",
    "UserPromptExpansion",
    "Notification",
    "MessageDisplay",
    "Stop",
    "StopFailure",
    "SubagentStart",
    "SubagentStop",
    "PreCompact",
    "PostCompact",
    "SessionStart",
    "SessionEnd",
    "Setup",
    "ConfigChange",
    "InstructionsLoaded",
    "TeammateIdle",
    "TaskCreated",
    "TaskCompleted",
    "Elicitation",
    "ElicitationResult",
    "FileChanged",
    "CwdChanged",
    "WorktreeCreate",
    "WorktreeRemove",
)

HOST = Host(
    name="claude",
    title="Claude Code",
    dialect="claude",
    version="2.1.331",
    events=EVENTS,
    executable="claude",
    config_dir=".claude",
    config_dir_env="CLAUDE_CONFIG_DIR",
    local_file="settings.local.json",
    context_events=frozenset(
        {
            "SessionStart",
            "Setup",
            "UserPromptSubmit",
            "UserPromptExpansion",
            "PreToolUse",
            "PostToolUse",
            "PostToolUseFailure",
            "PostToolBatch",
            "Notification",
            "SubagentStart",
            "Stop",
            "SubagentStop",
        }
    ),
    permission_events=frozenset({"PreToolUse"}),
    # An allow skips Claude Code's permission prompt and rules: for a hook's allow only. A
    # rewrite alone (`updatedInput`, no decision) is applied and then checked by them.
    allow_means="approve",
    behavior_events=frozenset({"PermissionRequest"}),
    block_events=frozenset(
        {"UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop", "SubagentStop"}
    ),
    gate_events=frozenset({"PreToolUse", "PermissionRequest", "UserPromptSubmit"}),
)

"""OpenAI Codex CLI: its hook events and how it reads a hook's answer (checked against 0.169.0 and 0.171.0)."""

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

_COMMON = frozenset({"continue", "stopReason", "suppressOutput", "systemMessage"})
_BLOCK = _COMMON | {"decision", "reason"}
_SPECIFIC = _COMMON | {"hookSpecificOutput"}
_CONTEXT = frozenset({"hookEventName", "additionalContext"})
# The output schemas Codex 0.169 embeds (additionalProperties: false): one field more and
# the whole answer is refused.
ACCEPTED: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "PreToolUse": (
        _BLOCK | {"hookSpecificOutput"},
        _CONTEXT | {"permissionDecision", "permissionDecisionReason", "updatedInput"},
    ),
    "PostToolUse": (_BLOCK | {"hookSpecificOutput"}, _CONTEXT | {"updatedMCPToolOutput"}),
    "PermissionRequest": (_SPECIFIC, frozenset({"hookEventName", "decision"})),
    "PreCompact": (_COMMON, frozenset()),
    "PostCompact": (_COMMON, frozenset()),
    "SessionStart": (_SPECIFIC, _CONTEXT),
    "SubagentStart": (_SPECIFIC, _CONTEXT),
    "SubagentStop": (_BLOCK, frozenset()),
    "UserPromptSubmit": (_BLOCK | {"hookSpecificOutput"}, _CONTEXT),
    "Stop": (_BLOCK, frozenset()),
}

HOST = Host(
    name="codex",
    title="Codex CLI",
    dialect="claude",
    version="0.171.0",
    events=EVENTS,
    executable="codex",
    config_dir=".codex",
    config_dir_env="CODEX_HOME",
    settings_file="hooks.json",
    context_events=frozenset(
        {"SessionStart", "SubagentStart", "UserPromptSubmit", "PreToolUse", "PostToolUse"}
    ),
    permission_events=frozenset({"PreToolUse"}),
    behavior_events=frozenset({"PermissionRequest"}),
    block_events=frozenset({"UserPromptSubmit", "PostToolUse", "Stop", "SubagentStop"}),
    permission_values=frozenset({"allow", "deny"}),
    # permissionDecision allow only makes Codex apply updatedInput (refused without one);
    # its approval policy and sandbox still judge the rewritten command.
    allow_means="rewrite",
    entry_timeouts={"SessionEnd": 3},
    accepted=ACCEPTED,
    gate_events=frozenset({"PreToolUse", "PermissionRequest", "UserPromptSubmit"}),
)

"""Event names of the three dialects (relay, claude, gemini) and how they map."""

from __future__ import annotations

import re
from typing import Any, Literal

from relay.protocol.events import CANONICAL_EVENTS, MATCHER_FIELDS

Dialect = Literal["relay", "claude", "gemini"]

CLAUDE_ALIASES: dict[str, str] = {
    "BeforeAgent": "UserPromptSubmit",
    "AfterAgent": "Stop",
    "BeforeTool": "PreToolUse",
    "AfterTool": "PostToolUse",
    "PreCompress": "PreCompact",
}
"""Canonical name -> the Claude Code name of the same event, where they differ."""

CANONICAL_OF_CLAUDE: dict[str, str] = {alias: name for name, alias in CLAUDE_ALIASES.items()}

CLAUDE_PASS_THROUGH_MATCHERS: dict[str, str | None] = {
    "PermissionRequest": "tool_name",
    "PermissionDenied": "tool_name",
    "PostToolUseFailure": "tool_name",
    "PostToolBatch": None,
    "SubagentStart": "agent_type",
    "SubagentStop": "agent_type",
    "Setup": "trigger",
    "ConfigChange": "source",
    "InstructionsLoaded": "load_reason",
    "UserPromptExpansion": "command_name",
    "StopFailure": "error",
    "TeammateIdle": None,
    "TaskCreated": None,
    "TaskCompleted": None,
    "PostCompact": "trigger",
    "FileChanged": None,
    "CwdChanged": None,
    "WorktreeCreate": None,
    "WorktreeRemove": None,
    "MessageDisplay": None,
    "Elicitation": "mcp_server_name",
    "ElicitationResult": "mcp_server_name",
    "PreModelSwitch": "to_model",
    "PostModelSwitch": "to_model",
    "DirectoryAdded": "source",
    "PreSkillShellCommand": "tool_name",
}
"""Other Claude Code events, accepted as pass-through, with the field their matcher tests."""

CLAUDE_FIELD_MERGE: dict[str, Literal["join", "union", "any"]] = {
    "classifierContext": "join",
    "watchPaths": "union",
    "retry": "any",
    "reloadSkills": "any",
    "suppressOriginalPrompt": "any",
}
"""How Claude Code's own `hookSpecificOutput` fields merge across hooks: `join` texts with
"\n" in plan order (Claude shares one budget among the hooks of a call), `union` lists in
order without repeats, `any` true wins; every other field: the last hook in plan order."""


def merge_specific_field(key: str, current: Any, value: Any) -> Any:
    """`value` of a later hook merged onto `current` (None: no hook set it yet)."""
    rule = CLAUDE_FIELD_MERGE.get(key)
    if current is None or rule is None:
        return value
    if rule == "join" and isinstance(current, str) and isinstance(value, str):
        return f"{current}\n{value}" if current and value else current or value
    if rule == "union" and isinstance(current, list) and isinstance(value, list):
        return [*current, *(item for item in value if item not in current)]
    if rule == "any" and isinstance(current, bool) and isinstance(value, bool):
        return current or value
    return value


EVENT_NAME = re.compile(r"[A-Z][A-Za-z0-9]{0,63}")
"""What an event name relay has never heard of must look like to pass through."""


class UnknownEventError(ValueError):
    """An event name that no dialect knows."""

    def __init__(self, name: str) -> None:
        import difflib

        self.name = name
        known = known_event_names()
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
        if not close:  # a wrong case: sessionstart, PRETOOLUSE
            close = [event for event in known if event.lower() == name.lower()][:1]
        self.suggestion = close[0] if close else None
        hint = f" (did you mean {self.suggestion!r}?)" if self.suggestion else ""
        super().__init__(f"unknown event {name!r}{hint}; valid events: {', '.join(known)}")


def known_event_names() -> list[str]:
    """Every accepted event name: canonical, Claude aliases, Claude pass-through."""
    return [*CANONICAL_EVENTS, *CLAUDE_ALIASES.values(), *CLAUDE_PASS_THROUGH_MATCHERS]


def canonical_name(name: str, *, unknown_passes: bool = False) -> str:
    """The canonical name of an event given in any dialect; pass-through names stay as they are.

    With `unknown_passes`, a name no dialect knows passes through too (a host's newer
    event must never make relay fail, DESIGN §2); otherwise it is an UnknownEventError.
    """
    if name in CANONICAL_OF_CLAUDE:
        return CANONICAL_OF_CLAUDE[name]
    if name in CANONICAL_EVENTS or name in CLAUDE_PASS_THROUGH_MATCHERS:
        return name
    if unknown_passes and EVENT_NAME.fullmatch(name):
        return name
    raise UnknownEventError(name)


def is_known_event(name: str) -> bool:
    """Whether some dialect knows this event name."""
    return (
        name in CANONICAL_OF_CLAUDE
        or name in CANONICAL_EVENTS
        or name in CLAUDE_PASS_THROUGH_MATCHERS
    )


def registered_dialect(registered_name: str) -> Dialect:
    """The dialect a hook registered under this event name speaks (a name relay does not
    know is a host's pass-through event: Claude's shape, which Codex shares)."""
    if registered_name in CANONICAL_EVENTS:
        return "relay"
    return "claude"


def wire_name(canonical: str, dialect: Dialect) -> str:
    """The `hook_event_name` a hook of this dialect receives."""
    if dialect == "claude":
        return CLAUDE_ALIASES.get(canonical, canonical)
    return canonical


def matcher_field(canonical: str) -> str | None:
    """The event field a matcher is tested against, or None when matchers match everything."""
    if canonical in CLAUDE_PASS_THROUGH_MATCHERS:
        return CLAUDE_PASS_THROUGH_MATCHERS[canonical]
    return MATCHER_FIELDS.get(canonical)  # None for a name relay never heard of: matches all

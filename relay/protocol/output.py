"""What a hook answers on stdout (DESIGN §3), and what relay answers for an event."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

Decision = Literal["allow", "ask", "defer", "deny"]
"""deny > defer > ask > allow when hooks disagree. defer: Claude Code's "let the host's own
permission flow decide" (no hook's allow overrides it, a deny still wins)."""
WireDecision = Literal["allow", "ask", "defer", "deny", "block", "approve"]
ToolMode = Literal["NONE", "ANY", "AUTO"]


class ToolConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Restricts which tools the model may call (BeforeToolSelection)."""

    mode: ToolMode | None = None
    allowedFunctionNames: list[str] | None = None


class HookSpecificOutput(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Event-specific answer fields, in relay and Claude Code names."""

    hookEventName: str | None = None
    additionalContext: str | None = None
    tool_input: dict[str, Any] | None = None
    llm_request: dict[str, Any] | None = None
    llm_response: dict[str, Any] | None = None
    toolConfig: ToolConfig | None = None
    clearContext: bool | None = None
    permissionDecision: Decision | None = None
    permissionDecisionReason: str | None = None
    updatedInput: dict[str, Any] | None = None
    body: str | None = None
    """MessageReceived: the message body to deliver instead (the last hook in plan order that sets it wins)."""
    classifierContext: str | None = None
    """Claude Code PostToolUse: context for its auto-mode permission classifier (joined)."""
    updatedToolOutput: Any = None
    """Claude Code PostToolUse: the tool output the model gets instead (the last hook wins)."""
    updatedMCPToolOutput: Any = None
    """Claude Code PostToolUse, MCP tools only (older form of updatedToolOutput)."""
    suppressOriginalPrompt: bool | None = None
    """Claude Code UserPromptSubmit/UserPromptExpansion: a block leaves the prompt out of its message."""
    sessionTitle: str | None = None
    """Claude Code SessionStart/UserPromptSubmit: the session's title (the last hook wins)."""
    initialUserMessage: str | None = None
    """Claude Code SessionStart: a first user message for the session (the last hook wins)."""
    watchPaths: list[str] | None = None
    """Claude Code SessionStart/CwdChanged/FileChanged: absolute paths to watch (union)."""
    reloadSkills: bool | None = None
    """Claude Code SessionStart: re-scan skills and commands after the hooks (any true)."""
    retry: bool | None = None
    """Claude Code PermissionDenied: let the model retry the denied call (any true)."""


class HookOutput(
    msgspec.Struct, kw_only=True, omit_defaults=True, rename={"continue_": "continue"}
):
    """One hook's answer: a JSON object on stdout, every field optional."""

    inject: str | None = None
    stop: bool | None = None
    continue_: Annotated[bool | None, Meta(description="false halts the agent")] = None
    stopReason: str | None = None
    systemMessage: str | None = None
    suppressOutput: bool | None = None
    decision: WireDecision | None = None
    reason: str | None = None
    terminalSequence: str | None = None
    """Claude Code: a notification or title escape sequence (OSC 0/1/2/9/99/777, BEL) for the
    host to write to its terminal; concatenated in plan order."""
    hookSpecificOutput: HookSpecificOutput | None = None


HOOK_OUTPUT_FIELDS: frozenset[str] = frozenset(
    field.encode_name for field in msgspec.structs.fields(HookOutput)
)
HOOK_SPECIFIC_FIELDS: frozenset[str] = frozenset(
    field.encode_name for field in msgspec.structs.fields(HookSpecificOutput)
)
HOST_SPECIFIC_FIELDS: tuple[str, ...] = (
    "classifierContext",
    "updatedToolOutput",
    "updatedMCPToolOutput",
    "suppressOriginalPrompt",
    "sessionTitle",
    "initialUserMessage",
    "watchPaths",
    "reloadSkills",
    "retry",
)
"""Fields of HookSpecificOutput that relay checks and merges but only a host reads: they are
passed on to the host (relay.protocol.dialects.merge_specific_field says how they merge)."""


class HookReport(msgspec.Struct, kw_only=True):
    """What relay saw of one hook while handling an event."""

    name: str
    source: str
    command: str
    exit_code: int | None = None
    signal: str | None = None
    timed_out: bool = False
    duration_ms: float = 0.0
    output: HookOutput | None = None
    error: str | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    warnings: list[str] = msgspec.field(default_factory=list)


class HookError(msgspec.Struct, kw_only=True):
    """A hook that failed without blocking (or blocked through failClosed)."""

    hook: str
    message: str


class AggregatedResult(msgspec.Struct, kw_only=True, rename={"continue_": "continue"}):
    """One event's merged answer: what the host acts on."""

    hook_event_name: str
    decision: Decision = "allow"
    reason: str | None = None
    continue_: bool = True
    stopReason: str | None = None
    inject: str | None = None
    systemMessage: str | None = None
    suppressOutput: bool = False
    terminalSequence: str | None = None
    stopped_by: str | None = None
    tool_input: dict[str, Any] | None = None
    hookSpecificOutput: dict[str, Any] | None = None
    hooks: list[HookReport] = msgspec.field(default_factory=list)
    errors: list[HookError] = msgspec.field(default_factory=list)
    warnings: list[str] = msgspec.field(default_factory=list)
    untrusted: list[str] = msgspec.field(default_factory=list)
    """Project hooks that matched but did not run: not trusted (yet, or since they changed)."""
    duration_ms: float = 0.0

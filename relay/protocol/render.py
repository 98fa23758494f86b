"""A merged result rendered as one hook's answer in a host's dialect (`relay hooks run --dialect`).

So that one `relay hooks run --dialect claude PreToolUse` entry in Claude Code's settings
fans out to all of relay's hooks, the merged result must read as a single Claude hook's
answer; likewise for Gemini CLI.
"""

from __future__ import annotations

from typing import Any

import msgspec

from relay.protocol.dialects import Dialect, wire_name
from relay.protocol.output import AggregatedResult

_RELAY_SPECIFIC = frozenset(
    {"tool_input", "llm_request", "llm_response", "toolConfig", "clearContext"}
)
CLAUDE_CONTEXT_EVENTS = frozenset(
    {
        "SessionStart",
        "BeforeAgent",
        "BeforeTool",
        "AfterTool",
        "PostToolUseFailure",
        "Notification",
        "SubagentStart",
        "Setup",
    }
)
"""Events for which Claude Code reads hookSpecificOutput.additionalContext."""


class HostAnswer(msgspec.Struct, kw_only=True):
    """What to print for a host: stdout object (or None), exit code, stderr text."""

    stdout: dict[str, Any] | None
    exit_code: int = 0
    stderr: str = ""


def explicit_allow(result: AggregatedResult) -> bool:
    """True when some hook that took effect said allow (no opinion is not an allow)."""
    errored = {error.hook for error in result.errors}
    for hook in result.hooks:
        output = hook.output
        if output is None or hook.name in errored:
            continue
        specific = output.hookSpecificOutput
        if output.decision in ("allow", "approve") or (
            specific is not None and specific.permissionDecision == "allow"
        ):
            return True
        if result.stopped_by == hook.name:
            break
    return False


def render_for_host(result: AggregatedResult, dialect: Dialect) -> HostAnswer:
    """The merged result as a single hook of `dialect` answers."""
    if dialect == "relay":
        return HostAnswer(stdout=msgspec.to_builtins(result))
    if result.decision == "deny":
        # Exit 2 blocks in both hosts, with stderr as the reason the model sees.
        return HostAnswer(
            stdout=None, exit_code=2, stderr=result.reason or "denied by a relay hook"
        )
    event = result.hook_event_name
    out: dict[str, Any] = {}
    if not result.continue_:
        out["continue"] = False
        if result.stopReason:
            out["stopReason"] = result.stopReason
    if result.systemMessage:
        out["systemMessage"] = result.systemMessage
    if result.suppressOutput:
        out["suppressOutput"] = True
    specific: dict[str, Any] = {"hookEventName": wire_name(event, dialect)}
    merged = result.hookSpecificOutput or {}
    decided = result.decision == "ask" or explicit_allow(result)
    if dialect == "claude":
        if event == "BeforeTool" and decided:
            specific["permissionDecision"] = result.decision
            if result.reason:
                specific["permissionDecisionReason"] = result.reason
        if event == "BeforeTool" and "tool_input" in merged:
            specific["updatedInput"] = merged["tool_input"]
        if result.inject and event in CLAUDE_CONTEXT_EVENTS:
            specific["additionalContext"] = result.inject
        specific.update({k: v for k, v in merged.items() if k not in _RELAY_SPECIFIC})
    else:
        if decided:
            out["decision"] = result.decision
            if result.reason:
                out["reason"] = result.reason
        if result.inject:
            specific["additionalContext"] = result.inject
        specific.update(merged)
    if len(specific) > 1:
        out["hookSpecificOutput"] = specific
    return HostAnswer(stdout=out)

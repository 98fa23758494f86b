"""Merging per-hook answers into one result (DESIGN §3, §4). A pure function: no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from relay.protocol.answers import Answer
from relay.protocol.dialects import merge_specific_field
from relay.protocol.output import (
    AggregatedResult,
    Decision,
    HookError,
    HookOutput,
    HookReport,
    ToolConfig,
    ToolMode,
)

TEXT_CAP = 10_000
TRUNCATION_MARKER = "\n…[truncated by relay]"
_DECISION_RANK: dict[str, int] = {"allow": 0, "ask": 1, "defer": 2, "deny": 3}
_TOOL_MODE_RANK: dict[str, int] = {"AUTO": 0, "ANY": 1, "NONE": 2}
TOOL_INPUT_EVENTS: frozenset[str] = frozenset({"BeforeTool"})
"""Events whose result carries the effective `tool_input`."""


class HookOutcome(msgspec.Struct, kw_only=True):
    """One hook's run, as the aggregator needs it."""

    report: HookReport
    answer: Answer
    fail_closed: bool = False
    from_project: bool = False
    """From a project file: its `stop` ends only project hooks, and its rewrites are applied
    before the user's hooks' (DESIGN §5, scopes and authority)."""


def apply_tool_input(current: dict[str, Any], answer: Answer) -> dict[str, Any]:
    """The tool input after one hook's rewrite: shallow merge, or Claude's whole replacement."""
    if answer.tool_input is None or answer.error is not None:
        return current
    if answer.tool_input_replaces:
        return dict(answer.tool_input)
    return {**current, **answer.tool_input}


def cap_output(output: HookOutput | None) -> HookOutput | None:
    """A hook's answer with its text fields capped, for reports (the merged fields are too)."""
    if output is None:
        return None
    specific = output.hookSpecificOutput
    if specific is not None:
        specific = msgspec.structs.replace(
            specific,
            additionalContext=cap_text(specific.additionalContext),
            permissionDecisionReason=cap_text(specific.permissionDecisionReason),
        )
    return msgspec.structs.replace(
        output,
        inject=cap_text(output.inject),
        systemMessage=cap_text(output.systemMessage),
        reason=cap_text(output.reason),
        stopReason=cap_text(output.stopReason),
        hookSpecificOutput=specific,
    )


def cap_text(text: str | None) -> str | None:
    """Cap a text field at TEXT_CAP characters, marker included."""
    if text is None or len(text) <= TEXT_CAP:
        return text
    return text[: TEXT_CAP - len(TRUNCATION_MARKER)] + TRUNCATION_MARKER


def taking_effect(outcomes: Sequence[HookOutcome]) -> tuple[list[HookOutcome], str | None]:
    """The outcomes that take effect, in plan order, and the hook that stopped a chain.

    A stop ends the chain for the hooks after it in plan order (they may have run, in
    parallel, but take no effect), except that a project hook's stop ends only the
    project's hooks: the user's and system's still count (DESIGN §5)."""
    taken: list[HookOutcome] = []
    stopped_by: str | None = None
    project_stopped = everything_stopped = False
    for outcome in outcomes:
        if everything_stopped or (project_stopped and outcome.from_project):
            continue
        taken.append(outcome)
        if outcome.answer.stop and outcome.answer.error is None:
            stopped_by = stopped_by or outcome.report.name
            if outcome.from_project:
                project_stopped = True
            else:
                everything_stopped = True
    return taken, stopped_by


def rewrite_order(outcomes: Sequence[HookOutcome]) -> list[HookOutcome]:
    """The order rewrites (tool_input, llm_request, llm_response, body) apply in: the
    project's hooks first, then the user's, each in plan order, so that the input the
    user's hooks judge is the project's rewrite and what runs is theirs on top of it."""
    return [outcome for outcome in outcomes if outcome.from_project] + [
        outcome for outcome in outcomes if not outcome.from_project
    ]


def project_rewrite(tool_input: dict[str, Any], outcomes: Sequence[HookOutcome]) -> dict[str, Any]:
    """The tool input as the project's hooks that take effect rewrote it (the input the
    user's hooks must judge); `tool_input` itself when none did."""
    taken, _ = taking_effect(outcomes)
    rewritten = tool_input
    for outcome in taken:
        if outcome.from_project:
            rewritten = apply_tool_input(rewritten, outcome.answer)
    return rewritten


def aggregate(
    event: str,
    outcomes: Sequence[HookOutcome],
    *,
    tool_input: dict[str, Any] | None = None,
    warnings: Sequence[str] = (),
    duration_ms: float = 0.0,
) -> AggregatedResult:
    """Merge hook outcomes, given in plan order, into the event's result."""
    merge = _Merge(tool_input or {})
    taken, stopped_by = taking_effect(outcomes)
    for outcome in taken:
        merge.add(outcome)
    for outcome in rewrite_order(taken):
        merge.rewrite(outcome.answer)
    return AggregatedResult(
        hook_event_name=event,
        decision=merge.decision,
        reason=cap_text(_join(merge.reasons)),
        continue_=merge.proceed,
        stopReason=cap_text(_join(merge.stop_reasons)),
        inject=cap_text(_join(merge.injects)),
        systemMessage=cap_text(_join(merge.messages)),
        suppressOutput=merge.suppress,
        terminalSequence=cap_text("".join(merge.terminal)) or None,
        stopped_by=stopped_by,
        tool_input=merge.tool_input if event in TOOL_INPUT_EVENTS else None,
        hookSpecificOutput=merge.specific() or None,
        hooks=[outcome.report for outcome in outcomes],
        errors=merge.errors,
        warnings=list(warnings),
        duration_ms=duration_ms,
    )


class _Merge:
    """Running state of one aggregation."""

    def __init__(self, tool_input: dict[str, Any]) -> None:
        self.decision: Decision = "allow"
        self.reasons: list[str] = []
        self.proceed = True
        self.stop_reasons: list[str] = []
        self.injects: list[str] = []
        self.messages: list[str] = []
        self.suppress = False
        self.original_tool_input = tool_input
        self.tool_input = tool_input
        self.llm_request: dict[str, Any] = {}
        self.llm_response: dict[str, Any] = {}
        self.tool_config: ToolConfig | None = None
        self.clear_context: bool | None = None
        self.body: str | None = None
        self.extra: dict[str, Any] = {}
        self.terminal: list[str] = []
        self.errors: list[HookError] = []

    def add(self, outcome: HookOutcome) -> None:
        answer, name = outcome.answer, outcome.report.name
        if answer.error is not None:
            self.errors.append(HookError(hook=name, message=cap_text(answer.error) or ""))
            if outcome.fail_closed:
                self.decide("deny", f"hook {name} failed and is failClosed: {answer.error}")
            return
        if answer.decision is not None:
            self.decide(answer.decision, answer.reason)
        if answer.continue_ is False:
            self.proceed = False
            if answer.stopReason:
                self.stop_reasons.append(answer.stopReason)
        if answer.inject:
            self.injects.append(answer.inject)
        if answer.systemMessage:
            self.messages.append(answer.systemMessage)
        self.suppress = self.suppress or answer.suppressOutput
        if answer.terminalSequence:
            self.terminal.append(answer.terminalSequence)
        if answer.toolConfig is not None:
            self.tool_config = _merge_tool_config(self.tool_config, answer.toolConfig)
        if answer.clearContext is not None:
            self.clear_context = bool(self.clear_context) or answer.clearContext
        for key, value in answer.extra_specific.items():
            behavior = value.get("behavior") if isinstance(value, dict) else None
            if key == "decision" and behavior in _DECISION_RANK:
                # Claude's PermissionRequest answer: ranked like every decision, so a later
                # allow never erases a deny (DESIGN §9).
                self.decide(behavior, value.get("message"))
                current = self.extra.get("decision")
                current_rank = (
                    _DECISION_RANK.get(str(current.get("behavior")), -1)
                    if isinstance(current, dict)
                    else -1
                )
                if _DECISION_RANK[behavior] > current_rank:
                    self.extra["decision"] = value
            else:
                self.extra[key] = merge_specific_field(key, self.extra.get(key), value)

    def rewrite(self, answer: Answer) -> None:
        """Apply one hook's rewrites (called in `rewrite_order`); a failed hook's are void."""
        if answer.error is not None:
            return
        self.tool_input = apply_tool_input(self.tool_input, answer)
        if answer.llm_request:
            self.llm_request.update(answer.llm_request)
        if answer.llm_response:
            self.llm_response.update(answer.llm_response)
        if answer.body is not None:
            self.body = answer.body  # MessageReceived: the last rewrite wins

    def decide(self, decision: Decision, reason: str | None) -> None:
        # deny > defer > ask > allow on every event: a later allow never erases a block.
        rank, current = _DECISION_RANK[decision], _DECISION_RANK[self.decision]
        if rank > current:
            self.decision, self.reasons = decision, []
        if rank >= current and reason:
            self.reasons.append(reason)

    def specific(self) -> dict[str, Any]:
        merged: dict[str, Any] = dict(self.extra)
        if self.tool_input is not self.original_tool_input:
            merged["tool_input"] = self.tool_input
        if self.llm_request:
            merged["llm_request"] = self.llm_request
        if self.llm_response:
            merged["llm_response"] = self.llm_response
        if self.tool_config is not None:
            merged["toolConfig"] = msgspec.to_builtins(self.tool_config)
        if self.clear_context is not None:
            merged["clearContext"] = self.clear_context
        if self.body is not None:
            merged["body"] = self.body
        return merged


def _merge_tool_config(left: ToolConfig | None, right: ToolConfig) -> ToolConfig:
    if left is None:
        return ToolConfig(
            mode=right.mode,
            allowedFunctionNames=sorted(set(right.allowedFunctionNames))
            if right.allowedFunctionNames is not None
            else None,
        )
    mode: ToolMode | None = left.mode
    if right.mode is not None and (
        mode is None or _TOOL_MODE_RANK[right.mode] > _TOOL_MODE_RANK[mode]
    ):
        mode = right.mode
    names: list[str] | None = None
    if left.allowedFunctionNames is not None or right.allowedFunctionNames is not None:
        names = sorted({*(left.allowedFunctionNames or ()), *(right.allowedFunctionNames or ())})
    return ToolConfig(mode=mode, allowedFunctionNames=names)


def _join(parts: list[str]) -> str | None:
    return "\n".join(parts) if parts else None

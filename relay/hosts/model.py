"""What relay knows of a host agent, as data, and how a merged result is rendered for it.

Each host module (claude, gemini, codex) exposes one `Host`: its events, which answer
fields it reads on which event, where its settings live. Rendering is driven by that
data, so host knowledge stays in the host's module (STYLE §15); the real-host tests
check it against the installed host.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from relay.protocol.dialects import Dialect, wire_name
from relay.protocol.output import AggregatedResult

DecisionStyle = Literal["claude", "gemini"]
AllowMeaning = Literal["approve", "rewrite", "nothing"]

_RELAY_SPECIFIC = frozenset(
    {"tool_input", "llm_request", "llm_response", "toolConfig", "clearContext", "body"}
)


class HostAnswer(msgspec.Struct, kw_only=True):
    """What to print for a host: stdout object (or None), exit code, stderr text."""

    stdout: dict[str, Any] | None
    exit_code: int = 0
    stderr: str = ""


class Host(msgspec.Struct, frozen=True, kw_only=True):
    """One host agent: its events and how it reads a hook's answer."""

    name: str
    """`claude`, `gemini`, `codex`: the `--dialect` that renders for it."""
    title: str
    """Its product name, for people."""
    dialect: Dialect
    """How hooks registered under its event names read events and answer."""
    version: str
    """The host version this table was checked against (the real-host tests)."""
    events: tuple[str, ...]
    """Every hook event the host fires, in its own names."""
    context_events: frozenset[str]
    """Events on which it reads `hookSpecificOutput.additionalContext`."""
    permission_events: frozenset[str] = frozenset()
    """Events answered with `hookSpecificOutput.permissionDecision` (allow/deny/ask/defer)."""
    behavior_events: frozenset[str] = frozenset()
    """Events answered with `hookSpecificOutput.decision.behavior` (allow/deny)."""
    block_events: frozenset[str] = frozenset()
    """Events on which a top-level `decision: "block"` with `reason` blocks."""
    gate_events: frozenset[str] = frozenset()
    """Events whose deny stops an action: where relay's own failure denies when asked to
    fail closed (a deny elsewhere, e.g. on Stop, would make the agent go on, not stop)."""
    permission_values: frozenset[str] = frozenset({"allow", "deny", "ask", "defer"})
    """The `permissionDecision` values it accepts; `defer` where it has none becomes `ask`
    (the host's own approval flow decides, never a silent allow)."""
    event_permission_values: dict[str, frozenset[str]] = msgspec.field(default_factory=dict)
    """Per event, the `permissionDecision` values it accepts there, where they are fewer
    (Claude Code's PreModelSwitch has no `defer`)."""
    terminal_sequences: bool = False
    """Whether it reads a top-level `terminalSequence` (Claude Code)."""
    allow_means: AllowMeaning = "approve"
    """What a hook's allow does in the host, and so what a rewrite costs there. `approve`
    (Claude Code's `permissionDecision: "allow"`): the call runs without the host's own
    permission prompt and rules, so relay renders allow for a hook's explicit allow only,
    and a rewrite alone as `updatedInput` with no decision (the host applies it, then its
    rules judge the rewritten input). `rewrite` (Codex's `permissionDecision: "allow"`):
    it grants nothing, it is what makes the host apply `updatedInput` (its approval policy
    and sandbox still judge the rewritten command) and a bare one is refused with the whole
    answer, so a rewrite carries allow and an allow without one is left out. `nothing`
    (Gemini CLI's `decision: "allow"`): the policy engine judges every call, rewritten or
    not; a hook's allow approves nothing."""
    accepted: dict[str, tuple[frozenset[str], frozenset[str]]] | None = None
    """Per event, the top-level and `hookSpecificOutput` fields it accepts, for a host that
    rejects a whole answer over one unknown field (Codex); None: it ignores unknown ones."""
    decision_style: DecisionStyle = "claude"
    """claude: decisions in the forms above, exit 2 elsewhere. gemini: a top-level
    `decision` and `reason` on every event."""
    executable: str
    """Its command on PATH."""
    config_dir: str
    """Its per-user folder under the home directory (and its project folder's name)."""
    config_dir_env: str | None = None
    """The environment variable that moves the per-user folder (CLAUDE_CONFIG_DIR, …)."""
    settings_file: str = "settings.json"
    """The file in that folder (user scope) or in `<project>/<config_dir>` that holds hooks."""
    local_file: str | None = None
    """The project's personal, uncommitted settings file next to it, if the host has one."""
    timeout_scale: int = 1
    """A hook's `timeout` in the host's unit per second (Gemini CLI counts milliseconds)."""
    entry_timeouts: dict[str, int] = msgspec.field(default_factory=dict)
    """Per event, the longest timeout (seconds) the host allows, where it clamps one
    (Codex: SessionEnd 3 s) and says so on every run if relay's entry asks for more."""
    entry_extra: tuple[tuple[str, str], ...] = ()
    """Further fields of relay's hook entry in the host's settings (e.g. Gemini's `name`)."""

    def wire(self, canonical: str) -> str:
        """The host's name for a canonical event."""
        return wire_name(canonical, self.dialect)

    def render(self, result: AggregatedResult) -> HostAnswer:
        """The merged result as a single hook of this host answers."""
        if self.decision_style == "gemini":
            return _render_gemini(self, result)
        return _render_claude(self, result)


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


def _common(result: AggregatedResult) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not result.continue_:
        out["continue"] = False
        if result.stopReason:
            out["stopReason"] = result.stopReason
    if result.systemMessage:
        out["systemMessage"] = result.systemMessage
    if result.suppressOutput:
        out["suppressOutput"] = True
    return out


def _render_claude(host: Host, result: AggregatedResult) -> HostAnswer:
    event = host.wire(result.hook_event_name)
    decision = result.decision
    reason = result.reason
    out = _common(result)
    if result.terminalSequence and host.terminal_sequences:
        out["terminalSequence"] = result.terminalSequence
    specific: dict[str, Any] = {"hookEventName": event}
    merged = dict(result.hookSpecificOutput or {})
    hook_decision = merged.pop("decision", None)
    if event in host.permission_events:
        mapped, reason = _permission(host, decision, reason, event)
        value, rewrite = _permission_answer(host, mapped, result, merged.get("tool_input"))
        if value is not None:
            specific["permissionDecision"] = value
            if reason:
                specific["permissionDecisionReason"] = reason
        if rewrite is not None:
            specific["updatedInput"] = rewrite
    elif event in host.behavior_events:
        if decision == "deny" or explicit_allow(result):
            answer = dict(hook_decision) if isinstance(hook_decision, dict) else {}
            if answer.get("behavior") != decision:
                answer = {"behavior": decision}
            if decision == "deny" and reason and "message" not in answer:
                answer["message"] = reason
            specific["decision"] = answer
        hook_decision = None
    elif decision == "deny":
        if event not in host.block_events:
            # No JSON form of a block here: exit 2 with the reason alone on stderr.
            return HostAnswer(stdout=None, exit_code=2, stderr=reason or "denied by a relay hook")
        out["decision"] = "block"
        out["reason"] = reason or "blocked by a relay hook"
    if hook_decision is not None:
        specific["decision"] = hook_decision
    if result.inject and event in host.context_events:
        specific["additionalContext"] = result.inject
    specific.update({key: value for key, value in merged.items() if key not in _RELAY_SPECIFIC})
    if len(specific) > 1:
        out["hookSpecificOutput"] = specific
    return HostAnswer(stdout=_accepted(host, event, out))


def _permission_answer(
    host: Host, decision: str, result: AggregatedResult, rewrite: dict[str, Any] | None
) -> tuple[str | None, dict[str, Any] | None]:
    """The `permissionDecision` (None: no opinion) and `updatedInput` (None: the input as
    the model gave it) of a PreToolUse answer, given the decision in a value the host
    accepts. A rewrite never approves: where allow approves, a rewrite goes without a
    decision and the host's own rules judge the rewritten input."""
    value: str | None = decision
    if value == "allow" and not explicit_allow(result):
        value = None  # no hook said allow: no opinion, whatever was rewritten
    if value in ("deny", "defer"):
        rewrite = None  # nothing runs now: Claude Code ignores a rewrite with these too
    if host.allow_means == "rewrite" and value in (None, "allow"):
        # There allow only carries a rewrite, and a bare allow has the whole answer refused.
        value = "allow" if rewrite is not None else None
    return value, rewrite


def _permission(
    host: Host, decision: str, reason: str | None, event: str | None = None
) -> tuple[str, str | None]:
    """The decision in a value the host accepts (on `event`): `defer` falls back to `ask`,
    and where the host has no `ask` either, to a deny that says why (never a silent allow)."""
    values = host.event_permission_values.get(event or "", host.permission_values)
    if decision in values:
        return decision, reason
    if decision == "defer" and "ask" in values:
        return "ask", reason
    why = f"a relay hook asked for the user's approval ({decision}), which {host.title} hooks "
    why += "cannot request"
    return "deny", f"{reason}\n({why})" if reason else why


def _gemini_decision(
    host: Host, event: str, decision: str, reason: str | None
) -> tuple[str, str | None]:
    """Gemini CLI asks the user on BeforeTool only and takes any decision it does not know
    (`defer`, or `ask` elsewhere) for an allow: there `ask`/`defer` become `ask` on
    BeforeTool and a deny that says why on the other events that gate something."""
    if decision not in ("ask", "defer"):
        return decision, reason
    if event == "BeforeTool":
        return "ask", reason
    if event not in host.gate_events:
        return decision, reason
    return _permission(host, decision, reason)


def _accepted(host: Host, event: str, out: dict[str, Any]) -> dict[str, Any]:
    """The answer without the fields the host would reject it for (see `Host.accepted`)."""
    if host.accepted is None or event not in host.accepted:
        return out
    top, specific_fields = host.accepted[event]
    kept = {key: value for key, value in out.items() if key in top}
    specific = kept.get("hookSpecificOutput")
    if isinstance(specific, dict):
        narrowed = {key: value for key, value in specific.items() if key in specific_fields}
        if set(narrowed) - {"hookEventName"}:
            kept["hookSpecificOutput"] = narrowed
        else:
            del kept["hookSpecificOutput"]
    return kept


def _render_gemini(host: Host, result: AggregatedResult) -> HostAnswer:
    event = host.wire(result.hook_event_name)
    out = _common(result)
    if result.decision == "deny" and event not in host.block_events:
        return HostAnswer(
            stdout=None, exit_code=2, stderr=result.reason or "denied by a relay hook"
        )
    if result.decision != "allow" or explicit_allow(result):
        decision, reason = _gemini_decision(host, event, result.decision, result.reason)
        out["decision"] = decision
        if reason:
            out["reason"] = reason
    specific: dict[str, Any] = {"hookEventName": event}
    if result.inject and event in host.context_events:
        specific["additionalContext"] = result.inject
    specific.update(result.hookSpecificOutput or {})
    if len(specific) > 1:
        out["hookSpecificOutput"] = specific
    return HostAnswer(stdout=out)

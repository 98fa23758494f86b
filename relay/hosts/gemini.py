"""Gemini CLI: its hook events and how it reads a hook's answer (checked against 0.61.0)."""

from __future__ import annotations

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

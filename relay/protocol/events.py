"""Typed events: one msgspec Struct per event of DESIGN §2.

Wire events accept unknown fields (forward compatibility) and every field has a
default, so a partial event from a host decodes and gets its base fields filled in.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta


class Event(msgspec.Struct, kw_only=True):
    """Fields every event carries."""

    session_id: str = ""
    cwd: str = ""
    timestamp: Annotated[str, Meta(description="ISO 8601 UTC, ending in Z")] = ""
    hook_event_name: str = ""
    transcript_path: str | None = None
    agent_name: str | None = None


class SessionStart(Event, kw_only=True):
    """The agent session begins."""

    source: Annotated[str, Meta(description="startup | resume | clear | compact")] = "startup"
    task: Annotated[
        str | None, Meta(description="What the session is for (relay run --task), if given")
    ] = None


class SessionEnd(Event, kw_only=True):
    """The agent session ends."""

    reason: Annotated[str, Meta(description="exit | stop | clear | logout | signal | other")] = (
        "other"
    )


class BeforeAgent(Event, kw_only=True):
    """A user prompt is about to reach the agent (Claude Code: UserPromptSubmit)."""

    prompt: str = ""


class AfterAgent(Event, kw_only=True):
    """The agent finished answering (Claude Code: Stop)."""

    prompt: str = ""
    prompt_response: str = ""
    stop_hook_active: bool = False


class BeforeModel(Event, kw_only=True):
    """A request is about to be sent to the model."""

    llm_request: dict[str, Any] = msgspec.field(default_factory=dict)


class AfterModel(Event, kw_only=True):
    """The model answered."""

    llm_request: dict[str, Any] = msgspec.field(default_factory=dict)
    llm_response: dict[str, Any] = msgspec.field(default_factory=dict)


class BeforeToolSelection(Event, kw_only=True):
    """The model is about to choose among tools."""

    llm_request: dict[str, Any] = msgspec.field(default_factory=dict)


class BeforeTool(Event, kw_only=True):
    """A tool is about to run (Claude Code: PreToolUse)."""

    tool_name: str = ""
    tool_input: dict[str, Any] = msgspec.field(default_factory=dict)


class AfterTool(Event, kw_only=True):
    """A tool has run (Claude Code: PostToolUse)."""

    tool_name: str = ""
    tool_input: dict[str, Any] = msgspec.field(default_factory=dict)
    tool_response: Any = None


class PreCompress(Event, kw_only=True):
    """The conversation is about to be compacted (Claude Code: PreCompact)."""

    trigger: Annotated[str, Meta(description="manual | auto")] = "manual"


class Notification(Event, kw_only=True):
    """The agent notifies the user."""

    notification_type: str = ""
    message: str = ""
    details: Any = None


class Output(Event, kw_only=True):
    """Complete lines of the wrapped agent's output, ANSI stripped."""

    text: str = ""
    stream: Annotated[str, Meta(description="stdout | stderr")] = "stdout"


class Idle(Event, kw_only=True):
    """The wrapped agent has been quiet for a while."""

    idle_seconds: float = 0.0


class MessageReceived(Event, kw_only=True):
    """A message from another agent or a human arrived for this agent."""

    message_id: str = ""
    sender: str = ""
    body: str = ""
    thread: str | None = None


class PatternMatch(Event, kw_only=True):
    """The agent printed an `@namespace:target message` directive."""

    namespace: str = ""
    target: str = ""
    message: str = ""
    line: str = ""
    source: str = "terminal"
    """Where it came from: `terminal` (the agent's screen under `relay run`), `assistant`
    (the assistant's message text, from a host's hooks) or `tool` (relay's MCP tools)."""


class PassThrough(Event, kw_only=True):
    """Any other Claude Code event: its fields pass through unchanged."""


EVENT_TYPES: dict[str, type[Event]] = {
    cls.__name__: cls
    for cls in (
        SessionStart,
        SessionEnd,
        BeforeAgent,
        AfterAgent,
        BeforeModel,
        AfterModel,
        BeforeToolSelection,
        BeforeTool,
        AfterTool,
        PreCompress,
        Notification,
        Output,
        Idle,
        MessageReceived,
        PatternMatch,
    )
}
"""Canonical event name -> its Struct."""

CANONICAL_EVENTS: tuple[str, ...] = tuple(EVENT_TYPES)

MATCHER_FIELDS: dict[str, str] = {
    "SessionStart": "source",
    "SessionEnd": "reason",
    "BeforeTool": "tool_name",
    "AfterTool": "tool_name",
    "PreCompress": "trigger",
    "Notification": "notification_type",
    "Output": "stream",
    "MessageReceived": "sender",
    "PatternMatch": "namespace",
}
"""Canonical event name -> the field its matcher tests (absent: matchers are ignored)."""

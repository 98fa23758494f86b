"""Realistic example events, for trying hooks out (`relay hooks test`). Pure: no I/O."""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from relay.protocol.dialects import canonical_name

PROMPT = "Add a --verbose flag to the CLI and update the tests."

_EVENTS: dict[str, dict[str, Any]] = {
    "SessionStart": {"source": "startup"},
    "SessionEnd": {"reason": "exit"},
    "BeforeAgent": {"prompt": PROMPT},
    "AfterAgent": {
        "prompt": PROMPT,
        "prompt_response": "I added --verbose to cli.py and a test in tests/test_cli.py.",
        "stop_hook_active": False,
    },
    "BeforeModel": {
        "llm_request": {
            "model": "gemini-2.5-pro",
            "messages": [{"role": "user", "content": PROMPT}],
            "config": {"temperature": 0.2},
        }
    },
    "AfterModel": {
        "llm_request": {
            "model": "gemini-2.5-pro",
            "messages": [{"role": "user", "content": PROMPT}],
        },
        "llm_response": {
            "text": "I'll start by reading cli.py.",
            "finish_reason": "STOP",
            "usage": {"input_tokens": 1830, "output_tokens": 64},
        },
    },
    "BeforeToolSelection": {
        "llm_request": {
            "model": "gemini-2.5-pro",
            "messages": [{"role": "user", "content": PROMPT}],
            "tools": ["read_file", "write_file", "replace", "run_shell_command"],
        }
    },
    "PreCompress": {"trigger": "manual"},
    "Notification": {
        "notification_type": "permission_prompt",
        "message": "The agent needs your permission to use Bash",
        "details": {},
    },
    "Output": {"text": "Running 42 tests...\n42 passed in 1.3s", "stream": "stdout"},
    "Idle": {"idle_seconds": 30.0},
    "MessageReceived": {
        "message_id": "01JD8Z3Q4X5V6W7Y8Z9A0B1C2D",
        "sender": "Alice",
        "body": "Can you review the retry change in api/client.py?",
        "thread": None,
    },
    "PatternMatch": {
        "namespace": "deploy",
        "target": "staging",
        "message": "release 1.4.2",
        "line": "@deploy:staging release 1.4.2",
    },
    "SubagentStart": {"agent_id": "agent-1", "agent_type": "general-purpose"},
    "SubagentStop": {
        "agent_id": "agent-1",
        "agent_type": "general-purpose",
        "stop_hook_active": False,
    },
    "Setup": {"trigger": "init"},
    "ConfigChange": {"source": "project_settings", "file_path": ".claude/settings.json"},
}

TOOL_EVENTS = frozenset(
    {"BeforeTool", "AfterTool", "PermissionRequest", "PermissionDenied", "PostToolUseFailure"}
)
"""Events that carry a tool call; `--tool` applies to them."""

DEFAULT_TOOL = "Bash"


class ToolExample(msgspec.Struct, frozen=True):
    """A plausible call of one tool, and what it answered."""

    tool_input: dict[str, Any]
    tool_response: Any


def _tools(cwd: str) -> dict[str, ToolExample]:
    path = f"{cwd.rstrip('/')}/src/app.py"
    shell = ToolExample(
        {"command": "npm test", "description": "Run the test suite"},
        {"stdout": "42 passed", "stderr": "", "interrupted": False},
    )
    write = ToolExample(
        {"file_path": path, "content": "def main() -> None:\n    print('hello')\n"},
        {"filePath": path, "success": True},
    )
    edit = ToolExample(
        {"file_path": path, "old_string": "print('hello')", "new_string": "print('hello, world')"},
        {"filePath": path, "success": True},
    )
    read = ToolExample(
        {"file_path": path}, {"content": "def main() -> None:\n    print('hello')\n"}
    )
    return {
        "Bash": shell,
        "run_shell_command": shell,
        "Write": write,
        "write_file": write,
        "Edit": edit,
        "replace": ToolExample({**edit.tool_input, "expected_replacements": 1}, edit.tool_response),
        "Read": read,
        "read_file": read,
    }


def tool_example(tool: str, cwd: str) -> ToolExample:
    """A plausible input and response for `tool` (an MCP tool or an unknown one gets a generic one)."""
    known = _tools(cwd)
    if tool in known:
        return known[tool]
    if tool.startswith("mcp__"):
        return ToolExample(
            {"query": "example"}, {"content": [{"type": "text", "text": "example result"}]}
        )
    return ToolExample({}, None)


def example_event(event: str, *, tool: str | None = None, cwd: str = ".") -> dict[str, Any]:
    """A realistic payload for `event` (any accepted name); base fields are left to make_event."""
    canonical = canonical_name(event)
    if canonical in TOOL_EVENTS:
        name = tool or DEFAULT_TOOL
        example = tool_example(name, cwd)
        payload: dict[str, Any] = {
            "tool_name": name,
            "tool_input": copy.deepcopy(example.tool_input),
        }
        if canonical == "AfterTool":
            payload["tool_response"] = copy.deepcopy(example.tool_response)
        if canonical == "PostToolUseFailure":
            payload["error"] = "Command failed with exit code 1"
        return payload
    return copy.deepcopy(_EVENTS.get(canonical, {}))


class PathError(ValueError):
    """A `--set` path that cannot be applied; says where it stopped."""


def set_path(payload: dict[str, Any], path: str, value: Any) -> None:
    """Set `value` at a dotted path (`tool_input.command`), creating objects on the way."""
    keys = path.split(".")
    if not all(keys):
        raise PathError(f"empty key in path {path!r}")
    node: Any = payload
    for depth, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        elif not isinstance(child, dict):
            where = ".".join(keys[: depth + 1])
            raise PathError(f"{where} is {type(child).__name__}, not an object: cannot set {path}")
        node = child
    node[keys[-1]] = value

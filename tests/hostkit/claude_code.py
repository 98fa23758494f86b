"""Drive the real Claude Code headless against a scripted Anthropic Messages API on loopback.

Claude Code is pointed at a `ModelServer` with ANTHROPIC_BASE_URL and, through
HTTPS_PROXY/HTTP_PROXY, at the same server for everything else (refused and listed). It
runs as `claude -p PROMPT --output-format stream-json --verbose --allowedTools …` in a
throwaway HOME whose ~/.claude.json answers the first-run questions.

The script is a list of model turns, one per main-conversation request (one that offers
the model tools): a `str` is a text answer, a `ToolUse` (see `bash`) a tool call, a list
of them several calls in one answer. Other requests (titles, topic checks) get a short
text and do not consume the script; once it is exhausted every main request gets
`final_text`. With `pace=(chars, seconds)` a text answer is streamed in deltas of that
many characters, that far apart, as a real model streams.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from hostkit.environment import clean_env
from hostkit.model_server import ModelServer, Reply, Request
from hostkit.npm import host_binary

_FINISHED = re.compile(r"Hooks: (\w+)(?::\S+)? \[(.*?)\] finished with status (-?\d+)")
API_KEY = "sk-ant-hostkit-test-0123456789abcdefghij"
MODEL = "claude-sonnet-4-5"
PERMISSION_MODE = "default"
"""The permission mode every run is pinned to: Claude Code 2.1.3xx may start in "auto", whose
safety check is a classifier on Anthropic's servers (unreachable here), so what a tool call
does would depend on the build's default rather than on relay's answer and the rules."""


@dataclass(frozen=True)
class ToolUse:
    """A tool call the scripted model makes."""

    name: str
    input: dict[str, Any]


def bash(command: str) -> ToolUse:
    """A call to Claude Code's Bash tool."""
    return ToolUse("Bash", {"command": command, "description": "scripted"})


Turn: TypeAlias = "str | ToolUse | Sequence[ToolUse]"


class MessagesApp:
    """A scripted Anthropic Messages API (`POST /v1/messages`, streamed or not)."""

    def __init__(
        self,
        script: Iterable[Turn],
        *,
        final_text: str = "Done.",
        pace: tuple[int, float] | None = None,
    ) -> None:
        self.script: list[Turn] = list(script)
        self.final_text = final_text
        self.pace = pace
        self.main: list[Request] = []
        self.side: list[Request] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def __call__(self, request: Request) -> Reply:
        if request.method == "POST" and request.path.endswith("/count_tokens"):
            return Reply.json({"input_tokens": 100})
        if request.method != "POST" or not request.path.endswith("/v1/messages"):
            return Reply.json(
                {"type": "error", "error": {"type": "not_found_error", "message": request.path}},
                404,
            )
        body = request.json if isinstance(request.json, dict) else {}
        with self._lock:
            if body.get("tools"):
                self.main.append(request)
                turn: Turn = self.script.pop(0) if self.script else self.final_text
            else:
                self.side.append(request)
                turn = "OK."
            serial = next(self._ids)
        blocks = _blocks(turn, serial)
        stop = "tool_use" if any(block["type"] == "tool_use" for block in blocks) else "end_turn"
        model = str(body.get("model") or MODEL)
        if body.get("stream"):
            return Reply.sse(_stream(blocks, stop, serial, model, self.pace))
        return Reply.json(
            {
                "id": f"msg_{serial}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": blocks,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 10},
            }
        )


def _blocks(turn: Turn, serial: int) -> list[dict[str, Any]]:
    if isinstance(turn, str):
        return [{"type": "text", "text": turn}]
    calls = [turn] if isinstance(turn, ToolUse) else list(turn)
    return [
        {
            "type": "tool_use",
            "id": f"toolu_{serial}_{index}",
            "name": call.name,
            "input": call.input,
        }
        for index, call in enumerate(calls)
    ]


def _stream(
    blocks: list[dict[str, Any]],
    stop: str,
    serial: int,
    model: str,
    pace: tuple[int, float] | None = None,
) -> Iterator[tuple[str | None, Any]]:
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": f"msg_{serial}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 1},
            },
        },
    )
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            text: str = block["text"]
            size, pause = pace or (len(text) or 1, 0.0)
            for start in range(0, len(text), size):
                if start:
                    time.sleep(pause)
                yield (
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "text_delta", "text": text[start : start + size]},
                    },
                )
        else:
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {**block, "input": {}},
                },
            )
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {
                        "type": "input_json_delta",
                        "partial_json": json.dumps(block["input"]),
                    },
                },
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 10},
        },
    )
    yield "message_stop", {"type": "message_stop"}


@dataclass
class ClaudeRun:
    """The outcome of one `claude -p` run."""

    returncode: int
    messages: list[dict[str, Any]]
    stdout: str
    stderr: str
    main_requests: list[Request]
    side_requests: list[Request]
    refused: list[str]
    errors: list[str]
    debug: str = ""
    """Claude Code's debug log of the run (`--debug hooks`)."""
    unused_script: list[Turn] = field(default_factory=list)

    def tool_results(self) -> dict[str, str]:
        """tool_use_id -> the text of its tool_result, as the model got it."""
        results: dict[str, str] = {}
        for request in self.main_requests:
            for message in (request.json or {}).get("messages", []):
                content = message.get("content")
                for block in content if isinstance(content, list) else ():
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        results[str(block.get("tool_use_id"))] = _text(block.get("content"))
        return results

    def sent(self) -> str:
        """Everything the main requests carried, as one JSON text (for `in` checks)."""
        return json.dumps([request.json for request in self.main_requests])

    def system_messages(self) -> list[str]:
        """What the user is shown of hooks' `systemMessage`s ("<Event>[:<tool>] says: …")."""
        return [
            str(message.get("content"))
            for message in self.messages
            if message.get("type") == "system" and message.get("subtype") == "informational"
        ]

    def hook_statuses(self) -> list[tuple[str, str, int]]:
        """(event, command, exit status) of every command hook Claude Code ran, from its
        debug log, in order."""
        return [(match[1], match[2], int(match[3])) for match in _FINISHED.finditer(self.debug)]

    def describe(self) -> str:
        """A summary for assertion messages."""
        return (
            f"exit {self.returncode}; refused {self.refused}; errors {self.errors}\n"
            f"stdout:\n{self.stdout[-4000:]}\nstderr:\n{self.stderr[-2000:]}"
        )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def claude_binary() -> Path:
    """The installed `claude`; raises when it is unavailable (tests skip before)."""
    binary = host_binary("claude")
    if binary is None:
        raise RuntimeError("claude is not installed")
    return binary


def prepare_home(home: Path, project: Path) -> None:
    """A HOME whose ~/.claude.json answers Claude Code's first-run questions."""
    home.mkdir(parents=True, exist_ok=True)
    state = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [API_KEY[-20:]], "rejected": []},
        "projects": {str(project): {"hasTrustDialogAccepted": True, "allowedTools": []}},
        "autoUpdates": False,
    }
    (home / ".claude.json").write_text(json.dumps(state))


def host_env(home: Path, url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a run: this one without Anthropic, proxy or CI settings, plus ours."""
    env = clean_env(("ANTHROPIC_", "CLAUDE_"))
    env.update(
        {
            "HOME": str(home),
            "ANTHROPIC_BASE_URL": url,
            "ANTHROPIC_API_KEY": API_KEY,
            "ANTHROPIC_MODEL": MODEL,
            "ANTHROPIC_SMALL_FAST_MODEL": MODEL,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            # Interactive, it clones Anthropic's plugin marketplace from GitHub at every
            # start (ssh, then https through the proxy: refused), a dozen git processes.
            "CLAUDE_CODE_DISABLE_OFFICIAL_MARKETPLACE_AUTOINSTALL": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "HTTPS_PROXY": url,
            "HTTP_PROXY": url,
            "https_proxy": url,
            "http_proxy": url,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "NO_COLOR": "1",
        }
    )
    env.update(extra or {})
    return env


def run_claude(
    project: Path,
    prompt: str,
    script: Iterable[Turn],
    *,
    home: Path,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    extra_args: Sequence[str] = (),
    final_text: str = "Done.",
    allowed_tools: Sequence[str] = ("Bash", "Write", "Read", "Edit"),
    permission_mode: str = PERMISSION_MODE,
    control: Sequence[dict[str, Any]] = (),
) -> ClaudeRun:
    """Run `claude -p` once in `project` against a fresh scripted server; the tools in
    `allowed_tools` (permission rules: `Bash(echo:*)`) run without asking, in
    `permission_mode` (pinned: see PERMISSION_MODE). With `control`, the SDK's control
    requests (`{"subtype": "register_repo_root", …}`) are sent first, on stdin in
    stream-json, then the prompt as a user message."""
    app = MessagesApp(script, final_text=final_text)
    if not (home / ".claude.json").exists():
        prepare_home(home, project)
    stdin: str | None = None
    how = [prompt]
    if control:
        how = ["--input-format", "stream-json"]
        lines: list[dict[str, Any]] = [
            {"type": "control_request", "request_id": f"req_{index}", "request": dict(request)}
            for index, request in enumerate(control)
        ]
        lines.append({"type": "user", "message": {"role": "user", "content": prompt}})
        stdin = "".join(json.dumps(line) + "\n" for line in lines)
    with ModelServer(app) as server:
        args = [
            str(claude_binary()),
            "-p",
            *how,
            "--output-format",
            "stream-json",
            "--verbose",
            "--debug",
            "hooks",
            "--permission-mode",
            permission_mode,
            "--allowedTools",
            *allowed_tools,
            *extra_args,
        ]
        completed = subprocess.run(
            args,
            cwd=project,
            env=host_env(home, server.url, env),
            input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        refused, errors = list(server.refused), list(server.errors)
    session = ""
    messages = []
    for line in completed.stdout.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            messages.append(value)
            session = session or str(value.get("session_id") or "")
    debug_file = home / ".claude" / "debug" / f"{session}.txt"
    debug = debug_file.read_text(errors="replace") if session and debug_file.exists() else ""
    return ClaudeRun(
        returncode=completed.returncode,
        messages=messages,
        stdout=completed.stdout,
        stderr=completed.stderr,
        main_requests=list(app.main),
        side_requests=list(app.side),
        refused=refused,
        errors=errors,
        debug=debug,
        unused_script=list(app.script),
    )

"""Drive the real Gemini CLI headless against a scripted Gemini API on loopback.

Gemini CLI is pointed at a `ModelServer` with GOOGLE_GEMINI_BASE_URL and, through
HTTPS_PROXY/HTTP_PROXY, at the same server for everything else (refused and listed). It
runs as `gemini -p PROMPT --output-format stream-json --approval-mode yolo` in a throwaway
HOME whose ~/.gemini/settings.json selects API-key auth and turns folder trust off.

The script is a list of model turns, one per main-conversation request (one that offers
the model function declarations): a `str` is a text answer, a `FunctionCall` (see
`shell`) a call, a list of them several calls in one answer. Other requests (the model
router, next-speaker checks: they carry a JSON response schema) are answered with a
value that fits the schema and do not consume the script. With `pace=(chars, seconds)` a
streamed text answer comes in pieces of that many characters, that far apart.

In the interactive TUI (tests/test_hosts_gemini_tui.py) Gemini CLI is ready for a prompt
once its input box shows TUI_READY.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeAlias

from hostkit.environment import clean_env
from hostkit.model_server import ModelServer, Reply, Request
from hostkit.npm import host_binary, node_runtime

API_KEY = "hostkit-gemini-test-key"
TUI_READY = "Type your message"  # the empty input box of the interactive TUI
SHELL_TOOL = "run_shell_command"


@dataclass(frozen=True)
class FunctionCall:
    """A function call the scripted model makes."""

    name: str
    args: dict[str, Any]


def shell(command: str) -> FunctionCall:
    """A call to Gemini CLI's shell tool."""
    return FunctionCall(SHELL_TOOL, {"command": command})


Turn: TypeAlias = "str | FunctionCall | Sequence[FunctionCall]"


class GeminiApp:
    """A scripted Gemini API: `:streamGenerateContent` (SSE) and `:generateContent`."""

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
        path = request.path
        if request.method == "POST" and path.endswith(":countTokens"):
            return Reply.json({"totalTokens": 100})
        if request.method != "POST" or ":" not in path.rsplit("/", 1)[-1]:
            return Reply.json({"error": {"code": 404, "message": f"not scripted: {path}"}}, 404)
        body = request.json if isinstance(request.json, dict) else {}
        config = body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        with self._lock:
            if schema is None and body.get("tools"):
                self.main.append(request)
                turn: Turn = self.script.pop(0) if self.script else self.final_text
            else:
                self.side.append(request)
                turn = json.dumps(fitting(schema)) if schema else "OK."
            next(self._ids)
        if path.endswith(":streamGenerateContent"):
            return Reply.sse(_paced(turn, self.pace))
        return Reply.json(_response(turn))


def fitting(schema: Any) -> Any:
    """A small value that satisfies a JSON schema (first enum value, required fields)."""
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        properties = schema.get("properties") or {}
        required = schema.get("required") or list(properties)
        return {name: fitting(properties.get(name, {})) for name in required}
    if kind == "array":
        return []
    if kind in ("number", "integer"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    return "user" if "speaker" in json.dumps(schema) else "ok"


def _paced(turn: Turn, pace: tuple[int, float] | None) -> Iterator[tuple[None, Any]]:
    """The streamed answer: a text in pieces of `pace[0]` characters, `pace[1]` s apart."""
    if not isinstance(turn, str) or pace is None or not turn:
        yield None, _response(turn)
        return
    size, pause = pace
    for start in range(0, len(turn), size):
        if start:
            time.sleep(pause)
        piece = _response(turn[start : start + size])
        if start + size < len(turn):
            del piece["candidates"][0]["finishReason"]
        yield None, piece


def _response(turn: Turn) -> dict[str, Any]:
    if isinstance(turn, str):
        parts: list[dict[str, Any]] = [{"text": turn}]
    else:
        calls = [turn] if isinstance(turn, FunctionCall) else list(turn)
        parts = [{"functionCall": {"name": call.name, "args": call.args}} for call in calls]
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": 100,
            "candidatesTokenCount": 10,
            "totalTokenCount": 110,
        },
    }


@dataclass
class GeminiRun:
    """The outcome of one `gemini -p` run."""

    returncode: int
    events: list[dict[str, Any]]
    stdout: str
    stderr: str
    main_requests: list[Request]
    side_requests: list[Request]
    refused: list[str]
    errors: list[str]
    unused_script: list[Turn] = field(default_factory=list)

    def function_responses(self) -> list[str]:
        """The functionResponse parts the model got, as JSON texts, in order."""
        found: list[str] = []
        seen: set[str] = set()
        for request in self.main_requests:
            for content in (request.json or {}).get("contents", []):
                for part in content.get("parts") or []:
                    if isinstance(part, dict) and "functionResponse" in part:
                        text = json.dumps(part["functionResponse"])
                        if text not in seen:
                            seen.add(text)
                            found.append(text)
        return found

    def sent(self) -> str:
        """Everything the main requests carried, as one JSON text (for `in` checks)."""
        return json.dumps([request.json for request in self.main_requests])

    def describe(self) -> str:
        """A summary for assertion messages."""
        return (
            f"exit {self.returncode}; refused {self.refused}; errors {self.errors}\n"
            f"stdout:\n{self.stdout[-4000:]}\nstderr:\n{self.stderr[-3000:]}"
        )


def gemini_binary() -> Path:
    """The installed `gemini`; raises when it is unavailable (tests skip before)."""
    binary = host_binary("gemini")
    if binary is None:
        raise RuntimeError("gemini is not installed")
    return binary


def prepare_home(home: Path) -> Path:
    """A HOME with API-key auth, folder trust off and nothing phoning home; returns the
    user settings file (tests add `hooks` to it, or `relay install gemini` does)."""
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    if not settings.exists():
        settings.write_text(
            json.dumps(
                {
                    "security": {
                        "auth": {"selectedType": "gemini-api-key"},
                        "folderTrust": {"enabled": False},
                    },
                    "privacy": {"usageStatisticsEnabled": False},
                    "telemetry": {"enabled": False},
                    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                },
                indent=2,
            )
        )
    return settings


def host_env(home: Path, url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a run: this one without Google, proxy or CI settings, plus ours,
    with Node.js 22 and its compile cache (node_runtime)."""
    env = clean_env(("GEMINI_", "GOOGLE_"))
    env.update(
        {
            "HOME": str(home),
            "GOOGLE_GEMINI_BASE_URL": url,
            "GEMINI_API_KEY": API_KEY,
            "HTTPS_PROXY": url,
            "HTTP_PROXY": url,
            "https_proxy": url,
            "http_proxy": url,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "NO_COLOR": "1",
            "GEMINI_CLI_NO_RELAUNCH": "true",
        }
    )
    env.update(extra or {})
    return node_runtime(env)


def run_gemini(
    project: Path,
    prompt: str,
    script: Iterable[Turn],
    *,
    home: Path,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    extra_args: Sequence[str] = (),
    final_text: str = "Done.",
    approval_mode: str = "yolo",
) -> GeminiRun:
    """Run `gemini -p` once in `project` against a fresh scripted server, in
    `approval_mode` (yolo: every call approved; default: the policy engine decides, and
    headless a call it would ask about is refused)."""
    app = GeminiApp(script, final_text=final_text)
    prepare_home(home)
    with ModelServer(app) as server:
        args = [
            str(gemini_binary()),
            "-p",
            prompt,
            "--output-format",
            "stream-json",
            "--approval-mode",
            approval_mode,
            *extra_args,
        ]
        completed = subprocess.run(
            args,
            cwd=project,
            env=host_env(home, server.url, env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        refused, errors = list(server.refused), list(server.errors)
    events = []
    for line in completed.stdout.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            events.append(value)
    return GeminiRun(
        returncode=completed.returncode,
        events=events,
        stdout=completed.stdout,
        stderr=completed.stderr,
        main_requests=list(app.main),
        side_requests=list(app.side),
        refused=refused,
        errors=errors,
        unused_script=list(app.script),
    )

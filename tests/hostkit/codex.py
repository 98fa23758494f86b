"""Drive the real Codex CLI headless against a scripted Responses API server on loopback.

Codex is pointed at a `ModelServer` through a `[model_providers.hostkit]` entry in
`$CODEX_HOME/config.toml` (`wire_api = "responses"`: POST /v1/responses, answered as SSE)
and, through HTTPS_PROXY/HTTP_PROXY, at the same server for everything else, which is
refused and listed. `run_codex` runs `codex exec --json` once and returns what happened.

The script is a list of model turns, one per main-conversation request: a `str` is a plain
text answer, a `Call` (see `shell`) a function call, a list of calls several in one answer.
Side requests (compaction, sub-agents, the TUI's title for a new thread, anything not the
main thread's turn) get a generic text answer and do not consume the script; once it is
exhausted every main request gets `final_text`. With `pace=(chars, seconds)` a text answer
is streamed in deltas of that many characters, that far apart, as a real model streams.

Hooks are read by Codex from `$CODEX_HOME/hooks.json`, `[[hooks.<Event>]]` tables in
`config.toml`, and `<project>/.codex/hooks.json` (the last only once the project is trusted),
but run only when trusted: `list_hooks` asks `codex app-server` for the hooks and their
hashes (JSON-RPC `hooks/list`), `trust_hooks` records `[hooks.state."<key>"] trusted_hash`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import queue
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

PROVIDER = "hostkit"
API_KEY_ENV = "HOSTKIT_CODEX_API_KEY"
SHELL_TOOL = "exec_command"  # Codex 0.169's shell tool (unified exec): {"cmd": "..."}
# The TUI titles a new thread from the human's first line in a thread of its own (a
# `turn` request with `thread_source: thread_title`), sent beside that line's own request:
# either may reach the server first, so the first thread seen is not always the main one.
SIDE_SOURCES = frozenset({"thread_title"})
DEFAULT_MODEL = "gpt-5.5"  # in Codex's bundled catalogue: no "model metadata not found" item
# Keep a run offline and quiet: no update check, no analytics (ab.chatgpt.com), no plugin
# marketplace sync (github.com, api.github.com, chatgpt.com). Given as -c overrides so that
# a test's own [features] / [analytics] tables cannot clash with them.
OFFLINE_OVERRIDES = (
    "check_for_update_on_startup=false",
    "analytics.enabled=false",
    "features.plugins=false",
)
_BEGIN = "# >>> hostkit codex provider (rewritten by tests/hostkit/codex.py)"
_END = "# <<< hostkit codex provider"
_BLOCK = re.compile(re.escape(_BEGIN) + r".*?" + re.escape(_END) + r"\n?", re.DOTALL)


# --------------------------------------------------------------------------- the script


@dataclass(frozen=True)
class Call:
    """A function call the scripted model makes; `arguments` is JSON-encoded on the wire."""

    name: str
    arguments: dict[str, Any]


def shell(command: str, **arguments: Any) -> Call:
    """A call to Codex's shell tool; hooks see it as tool `Bash`, `tool_input.command`."""
    return Call(SHELL_TOOL, {"cmd": command, **arguments})


Turn: TypeAlias = "str | Call | Sequence[Call]"


class ResponsesApp:
    """A scripted OpenAI Responses API (`POST …/responses`, streamed) for a ModelServer."""

    def __init__(
        self,
        script: Iterable[Turn],
        *,
        final_text: str = "Done.",
        side_text: str = "OK.",
        pace: tuple[int, float] | None = None,
    ) -> None:
        self.script: list[Turn] = list(script)
        self.final_text = final_text
        self.side_text = side_text
        self.pace = pace
        self.main: list[Request] = []  # main-conversation requests, in order
        self.side: list[Request] = []  # other model requests (compaction, sub-agents, …)
        self.main_thread: str | None = None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def __call__(self, request: Request) -> Reply:
        if request.method == "GET" and request.path.endswith("/models"):
            return Reply.json({"models": []})
        if request.method != "POST" or not request.path.endswith("/responses"):
            return Reply.json({"error": {"message": f"not scripted: {request.path}"}}, 404)
        with self._lock:
            if not self._is_main(request):
                self.side.append(request)
                turn: Turn = self.side_text
            else:
                self.main.append(request)
                turn = self.script.pop(0) if self.script else self.final_text
            serial = next(self._ids)
        return Reply.sse(_response_events(turn, serial, self.pace))

    def _is_main(self, request: Request) -> bool:
        if "x-openai-subagent" in request.headers:
            return False
        meta = turn_metadata(request)
        if meta.get("request_kind", "turn") != "turn":
            return False
        if meta.get("thread_source") in SIDE_SOURCES:
            return False
        thread = str(meta.get("thread_id") or request.headers.get("thread-id") or "")
        if self.main_thread is None:
            self.main_thread = thread
        return thread == self.main_thread


def _response_events(
    turn: Turn, serial: int, pace: tuple[int, float] | None = None
) -> Iterator[tuple[str | None, Any]]:
    response_id = f"resp_{serial}"
    items: list[dict[str, Any]]
    if isinstance(turn, str):
        items = [
            {
                "type": "message",
                "id": f"msg_{serial}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn, "annotations": []}],
            }
        ]
    else:
        calls = [turn] if isinstance(turn, Call) else list(turn)
        items = [
            {
                "type": "function_call",
                "id": f"fc_{serial}_{n}",
                "call_id": f"call_{serial}_{n}",
                "name": call.name,
                "arguments": json.dumps(call.arguments),
                "status": "completed",
            }
            for n, call in enumerate(calls)
        ]
    yield (
        "response.created",
        {"type": "response.created", "response": {"id": response_id, "status": "in_progress"}},
    )
    for index, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield (
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "content": []},
                },
            )
            size, pause = pace or (len(text) or 1, 0.0)
            for start in range(0, len(text), size):
                if start:
                    time.sleep(pause)
                yield (
                    "response.output_text.delta",
                    {
                        "type": "response.output_text.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "delta": text[start : start + size],
                    },
                )
        else:
            yield (
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "status": "in_progress", "arguments": ""},
                },
            )
        yield (
            "response.output_item.done",
            {"type": "response.output_item.done", "output_index": index, "item": item},
        )
    usage = {
        "input_tokens": 100,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 10,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 110,
    }
    yield (
        "response.completed",
        {
            "type": "response.completed",
            "response": {"id": response_id, "status": "completed", "output": items, "usage": usage},
        },
    )


# --------------------------------------------------------------------------- reading requests


def turn_metadata(request: Request) -> dict[str, Any]:
    """Codex's `x-codex-turn-metadata` header (request_kind, thread_id, turn_id, …)."""
    try:
        value = json.loads(request.headers.get("x-codex-turn-metadata") or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def input_items(request: Request) -> list[dict[str, Any]]:
    """The `input` items of a Responses API request."""
    body = request.json if isinstance(request.json, dict) else {}
    items = body.get("input") or []
    return [item for item in items if isinstance(item, dict)]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_content_text(part) for part in content)
    if isinstance(content, dict):
        return str(content.get("text") or "")
    return ""


def item_text(item: dict[str, Any]) -> str:
    """The text an input item carries (message content, a call's arguments or output)."""
    kind = item.get("type")
    if kind == "function_call_output":
        return _content_text(item.get("output"))
    if kind == "function_call":
        return str(item.get("arguments") or "")
    return _content_text(item.get("content"))


def request_text(request: Request) -> str:
    """Everything the model was sent as input, as one string (instructions excluded)."""
    return "\n".join(item_text(item) for item in input_items(request))


def messages(request: Request, role: str) -> list[str]:
    """The texts of the input messages with `role` (user, developer, assistant)."""
    return [
        _content_text(item.get("content"))
        for item in input_items(request)
        if item.get("type") == "message" and item.get("role") == role
    ]


def function_outputs(request: Request) -> dict[str, str]:
    """call_id -> the output text of every function_call_output the model received."""
    return {
        str(item.get("call_id")): _content_text(item.get("output"))
        for item in input_items(request)
        if item.get("type") == "function_call_output"
    }


def tool_names(request: Request) -> list[str]:
    """The names of the tools offered to the model (namespaces by their own name)."""
    body = request.json if isinstance(request.json, dict) else {}
    return [str(tool.get("name") or tool.get("type")) for tool in body.get("tools") or []]


# --------------------------------------------------------------------------- running codex


@dataclass
class CodexRun:
    """The outcome of one `codex exec --json` run."""

    returncode: int
    events: list[dict[str, Any]]
    stdout: str
    stderr: str
    requests: list[Request]  # every request the server got, in order
    main_requests: list[Request]  # those that consumed the script (main conversation)
    side_requests: list[Request]
    refused: list[str]  # proxied traffic the server refused
    errors: list[str]  # exceptions in the scripted app
    unused_script: list[Turn] = field(default_factory=list)

    def items(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The completed items of `item.completed` events, optionally of one type."""
        found = [
            event["item"]
            for event in self.events
            if event.get("type") == "item.completed" and isinstance(event.get("item"), dict)
        ]
        return [item for item in found if kind is None or item.get("type") == kind]

    @property
    def agent_messages(self) -> list[str]:
        """The texts of the agent_message items."""
        return [str(item.get("text")) for item in self.items("agent_message")]

    @property
    def commands(self) -> list[dict[str, Any]]:
        """The completed command_execution items (command, aggregated_output, exit_code)."""
        return self.items("command_execution")

    @property
    def last_main_text(self) -> str:
        """The input text of the last main-conversation request ("" if there was none)."""
        return request_text(self.main_requests[-1]) if self.main_requests else ""

    def function_outputs(self) -> dict[str, str]:
        """call_id -> output, over all main requests."""
        outputs: dict[str, str] = {}
        for request in self.main_requests:
            outputs.update(function_outputs(request))
        return outputs

    def describe(self) -> str:
        """A summary for assertion messages."""
        return (
            f"exit {self.returncode}; refused {self.refused}; errors {self.errors}\n"
            f"stdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}"
        )


def codex_binary() -> Path:
    """The installed `codex`; raises when it is unavailable (tests skip before)."""
    binary = host_binary("codex")
    if binary is None:
        raise RuntimeError("codex is not installed")
    return binary


def write_provider_config(codex_home: Path, base_url: str, *, model: str = DEFAULT_MODEL) -> Path:
    """Point `$CODEX_HOME/config.toml` at `base_url`, keeping whatever else it holds.

    The managed lines go first (top-level keys must precede the first table) and are
    replaced on each call; the provider itself is given as dotted keys there too.
    """
    codex_home.mkdir(parents=True, exist_ok=True)
    path = codex_home / "config.toml"
    rest = _BLOCK.sub("", path.read_text()) if path.exists() else ""
    block = "\n".join(
        [
            _BEGIN,
            f"model = {_toml_str(model)}",
            f"model_provider = {_toml_str(PROVIDER)}",
            f'model_providers.{PROVIDER}.name = "hostkit scripted server"',
            f"model_providers.{PROVIDER}.base_url = {_toml_str(base_url.rstrip('/') + '/v1')}",
            f'model_providers.{PROVIDER}.wire_api = "responses"',
            f"model_providers.{PROVIDER}.env_key = {_toml_str(API_KEY_ENV)}",
            f"model_providers.{PROVIDER}.request_max_retries = 0",
            f"model_providers.{PROVIDER}.stream_max_retries = 0",
            _END,
            "",
        ]
    )
    path.write_text(block + rest)
    return path


def prepare_tui(codex_home: Path, base_url: str, *, model: str = DEFAULT_MODEL) -> Path:
    """A `$CODEX_HOME` for the interactive TUI: the provider as for `codex exec`, and the
    first-run questions answered (Codex 0.169 first offers to move `gpt-5.5` users to a
    newer model, a full-screen choice, until `notice.model_migrations` records it)."""
    path = write_provider_config(codex_home, base_url, model=model)
    with path.open("a") as config:
        config.write(f'\n[notice.model_migrations]\n{_toml_str(model)} = "gpt-6-sol"\n')
    return path


def host_env(codex_home: Path, proxy: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a Codex run gets: this one, minus OpenAI, proxy or CI settings, plus ours."""
    env = clean_env(("OPENAI_", "CODEX_"))
    env.update(
        {
            "CODEX_HOME": str(codex_home),
            API_KEY_ENV: "sk-hostkit-test",
            "HTTPS_PROXY": proxy,
            "HTTP_PROXY": proxy,
            "ALL_PROXY": proxy,
            "https_proxy": proxy,
            "http_proxy": proxy,
            "all_proxy": proxy,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
            "NO_COLOR": "1",
        }
    )
    env.update(extra or {})
    return env


def run_codex(
    project: Path,
    prompt: str,
    script: Iterable[Turn],
    *,
    codex_home: Path,
    env: dict[str, str] | None = None,
    bypass_trust: bool = False,
    timeout: float = 120,
    model: str = DEFAULT_MODEL,
    extra_args: Sequence[str] = (),
    final_text: str = "Done.",
    sandbox: str = "workspace-write",
) -> CodexRun:
    """Run `codex exec --json` once in `project` against a fresh scripted server, its
    commands in `sandbox` (read-only: a command that writes fails)."""
    app = ResponsesApp(script, final_text=final_text)
    with ModelServer(app) as server:
        write_provider_config(codex_home, server.url, model=model)
        args = [
            str(codex_binary()),
            "exec",
            "--skip-git-repo-check",
            "-s",
            sandbox,
            "--json",
            "--color",
            "never",
        ]
        for override in OFFLINE_OVERRIDES:
            args += ["-c", override]
        if bypass_trust:
            args.append("--dangerously-bypass-hook-trust")
        args += [*extra_args, "--", prompt]
        completed = subprocess.run(
            args,
            cwd=project,
            env=host_env(codex_home, server.url, env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        requests = list(server.requests)
        refused, errors = list(server.refused), list(server.errors)
    return CodexRun(
        returncode=completed.returncode,
        events=_jsonl(completed.stdout),
        stdout=completed.stdout,
        stderr=completed.stderr,
        requests=requests,
        main_requests=list(app.main),
        side_requests=list(app.side),
        refused=refused,
        errors=errors,
        unused_script=list(app.script),
    )


def _jsonl(text: str) -> list[dict[str, Any]]:
    events = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                events.append(value)
    return events


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


# --------------------------------------------------------------------------- hooks and trust


@dataclass(frozen=True)
class HookInfo:
    """One hook as `codex app-server` lists it (`hooks/list`)."""

    key: str  # "<source file>:<event_snake>:<group index>:<handler index>"
    event: str  # camelCase: preToolUse, sessionStart, …
    command: str | None
    matcher: str | None
    current_hash: str  # "sha256:<hex>"
    trust_status: str  # untrusted | trusted | modified | managed
    source: str  # user | project | …
    source_path: str
    timeout_sec: int
    enabled: bool
    raw: dict[str, Any]

    @property
    def trusted(self) -> bool:
        """Whether Codex would run it without --dangerously-bypass-hook-trust."""
        return self.trust_status in ("trusted", "managed")


@dataclass(frozen=True)
class HookListing:
    """`hooks/list` for one cwd: the hooks, and what Codex reported about its config."""

    cwd: str
    hooks: list[HookInfo]
    warnings: list[str]
    errors: list[dict[str, Any]]


class AppServerError(RuntimeError):
    """`codex app-server` failed or answered with an error."""


class AppServer:
    """A `codex app-server` (stdio JSON-RPC, one JSON object per line), initialized."""

    def __init__(
        self, codex_home: Path, cwd: Path, *, env: dict[str, str] | None = None, timeout: float = 30
    ) -> None:
        self.timeout = timeout
        self.notifications: list[dict[str, Any]] = []
        full_env = clean_env(("OPENAI_", "CODEX_"))
        full_env.update({"CODEX_HOME": str(codex_home), "NO_COLOR": "1", **(env or {})})
        self._process = subprocess.Popen(
            [str(codex_binary()), "app-server", "--listen", "stdio://"],
            cwd=cwd,
            env=full_env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        self._threads = [
            threading.Thread(target=self._pump, daemon=True),
            threading.Thread(target=self._drain_stderr, daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        self._ids = itertools.count(1)
        try:
            self.request("initialize", {"clientInfo": {"name": "relay-hostkit", "version": "0"}})
            self.notify("initialized")
        except BaseException:
            self.close()
            raise

    def _pump(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _drain_stderr(self) -> None:
        assert self._process.stderr is not None
        for line in self._process.stderr:
            self._stderr.append(line)

    def _send(self, message: dict[str, Any]) -> None:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(message) + "\n")
        self._process.stdin.flush()

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Send a JSON-RPC notification."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    def request(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send a request and wait for its result (notifications are kept meanwhile)."""
        request_id = next(self._ids)
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        deadline = time.monotonic() + self.timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                line = self._lines.get(timeout=max(remaining, 0.01))
            except queue.Empty:
                raise AppServerError(f"{method}: no answer in {self.timeout}s") from None
            if line is None:
                self._lines.put(None)
                raise AppServerError(f"{method}: app-server exited: {''.join(self._stderr)}")
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if message.get("id") != request_id or "method" in message:
                if "method" in message:
                    self.notifications.append(message)
                continue
            if "error" in message:
                raise AppServerError(f"{method}: {message['error']}")
            return message.get("result")

    def close(self) -> None:
        """Close stdin (the server exits on EOF) and reap it."""
        with contextlib.suppress(OSError):
            if self._process.stdin:
                self._process.stdin.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        for thread in self._threads:
            thread.join(timeout=5)
        for stream in (self._process.stdout, self._process.stderr):
            if stream:
                stream.close()

    def __enter__(self) -> AppServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def list_hooks_detailed(codex_home: Path, cwd: Path, *, timeout: float = 30) -> HookListing:
    """`hooks/list` for `cwd`: every hook Codex discovers there, with its warnings/errors."""
    with AppServer(codex_home, cwd, timeout=timeout) as server:
        result = server.request("hooks/list", {"cwds": [str(cwd)]})
    entries = result.get("data") or []
    entry = next(
        (item for item in entries if item.get("cwd") == str(cwd)), entries[0] if entries else {}
    )
    hooks = [
        HookInfo(
            key=str(hook["key"]),
            event=str(hook["eventName"]),
            command=hook.get("command"),
            matcher=hook.get("matcher"),
            current_hash=str(hook["currentHash"]),
            trust_status=str(hook["trustStatus"]),
            source=str(hook.get("source")),
            source_path=str(hook.get("sourcePath")),
            timeout_sec=int(hook.get("timeoutSec") or 0),
            enabled=bool(hook.get("enabled", True)),
            raw=hook,
        )
        for hook in entry.get("hooks") or []
    ]
    return HookListing(
        cwd=str(entry.get("cwd", cwd)),
        hooks=hooks,
        warnings=list(entry.get("warnings") or []),
        errors=list(entry.get("errors") or []),
    )


def list_hooks(codex_home: Path, cwd: Path, *, timeout: float = 30) -> list[HookInfo]:
    """The hooks Codex lists for `cwd` (key, event, command, current hash, trusted?)."""
    return list_hooks_detailed(codex_home, cwd, timeout=timeout).hooks


def trust_hooks(codex_home: Path, entries: Iterable[HookInfo]) -> None:
    """Record trust in `$CODEX_HOME/config.toml`: `[hooks.state."<key>"] trusted_hash`.

    Existing state tables for the same keys are replaced; everything else is kept.
    """
    path = codex_home / "config.toml"
    text = path.read_text() if path.exists() else ""
    for hook in entries:
        header = f"[hooks.state.{_toml_str(hook.key)}]"
        table = re.compile(r"^" + re.escape(header) + r"[ \t]*\n(?:(?!\[).*\n?)*", re.MULTILINE)
        text = table.sub("", text)
        if text and not text.endswith("\n"):
            text += "\n"
        text += f"\n{header}\ntrusted_hash = {_toml_str(hook.current_hash)}\n"
    path.write_text(text)

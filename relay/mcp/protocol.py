"""MCP's stdio transport, served: newline-delimited JSON-RPC 2.0 on stdin and stdout.

What `relay mcp` speaks (spec/mcp.md), without the official SDK (importing it cost a host
1.2 s of CPU at every start): the `initialize` handshake (the client's protocol version if
relay knows it, else the newest), `ping`, `tools/list` and `tools/call`, and empty lists
of resources and prompts, as the SDK's server advertised them. Requests run concurrently
(a slow tool never holds up a `ping`); `notifications/cancelled` cancels a running call,
which is then never answered; EOF on stdin cancels what still runs, answers it
"Connection closed" and ends the server.

Bad input costs one error answer, never the server: a line that is not JSON is -32700, a
message that is not a request -32600, an unknown method -32601, bad params -32602, a line
over MAX_LINE bytes is skipped to its end and refused.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread
import msgspec

from relay.mcp.tools import Tool, ToolError

PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""The handshake revisions relay serves, oldest to newest."""
MAX_LINE = 8 * 1024 * 1024
"""Longest message line relay reads (bytes): above any tool argument relay accepts (a
refusal of a 2 MB argument must still name it) and far below a host's memory."""
READ_SIZE = 64 * 1024

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
CONNECTION_CLOSED = -32000

_EMPTY_LISTS: dict[str, dict[str, object]] = {
    "resources/list": {"resources": []},
    "resources/templates/list": {"resourceTemplates": []},
    "prompts/list": {"prompts": []},
}
"""What the SDK's server answered for resources and prompts, which relay has none of."""

RequestId = str | int


class ProtocolError(Exception):
    """A request answered with a JSON-RPC error: its code, message and data."""

    def __init__(self, code: int, message: str, data: object = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    @property
    def error(self) -> dict[str, object]:
        error: dict[str, object] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


@dataclass
class _Call:
    scope: anyio.CancelScope
    cancelled: bool = False
    """By the client: never answered."""
    answered: bool = False
    """Its answer is (being) written: never a second one."""


@dataclass
class Server:
    """relay's MCP server: its tools, and who it says it is to the client."""

    name: str
    version: str
    instructions: str
    tools: dict[str, Tool] = field(default_factory=dict)
    _initialized: bool = False
    _calls: dict[RequestId, _Call] = field(default_factory=dict)
    _write_lock: anyio.Lock = field(default_factory=anyio.Lock)
    _wire: int = -1

    def add(self, tool: Tool) -> None:
        self.tools[tool.name] = tool

    # -- the transport ----------------------------------------------------------------

    async def run_stdio(self) -> None:
        """Serve on this process's stdin and stdout until stdin ends."""
        with _claimed_stdio() as (wire_in, wire_out):
            await self.serve(wire_in, wire_out)

    async def serve(self, wire_in: int, wire_out: int) -> None:
        """Serve the messages read from the file descriptor `wire_in`, answering on
        `wire_out`, until `wire_in` ends."""
        self._wire = wire_out
        async with anyio.create_task_group() as group:
            async for line in _lines(wire_in):
                if isinstance(line, ProtocolError):
                    await self._send({"jsonrpc": "2.0", "id": None, "error": line.error})
                else:
                    await self._receive(line, group)
            # EOF: the client is gone or done; what still runs is cancelled, as the SDK did.
            for call in self._calls.values():
                call.scope.cancel()

    async def _receive(self, line: bytes, group: anyio.abc.TaskGroup) -> None:
        try:
            message = _decode(line)
        except ProtocolError as exc:
            await self._send({"jsonrpc": "2.0", "id": None, "error": exc.error})
            return
        try:
            request_id, method, params = _request(message)
        except ProtocolError as exc:
            raw_id = message.get("id") if isinstance(message, dict) else None
            answer_id = raw_id if _is_id(raw_id) else None
            await self._send({"jsonrpc": "2.0", "id": answer_id, "error": exc.error})
            return
        if method is None:
            return  # a response: relay sends no requests, so there is nothing to match
        if request_id is None:
            self._notified(method, params)
        elif method == "initialize":
            # Answered before the next line is read, as the SDK did: a client may send
            # its next request without waiting (the spec says it should not).
            await self._answer(request_id, method, params)
        else:
            call = _Call(anyio.CancelScope())
            self._calls[request_id] = call  # a reused id replaces the entry, as in the SDK
            group.start_soon(self._run, request_id, method, params, call)

    def _notified(self, method: str, params: Mapping[str, object]) -> None:
        if method == "notifications/initialized":
            self._initialized = True
        elif method == "notifications/cancelled":
            request_id = params.get("requestId")
            call = (
                self._calls.get(request_id)
                if isinstance(request_id, str | int) and _is_id(request_id)
                else None
            )
            if call is not None:
                call.cancelled = True
                call.scope.cancel()
        # Other notifications (progress, roots changed, ...) concern nothing relay serves.

    async def _run(
        self, request_id: RequestId, method: str, params: Mapping[str, object], call: _Call
    ) -> None:
        try:
            with call.scope:
                await self._answer(request_id, method, params, call)
        finally:
            if self._calls.get(request_id) is call:
                del self._calls[request_id]
        if call.scope.cancelled_caught and not (call.cancelled or call.answered):
            # Cancelled by EOF: answered as the SDK answered it (the client may still read).
            error = ProtocolError(CONNECTION_CLOSED, "Connection closed").error
            with anyio.CancelScope(shield=True):
                await self._send({"jsonrpc": "2.0", "id": request_id, "error": error})

    async def _answer(
        self,
        request_id: RequestId,
        method: str,
        params: Mapping[str, object],
        call: _Call | None = None,
    ) -> None:
        answer: dict[str, object] = {"jsonrpc": "2.0", "id": request_id}
        try:
            answer["result"] = await self._handle(method, params)
        except ProtocolError as exc:
            answer["error"] = exc.error
        except Exception as exc:  # relay's own fault: this request fails, the server serves on
            print(f"relay mcp: {method} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            error = ProtocolError(INTERNAL_ERROR, "Internal error", f"{type(exc).__name__}: {exc}")
            answer["error"] = error.error
        if call is not None:
            call.answered = True
        await self._send(answer)

    async def _send(self, message: dict[str, object]) -> None:
        """Write one message as one line; a client that stopped reading loses it."""
        try:
            data = msgspec.json.encode(message) + b"\n"
        except (TypeError, UnicodeEncodeError, OverflowError) as exc:
            error = ProtocolError(INTERNAL_ERROR, f"the answer could not be encoded: {exc}")
            data = msgspec.json.encode({**_without_outcome(message), "error": error.error}) + b"\n"
        async with self._write_lock:
            try:
                await anyio.to_thread.run_sync(_write_all, self._wire, data)
            except OSError as exc:  # EPIPE: the client is gone; stdin's EOF ends the server
                print(f"relay mcp: an answer was not delivered: {exc}", file=sys.stderr)

    # -- the methods --------------------------------------------------------------------

    async def _handle(self, method: str, params: Mapping[str, object]) -> dict[str, object]:
        if method == "initialize":
            return self._initialize(params)
        if method == "ping":
            return {}
        if method not in _EMPTY_LISTS and method not in ("tools/list", "tools/call"):
            raise ProtocolError(METHOD_NOT_FOUND, "Method not found", method)
        if not self._initialized:
            raise ProtocolError(
                INVALID_PARAMS, "Invalid request parameters", "initialize the session first"
            )
        if method == "tools/list":
            return {"tools": [tool.listing for tool in self.tools.values()]}
        if method == "tools/call":
            return await self._call_tool(params)
        return _EMPTY_LISTS[method]

    def _initialize(self, params: Mapping[str, object]) -> dict[str, object]:
        version, client = params.get("protocolVersion"), params.get("clientInfo")
        if not isinstance(version, str):
            raise _bad_params("`protocolVersion` must be text")
        if not isinstance(params.get("capabilities"), dict):
            raise _bad_params("`capabilities` must be an object")
        if not (
            isinstance(client, dict)
            and isinstance(client.get("name"), str)
            and isinstance(client.get("version"), str)
        ):
            raise _bad_params("`clientInfo` must be an object with a `name` and a `version`")
        # A client may send its requests before `notifications/initialized`: the SDK
        # counted the session as initialized once it had answered this.
        self._initialized = True
        return {
            "protocolVersion": version if version in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
            "capabilities": {
                "prompts": {"listChanged": False},
                "resources": {"subscribe": False, "listChanged": False},
                "tools": {"listChanged": False},
            },
            "serverInfo": {"name": self.name, "version": self.version},
            "instructions": self.instructions,
        }

    async def _call_tool(self, params: Mapping[str, object]) -> dict[str, object]:
        name, arguments = params.get("name"), params.get("arguments")
        if not isinstance(name, str):
            raise _bad_params("`name` must be the tool's name")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise _bad_params("`arguments` must be an object")
        tool = self.tools.get(name)
        if tool is None:
            return _tool_result(f"Unknown tool: {name}", error=True)
        try:
            text = await tool.function(**tool.arguments(arguments))
        except ToolError as exc:
            return _tool_result(f"Error executing tool {name}: {exc}", error=True)
        except Exception as exc:  # a tool's failure is its caller's error, never the server's
            print(f"relay mcp: tool {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            text = f"Error executing tool {name}: {type(exc).__name__} (see relay mcp's stderr)"
            return _tool_result(text, error=True)
        return _tool_result(text, error=False)


def _tool_result(text: str, *, error: bool) -> dict[str, object]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


def _bad_params(reason: str) -> ProtocolError:
    return ProtocolError(INVALID_PARAMS, "Invalid request parameters", reason)


def _without_outcome(message: dict[str, object]) -> dict[str, object]:
    return {key: value for key, value in message.items() if key not in ("result", "error")}


def _is_id(value: object) -> bool:
    return isinstance(value, str | int) and not isinstance(value, bool)


def _decode(line: bytes) -> Any:
    try:
        try:
            return msgspec.json.decode(line)
        except UnicodeDecodeError:
            # Bytes that are not UTF-8 inside a string: replaced, as the SDK's reader did.
            return msgspec.json.decode(line.decode("utf-8", "replace"))
    except (msgspec.DecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(PARSE_ERROR, "Parse error", f"not JSON: {exc}") from None


def _request(message: object) -> tuple[RequestId | None, str | None, Mapping[str, object]]:
    """(id, method, params) of a request, (None, method, params) of a notification,
    (None, None, {}) of a response; ProtocolError for anything else."""
    if not isinstance(message, dict):
        what = "a batch (MCP sends one message a line)" if isinstance(message, list) else "JSON"
        raise ProtocolError(
            INVALID_REQUEST, "Invalid Request", f"a message is an object, not {what}"
        )
    if message.get("jsonrpc") != "2.0":
        raise ProtocolError(INVALID_REQUEST, "Invalid Request", '`jsonrpc` must be "2.0"')
    if "method" not in message:
        if "id" in message and ("result" in message or "error" in message):
            return None, None, {}
        raise ProtocolError(INVALID_REQUEST, "Invalid Request", "a message without a `method`")
    method, params = message["method"], message.get("params")
    if not isinstance(method, str):
        raise ProtocolError(INVALID_REQUEST, "Invalid Request", "`method` must be text")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ProtocolError(
            INVALID_PARAMS, "Invalid request parameters", "`params` must be an object"
        )
    if "id" not in message:
        return None, method, params
    if not _is_id(message["id"]):
        raise ProtocolError(INVALID_REQUEST, "Invalid Request", "`id` must be text or an integer")
    return message["id"], method, params


async def _lines(fd: int) -> Any:
    """The lines read from `fd` (without their newline), until EOF; a line over
    MAX_LINE bytes is read to its end and yielded as a ProtocolError instead."""
    buffer = bytearray()
    skipped = 0  # bytes of an over-long line thrown away so far
    while True:
        chunk = await anyio.to_thread.run_sync(os.read, fd, READ_SIZE, abandon_on_cancel=True)
        if not chunk:
            break
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if skipped:
                yield _too_long(skipped + end - start)
                skipped = 0
            else:
                buffer += chunk[start:end]
                line = bytes(buffer).strip()
                buffer.clear()
                if len(line) > MAX_LINE:
                    yield _too_long(len(line))
                elif line:
                    yield line
            start = end + 1
        if skipped:
            skipped += len(chunk) - start
        else:
            buffer += chunk[start:]
            if len(buffer) > MAX_LINE:
                skipped = len(buffer)
                buffer.clear()
    if skipped:
        yield _too_long(skipped)
    elif line := bytes(buffer).strip():
        yield line  # a last message without its newline


def _too_long(size: int) -> ProtocolError:
    return ProtocolError(
        INVALID_REQUEST, "Invalid Request", f"a message of {size:,} bytes; at most {MAX_LINE:,}"
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@contextmanager
def _claimed_stdio() -> Iterator[tuple[int, int]]:
    """This process's stdin and stdout as private descriptors for the wire, with fd 0 on
    the null device and fd 1 on stderr meanwhile (as the SDK did): a hook or any child
    that inherits them, or a stray print, can neither read the client's messages nor
    break the stream of answers."""
    sys.stdout.flush()
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, 0)
        try:
            os.dup2(2, 1)
        except OSError:  # no stderr: stray output is dropped instead
            os.dup2(null, 1)
    finally:
        os.close(null)
    try:
        yield wire_in, wire_out
    finally:
        sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        # Not closed: a reader thread abandoned on cancel may still block on wire_in.

"""A scripted HTTP server on 127.0.0.1 that stands in for a model API, and refuses to be a proxy.

A host under test is pointed at it for its model API (ANTHROPIC_BASE_URL, …) and, through
HTTPS_PROXY/HTTP_PROXY, for everything else: proxied requests (CONNECT, or an absolute URI
in the request line) are answered 403 and listed in `refused`, so any other traffic is
both impossible and visible. Every request is recorded with its decoded JSON body.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    json: Any = None


@dataclass
class Reply:
    """What to answer: a status, headers, and a body or a stream of chunks (SSE)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    chunks: Iterable[bytes] | None = None

    @classmethod
    def json(cls, value: Any, status: int = 200) -> Reply:
        """A JSON reply."""
        return cls(status, {"content-type": "application/json"}, json.dumps(value).encode())

    @classmethod
    def sse(cls, events: Iterable[tuple[str | None, Any]]) -> Reply:
        """A text/event-stream reply: (event name or None, data) pairs, data JSON-encoded."""

        def chunks() -> Iterable[bytes]:
            for name, data in events:
                text = data if isinstance(data, str) else json.dumps(data)
                head = f"event: {name}\n" if name else ""
                yield f"{head}data: {text}\n\n".encode()

        return cls(
            200, {"content-type": "text/event-stream", "cache-control": "no-cache"}, chunks=chunks()
        )


App = Callable[[Request], Reply]


class ModelServer:
    """Serve `app` on a free loopback port until closed; `url` is its base address."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.requests: list[Request] = []
        self.refused: list[str] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`."""
        return f"http://127.0.0.1:{self.port}"

    def record(self, request: Request) -> None:
        """Keep a request (thread-safe)."""
        with self._lock:
            self.requests.append(request)

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> ModelServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _handler_for(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_CONNECT(self) -> None:
            self._refuse()

        def _refuse(self) -> None:
            with server._lock:
                server.refused.append(f"{self.command} {self.path}")
            self.send_response(403)
            self.send_header("content-length", "0")
            self.send_header("connection", "close")
            self.end_headers()
            self.close_connection = True

        def _handle(self) -> None:
            if not self.path.startswith("/"):  # absolute URI: used as a proxy
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                self._refuse()
                return
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            request = Request(
                method=self.command,
                path=parts.path,
                query=parse_qs(parts.query),
                headers={key.lower(): value for key, value in self.headers.items()},
                body=body,
            )
            if body:
                try:
                    request.json = json.loads(body)
                except ValueError:
                    request.json = None
            server.record(request)
            try:
                reply = server.app(request)
            except Exception as exc:  # a bug in a script: visible, and a 500 for the host
                with server._lock:
                    server.errors.append(f"{request.method} {request.path}: {exc!r}")
                reply = Reply.json({"error": {"message": repr(exc)}}, status=500)
            self.send_response(reply.status)
            for key, value in reply.headers.items():
                self.send_header(key, value)
            if reply.chunks is None:
                self.send_header("content-length", str(len(reply.body)))
                self.end_headers()
                self.wfile.write(reply.body)
                return
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for chunk in reply.chunks:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle

    return Handler

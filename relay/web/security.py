"""What keeps the dashboard the user's own (spec/dashboard.md, "Security").

The server listens on loopback, but any web page the user visits, and any program of any
user of the machine, can send requests there. So every request must:

- name this server in its Host header (`127.0.0.1:PORT`, `localhost:PORT`; a DNS name
  rebound to 127.0.0.1 carries its own name and is refused);
- come from this server's own page when it says where it comes from (Origin,
  Sec-Fetch-Site);
- carry the token: in the URL the first time (`?token=…`, printed by `relay dashboard`),
  which sets an HttpOnly, SameSite=Strict cookie and redirects to the same URL without
  it, then in that cookie;
- for an action (any method but GET and HEAD), also carry the page's CSRF token in the
  X-Relay-CSRF header, and an Origin.

Anything else gets 403. Every answer carries a strict Content-Security-Policy (no inline
script or style, nothing from elsewhere), nosniff and no referrer. Tokens are compared in
constant time.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

TOKEN_PARAMETER = "token"
CSRF_HEADER = "x-relay-csrf"
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
SAFE_METHODS = frozenset({"GET", "HEAD"})


def same(given: str, expected: str) -> bool:
    """Whether two tokens are equal, in time that does not depend on where they differ."""
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address) is this machine's loopback."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """`host` as it is written in a URL (an IPv6 address in brackets)."""
    bare = host.strip("[]")
    return f"[{bare}]" if ":" in bare else bare


def allowed_hosts(host: str, port: int) -> set[str]:
    """The Host headers a server bound to `host`:`port` answers: the loopback names, the
    host it was given, and for a wildcard address (0.0.0.0, ::) this machine's names."""
    names = {"localhost", "127.0.0.1", "[::1]", url_host(host)}
    bare = host.strip("[]")
    if bare in ("0.0.0.0", "::"):
        machine = socket.gethostname()
        names |= {machine, socket.getfqdn()}
        with contextlib.suppress(OSError):  # a host name that does not resolve: its name alone
            names |= {url_host(str(info[4][0])) for info in socket.getaddrinfo(machine, None)}
    return {f"{name.lower()}:{port}" for name in names}


class Guard:
    """The ASGI middleware in front of the whole dashboard (see the module docstring)."""

    def __init__(
        self, app: ASGIApp, *, token: str, csrf: str, hosts: Iterable[str], cookie: str
    ) -> None:
        self.app = app
        self.token = token
        self.csrf = csrf
        self.hosts = {host.lower() for host in hosts}
        self.cookie = cookie

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1008})
            return
        headers, repeated = _headers(scope)
        refused = self._refusal(headers, repeated)
        if refused is not None:
            await _answer(send, 403, refused)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [value for key, value in query if key == TOKEN_PARAMETER]
        if given:
            if len(given) != 1 or not same(given[0], self.token):
                await _answer(send, 403, "wrong token: open the URL relay dashboard printed")
                return
            await self._set_cookie(scope, query, send)
            return
        if not same(_cookies(headers).get(self.cookie, ""), self.token):
            await _answer(
                send,
                403,
                "no token: open the URL relay dashboard printed (with its ?token=…)",
            )
            return
        if scope["method"] not in SAFE_METHODS:
            if "origin" not in headers:
                await _answer(send, 403, "an action needs an Origin header")
                return
            if not same(headers.get(CSRF_HEADER, ""), self.csrf):
                await _answer(send, 403, "an action needs the page's CSRF token")
                return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, secured)

    def _refusal(self, headers: dict[str, str], repeated: set[str]) -> str | None:
        """Why a request is refused before its token is looked at, or None."""
        twice = repeated & {"host", "origin", "cookie", CSRF_HEADER}
        if twice:
            return f"the header {sorted(twice)[0]} is given more than once"
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            return "wrong Host header: this server answers only to its own address"
        origin = headers.get("origin")
        if origin is not None and origin.lower() != f"http://{host}":
            return "wrong Origin: only this dashboard's own page may call it"
        if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return "a request from another site (Sec-Fetch-Site)"
        return None

    async def _set_cookie(self, scope: Scope, query: list[tuple[str, str]], send: Send) -> None:
        """The token's first visit: the cookie, and the same URL without the token."""
        rest = urlencode([(key, value) for key, value in query if key != TOKEN_PARAMETER])
        location = scope["path"] + (f"?{rest}" if rest else "")
        cookie = f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", location.encode("latin-1", "replace")),
                    (b"set-cookie", cookie.encode()),
                    (b"cache-control", b"no-store"),
                    (b"content-length", b"0"),
                    *SECURITY_HEADERS,
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _headers(scope: Scope) -> tuple[dict[str, str], set[str]]:
    """The request's headers by lowercase name, and the names given more than once."""
    found: dict[str, str] = {}
    repeated: set[str] = set()
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin-1").lower()
        if name in found:
            repeated.add(name)
        found[name] = raw_value.decode("latin-1")
    return found, repeated


def _cookies(headers: dict[str, str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for part in headers.get("cookie", "").split(";"):
        name, _, value = part.strip().partition("=")
        found.setdefault(name, value)
    return found


async def _answer(send: Send, status: int, text: str) -> None:
    body = f"relay dashboard: {text}\n".encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

"""`relay dashboard`'s server: uvicorn on a socket bound here, the pages' tasks beside it,
and a clean end on SIGINT, SIGTERM or SIGHUP."""

from __future__ import annotations

import contextlib
import secrets
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import anyio
import uvicorn

from relay.errors import RelayError
from relay.protocol.display import visible
from relay.web.app import create_app
from relay.web.dashboard import Dashboard
from relay.web.pages import Page
from relay.web.security import allowed_hosts, url_host

SHUTDOWN_SECONDS = 5.0
"""The longest the server waits for its open requests when it stops."""
TASK_RETRY_SECONDS = 5.0
"""A page task that failed starts again after this."""


class DashboardError(RelayError):
    """The dashboard cannot be served as asked (its address, its port)."""


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # relay ends the server on its signals itself (exit 0); uvicorn's own handlers
        # would raise the signal again once it stopped.
        yield


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host`:`port` (0: a free port)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise DashboardError(f"cannot listen on {host}: {exc.strerror or exc}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise DashboardError(
            f"cannot listen on {url_host(host)}:{port}: {exc.strerror or exc}"
        ) from None
    return sock


def shown_host(host: str) -> str:
    """The host a URL of the server names: a wildcard address is this machine's name."""
    return socket.gethostname() if host.strip("[]") in ("0.0.0.0", "::") else host


async def serve(
    dashboard: Dashboard,
    pages: Sequence[Page],
    *,
    host: str,
    port: int,
    on_ready: Callable[[str], None],
) -> None:
    """Serve `pages` of `dashboard` on `host`:`port` until SIGINT, SIGTERM or SIGHUP;
    `on_ready(url)` once it answers (the URL carries the token)."""
    sock = bind(host, port)
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(32)
    app = create_app(
        dashboard,
        pages,
        token=token,
        hosts=allowed_hosts(host, port),
        cookie=f"relay_dashboard_{port}",
    )
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=int(SHUTDOWN_SECONDS),
        server_header=False,
    )
    server = _Server(config)
    url = f"http://{url_host(shown_host(host))}:{port}/?token={token}"
    with sock:
        async with anyio.create_task_group() as group:
            group.start_soon(_stop_on_signals, server, dashboard)
            for page in pages:
                for task in page.tasks:
                    group.start_soon(_keep_running, dashboard, page, task)
            group.start_soon(_tell_when_ready, server, url, on_ready)
            await server.serve(sockets=[sock])
            dashboard.feed.close()
            group.cancel_scope.cancel()


async def _tell_when_ready(
    server: uvicorn.Server, url: str, on_ready: Callable[[str], None]
) -> None:
    while not server.started:
        await anyio.sleep(0.01)
    on_ready(url)


async def _stop_on_signals(server: uvicorn.Server, dashboard: Dashboard) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as received:
        async for _ in received:
            dashboard.feed.close()  # the open event streams end, so the server may stop
            server.should_exit = True
            return


async def _keep_running(dashboard: Dashboard, page: Page, task: Callable[[], Any]) -> None:
    """A page's task, started again (after a pause) when it fails; each failure said on
    stderr and to the open pages (event `dashboard.problem`)."""
    said = None
    while True:
        try:
            await task()
            return
        except Exception as exc:
            text = f"the {page.name} page's feed failed: {type(exc).__name__}: {exc}"
            if text != said:
                sys.stderr.write(visible(f"relay dashboard: {text}; trying again") + "\n")
                dashboard.publish("dashboard.problem", {"page": page.name, "text": text})
                said = text
        await anyio.sleep(TASK_RETRY_SECONDS)

"""`relay dashboard` (spec/dashboard.md): a real `relay dashboard` process, real `relay
run` sessions and `relay up` teams of scripted agents, and the distribution's Chromium
driving the page (tests/browser.py)."""

from __future__ import annotations

import http.client
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import DashboardServer
from scripted_sessions import RELAY, agent

from relay.fleet.board import SqliteBoard

pytestmark = pytest.mark.timeout(180)
TEAM = "default"
FAST = {
    "session": {"injectQuietMs": 100},
    "messaging": {"ackTimeoutSeconds": 0.3, "team": TEAM},
}
Start = Callable[..., DashboardServer]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


@pytest.fixture
def settings(tmp_path: Path) -> Path:
    path = tmp_path / "fast.json"
    path.write_text(json.dumps(FAST))
    return path


@pytest.fixture
def sessions() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """`start(name, steps, cwd, settings, *options)`: a `relay run --headless` of a scripted
    agent; every one still running is stopped (SIGTERM, then kill) at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(
        name: str,
        steps: list[dict[str, Any]],
        cwd: Path,
        settings: Path,
        *options: str,
        env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        process = subprocess.Popen(
            [
                *(RELAY, "run", "--headless", "--name", name, "--settings", str(settings)),
                *(*options, "--", *agent(steps, cwd / f"{name}.jsonl")),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.terminate()
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def request(
    server: DashboardServer,
    path: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One raw HTTP request to the dashboard: its status, headers (lowercase) and body."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        for name, value in {"Host": server.host, **(headers or {})}.items():
            connection.putheader(name, value)
        if body is not None:
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders(body)
        response = connection.getresponse()
        return (
            response.status,
            {name.lower(): value for name, value in response.getheaders()},
            response.read(),
        )
    finally:
        connection.close()


def on_board(name: str, timeout: float = 60) -> float:
    """Wait until `name` has a status on this machine's board; when it was first seen."""
    board = SqliteBoard()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(status.name == name for status in board.statuses_now(TEAM)):
                return time.monotonic()
            time.sleep(0.01)
    finally:
        board.close()
    raise AssertionError(f"{name} never reached the board")


def test_every_request_without_the_token_or_from_elsewhere_is_refused(
    project: Path, settings: Path, dashboard_server: Start
) -> None:
    server = dashboard_server(project, "--settings", str(settings))
    csp = "default-src 'none'; script-src 'self'"
    # No token, no cookie: 403, on every path, with the security headers.
    for path in ("/", "/api/team", "/api/events", "/static/app.js"):
        status, headers, body = request(server, path)
        assert status == 403, (path, body)
        assert headers["content-security-policy"].startswith(csp)
    # A wrong token, or a wrong cookie.
    assert request(server, "/?token=nope")[0] == 403
    assert request(server, "/", headers={"Cookie": server.cookie + "x"})[0] == 403
    # The right token, but another Host (a DNS name rebound to 127.0.0.1) or Origin.
    rebound = {"Host": f"evil.example:{server.port}"}
    assert request(server, f"/?token={server.token}", headers=rebound)[0] == 403
    assert request(server, "/", headers={**rebound, "Cookie": server.cookie})[0] == 403
    foreign = {"Origin": "http://evil.example", "Cookie": server.cookie}
    status, _, body = request(server, "/api/team", headers=foreign)
    assert status == 403 and b"Origin" in body
    other_port = {"Origin": f"http://127.0.0.1:{server.port + 1}", "Cookie": server.cookie}
    assert request(server, "/api/team", headers=other_port)[0] == 403
    cross = {"Sec-Fetch-Site": "same-site", "Cookie": server.cookie}
    assert request(server, "/api/team", headers=cross)[0] == 403
    # The token sets the cookie and redirects to the URL without it.
    status, headers, _ = request(server, f"/?token={server.token}")
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert cookie.startswith(server.cookie + ";")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    # With the cookie, the page and the API answer.
    status, headers, body = request(server, "/", headers={"Cookie": server.cookie})
    assert status == 200 and b'name="relay-csrf"' in body
    assert headers["content-security-policy"].startswith(csp)
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    status, _, body = request(server, "/api/team", headers={"Cookie": server.cookie})
    assert status == 200 and json.loads(body)["team"] == TEAM
    # An action needs the CSRF token and an Origin, besides the cookie.
    csrf = body_meta(request(server, "/", headers={"Cookie": server.cookie})[2], "relay-csrf")
    action = {"Cookie": server.cookie, "Content-Type": "application/json"}
    payload = json.dumps({"to": "nobody", "body": "hi"}).encode()
    own = {"Origin": server.base}
    for headers in (
        action,
        {**action, **own},
        {**action, "X-Relay-CSRF": csrf},
        {**action, **own, "X-Relay-CSRF": csrf + "x"},
        {**action, "Origin": "http://evil.example", "X-Relay-CSRF": csrf},
    ):
        status, _, body = request(
            server, "/api/team/send", method="POST", headers=headers, body=payload
        )
        assert status == 403, (headers, body)
    status, _, body = request(
        server,
        "/api/team/send",
        method="POST",
        headers={**action, **own, "X-Relay-CSRF": csrf},
        body=payload,
    )
    assert status == 409 and "nobody" in json.loads(body)["error"]
    code, printed = server.stop()
    assert code == 0, printed
    assert "relay dashboard: stopped" in printed


def body_meta(page_html: bytes, name: str) -> str:
    text = page_html.decode()
    start = text.index(f'<meta name="{name}" content="') + len(f'<meta name="{name}" content="')
    return text[start : text.index('"', start)]


def test_agents_started_with_relay_run_appear_within_a_second(
    project: Path, settings: Path, dashboard_server: Start, page: Any, sessions: Any
) -> None:
    server = dashboard_server(project, "--settings", str(settings))
    page.goto(server.url)
    assert page.url == server.base + "/"
    page.wait_for_selector("#team-table")
    page.wait_for_selector("#connection[data-state=live]")
    sessions("Alice", [{"print": "compiling the parser"}, {"sleep": 60}], project, settings)
    seen = on_board("Alice")
    page.wait_for_selector('tr[data-name="Alice"]', timeout=1000)
    assert time.monotonic() - seen < 1.5
    sessions("Bob", [{"print": "reading the spec"}, {"sleep": 60}], project, settings)
    on_board("Bob")
    page.wait_for_selector('tr[data-name="Bob"]', timeout=1000)
    page.wait_for_function(
        """() => {
            const cell = document.querySelector('tr[data-name="Alice"] td.last');
            return cell && cell.textContent === 'compiling the parser';
        }""",
        timeout=30_000,
    )

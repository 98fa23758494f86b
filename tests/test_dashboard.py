"""`relay dashboard` (spec/dashboard.md): a real `relay dashboard` process, real `relay
run` sessions and `relay up` teams of scripted agents, and the distribution's Chromium
driving the page (tests/browser.py)."""

from __future__ import annotations

import getpass
import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import DashboardServer, launch
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


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One Chromium for this file's tests, each with a page of its own in a context of its
    own (its cookies, its storage): a Chromium and Playwright's driver started for each
    test cost about a CPU-second each. None of these tests runs asyncio (see launch; the
    feed's test, which does, is in test_dashboard_data.py)."""
    yield from launch()


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


def on_board(name: str, timeout: float = 60) -> None:
    """Wait until `name` has a status on this machine's board."""
    board = SqliteBoard()
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(status.name == name for status in board.statuses_now(TEAM)):
                return
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
    *, project: Path, settings: Path, dashboard_server: Start, page: Any, sessions: Any, shot: Any
) -> None:
    server = dashboard_server(project, "--settings", str(settings))
    console: list[str] = []
    page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
    page.goto(server.url)
    assert page.url == server.base + "/"
    page.wait_for_selector("#team-table")
    page.wait_for_selector("#connection[data-state=live]")
    sessions("Alice", [{"print": "compiling the parser"}, {"sleep": 60}], project, settings)
    on_board("Alice")
    page.wait_for_selector('tr[data-name="Alice"]', timeout=1000)  # within 1 s of its report
    bob = sessions("Bob", [{"print": "reading the spec"}, {"sleep": 60}], project, settings)
    on_board("Bob")
    page.wait_for_selector('tr[data-name="Bob"]', timeout=1000)
    page.wait_for_function(
        """() => {
            const cell = document.querySelector('tr[data-name="Alice"] td.last');
            return cell && cell.textContent === 'compiling the parser';
        }""",
        timeout=30_000,
    )
    # Bob's relay run is killed (nothing more is published): the page shows him lost, in
    # red, without a reload (the board is read at least once a second).
    bob.kill()
    bob.communicate()
    page.wait_for_selector('tr[data-name="Bob"][data-state="lost"] .state-lost', timeout=10_000)
    assert page.text_content('tr[data-name="Alice"] [data-field="state"]') == "working"
    shot("lost")
    assert [line for line in console if line.startswith("error")] == []  # no CSP refusal
    # Ctrl-C with the page open (its feed connected): the server ends, exit 0.
    code, printed = server.stop()
    assert code == 0, printed
    page.wait_for_selector("#connection[data-state=down]")


def test_hostile_text_from_an_agent_renders_as_text(
    *, tmp_path: Path, settings: Path, dashboard_server: Start, page: Any, sessions: Any, shot: Any
) -> None:
    folder = tmp_path / "<img src=x onerror=window.pwned=1>"
    (folder / ".git").mkdir(parents=True)
    machine = '<script>window.pwned=4</script><img src=x onerror="window.pwned=5">'
    script = "<script>window.pwned=2</script>"
    image = '<img src=x onerror="window.pwned=3">'
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    server = dashboard_server(folder, "--settings", str(settings))
    page.goto(server.url)
    page.wait_for_selector("#connection[data-state=live]")
    sessions(
        "Mallory",
        [{"print": script}, {"print": image}, {"sleep": 60}],
        folder,
        settings,
        env={**os.environ, "RELAY_MACHINE": machine},
    )
    row = 'tr[data-name="Mallory"]'
    page.wait_for_function(
        f"""() => {{
            const cell = document.querySelector('{row} td.last');
            return cell && cell.textContent === {json.dumps(image)};
        }}""",
        timeout=30_000,
    )
    cells = page.eval_on_selector(row, "tr => Array.from(tr.cells, cell => cell.textContent)")
    assert machine in cells
    assert folder.name in cells
    assert page.get_attribute(f"{row} td.last", "title") == image
    shot("hostile")
    assert page.evaluate("window.pwned") is None
    assert page.evaluate("document.querySelectorAll('#main img, #main script').length") == 0
    # Only the shell's own scripts (app.js and one per page), none from the agent's text.
    sources = page.evaluate("Array.from(document.scripts, s => s.getAttribute('src'))")
    assert sources and all(src and src.startswith("/static/") for src in sources), sources
    assert dialogs == []


def test_a_message_sent_from_the_page_reaches_the_agents_inbox(
    *, project: Path, settings: Path, dashboard_server: Start, page: Any, sessions: Any, shot: Any
) -> None:
    alice = sessions(
        "Alice", [{"print": "ready"}, {"read": "mail"}, {"sleep": 60}], project, settings
    )
    server = dashboard_server(project, "--settings", str(settings))
    page.goto(server.url)
    page.wait_for_selector('tr[data-name="Alice"]')
    text = "please look at <b>this</b> & run the tests"
    page.click('tr[data-name="Alice"] button[data-action="message"]')
    assert page.input_value("#send-to") == "Alice"
    page.fill("#send-text", text)
    page.click("#send-button")
    page.wait_for_function(
        "() => document.querySelector('#team-notice').textContent.startsWith('queued [')"
    )
    assert page.text_content("#team-notice").endswith("for Alice")
    assert page.input_value("#send-text") == ""
    shot("sent")
    done = subprocess.run(
        [RELAY, "inbox", "Alice", "--all", "--json", "--settings", str(settings)],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    deliveries = json.loads(done.stdout)
    user = os.environ.get("USER") or getpass.getuser()
    assert [(d["message"]["sender"], d["message"]["body"]) for d in deliveries] == [(user, text)]
    # The agent itself read it (relay run typed it in).
    wait_for(lambda: text in (project / "Alice.jsonl").read_text(), "Alice to read it")
    assert alice.poll() is None
    # A message to nobody is refused, and says why; one the server refuses shows why.
    refused = page.evaluate("() => relay.post('/api/team/send', {to: 'nobody', body: 'x'})")
    assert refused["status"] == 409 and "nobody" in refused["data"]["error"]
    page.fill("#send-text", "x" * 70_000)
    page.click("#send-button")
    page.wait_for_selector("#team-notice.error")
    assert "longer than 65536 characters" in page.text_content("#team-notice")


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = condition()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


FLEET_AGENT = str(Path(__file__).resolve().parent / "resources" / "fleet" / "agent.py")


def write_team(project: Path, names: list[str], records: Path, *, team: str) -> None:
    """A team file of scripted fleet agents (tests/resources/fleet/agent.py)."""
    lines = [f"team = {json.dumps(team)}", ""]
    for name in names:
        lines += [
            "[[agent]]",
            f"name = {json.dumps(name)}",
            f"command = {json.dumps([sys.executable, FLEET_AGENT])}",
            f"env = {{ AGENT_RECORD = {json.dumps(str(records / f'{name}.jsonl'))} }}",
            "",
        ]
    (project / "relay.team.toml").write_text("\n".join(lines))


def relay(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY, *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=120
    )


@pytest.fixture
def team_project(tmp_path: Path) -> Iterator[Path]:
    """A project whose `relay up` team is stopped at the end."""
    folder = tmp_path / "team"
    (folder / ".git").mkdir(parents=True)
    (tmp_path / "records").mkdir()
    yield folder
    relay("down", cwd=folder)


def test_stop_and_restart_from_the_page_act_on_relay_up_agents_only(
    *,
    team_project: Path,
    settings: Path,
    dashboard_server: Start,
    page: Any,
    sessions: Any,
    shot: Any,
) -> None:
    write_team(team_project, ["Alice"], team_project.parent / "records", team="crew")
    up = relay("up", "--yes", "--headless", cwd=team_project)
    assert up.returncode == 0, up.stdout + up.stderr
    sessions(
        "Bob",
        [{"print": "not supervised"}, {"sleep": 60}],
        team_project,
        settings,
        "--team",
        "crew",
    )
    server = dashboard_server(team_project, "--team", "crew")
    page.goto(server.url)
    alice, bob = 'tr[data-name="Alice"]', 'tr[data-name="Bob"]'
    page.wait_for_selector(f"{alice} button[data-action=stop]")
    page.wait_for_selector(bob)
    assert page.query_selector(f"{bob} button[data-action=stop]") is None
    # Bob was not started by relay up: the server refuses, and says so.
    refused = page.evaluate("() => relay.post('/api/team/stop', {name: 'Bob'})")
    assert refused["status"] == 409
    assert "not started by relay up on this machine" in refused["data"]["error"]
    # Restart: a second click confirms; the agent's run ends and starts again.
    page.click(f"{alice} button[data-action=restart]")
    page.click(f"{alice} button[data-action=restart]")
    page.wait_for_function(
        "() => document.querySelector('#team-notice').textContent === 'restarted Alice'"
    )
    runs = team_project.parent / "records" / "Alice.runs"
    wait_for(lambda: runs.read_text() == "2", "Alice's second run")
    page.wait_for_function(
        """() => document.querySelector('tr[data-name="Alice"] td.last').textContent
            === 'ready Alice run 2'""",
        timeout=30_000,
    )
    # Stop: its supervisor ends it (SessionEnd), and the page shows it stopped. The row is
    # drawn again between the two clicks (a message to Alice counts in it): the new
    # button still takes the second click as the confirmation.
    page.click(f"{alice} button[data-action=stop]")
    armed = page.query_selector(f"{alice} button[data-action=stop]")
    sent = relay("send", "--team", "crew", "Alice", "before you go", cwd=team_project)
    assert sent.returncode == 0, sent.stderr
    page.wait_for_function("(button) => !button.isConnected", arg=armed, timeout=30_000)
    assert page.inner_text(f"{alice} button[data-action=stop]") == "confirm stop"
    page.click(f"{alice} button[data-action=stop]")
    page.wait_for_function(
        "() => document.querySelector('#team-notice').textContent === 'stopped Alice'",
        timeout=60_000,
    )
    assert relay_ps(team_project)["Alice"]["state"] == "stopped"
    page.wait_for_selector(f'{alice}[data-state="stopped"]', timeout=10_000)
    shot("stopped")
    assert wait_for(lambda: "Bob" in names_running(), "Bob still runs")


def relay_ps(project: Path) -> dict[str, dict[str, Any]]:
    done = relay("ps", "--json", cwd=project)
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in json.loads(done.stdout)}


def names_running() -> set[str]:
    from relay.session.sessions import list_sessions

    return {record.name for record in list_sessions()}


def test_the_feed_says_hello_then_numbered_events_and_ends_when_the_server_stops(
    project: Path, settings: Path, dashboard_server: Start, sessions: Any
) -> None:
    server = dashboard_server(project, "--settings", str(settings))
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    connection.putrequest("GET", "/api/events", skip_host=True)
    connection.putheader("Host", server.host)
    connection.putheader("Cookie", server.cookie)
    connection.endheaders()
    stream = connection.getresponse()
    assert stream.status == 200
    assert stream.getheader("content-type", "").startswith("text/event-stream")

    def frame() -> dict[str, str]:
        fields: dict[str, str] = {}
        while (line := stream.readline().decode()) not in ("\n", ""):
            name, _, value = line.rstrip("\n").partition(": ")
            fields[name] = value
        return fields

    hello = frame()
    assert hello["event"] == "hello" and "id" not in hello
    first = json.loads(hello["data"])["seq"]
    sessions("Alice", [{"print": "hello"}, {"sleep": 60}], project, settings)
    event = frame()
    while event.get("event") != "team.member":
        event = frame()
    assert int(event["id"]) > first
    row = json.loads(event["data"])
    assert row["name"] == "Alice" and row["kind"] == "agent"
    snapshot = json.loads(request(server, "/api/team", headers={"Cookie": server.cookie})[2])
    assert snapshot["seq"] >= int(event["id"])
    assert "Alice" in [member["name"] for member in snapshot["members"]]
    # Ctrl-C with a feed open: the feed ends, and so does the server (exit 0).
    code, printed = server.stop()
    assert code == 0, printed
    while frame():
        pass  # the rest, up to the end of the stream
    connection.close()


def test_bad_actions_are_refused_with_a_reason_and_the_server_goes_on(
    project: Path, settings: Path, dashboard_server: Start
) -> None:
    server = dashboard_server(project, "--settings", str(settings))
    page_html = request(server, "/", headers={"Cookie": server.cookie})[2]
    headers = {
        "Cookie": server.cookie,
        "Origin": server.base,
        "X-Relay-CSRF": body_meta(page_html, "relay-csrf"),
        "Content-Type": "application/json",
    }
    cases = [
        ("/api/team/send", headers, b"{not json", 400, "not JSON"),
        ("/api/team/send", headers, b"[1, 2]", 400, "JSON object"),
        ("/api/team/send", {**headers, "Content-Type": "text/plain"}, b"{}", 415, "JSON"),
        ("/api/team/send", headers, b'{"body": "hi"}', 400, "who the message is for"),
        ("/api/team/send", headers, b'{"to": "Bob", "body": " "}', 400, "empty"),
        ("/api/team/send", headers, b"\xff\xfe", 400, "not JSON"),
        ("/api/team/stop", headers, b"{}", 400, "which agent"),
        ("/api/team/stop", headers, b'{"name": "Nobody"}', 409, "no agent named Nobody"),
        ("/api/team/restart", headers, b'{"name": 3}', 400, "which agent"),
    ]
    for path, sent_headers, body, status, says in cases:
        got, _, answer = request(server, path, method="POST", headers=sent_headers, body=body)
        assert got == status, (path, body, answer)
        assert says in json.loads(answer)["error"], (path, body, answer)
    assert request(server, "/api/team", headers={"Cookie": server.cookie})[0] == 200


def test_a_port_in_use_is_an_error_that_names_it(
    project: Path, settings: Path, dashboard_server: Start
) -> None:
    server = dashboard_server(project, "--settings", str(settings))
    done = subprocess.run(
        [RELAY, "dashboard", "--no-open", "--port", str(server.port)],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"cannot listen on 127.0.0.1:{server.port}: Address already in use" in done.stderr


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[Any]:
    """A real nats-server with a user per machine (m1, m2) of the team crew."""
    from nats_server import NatsServer, find_nats_server, server_config

    binary = find_nats_server()
    if binary is None:
        pytest.skip("nats-server binary not available: install Debian's nats-server (.ci/run does)")
    workdir = tmp_path / "nats"
    workdir.mkdir()
    running = NatsServer(
        binary, workdir, server_config(workdir / "js", {}, unrestricted={"crew": ["m1", "m2"]})
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def test_across_machines_the_page_shows_the_whole_team_and_acts_only_on_its_own(
    *, tmp_path: Path, nats: Any, dashboard_server: Start, page: Any, shot: Any
) -> None:
    """Two machines (two RELAY_HOMEs) on one nats-server, each `relay up --machine` its
    half of one team file; the dashboard of m1 shows both halves, stops only its own, and
    its message reaches the agent on m2."""
    from nats_server import password

    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    records = tmp_path / "records"
    records.mkdir()
    lines = ['team = "crew"', ""]
    for name, machine in (("Alice", "m1"), ("Carol", "m2")):
        lines += [
            "[[agent]]",
            f"name = {json.dumps(name)}",
            f"command = {json.dumps([sys.executable, FLEET_AGENT])}",
            f"machine = {json.dumps(machine)}",
            f"env = {{ AGENT_RECORD = {json.dumps(str(records / f'{name}.jsonl'))} }}",
            "",
        ]
    (project / "relay.team.toml").write_text("\n".join(lines))
    envs = {}
    for machine in ("m1", "m2"):
        home = tmp_path / f"home-{machine}"
        home.mkdir()
        server_settings = {"url": nats.url, "user": machine, "password": password(machine)}
        messaging = {"transport": "nats", "team": "crew", "nats": server_settings}
        (home / "settings.json").write_text(json.dumps({"messaging": messaging}))
        envs[machine] = {**os.environ, "RELAY_HOME": str(home), "RELAY_MACHINE": machine}

    def relay_on(machine: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RELAY, *args],
            cwd=project,
            env=envs[machine],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    try:
        for machine in ("m1", "m2"):
            done = relay_on(machine, "up", "--yes", "--headless", "--machine", machine)
            assert done.returncode == 0, done.stdout + done.stderr
        server = dashboard_server(project, env=envs["m1"])
        page.goto(server.url)
        alice, carol = 'tr[data-name="Alice"]', 'tr[data-name="Carol"]'
        page.wait_for_selector(f"{alice} button[data-action=stop]", timeout=30_000)
        page.wait_for_selector(carol, timeout=30_000)
        cells = page.eval_on_selector(carol, "tr => Array.from(tr.cells, c => c.textContent)")
        assert "m2" in cells
        assert page.query_selector(f"{carol} button[data-action=stop]") is None
        refused = page.evaluate("() => relay.post('/api/team/stop', {name: 'Carol'})")
        assert refused["status"] == 409
        assert (
            "started by relay up on machine m2, not on this one (m1)" in (refused["data"]["error"])
        )
        # A message from the page crosses to m2.
        page.click(f"{carol} button[data-action=message]")
        page.fill("#send-text", "hello from the page")
        page.click("#send-button")
        page.wait_for_function(
            "() => document.querySelector('#team-notice').textContent.startsWith('queued [')"
        )
        wait_for(
            lambda: "hello from the page" in (records / "Carol.jsonl").read_text(),
            "Carol (m2) to read the page's message",
        )
        shot("two-machines")
    finally:
        relay_on("m1", "down")
        relay_on("m2", "down")


def test_another_host_is_warned_about_and_still_checked(
    project: Path, settings: Path, dashboard_server: Start
) -> None:
    import socket

    server = dashboard_server(project, "--settings", str(settings), "--host", "0.0.0.0")
    assert server.host == f"{socket.gethostname()}:{server.port}"  # the URL names the machine
    cookie = {"Cookie": server.cookie}
    for host in (server.host, f"127.0.0.1:{server.port}", f"localhost:{server.port}"):
        assert request(server, "/api/team", headers={**cookie, "Host": host})[0] == 200, host
    for host in (f"evil.example:{server.port}", f"{socket.gethostname()}:1"):
        assert request(server, "/api/team", headers={**cookie, "Host": host})[0] == 403, host
    assert request(server, "/api/team")[0] == 403
    code, printed = server.stop()
    assert code == 0
    assert "warning: listening on 0.0.0.0, not on loopback" in printed

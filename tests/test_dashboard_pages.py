"""The dashboard's Conversation, Hooks and Memory pages in the distribution's Chromium
(tests/browser.py), served by a real `relay dashboard` process: a `relay send` appears
in the conversation live, a deny from `relay hooks run` appears on the Hooks page live and
highlighted, a click shows a call's input and answer, hostile text renders as text, and a
memory search shows its results with their reasons."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import DashboardServer, launch

from relay.services.messaging.mailbox import SqliteMailbox
from relay.services.messaging.model import LoopStoppedError

pytestmark = pytest.mark.timeout(180)
RELAY = str(Path(sys.executable).parent / "relay")
TEAM = "shop"
WAIT_MS = 30_000
"""How long the page may take for what the server does (a loaded machine)."""
HOSTILE = ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>")
GUARD = "import sys; sys.stderr.write('no rm, <b>really</b>'); sys.exit(2)"
BROKEN = "import sys; sys.stderr.write('boom <img src=x onerror=alert(1)>'); sys.exit(1)"
FINE = "import json; print(json.dumps({'decision': 'allow'}))"
Start = Callable[..., DashboardServer]
Shot = Callable[[str], Path]


def relay(*args: str, stdin: str = "", cwd: Path, **env: str) -> str:
    done = subprocess.run(
        [RELAY, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"relay {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One Chromium for this file's tests, each with a page of its own in a context of its
    own (its cookies, its storage): a Chromium and Playwright's driver started for each
    test cost about a CPU-second each. None of these tests runs asyncio (see launch)."""
    yield from launch()


@pytest.fixture
def project(tmp_path: Path, relay_home: Path) -> Path:
    """A project in team `shop`, with hooks on BeforeTool: guard denies, broken fails."""
    root = tmp_path / "shop"
    (root / ".git").mkdir(parents=True)
    hooks = [
        {"name": name, "command": sys.executable, "args": ["-c", code]}
        for name, code in (("guard", GUARD), ("broken", BROKEN), ("fine", FINE))
    ]
    settings = {"messaging": {"team": TEAM}, "hooks": {"BeforeTool": [{"hooks": hooks}]}}
    (relay_home / "settings.json").write_text(json.dumps(settings))
    return root


@pytest.fixture
def mailbox(relay_home: Path, project: Path) -> Iterator[SqliteMailbox]:
    """The team's mailbox with Alice and Bob live in it (this process stands for them)."""
    box = SqliteMailbox(relay_home / "state" / "messages.db")
    box.register_agent("Alice", team=TEAM, session_id="a")
    box.register_agent("Bob", team=TEAM, session_id="b")
    yield box
    box.close()


@pytest.fixture
def dialogs(page: Any) -> Iterator[list[str]]:
    """Every dialog (alert, confirm, prompt) the page opens: there must be none. Nor may
    the page log an error (a script's exception, or anything the CSP refused)."""
    opened: list[str] = []
    errors: list[str] = []

    def dismiss(dialog: Any) -> None:
        opened.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    yield opened
    assert errors == []


def open_page(page: Any, server: DashboardServer, name: str) -> None:
    page.goto(server.url)
    page.wait_for_selector("#connection[data-state=live]", timeout=WAIT_MS)
    page.click(f'#nav a[data-page="{name}"]')
    page.wait_for_selector(f"#page-{name}:not([hidden])", timeout=WAIT_MS)


def test_a_relay_send_appears_in_the_conversation_live_as_text(
    *,
    project: Path,
    mailbox: SqliteMailbox,
    dashboard_server: Start,
    page: Any,
    dialogs: list[str],
    shot: Shot,
) -> None:
    mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="the parser is done")
    # Alice and Bob in a reply loop, stopped by relay after 2 exchanges.
    looping = SqliteMailbox(mailbox.path, max_exchanges=2)
    looping.send(team=TEAM, sender="Bob", recipient="Alice", body="thanks!")
    with pytest.raises(LoopStoppedError):
        looping.send(team=TEAM, sender="Alice", recipient="Bob", body="no, thank you!")
    looping.close()
    server = dashboard_server(project)
    open_page(page, server, "conversation")
    page.wait_for_selector("#conversation-list li.entry", timeout=WAIT_MS)
    assert page.inner_text("#conversation-list li.entry .body") == "the parser is done"
    stop = page.inner_text("li.entry.notice-loop-stop .loop-stop")
    assert stop.startswith("loop stopped: Alice ↔ Bob after 2 exchanges")

    relay("send", "Alice", "please deploy", "--thread", "deploy", cwd=project, USER="pat")
    entry = page.wait_for_selector('li.entry:has-text("please deploy")', timeout=WAIT_MS)
    assert entry.query_selector(".sender").inner_text() == "pat"
    assert entry.query_selector(".recipient").inner_text() == "Alice"
    assert entry.query_selector(".thread-tag").inner_text() == "#deploy"
    page.wait_for_selector(
        '#conversation-threads .thread-link:has-text("#deploy")', timeout=WAIT_MS
    )
    chip = entry.query_selector(".deliveries .chip")
    assert (chip.get_attribute("data-recipient"), chip.get_attribute("data-state")) == (
        "Alice",
        "queued",
    )
    # Alice's session takes it in: the delivery's state changes in the page.
    handed = mailbox.claim("Alice", team=TEAM, session_id="a")
    (message_id,) = [d.message.id for d in handed if d.message.body == "please deploy"]
    mailbox.ack(message_id, "Alice", team=TEAM, evidence="marker")
    page.wait_for_selector(
        f'li.entry[data-id="{message_id}"] .chip[data-recipient="Alice"][data-state="acked"]',
        timeout=WAIT_MS,
    )

    # Hostile messages render literally: no element is made from them, no dialog opens.
    for body in HOSTILE:
        relay("send", "Bob", body, cwd=project, USER="pat")
    for body in HOSTILE:
        page.wait_for_function(
            """(body) => Array.from(document.querySelectorAll('#conversation-list .body'))
                .some((node) => node.textContent === body)""",
            arg=body,
            timeout=WAIT_MS,
        )
    assert page.query_selector_all("#conversation-list img, #conversation-list script") == []
    # A broadcast to many shows its deliveries as counts by state.
    for number in range(6):
        mailbox.register_agent(f"Helper{number}", team=TEAM, session_id=f"h{number}")
    relay("send", "*", "stand-up in five", cwd=project, USER="pat")
    grouped = page.wait_for_selector(
        'li.entry:has-text("stand-up in five") .chip[data-state="queued"]', timeout=WAIT_MS
    )
    assert grouped.inner_text() == "8 queued"
    assert grouped.get_attribute("title") == ", ".join(
        sorted(["Alice", "Bob", *(f"Helper{number}" for number in range(6))])
    )
    page.wait_for_timeout(500)  # a handler that would run has had its turn
    assert dialogs == []
    shot("conversation")

    # Search: the same words as relay messages --grep; then the thread.
    page.fill("#conversation-grep", "deploy")
    page.click("#conversation-go")
    page.wait_for_function(
        "() => document.querySelectorAll('#conversation-list li.entry').length === 1",
        timeout=WAIT_MS,
    )
    relay("send", "Alice", "no deploy today", cwd=project, USER="pat")
    relay("send", "Alice", "unrelated", cwd=project, USER="pat")
    page.wait_for_selector('li.entry:has-text("no deploy today")', timeout=WAIT_MS)
    page.wait_for_timeout(500)
    bodies = page.eval_on_selector_all(
        "#conversation-list .body", "nodes => nodes.map((node) => node.textContent)"
    )
    assert bodies == ["please deploy", "no deploy today"]
    shot("search")
    page.click("#conversation-threads .thread-link")
    page.wait_for_function(
        "() => document.querySelector('#conversation-thread').value === 'deploy'"
        " && document.querySelectorAll('#conversation-list li.entry').length === 1",
        timeout=WAIT_MS,
    )


def test_a_deny_appears_on_the_hooks_page_live_highlighted_and_opens_on_click(
    project: Path,
    dashboard_server: Start,
    page: Any,
    dialogs: list[str],
    shot: Shot,
) -> None:
    server = dashboard_server(project)
    open_page(page, server, "hooks")
    page.wait_for_selector("#hooks-empty:not([hidden])", timeout=WAIT_MS)

    event = {"tool_name": "Bash", "tool_input": {"command": "rm -rf / <script>alert(1)</script>"}}
    answer = relay(
        "hooks", "run", "BeforeTool", stdin=json.dumps(event), cwd=project, RELAY_AGENT_NAME="Alice"
    )
    assert json.loads(answer)["decision"] == "deny"

    denied = page.wait_for_selector('tr.call.denied[data-hook="guard"]', timeout=WAIT_MS)
    failed = page.wait_for_selector('tr.call.failed[data-hook="broken"]', timeout=WAIT_MS)
    fine = page.wait_for_selector('tr.call[data-hook="fine"]', timeout=WAIT_MS)
    assert "denied" not in (fine.get_attribute("class") or "")
    order = "nodes => nodes.map((node) => node.dataset.hook)"
    assert page.eval_on_selector_all("tr.call", order) == ["guard", "broken", "fine"]
    background = "(node) => getComputedStyle(node.querySelector('td')).backgroundColor"
    plain = fine.evaluate(background)
    assert denied.evaluate(background) != plain and failed.evaluate(background) != plain
    assert denied.query_selector(".flag-deny") is not None
    assert failed.query_selector(".verdict-text").inner_text() == (
        "error: hook exited with code 1: boom <img src=x onerror=alert(1)>"
    )
    assert "Alice" in denied.inner_text()
    page.wait_for_selector('#hooks-stats tr[data-hook="broken"].failed', timeout=WAIT_MS)
    stats = page.inner_text('#hooks-stats tr[data-hook="guard"]')
    assert stats.split()[:2] == ["guard", "1"]
    shot("live")

    denied.click()
    page.wait_for_selector("#hooks-detail pre.json", timeout=WAIT_MS)
    shown = page.eval_on_selector_all(
        "#hooks-detail pre.json", "nodes => nodes.map((node) => JSON.parse(node.textContent))"
    )
    event_input, report, result = shown
    assert event_input["tool_input"] == event["tool_input"]
    assert (report["name"], report["exit_code"]) == ("guard", 2)
    assert result["decision"] == "deny" and result["reason"] == "no rm, <b>really</b>"
    assert "relay hooks replay 1" in page.inner_text("#hooks-detail")
    assert page.query_selector_all("#page-hooks img, #page-hooks b:has-text('really')") == []
    page.wait_for_timeout(500)
    assert dialogs == []
    shot("detail")

    page.check("#hooks-only")
    assert page.is_hidden('tr.call[data-hook="fine"]')
    assert page.is_visible('tr.call[data-hook="guard"]')


def test_a_memory_search_shows_results_with_their_reasons(
    project: Path,
    dashboard_server: Start,
    page: Any,
    dialogs: list[str],
    shot: Shot,
) -> None:
    relay("memory", "save", "the deploy script lives in tools/deploy.sh #deploy", cwd=project)
    relay("memory", "save", "--global", "prefer small commits", cwd=project)
    relay("memory", "save", HOSTILE[1] + " deploy notes", cwd=project)
    server = dashboard_server(project)
    open_page(page, server, "memory")
    page.wait_for_selector("#memory-scope-project li.memory", timeout=WAIT_MS)
    assert page.inner_text("#memory-scope-global li.memory .body") == "prefer small commits"
    assert "team memory is off" in page.inner_text("#memory-scope-team")

    page.fill("#memory-query", "deploy script")
    page.click("#memory-go")
    first = page.wait_for_selector("#memory-hits li.memory", timeout=WAIT_MS)
    assert first.query_selector(".body").inner_text() == (
        "the deploy script lives in tools/deploy.sh #deploy"
    )
    reasons = [node.inner_text() for node in first.query_selector_all(".why .reason")]
    assert reasons[0].startswith("words #1 (bm25 ")
    assert any(reason.startswith("recency x") for reason in reasons)
    assert "tags: #deploy" in reasons
    assert page.query_selector_all("#page-memory img") == []
    bodies = page.eval_on_selector_all(
        "#memory-hits .body", "nodes => nodes.map((node) => node.textContent)"
    )
    assert HOSTILE[1] + " deploy notes" in bodies
    shot("search")

    # A memory saved elsewhere shows without a reload.
    relay("memory", "save", "a new note about releases", cwd=project)
    page.wait_for_selector(
        '#memory-scope-project li.memory:has-text("a new note about releases")', timeout=WAIT_MS
    )
    page.wait_for_timeout(500)
    assert dialogs == []


def test_bad_requests_are_refused_with_a_reason_and_the_page_says_it(
    project: Path, mailbox: SqliteMailbox, dashboard_server: Start, page: Any
) -> None:
    server = dashboard_server(project)
    open_page(page, server, "conversation")

    def get(path: str) -> tuple[int, str]:
        answer = page.request.get(server.base + path)
        return answer.status, str(answer.json().get("error", ""))

    status, error = get("/api/conversation?grep=%21%21%21")
    assert status == 400 and "no words in it" in error
    status, error = get("/api/conversation?since=last%20tuesday")
    assert status == 400 and "neither a duration ago" in error
    assert get("/api/conversation/since?cursor=99999999999999999999999")[0] == 400
    assert get("/api/conversation?limit=-1")[0] == 400
    status, error = get("/api/hooks/call?event=7&call=1")
    assert status == 404 and "no event 7 in the hook log" in error
    assert get("/api/hooks?limit=ten")[0] == 400
    status, error = get("/api/memory/search?q=deploy&scope=everywhere")
    assert status == 400 and "no scope 'everywhere'" in error
    assert get("/api/memory/search?q=" + "x" * 2000)[0] == 400
    # The server goes on answering, and the page shows a bad search's reason.
    assert page.request.get(server.base + "/api/conversation").status == 200
    page.fill("#conversation-grep", "!!!")
    page.click("#conversation-go")
    page.wait_for_selector("#conversation-error:not([hidden])", timeout=WAIT_MS)
    assert "no words in it" in page.inner_text("#conversation-error")

"""The data of the dashboard's Conversation, Hooks and Memory pages (relay/web/conversation.py,
hooks.py, memory.py) and its event feed (feed.py), with no browser: real SQLite files, messages sent through relay's
mailbox and by `relay send`, hook calls logged by `relay hooks run`, memories saved by
`relay memory save`; each page's data compared with what the CLI shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest

from relay.config.discovery import load_settings
from relay.engine.hooklog import HookLog, UnknownLogEventError
from relay.engine.telemetry import log_path
from relay.services.messaging.history import HistoryQuery, SearchTextError, TimeBoundError
from relay.services.messaging.mailbox import SqliteMailbox
from relay.services.messaging.model import LoopStoppedError, MessagingError, RateLimitedError
from relay.web.conversation import Conversation, ConversationFeed, history_query
from relay.web.hooks import Hooks, hook_stats
from relay.web.memory import MemoryPageError, open_memories, reasons

RELAY = str(Path(sys.executable).parent / "relay")
TEAM = "shop"
WAIT = 60.0
"""Seconds a test waits for something a relay process does (a loaded machine)."""
HOSTILE = ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>")

Result = TypeVar("Result")


def relay(*args: str, stdin: str = "", cwd: Path | None = None, **env: str) -> str:
    """Run the relay CLI as its own process; its stdout (it must succeed)."""
    done = subprocess.run(
        [RELAY, *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **env},
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 0, f"relay {' '.join(args)}: {done.stderr}"
    return done.stdout


def eventually(look: Callable[[], Result | None], what: str) -> Result:
    """What `look` returns once it is something, looked at until WAIT seconds passed."""
    deadline = time.monotonic() + WAIT
    while True:
        found = look()
        if found:
            return found
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def write_settings(relay_home: Path, settings: dict[str, Any]) -> None:
    (relay_home / "settings.json").write_text(json.dumps(settings))


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "shop"
    (root / ".git").mkdir(parents=True)
    monkeypatch.chdir(root)
    return root


# -- Conversation ------------------------------------------------------------------------


@pytest.fixture
def mailbox(relay_home: Path, project: Path) -> Iterator[SqliteMailbox]:
    """The team's mailbox (the one `relay send` uses), Alice and Bob live in it, a reply
    loop stopped after 4 exchanges and 2 attempts making a delivery dead."""
    write_settings(relay_home, {"messaging": {"team": TEAM, "maxExchanges": 4, "maxAttempts": 2}})
    box = SqliteMailbox(
        relay_home / "state" / "messages.db", max_attempts=2, max_per_minute=1000, max_exchanges=4
    )
    box.register_agent("Alice", team=TEAM, session_id="a")
    box.register_agent("Bob", team=TEAM, session_id="b")
    yield box
    box.close()


def test_the_timeline_holds_messages_threads_deliveries_and_notices(
    mailbox: SqliteMailbox, project: Path
) -> None:
    relay("send", "Alice", "please deploy the shop", "--thread", "deploy", cwd=project, USER="pat")
    relay("send", "*", "lunch at noon", cwd=project, USER="pat")
    asked, _ = mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="can you review?")
    hostile, _ = mailbox.send(team=TEAM, sender="Bob", recipient="Alice", body=HOSTILE[0])
    mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="on it", thread="deploy")
    # Bob's session takes his mail and acknowledges Alice's question; Alice refuses Bob's.
    handed = mailbox.claim("Bob", team=TEAM, session_id="b")
    assert [delivery.message.body for delivery in handed] == [
        "lunch at noon",
        "can you review?",
        "on it",
    ]
    mailbox.ack(asked.id, "Bob", team=TEAM, evidence="marker")
    mailbox.deny(hostile.id, "Alice", team=TEAM, reason="not from Bob")

    page = Conversation(mailbox, TEAM).page()

    assert [(entry.sender, entry.recipient, entry.body) for entry in page.entries] == [
        ("pat", "Alice", "please deploy the shop"),
        ("pat", "*", "lunch at noon"),
        ("Alice", "Bob", "can you review?"),
        ("Bob", "Alice", HOSTILE[0]),
        ("Alice", "Bob", "on it"),
        ("relay", "Bob", f"Your message to Alice [{hostile.short_id}] was refused: not from Bob."),
    ]
    deploy, lunch, question, refused, reply, notice = page.entries
    assert lunch.recipient == "*" and lunch.thread is None
    assert [entry.seq for entry in page.entries] == sorted(entry.seq for entry in page.entries)
    assert page.cursor == notice.seq and page.more is False and page.team == TEAM
    assert (deploy.sender_kind, question.sender_kind, notice.sender_kind) == (
        "human",
        "agent",
        "relay",
    )
    assert deploy.short_id == deploy.id[-8:].lower() and deploy.thread == "deploy"
    states = {
        entry.body: {d.recipient: d.state for d in entry.deliveries} for entry in page.entries
    }
    assert states["lunch at noon"] == {"Alice": "queued", "Bob": "handed"}
    assert states["can you review?"] == {"Bob": "acked"} and states["on it"] == {"Bob": "handed"}
    assert states[HOSTILE[0]] == {"Alice": "denied"}
    assert refused.deliveries[0].reason == "not from Bob"
    assert question.deliveries[0].evidence == "marker" and question.deliveries[0].acked_at
    assert (notice.notice, reply.notice, deploy.notice) == ("refused", None, None)
    assert [(thread.thread, thread.messages, thread.participants) for thread in page.threads] == [
        ("deploy", 2, ["Alice", "pat"])
    ]
    assert page.threads[0].last_at == reply.created_at
    encoded = msgspec.json.encode(page)  # what the page's route sends: the text as sent
    assert json.loads(encoded)["entries"][3]["body"] == HOSTILE[0]

    one_thread = Conversation(mailbox, TEAM).page(history_query(thread="deploy"))
    assert [entry.body for entry in one_thread.entries] == ["please deploy the shop", "on it"]
    newest = Conversation(mailbox, TEAM).page(limit=2)
    assert [entry.body for entry in newest.entries] == ["on it", notice.body] and newest.more


def test_a_loop_stop_and_a_dead_delivery_are_notices_of_their_kind(
    mailbox: SqliteMailbox,
) -> None:
    for turn in range(4):
        one, other = ("Alice", "Bob") if turn % 2 == 0 else ("Bob", "Alice")
        mailbox.send(team=TEAM, sender=one, recipient=other, body=f"ping {turn}")
    with pytest.raises(LoopStoppedError) as stopped:
        mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="ping again")
    # Bob's mail reaches him twice without an acknowledgement: the next claim finds it dead.
    mail, _ = mailbox.send(team=TEAM, sender="pat", recipient="Bob", body="hello?", human=True)
    for attempt in range(2):
        for delivery in mailbox.claim("Bob", team=TEAM, session_id=f"b{attempt}"):
            mailbox.typed(delivery.message.id, "Bob", team=TEAM, session_id=f"b{attempt}")
        mailbox.release("Bob", [mail.id], team=TEAM, session_id=f"b{attempt}")
    mailbox.claim("Bob", team=TEAM, session_id="b3")
    # Carol sends more than her minute's share: Alice is told once.
    mailbox.register_agent("Carol", team=TEAM, session_id="c")
    mailbox.max_per_minute = 2
    with pytest.raises(RateLimitedError):
        for n in range(3):
            mailbox.send(team=TEAM, sender="Carol", recipient="Alice", body=f"news {n}")

    entries = Conversation(mailbox, TEAM).page().entries

    # Bob's pings died the same way: Alice is told of each, pat of his.
    notices = [(entry.recipient, entry.notice) for entry in entries if entry.sender == "relay"]
    assert notices == [("Bob", "loop-stop")] + [
        (name, "undelivered") for name in ("Alice", "Alice", "pat")
    ] + [("Alice", "rate-limit")]
    stop = next(entry for entry in entries if entry.notice == "loop-stop")
    assert stop.body == stopped.value.notice and stop.recipient == "Bob"
    assert stop.loop_stop is not None
    assert (stop.loop_stop.agents, stop.loop_stop.exchanges) == (["Alice", "Bob"], 4)
    assert stop.loop_stop.until in stop.body
    assert all("could not be delivered" in e.body for e in entries if e.notice == "undelivered")
    hello = next(entry for entry in entries if entry.body == "hello?")
    assert [(d.recipient, d.state, d.attempts) for d in hello.deliveries] == [("Bob", "dead", 2)]
    assert "without an acknowledgement" in (hello.deliveries[0].reason or "")


def test_search_is_relay_messages_grep(mailbox: SqliteMailbox, project: Path) -> None:
    for body in (
        "deploy the café at noon",
        'NEAR the "quoted" bit - with a * star',
        "Deploying is not deploy-ing",
        "nothing to see",
        HOSTILE[1],
    ):
        mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body=body)
    conversation = Conversation(mailbox, TEAM)
    for words in ("deploy", "cafe NOON", '"quoted" NEAR', "onerror", "img src", "star *"):
        page = conversation.page(history_query(text=words))
        listed = relay("messages", "--grep", words, "--json", cwd=project)
        expected = [json.loads(line)["id"] for line in listed.splitlines()]
        assert [entry.id for entry in page.entries] == expected, words
        assert expected or words == "star *"
    assert conversation.page(history_query(text="onerror")).entries[0].body == HOSTILE[1]
    since = conversation.page(history_query(since="1h", sender="Alice", recipient="Bob"))
    assert len(since.entries) == 5
    assert conversation.page(history_query(until="1h")).entries == []
    for bad in ("", "   "):  # blank filters are no filter, as an empty form field
        assert history_query(text=bad, sender=bad) == HistoryQuery()
    with pytest.raises(SearchTextError):
        history_query(text="!!! ---")
    with pytest.raises(TimeBoundError) as error:
        history_query(since="last tuesday")
    assert isinstance(error.value, MessagingError) and "since" in str(error.value)


def test_the_feed_gives_what_is_new_since_its_cursor(
    mailbox: SqliteMailbox, project: Path, request: pytest.FixtureRequest
) -> None:
    first, _ = mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="first")
    # The dashboard's own connection to the mailbox; sessions write through theirs.
    reader = SqliteMailbox(mailbox.path)
    request.addfinalizer(reader.close)
    conversation = Conversation(reader, TEAM)
    page = conversation.page()
    feed = ConversationFeed(conversation, after=page.cursor, shown=page.entries)
    assert feed.poll().entries == [] and feed.poll().deliveries == []

    relay("send", "Bob", HOSTILE[1], cwd=project, USER="pat")
    relay("send", "*", "all hands", cwd=project, USER="pat")
    update = feed.poll()
    assert [(entry.sender, entry.body) for entry in update.entries] == [
        ("pat", HOSTILE[1]),
        ("pat", "all hands"),
    ]
    assert update.cursor == update.entries[-1].seq == feed.cursor
    assert update.deliveries == []

    # Deliveries change: Bob's session takes his mail and acknowledges the first.
    mailbox.claim("Bob", team=TEAM, session_id="b")
    mailbox.ack(first.id, "Bob", team=TEAM, evidence="output")
    update = feed.poll()
    assert update.entries == []
    changes = sorted((c.id, c.delivery.recipient, c.delivery.state) for c in update.deliveries)
    hostile, hands = (entry.id for entry in conversation.page().entries[1:])
    assert changes == sorted(
        [(first.id, "Bob", "acked"), (hostile, "Bob", "handed"), (hands, "Bob", "handed")]
    )
    assert feed.poll().deliveries == []  # told once
    mailbox.ack(hands, "Bob", team=TEAM, evidence="marker")
    assert [(c.id, c.delivery.state) for c in feed.poll().deliveries] == [(hands, "acked")]

    # A search's feed gives only what the search selects.
    searched = ConversationFeed(conversation, after=feed.cursor)
    relay("send", "Alice", "nothing here", cwd=project, USER="pat")
    relay("send", "Alice", "deploy now", cwd=project, USER="pat")
    entries, cursor = conversation.since(feed.cursor, history_query(text="deploy"))
    assert [entry.body for entry in entries] == ["deploy now"] and cursor == entries[0].seq
    assert [entry.body for entry in searched.poll().entries] == ["nothing here", "deploy now"]


def test_deliveries_of_many_messages_in_one_read(mailbox: SqliteMailbox) -> None:
    mailbox.max_per_minute = 10**6
    sent = [
        mailbox.send(team=TEAM, sender="pat", recipient="*", body=f"note {n}", human=True)[0]
        for n in range(1200)  # more than one chunk of bound parameters
    ]
    found = mailbox.search(TEAM, HistoryQuery(), limit=2000)
    keys = [(item.seq, item.message.recipient) for item in found]
    deliveries = mailbox.deliveries(TEAM, [*keys, (10**9, "*"), (found[0].seq, "Carol")])
    assert len(deliveries) == 1200
    assert {d.message.id for item in found for d in deliveries[item.seq]} == {m.id for m in sent}
    assert all([d.recipient for d in deliveries[item.seq]] == ["Alice", "Bob"] for item in found)
    assert mailbox.deliveries("other-team", keys) == {}
    # One recipient's, and those of a name no longer in the team (its mail died then).
    assert [
        d.recipient for d in mailbox.deliveries(TEAM, [(found[0].seq, "Bob")])[found[0].seq]
    ] == ["Bob"]
    mailbox.forget("pat", team=TEAM)
    mailbox.register_agent("Carol", team=TEAM, session_id="c", pid=_gone_pid())
    mailbox.set_presence("Carol", team=TEAM, session_id="c", state="offline")
    mailbox.send(team=TEAM, sender="Alice", recipient="*", body="last call")
    mailbox.forget("Carol", team=TEAM)
    (last,) = mailbox.search(TEAM, HistoryQuery(text="last call"), limit=1)
    states = mailbox.deliveries(TEAM, [(last.seq, "*")])[last.seq]
    assert [(d.recipient, d.state) for d in states] == [("Bob", "queued"), ("Carol", "dead")]


def _gone_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


# -- Hooks -------------------------------------------------------------------------------

GUARD = "import sys; sys.stderr.write('no rm <b>here</b>'); sys.exit(2)"
BROKEN = "import sys; sys.stderr.write('boom <script>alert(1)</script>'); sys.exit(1)"
FINE = "import json; print(json.dumps({'decision': 'allow', 'systemMessage': 'fine by me'}))"


@pytest.fixture
def hook_settings(relay_home: Path) -> None:
    """Three hooks on BeforeTool: guard denies (exit 2), broken fails (exit 1), fine allows."""
    hooks = [
        {"name": name, "command": sys.executable, "args": ["-c", code]}
        for name, code in (("guard", GUARD), ("broken", BROKEN), ("fine", FINE))
    ]
    write_settings(relay_home, {"hooks": {"BeforeTool": [{"hooks": hooks}]}})


def run_hook(project: Path, command: str, agent: str = "Alice") -> dict[str, Any]:
    event = {"tool_name": "Bash", "tool_input": {"command": command}}
    answer = relay(
        "hooks", "run", "BeforeTool", stdin=json.dumps(event), cwd=project, RELAY_AGENT_NAME=agent
    )
    result: dict[str, Any] = json.loads(answer)
    return result


def logged_events(count: int) -> list[int]:
    """The ids of the log's events once it holds `count` (its writer commits in batches)."""
    log = HookLog(log_path())
    return eventually(
        lambda: (
            [event.id for event in log.events(limit=None)]
            if len(log.events(limit=None)) >= count
            else None
        ),
        f"{count} events in the hook log",
    )


@pytest.mark.usefixtures("hook_settings")
def test_hook_calls_denies_errors_and_figures(project: Path) -> None:
    hooks = Hooks(HookLog(log_path()))
    empty = hooks.page()
    assert (empty.calls, empty.cursor, empty.stats.hooks) == ([], 0, [])

    for command in ("rm -rf /", "ls", "echo <hi>"):
        assert run_hook(project, command)["decision"] == "deny"
    logged_events(3)

    page = hooks.page()

    assert [(call.event_id, call.hook) for call in page.calls] == [
        (event, hook) for event in (3, 2, 1) for hook in ("guard", "broken", "fine")
    ]
    guard, broken, fine = page.calls[:3]
    assert (guard.denied, guard.failed, guard.decision, guard.exit_code) == (True, False, "deny", 2)
    assert (broken.denied, broken.failed, broken.exit_code) == (False, True, 1)
    assert broken.error == "hook exited with code 1: boom <script>alert(1)</script>"
    assert (fine.denied, fine.failed, fine.decision) == (False, False, "allow")
    assert {call.agent for call in page.calls} == {"Alice"}
    assert {(call.event, call.event_decision) for call in page.calls} == {("BeforeTool", "deny")}
    assert all(call.duration_ms > 0 for call in page.calls) and page.cursor == 3
    stats = {item.hook: item for item in page.stats.hooks}
    assert set(stats) == {"guard", "broken", "fine"} and page.stats.events == 3
    assert [
        (stats[h].calls, stats[h].errors, stats[h].denies) for h in ("guard", "broken", "fine")
    ] == [
        (3, 0, 3),
        (3, 3, 0),
        (3, 0, 0),
    ]
    durations = sorted(call.duration_ms for call in page.calls if call.hook == "fine")
    assert (stats["fine"].p50_ms, stats["fine"].p99_ms) == (durations[1], durations[2])
    assert stats["fine"].max_ms == durations[2]

    # What `relay hooks log --json` shows of an event is what a call's detail holds.
    detail = hooks.detail(guard.id, guard.event_id)
    assert detail is not None
    (logged,) = [e for e in json.loads(relay("hooks", "log", "--json", "--all")) if e["id"] == 3]
    assert detail.input == logged["input"] and detail.input["tool_input"] == {
        "command": "echo <hi>"
    }
    assert detail.result == logged["result"] and detail.result["decision"] == "deny"
    assert detail.answer == logged["result"]["hooks"][0]
    assert (detail.answer["name"], detail.answer["exit_code"]) == ("guard", 2)
    assert detail.replay == "relay hooks replay 3"
    assert [call.hook for call in detail.calls] == ["guard", "broken", "fine"]
    fine_detail = hooks.detail(fine.id, fine.event_id)
    assert fine_detail is not None and fine_detail.answer is not None
    assert fine_detail.answer["output"]["systemMessage"] == "fine by me"
    assert hooks.detail(10**6, guard.event_id) is None
    with pytest.raises(UnknownLogEventError):
        hooks.detail(guard.id, 99)


@pytest.mark.usefixtures("hook_settings")
def test_the_hooks_feed_gives_new_calls_and_keeps_the_figures(project: Path) -> None:
    run_hook(project, "ls")
    logged_events(1)
    hooks = Hooks(HookLog(log_path()))
    page = hooks.page()
    assert hooks.since(page.cursor) == ([], page.cursor)

    run_hook(project, "rm -rf /", agent="Bob")
    run_hook(project, "ls", agent="Bob")
    logged_events(3)
    calls, cursor = hooks.since(page.cursor)

    assert [(call.event_id, call.hook, call.agent) for call in calls] == [
        (event, hook, "Bob") for event in (2, 3) for hook in ("guard", "broken", "fine")
    ]
    assert cursor == 3 and hooks.since(cursor) == ([], 3)
    assert {item.hook: item.calls for item in hooks.stats().hooks} == {
        "guard": 3,
        "broken": 3,
        "fine": 3,
    }
    # The window lets old calls go.
    later = hooks.stats(now=datetime.now(UTC) + timedelta(hours=2))
    assert (later.events, later.hooks) == (0, [])


def test_figures_are_nearest_rank_percentiles() -> None:
    from relay.web.hooks import CallRow

    def row(hook: str, duration: float, *, failed: bool = False) -> CallRow:
        return CallRow(
            id=1, event_id=1, time="t", event="BeforeTool", hook=hook, source="user", agent=None,
            session_id=None, decision=None, event_decision="allow", duration_ms=duration,
            exit_code=0, signal=None, timed_out=False, error=None, denied=False, failed=failed,
        )  # fmt: skip

    rows = [row("slow", float(ms)) for ms in range(1, 101)] + [row("quick", 1.0, failed=True)]
    slow, quick = hook_stats(rows)
    assert (slow.hook, slow.calls, slow.p50_ms, slow.p99_ms, slow.max_ms) == (
        "slow",
        100,
        50,
        99,
        100,
    )
    assert (quick.hook, quick.p50_ms, quick.p99_ms, quick.errors) == ("quick", 1.0, 1.0, 1)


# -- Memory ------------------------------------------------------------------------------


def test_memories_by_scope_and_search_with_reasons(
    relay_home: Path, project: Path, tmp_path: Path
) -> None:
    # Team memory on, its server unreachable: a team save is kept here, waiting to be shared.
    write_settings(
        relay_home,
        {
            "memory": {"transport": "nats", "team": TEAM},
            "messaging": {"nats": {"url": "nats://127.0.0.1:9"}},
        },
    )
    other = tmp_path / "other"
    (other / ".git").mkdir(parents=True)
    relay("memory", "save", "the deploy script lives in tools/deploy.sh #deploy", cwd=project)
    relay("memory", "save", "tabs are rendered as four spaces", cwd=project)
    relay("memory", "save", "--global", "prefer small commits for every deploy", cwd=project)
    relay("memory", "save", "--team", "the staging deploy needs a VPN", cwd=project)
    relay("memory", "save", "other project's deploy is manual", cwd=other)
    relay("memory", "save", HOSTILE[1] + " deploy", cwd=project)

    memories = open_memories(load_settings(project), project)
    try:
        overview = memories.overview()
        assert overview.team == TEAM and overview.project == str(project.resolve())
        listed = {
            listing.scope: [item.content for item in listing.memories]
            for listing in overview.scopes
        }
        assert listed == {
            "project": [
                HOSTILE[1] + " deploy",
                "tabs are rendered as four spaces",
                "the deploy script lives in tools/deploy.sh #deploy",
            ],
            "team": ["the staging deploy needs a VPN"],
            "global": ["prefer small commits for every deploy"],
        }
        assert all(listing.more is False for listing in overview.scopes)
        short = memories.listing("project", limit=1)
        assert [item.content for item in short.memories] == [HOSTILE[1] + " deploy"] and short.more
        script = overview.scopes[0].memories[2]
        assert (script.scope, script.tags, script.extra_tags) == ("project", ["deploy"], [])

        answer = memories.search("deploy script")
        cli = json.loads(
            relay("memory", "search", "--explain", "--json", "deploy", "script", cwd=project)
        )
        assert [(hit.memory.id, round(hit.score, 6)) for hit in answer.hits] == [
            (hit["memory"]["id"], round(hit["score"], 6)) for hit in cli
        ]
        best = answer.hits[0]
        assert best.memory.content.startswith("the deploy script") and best.ranking is not None
        assert best.why[0].startswith("words #1 (bm25 ") and best.why == reasons(best.ranking)
        assert any(part.startswith("recency x") for part in best.why)
        assert "tags: #deploy" in best.why
        assert answer.by_meaning is (answer.model is not None)
        if answer.by_meaning:
            assert any(part.startswith("meaning #") for part in best.why)
            assert answer.model == best.ranking.model  # the model in use, MiniLM if installed
        contents = {hit.memory.content for hit in answer.hits}
        assert "other project's deploy is manual" not in contents

        scoped = {
            scope: {hit.memory.content for hit in memories.search("deploy", scope=scope).hits}
            for scope in ("project", "team", "global")
        }
        assert scoped == {
            "project": {
                HOSTILE[1] + " deploy",
                "the deploy script lives in tools/deploy.sh #deploy",
            },
            "team": {"the staging deploy needs a VPN"},
            "global": {"prefer small commits for every deploy"},
        }
        assert {hit.memory.scope for hit in memories.search("deploy").hits} == {
            "project",
            "team",
            "global",
        }
        assert memories.search("!!!").hits == []
        with pytest.raises(MemoryPageError):
            memories.search("deploy", scope="everywhere")  # type: ignore[arg-type]
        with pytest.raises(MemoryPageError):
            memories.search("x" * 5000)
    finally:
        memories.close()


def test_team_scope_says_when_team_memory_is_off(relay_home: Path, project: Path) -> None:
    relay("memory", "save", "a project note", cwd=project)
    memories = open_memories(load_settings(project), project)
    try:
        overview = memories.overview()
        team = next(listing for listing in overview.scopes if listing.scope == "team")
        assert overview.team is None and team.memories == []
        assert team.note is not None and "team memory is off" in team.note
        assert [item.content for item in overview.scopes[0].memories] == ["a project note"]
    finally:
        memories.close()


def test_the_feed_cuts_off_a_browser_that_falls_behind_and_refuses_bad_event_types() -> None:
    import anyio

    from relay.web.feed import BACKLOG, Feed

    async def main() -> None:
        feed = Feed()
        feed.publish("team.member", {"name": "before"})
        slow, quick = feed.subscribe(), feed.subscribe()
        assert await anext(slow) == b'event: hello\ndata: {"seq": 1}\n\n'
        assert await anext(quick) == b'event: hello\ndata: {"seq": 1}\n\n'
        feed.publish("team.member", {"name": "<b>x</b>\n"})
        assert await anext(quick) == (
            b'id: 2\nevent: team.member\ndata: {"name":"<b>x</b>\\n"}\n\n'
        )
        for number in range(BACKLOG):
            feed.publish("team.member", {"n": number})
            await anext(quick)
        # slow read none of them: it is cut off once its backlog is full (it reconnects).
        frames = [frame async for frame in slow]
        assert len(frames) == BACKLOG
        for kind in ("Team.member", "team member", "team\nevent: x", ""):
            with pytest.raises(ValueError, match="not an event type"):
                feed.publish(kind, {})
        feed.close()
        assert [frame async for frame in quick] == []
        assert [frame async for frame in feed.subscribe()] == [
            b'event: hello\ndata: {"seq": %d}\n\n' % feed.seq
        ]

    anyio.run(main)

"""Messaging end to end: real `relay run` processes with scripted fake agents, one real mailbox."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scripted_sessions import (
    RELAY,
    agent,
    finish,
    reads,
    run_session,
    start_relay_run,
    wait_for,
)

from relay.services.messaging.mailbox import SqliteMailbox
from relay.session.wrapper import Relay

# These tests address the team `default` (a project has a team of its own otherwise).
FAST = {
    "session": {"injectQuietMs": 100},
    "messaging": {"ackTimeoutSeconds": 0.3, "team": "default"},
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


@pytest.fixture
def fast_settings(tmp_path: Path) -> Path:
    path = tmp_path / "fast.json"
    path.write_text(json.dumps(FAST))
    return path


@pytest.fixture
def mailbox(relay_home: Path) -> Iterator[SqliteMailbox]:
    box = SqliteMailbox(relay_home / "state" / "messages.db")
    yield box
    box.close()


def live(mailbox: SqliteMailbox, name: str) -> bool:
    return any(a.name == name and a.state != "offline" for a in mailbox.agents("default"))


def test_two_sessions_exchange_messages(
    tmp_path: Path, fast_settings: Path, mailbox: SqliteMailbox
) -> None:
    bob_record, alice_record = tmp_path / "bob.jsonl", tmp_path / "alice.jsonl"
    bob = start_relay_run(
        "Bob",
        [
            {"print": "bob ready"},
            {"read": "from-alice"},
            {"print": "@relay:Alice [thread:t1] got it, thanks"},
            {"read": "confirm"},
            {"sleep": 0.6},
            {"exit": 0},
        ],
        bob_record,
        settings=[fast_settings],
    )
    wait_for(lambda: live(mailbox, "Bob"), "Bob to be live")
    alice = start_relay_run(
        "Alice",
        [
            {"print": "@relay:Bob hello from alice"},
            {"read": "confirm"},
            {"read": "reply"},
            {"sleep": 0.6},
            {"exit": 0},
        ],
        alice_record,
        settings=[fast_settings],
    )
    assert finish(alice)[0] == 0 and finish(bob)[0] == 0
    to_bob = mailbox.inbox("Bob", team="default")
    to_alice = mailbox.inbox("Alice", team="default")
    assert [d.message.body for d in to_bob] == ["hello from alice"]
    assert [(d.message.body, d.message.thread) for d in to_alice] == [("got it, thanks", "t1")]
    first, reply = to_bob[0].message, to_alice[0].message
    assert reads(bob_record) == [
        ("from-alice", f"Relay message from Alice [{first.short_id}]: hello from alice"),
        ("confirm", f"✓ Queued for Alice [{reply.short_id}] in thread t1"),
    ]
    assert reads(alice_record) == [
        ("confirm", f"✓ Queued for Bob [{first.short_id}]"),
        ("reply", f"Relay message from Bob [{reply.short_id}] [thread:t1]: got it, thanks"),
    ]
    assert [(d.state, d.attempts) for d in [*to_bob, *to_alice]] == [("acked", 1), ("acked", 1)]
    assert all(d.evidence in ("marker", "output") for d in [*to_bob, *to_alice])
    assert {a.name: a.state for a in mailbox.agents("default")} == {
        "Alice": "offline",
        "Bob": "offline",
    }


def test_killed_between_hand_out_and_ack_delivers_once_after_restart(
    tmp_path: Path, fast_settings: Path, mailbox: SqliteMailbox
) -> None:
    first_record = tmp_path / "first.jsonl"
    # Echo off and silent after reading: no evidence the agent took the message in.
    first = start_relay_run(
        "Bob",
        [{"noecho": True}, {"print": "ready"}, {"read": "first"}, {"sleep": 60}],
        first_record,
        settings=[fast_settings],
    )
    wait_for(lambda: live(mailbox, "Bob"), "Bob to be live")
    sent, _ = mailbox.send(team="default", sender="carol", recipient="Bob", body="deploy at 5")
    wait_for(lambda: reads(first_record), "the first Bob to read the message")
    assert reads(first_record) == [
        ("first", f"Relay message from carol [{sent.short_id}]: deploy at 5")
    ]
    time.sleep(0.6)  # past ackTimeoutSeconds: still no evidence, so still handed
    delivery = mailbox.delivery(sent.id, "Bob", team="default")
    assert delivery is not None and (delivery.state, delivery.attempts) == ("handed", 1)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate(timeout=10)
    assert not live(mailbox, "Bob")  # the pid is dead: offline, and the name is free

    second_record = tmp_path / "second.jsonl"
    second = start_relay_run(
        "Bob",
        [
            {"print": "ready again"},
            {"read": "again"},
            {"print": "on it"},
            {"sleep": 0.8},
            {"exit": 0},
        ],
        second_record,
        settings=[fast_settings],
    )
    assert finish(second)[0] == 0
    assert reads(second_record) == [
        ("again", f"Relay message from carol [{sent.short_id}]: deploy at 5")
    ]
    delivery = mailbox.delivery(sent.id, "Bob", team="default")
    assert delivery is not None and (delivery.state, delivery.attempts) == ("acked", 2)


def test_a_second_live_agent_with_the_same_name_is_refused(
    tmp_path: Path, fast_settings: Path, mailbox: SqliteMailbox
) -> None:
    steps: list[dict[str, Any]] = [{"print": "ready"}, {"sleep": 30}]
    first = start_relay_run("Alice", steps, tmp_path / "a.jsonl", settings=[fast_settings])
    try:
        wait_for(lambda: live(mailbox, "Alice"), "Alice to be live")
        second = start_relay_run("Alice", steps, tmp_path / "b.jsonl", settings=[fast_settings])
        code, err = finish(second)
        # One machine: its session registry refuses before the mailbox is asked (the
        # mailbox's own refusal is tested in test_messaging_mailbox, across machines in
        # test_messaging_nats).
        assert (code, err.strip()) == (
            1,
            f"relay: error: a session named 'Alice' is already running (pid {first.pid}); "
            "choose another --name or `relay stop` it",
        )
        assert not (tmp_path / "b.jsonl").exists()  # its agent never started
    finally:
        first.terminate()
        finish(first)


def run_named(
    project: Path, name: str, steps: list[dict[str, Any]], record: Path, settings: dict[str, Any]
) -> tuple[int, str]:
    """An in-process headless session of agent `name`, with FAST and `settings`."""
    file = project.parent / f"{name}-settings.json"
    messaging = {**FAST["messaging"], **settings.get("messaging", {})}
    file.write_text(json.dumps({**FAST, **settings, "messaging": messaging}))
    return run_session(agent(steps, record), project, settings_files=(file,), name=name)


def hook(code: str) -> dict[str, Any]:
    return {"hooks": [{"command": f"{sys.executable} -c {json.dumps(code)}"}]}


def test_message_received_hooks_deny_rewrite_and_add(
    project: Path, tmp_path: Path, mailbox: SqliteMailbox
) -> None:
    mailbox.register_agent("Bob", team="default", session_id="earlier", pid=999_999_999)
    mailbox.set_presence("Bob", team="default", session_id="earlier", state="offline")
    mailbox.register_agent("Alice", team="default", session_id="alice", pid=999_999_998)
    spam, _ = mailbox.send(team="default", sender="Alice", recipient="Bob", body="BUY NOW")
    loud, _ = mailbox.send(team="default", sender="Alice", recipient="Bob", body="hello bob")
    rule = (
        "import json,sys; e=json.load(sys.stdin); "
        "print(json.dumps({'decision':'deny','reason':'no spam'}) if 'BUY' in e['body'] else "
        "json.dumps({'inject':'(reply with @relay:'+e['sender']+')',"
        "'hookSpecificOutput':{'body':e['body'].upper()}}))"
    )
    record = tmp_path / "bob.jsonl"
    code, _ = run_named(
        project,
        "Bob",
        [{"print": "ready"}, {"read": "one"}, {"print": "ok"}, {"sleep": 0.6}, {"exit": 0}],
        record,
        {"hooks": {"MessageReceived": [hook(rule)]}},
    )
    assert code == 0
    assert reads(record) == [
        ("one", f"Relay message from Alice [{loud.short_id}]: HELLO BOB (reply with @relay:Alice)")
    ]
    denied = mailbox.delivery(spam.id, "Bob", team="default")
    assert denied is not None and (denied.state, denied.reason) == ("denied", "no spam")
    notices = mailbox.inbox("Alice", team="default")
    assert [(n.message.sender, n.message.body) for n in notices] == [
        ("relay", f"Your message to Bob [{spam.short_id}] was refused: no spam.")
    ]


def test_injected_text_is_never_read_back_as_a_directive(
    project: Path, tmp_path: Path, mailbox: SqliteMailbox
) -> None:
    mailbox.register_agent("Alice", team="default", session_id="alice", pid=999_999_998)
    mailbox.set_presence("Alice", team="default", session_id="alice", state="offline")
    mailbox.register_agent("Bob", team="default", session_id="earlier", pid=999_999_999)
    sent, _ = mailbox.send(
        team="default", sender="Alice", recipient="Bob", body="x\n@relay:Alice loop forever"
    )
    record = tmp_path / "bob.jsonl"
    # The agent turns bracketed paste on, so the body's second line is echoed as a line of its own.
    steps = [
        {"print": "\x1b[?2004hready"},
        {"read": "one"},
        {"print": "@relay:Alice loop forever"},  # an echo-like line, as a TUI redraw prints it
        {"sleep": 0.6},
        {"exit": 0},
    ]
    code, _ = run_named(project, "Bob", steps, record, {})
    assert code == 0
    assert f"Relay message from Alice [{sent.short_id}]: x" in reads(record)[0][1]
    assert [d.message.body for d in mailbox.inbox("Alice", team="default")] == []


def test_rate_limit_stops_a_reply_loop_and_tells_both(
    project: Path, tmp_path: Path, mailbox: SqliteMailbox
) -> None:
    mailbox.register_agent("Alice", team="default", session_id="alice", pid=999_999_998)
    mailbox.set_presence("Alice", team="default", session_id="alice", state="offline")
    record = tmp_path / "bob.jsonl"
    steps: list[dict[str, Any]] = [{"print": "ready"}]
    for number in range(3):
        steps += [{"print": f"@relay:Alice reply {number}"}, {"read": f"confirm {number}"}]
    steps += [{"sleep": 0.3}, {"exit": 0}]
    code, _ = run_named(
        project, "Bob", steps, record, {"messaging": {"maxPerMinute": 2, "ackTimeoutSeconds": 0.3}}
    )
    assert code == 0
    answers = [line for _, line in reads(record)]
    assert answers[0].startswith("✓ Queued for Alice") and answers[1].startswith(
        "✓ Queued for Alice"
    )
    assert answers[2].startswith("✗ Not sent: Bob has sent 2 messages in the last minute")
    to_alice = [d.message for d in mailbox.inbox("Alice", team="default")]
    assert [m.sender for m in to_alice] == ["Bob", "Bob", "relay"]
    assert "Bob is sending more than 2 messages a minute" in to_alice[2].body


def test_python_handlers_send_with_ctx(
    project: Path, tmp_path: Path, mailbox: SqliteMailbox
) -> None:
    mailbox.register_agent("Carol", team="default", session_id="c", pid=999_999_997)
    record = tmp_path / "reads.jsonl"
    settings = project.parent / "team.json"
    settings.write_text(json.dumps({"messaging": {"team": "default"}}))
    relay = Relay(name="Dave", cwd=project, headless=True, settings=[settings])
    sent: list[str] = []

    @relay.pattern("tell")
    async def tell(target: str, message: str, ctx: Any) -> dict[str, str]:
        message_sent = await ctx.send(target, message, thread="ops")
        sent.append(message_sent.id)
        return {"inject": f"told {target}"}

    steps = [{"print": "@tell:Carol the build is green"}, {"read": "answer"}, {"exit": 0}]
    code = relay.wrap(agent(steps, record))
    assert code == 0
    assert reads(record) == [("answer", "told Carol")]
    [delivery] = mailbox.inbox("Carol", team="default")
    assert (delivery.message.id, delivery.message.sender, delivery.message.thread) == (
        sent[0],
        "Dave",
        "ops",
    )


def test_a_broken_mailbox_never_stops_the_session(
    project: Path, tmp_path: Path, relay_home: Path
) -> None:
    state = relay_home / "state"
    state.mkdir(parents=True, exist_ok=True)
    (state / "messages.db").write_bytes(b"not a database" * 500)
    record = tmp_path / "bob.jsonl"
    steps = [{"print": "@relay:Alice hello"}, {"read": "answer"}, {"exit": 0}]
    code, _ = run_named(project, "Bob", steps, record, {})
    assert code == 0
    [(_, answer)] = reads(record)
    assert answer.startswith("✗ Not sent: messaging is unavailable in this session (")
    assert "messages.db: cannot use the mailbox" in answer


def test_six_kills_during_a_backlog_lose_nothing_and_kill_nothing(
    tmp_path: Path, fast_settings: Path, mailbox: SqliteMailbox
) -> None:
    """60 messages queued; six `relay run` sessions SIGKILLed while typing them, one that
    quits normally; then a session that runs to the end: none dead, none typed twice in
    one session, all 60 delivered."""
    sender = SqliteMailbox(mailbox.path, max_per_minute=1000)
    sender.register_agent("Bob", team="default", session_id="earlier", pid=999_999_999)
    sent = [
        sender.send(team="default", sender="carol", recipient="Bob", body=f"message {n}")[0]
        for n in range(60)
    ]
    sender.close()
    by_marker = {message.short_id: message.id for message in sent}
    steps: list[dict[str, Any]] = [{"print": "ready"}]
    steps += [{"read": f"r{n}"} for n in range(80)]

    def ids_read(record: Path) -> list[str]:
        found = []
        for _, line in reads(record):
            if line.startswith("Relay message from carol ["):
                found.append(by_marker[line.split("[", 1)[1].split("]", 1)[0]])
        return found

    records = []
    for kill in range(6):
        record = tmp_path / f"killed-{kill}.jsonl"
        records.append(record)
        process = start_relay_run("Bob", steps, record, settings=[fast_settings])
        wait_for(lambda record=record, kill=kill: len(reads(record)) >= 3 + kill, "typing")
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=10)
    # A normal quit with a backlog: what it claimed and never typed goes back, untouched.
    record = tmp_path / "quits.jsonl"
    records.append(record)
    quits = start_relay_run(
        "Bob",
        [{"print": "ready"}, {"read": "a"}, {"read": "b"}, {"print": "bye"}, {"exit": 0}],
        record,
        settings=[fast_settings],
    )
    assert finish(quits)[0] == 0
    waiting = mailbox.inbox("Bob", team="default", states=["queued", "handed"])
    assert waiting and all(d.attempts <= 1 for d in waiting)
    assert [d for d in waiting if d.state == "queued" and d.attempts == 0]
    assert not [d for d in waiting if d.state == "handed" and d.attempts == 0]

    record = tmp_path / "last.jsonl"
    records.append(record)
    last = start_relay_run("Bob", steps, record, settings=[fast_settings])
    try:
        wait_for(
            lambda: all(
                d.state == "acked" for d in mailbox.inbox("Bob", team="default", limit=100)
            ),
            "all 60 to be acknowledged",
            timeout=120,
        )
    finally:
        last.terminate()
        finish(last)
    deliveries = mailbox.inbox("Bob", team="default", limit=100)
    assert len(deliveries) == 60
    assert [d.state for d in deliveries] == ["acked"] * 60  # none dead
    for each in records:
        typed = ids_read(each)
        assert len(typed) == len(set(typed)), f"{each.name} typed a message twice"
    assert {i for each in records for i in ids_read(each)} == {m.id for m in sent}
    assert max(d.attempts for d in deliveries) <= 2


def _old_bell_address(store: Path, team: str, name: str) -> bytes:
    """The doorbell address relay used to derive from the mailbox, team and name: anyone
    who could guess it could bind it before the session and hear its pokes."""
    import hashlib

    digest = hashlib.blake2b(f"{store.resolve()}\0{team}\0{name}".encode(), digest_size=12)
    return b"\0relay-bell-" + digest.hexdigest().encode()


def test_the_doorbell_cannot_be_taken_or_heard_by_another_process(
    tmp_path: Path, fast_settings: Path, mailbox: SqliteMailbox
) -> None:
    import socket

    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    squatter.bind(_old_bell_address(mailbox.path, "default", "Bob"))  # bound first
    squatter.setblocking(False)
    addresses = []
    try:
        for run in range(2):
            record = tmp_path / f"bob-{run}.jsonl"
            bob = start_relay_run(
                "Bob",
                [{"print": "ready"}, {"read": "one"}, {"print": "ok"}, {"sleep": 0.6}, {"exit": 0}],
                record,
                settings=[fast_settings],
            )
            wait_for(lambda: live(mailbox, "Bob"), "Bob to be live")
            with sqlite3.connect(mailbox.path) as db:
                [(bell,)] = db.execute("SELECT bell FROM agents WHERE name = 'Bob'").fetchall()
            addresses.append(bytes(bell))
            sent, _ = mailbox.send(team="default", sender="carol", recipient="Bob", body="hi")
            assert finish(bob)[0] == 0
            assert [line for _, line in reads(record)] == [
                f"Relay message from carol [{sent.short_id}]: hi"
            ]
        with pytest.raises(BlockingIOError):
            squatter.recv(64)  # it heard no poke
    finally:
        squatter.close()
    # A fresh unguessable address per session, none of them the derivable one.
    assert len(set(addresses)) == 2
    assert all(len(address) > 40 for address in addresses)


def test_the_mailbox_is_private_whatever_the_umask(tmp_path: Path, relay_home: Path) -> None:
    record = tmp_path / "bob.jsonl"
    script = json.dumps([{"print": "ready"}, {"exit": 0}])
    command = (
        f"umask 000; exec {RELAY} run --headless --name Bob -- {sys.executable} "
        f"{shlex.quote(agent([], record)[1])} {shlex.quote(script)} {shlex.quote(str(record))}"
    )
    done = subprocess.run(["sh", "-c", command], capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    state = relay_home / "state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    files = [state / f"messages.db{suffix}" for suffix in ("", "-wal", "-shm")]
    present = [path for path in files if path.exists()]
    assert files[0] in present
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in present} == {
        path.name: 0o600 for path in present
    }


def test_send_refuses_reserved_names_and_the_name_of_a_live_agent(
    tmp_path: Path, fast_settings: Path, mailbox: SqliteMailbox
) -> None:
    mailbox.register_agent("Bob", team="default", session_id="earlier", pid=999_999_999)

    def send(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RELAY, "send", "--settings", str(fast_settings), "Bob", "hi", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            check=False,
        )

    refused = send("--as", "relay")
    assert refused.returncode == 1 and "agent name 'relay' is reserved" in refused.stderr
    refused = send("--as", "*")
    assert refused.returncode == 1 and "agent name '*' is not usable" in refused.stderr
    alice = start_relay_run(
        "Alice", [{"print": "ready"}, {"sleep": 30}], tmp_path / "a.jsonl", settings=[fast_settings]
    )
    try:
        wait_for(lambda: live(mailbox, "Alice"), "Alice to be live")
        refused = send("--as", "Alice")
        assert refused.returncode == 1
        assert f"Alice is a live agent in team default (pid {alice.pid} on " in refused.stderr, (
            refused.stderr
        )
        assert mailbox.inbox("Bob", team="default") == []
    finally:
        alice.terminate()
        finish(alice)
    # Offline, the name may be used again (the agent's own relay is gone).
    assert send("--as", "Alice").returncode == 0
    assert [d.message.sender for d in mailbox.inbox("Bob", team="default")] == ["Alice"]


def test_projects_have_their_own_teams_and_humans_are_not_agents(
    tmp_path: Path, mailbox: SqliteMailbox
) -> None:
    """Without messaging.team and --name: each project is a team of its own, default names
    differ between projects, a human who sends is a human (no broadcast reaches them), an
    agent long offline needs --queue, and agents can be forgotten and pruned."""
    from relay.services.messaging.model import default_agent_name, project_team

    fast = tmp_path / "fast-no-team.json"
    fast.write_text(
        json.dumps({"session": {"injectQuietMs": 100}, **{"messaging": {"ackTimeoutSeconds": 0.3}}})
    )
    shop, blog = tmp_path / "shop", tmp_path / "blog"
    for root in (shop, blog):
        (root / ".git").mkdir(parents=True)
    env = {**os.environ, "USER": "pat"}

    def relay(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RELAY, *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def start(root: Path, steps: list[dict[str, Any]]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                RELAY,
                "run",
                "--headless",
                "--settings",
                str(fast),
                "--",
                *agent(steps, root / "r.jsonl"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=root,
            env=env,
        )

    name = default_agent_name(sys.executable, shop)
    other = default_agent_name(sys.executable, blog)
    assert name != other
    teams = {shop: project_team(shop), blog: project_team(blog)}
    assert teams[shop] != teams[blog] and teams[shop].startswith("shop-")
    a = start(
        shop, [{"print": "ready"}, {"read": "one"}, {"print": "ok"}, {"sleep": 0.6}, {"exit": 0}]
    )
    b = start(blog, [{"print": "ready"}, {"sleep": 30}])
    try:
        for root, who in ((shop, name), (blog, other)):
            wait_for(
                lambda root=root, who=who: any(
                    x.name == who and x.state != "offline" for x in mailbox.agents(teams[root])
                ),
                f"{who} to be live",
            )
        assert relay(shop, "send", name, "from sam", "--as", "sam").returncode == 0
        sent = relay(shop, "send", "*", "hello", "--json")
        assert sent.returncode == 0, sent.stderr
        assert json.loads(sent.stdout)["queued_for"] == [name]  # not sam, not blog's agent
        assert finish(a)[0] == 0
    finally:
        b.terminate()
        finish(b)
        if a.poll() is None:
            a.kill()
            a.communicate()
    assert reads(shop / "r.jsonl")[0][1].startswith("Relay message from sam [")
    assert mailbox.inbox(other, team=teams[blog]) == []
    listed = relay(shop, "agents", "--json")
    assert {x["name"]: x["kind"] for x in json.loads(listed.stdout)} == {
        name: "agent",
        "pat": "human",
        "sam": "human",
    }
    # Long offline: a message needs --queue.
    with sqlite3.connect(mailbox.path) as db:
        db.execute(
            "UPDATE agents SET last_seen = '2000-01-01T00:00:00.000Z' WHERE name = ?", (name,)
        )
    refused = relay(shop, "send", name, "are you there?")
    assert refused.returncode == 1 and "`relay send --queue` queues it anyway" in refused.stderr
    assert relay(shop, "send", name, "are you there?", "--queue").returncode == 0
    # forget and prune.
    assert relay(blog, "agents", "forget", other).returncode == 0
    assert mailbox.agents(teams[blog]) == []
    pruned = relay(shop, "agents", "--prune", "--older-than", "1d", "--json")
    assert json.loads(pruned.stdout) == [name]
    dead = [d for d in mailbox.inbox(name, team=teams[shop]) if d.state == "dead"]
    assert dead and all("was pruned from team" in (d.reason or "") for d in dead)


def test_an_agent_at_its_prompt_is_idle_within_seconds(
    tmp_path: Path, fast_settings: Path, mailbox: SqliteMailbox
) -> None:
    """Busy while it prints, idle a couple of seconds after it stops (not after Idle's 30 s)."""
    record = tmp_path / "carol.jsonl"
    carol = start_relay_run(
        "Carol",
        [{"print": f"line {n}"} for n in range(3)] + [{"read": "never"}],
        record,
        settings=[fast_settings],
    )
    try:

        def state() -> str | None:
            return next((a.state for a in mailbox.agents("default") if a.name == "Carol"), None)

        wait_for(lambda: state() in ("busy", "idle"), "Carol's presence")
        started = time.monotonic()
        wait_for(lambda: state() == "idle", "Carol idle", timeout=20)
        # PRESENCE_QUIET_SECONDS (2 s) after its last output, and a presence write after.
        assert time.monotonic() - started < 15
    finally:
        carol.send_signal(signal.SIGTERM)
        finish(carol)

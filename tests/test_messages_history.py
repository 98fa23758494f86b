"""`relay messages`: filters, full-text search (FTS5), JSON lines and --follow, over real
SQLite mailboxes and real relay processes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import msgspec
import nats
import pytest
from click.testing import CliRunner
from nats_server import NatsServer, find_nats_server, password, server_config

import relay.services.messaging.timeline as timeline_module
from relay.cli.main import cli
from relay.config.model import MessagingConfig, NatsConfig
from relay.services.messaging.history import HistoryQuery, SearchTextError, match_expression
from relay.services.messaging.mailbox import SCHEMA_VERSION, SqliteMailbox
from relay.services.messaging.messenger import Messenger
from relay.services.messaging.model import Message
from relay.services.messaging.nats import NatsMessaging, history_permissions, message_subject
from relay.services.messaging.timeline import Timeline
from relay.services.messaging.ulid import new_ulid

RELAY = str(Path(sys.executable).parent / "relay")
TEAM = "shop-1f3a9c2e"
WAIT = 30.0
"""Seconds a test waits for a line from a relay process before it fails (a loaded machine)."""


@pytest.fixture
def mailbox(relay_home: Path) -> Iterator[SqliteMailbox]:
    (relay_home / "settings.json").write_text(json.dumps({"messaging": {"team": TEAM}}))
    box = SqliteMailbox(relay_home / "state" / "messages.db", max_per_minute=1000)
    box.register_agent("Bob", team=TEAM, session_id="b")
    box.register_agent("Alice", team=TEAM, session_id="a")
    yield box
    box.close()


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["messages", *args], env={"USER": "pat"})
    return result.exit_code, result.output


def json_lines(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines() if line]


def bodies(text: str) -> list[object]:
    return [message["body"] for message in json_lines(text)]


def at(hours_ago: float) -> str:
    moment = datetime.now(UTC) - timedelta(hours=hours_ago)
    return moment.isoformat(timespec="milliseconds")[:-6] + "Z"


def old_message(sender: str, recipient: str, body: str, hours_ago: float, **extra: str) -> Message:
    return Message(
        id=new_ulid(),
        team=TEAM,
        sender=sender,
        recipient=recipient,
        body=body,
        created_at=at(hours_ago),
        **extra,
    )


# -- search ---------------------------------------------------------------------------------


def test_grep_matches_words_and_fts_syntax_is_only_words(mailbox: SqliteMailbox) -> None:
    for body in (
        "deploy the café at noon",
        'NEAR the "quoted" bit - with a * star',
        "Deploying is not deploy-ing",
        "AND OR NOT are words too",
        "nothing to see",
    ):
        mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body=body)
    cases = {
        "deploy": ["deploy the café at noon", "Deploying is not deploy-ing"],
        "CAFE": ["deploy the café at noon"],  # case and accents ignored
        "noon deploy": ["deploy the café at noon"],  # every word, in any order
        "NEAR": ['NEAR the "quoted" bit - with a * star'],
        '"quoted"': ['NEAR the "quoted" bit - with a * star'],
        'quoted" bit': ['NEAR the "quoted" bit - with a * star'],
        "star *": ['NEAR the "quoted" bit - with a * star'],
        "bit -with": ['NEAR the "quoted" bit - with a * star'],
        "AND OR": ["AND OR NOT are words too"],
        "NOT": ["Deploying is not deploy-ing", "AND OR NOT are words too"],
        "NEAR(deploy noon)": [],
        "body:deploy": [],
        "deploy OR nothing": [],
        "deploy-ing": ["Deploying is not deploy-ing"],
        "(": None,
        '* - "': None,
    }
    for text, expected in cases.items():
        code, out = invoke("--grep", text, "--json")
        if expected is None:
            assert code == 1, (text, out)
            assert "has no words in it" in out, (text, out)
        else:
            assert code == 0, (text, out)
            assert bodies(out) == expected, text
    code, out = invoke("--grep", "   ")
    assert code == 1 and "the search text is empty" in out
    with pytest.raises(SearchTextError):
        match_expression("")
    assert match_expression('a"b NEAR') == '"a""b" "NEAR"'


def test_filters_combine_and_times_are_durations_or_iso(mailbox: SqliteMailbox) -> None:
    olds = [
        old_message("Alice", "Bob", "ship the release", 50),
        old_message("Bob", "Alice", "release shipped", 30, thread="rel"),
        old_message("Alice", "*", "release party tonight", 20, thread="rel"),
        old_message("Bob", "Alice", "unrelated", 2),
    ]
    for message in olds:
        mailbox.store_incoming(message, [])
    mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="fresh release notes")
    assert bodies(invoke("--from", "Bob", "--json")[1]) == ["release shipped", "unrelated"]
    assert bodies(invoke("--to", "*", "--json")[1]) == ["release party tonight"]
    assert bodies(invoke("--thread", "rel", "--from", "Alice", "--json")[1]) == [
        "release party tonight"
    ]
    assert bodies(invoke("--since", "1h", "--json")[1]) == ["fresh release notes"]
    assert bodies(invoke("--since", "1", "--from", "Alice", "--json")[1]) == [
        "release party tonight",
        "fresh release notes",
    ]
    assert bodies(invoke("--since", "2d", "--until", "12h", "--grep", "release", "--json")[1]) == [
        "release shipped",
        "release party tonight",
    ]
    day_before = (datetime.now(UTC) - timedelta(hours=40)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert bodies(invoke("--until", day_before, "--json")[1]) == ["ship the release"]
    assert bodies(invoke("--grep", "release", "--limit", "2", "--json")[1]) == [
        "release party tonight",
        "fresh release notes",
    ]
    code, out = invoke("--since", "yesterday")
    assert code == 1 and "--since 'yesterday' is neither a duration ago" in out
    code, out = invoke("--until", "2026-13-40")
    assert code == 1 and "--until '2026-13-40'" in out
    for far in ("99999999999999d", "0001-01-01"):
        code, out = invoke("--since", far)
        assert code == 1 and f"--since {far!r} is further back or ahead than a date can be" in out
    code, out = invoke("--from", "\x1b]0;x\x07", "--to", "'; DROP TABLE messages; --")
    assert (code, out) == (0, f"no matching messages in team {TEAM}\n")
    assert len(mailbox.history(team=TEAM)) == 5


def test_listing_names_the_team_and_stays_terminal_safe(mailbox: SqliteMailbox) -> None:
    code, out = invoke()
    assert (code, out) == (0, f"no messages yet in team {TEAM}\n")
    mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="red \x1b[31malert\x1b[0m \u202e")
    mailbox.send(team=TEAM, sender="Bob", recipient="Alice", body="second")
    code, out = invoke()
    lines = out.splitlines()
    assert lines[0] == f"team {TEAM}: 2 messages, oldest first"
    assert "Alice -> Bob: red ^[[31malert^[[0m <U+202E>" in lines[1]
    assert "\x1b" not in out and "\u202e" not in out
    code, out = invoke("--limit", "1")
    assert out.splitlines()[0] == (
        f"team {TEAM}: 1 message, oldest first (the newest 1; --limit for more)"
    )
    code, out = invoke("--grep", "nothing")
    assert out == f"no matching messages in team {TEAM}\n"
    # --json: one exact message per line, no header.
    code, out = invoke("--json")
    assert [line["body"] for line in json_lines(out)] == [
        "red \x1b[31malert\x1b[0m \u202e",
        "second",
    ]
    assert all(line["team"] == TEAM for line in json_lines(out))


# -- the mailbox's index ----------------------------------------------------------------------

VERSION_4 = """
CREATE TABLE agents (
    team TEXT NOT NULL, name TEXT NOT NULL, state TEXT NOT NULL, host TEXT NOT NULL,
    pid INTEGER, started_ticks INTEGER, cwd TEXT, last_seen TEXT NOT NULL, session_id TEXT,
    kind TEXT NOT NULL DEFAULT 'agent', bell BLOB, PRIMARY KEY (team, name)
) WITHOUT ROWID;
CREATE TABLE messages (
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, team TEXT NOT NULL,
    sender TEXT NOT NULL, recipient TEXT NOT NULL, thread TEXT, body TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX messages_by_sender ON messages(team, sender, created_at);
CREATE INDEX messages_by_thread ON messages(team, thread, seq);
CREATE INDEX messages_by_pair ON messages(team, sender, recipient, seq);
CREATE TABLE deliveries (
    team TEXT NOT NULL, recipient TEXT NOT NULL, seq INTEGER NOT NULL REFERENCES messages(seq),
    state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, session_id TEXT, handed_at TEXT,
    acked_at TEXT, evidence TEXT, reason TEXT, PRIMARY KEY (team, recipient, seq)
) WITHOUT ROWID;
CREATE INDEX deliveries_by_state ON deliveries(team, recipient, state, seq);
CREATE INDEX deliveries_handed ON deliveries(team, recipient, state, session_id)
    WHERE state = 'handed';
PRAGMA user_version = 4;
"""
"""The mailbox as relay wrote it before the full-text index."""


def _insert_raw(db: sqlite3.Connection, body: str) -> None:
    db.execute(
        "INSERT INTO messages (id, team, sender, recipient, body, created_at)"
        " VALUES (?, ?, 'Alice', 'Bob', ?, ?)",
        (new_ulid(), TEAM, body, at(1)),
    )


def test_an_older_mailbox_is_upgraded_and_its_messages_indexed(tmp_path: Path) -> None:
    path = tmp_path / "state" / "messages.db"
    path.parent.mkdir()
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(VERSION_4)
    for body in ("kept from before the index", "another old one", "a third"):
        _insert_raw(db, body)
    box = SqliteMailbox(path)
    found = box.search(TEAM, HistoryQuery(text="before index"))
    assert [item.message.body for item in found] == ["kept from before the index"]
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    # A connection that knows nothing of the index (an older relay still running) keeps
    # it in step: the triggers are in the file.
    _insert_raw(db, "written by an older connection")
    db.execute("UPDATE messages SET body = 'a third, edited' WHERE body = 'a third'")
    db.execute("DELETE FROM messages WHERE body = 'another old one'")
    assert [f.message.body for f in box.search(TEAM, HistoryQuery(text="older"))] == [
        "written by an older connection"
    ]
    assert [f.message.body for f in box.search(TEAM, HistoryQuery(text="edited"))] == [
        "a third, edited"
    ]
    assert box.search(TEAM, HistoryQuery(text="another")) == []
    assert db.execute(
        "INSERT INTO messages_text (messages_text, rank) VALUES ('integrity-check', 1)"
    ).rowcount
    box.close()
    db.close()
    # Opened again (already at the current version): nothing is rebuilt or lost.
    again = SqliteMailbox(path)
    assert len(again.search(TEAM, HistoryQuery(text="old OR older"))) == 0
    assert len(again.search(TEAM, HistoryQuery(text="older"))) == 1
    again.close()


# -- following ------------------------------------------------------------------------------


def _reader(stream: object, lines: list[str], arrived: threading.Condition) -> None:
    for line in stream:  # type: ignore[attr-defined]  # a text pipe
        with arrived:
            lines.append(line.rstrip("\n"))
            arrived.notify_all()


def _wait_for_lines(
    lines: list[str], arrived: threading.Condition, count: int, process: subprocess.Popen[str]
) -> list[str]:
    with arrived:
        ok = arrived.wait_for(lambda: len(lines) >= count or process.poll() is not None, WAIT)
    assert ok and len(lines) >= count, (lines, process.poll())
    return lines[:count]


def test_follow_prints_matching_messages_as_they_come_until_ctrl_c(
    mailbox: SqliteMailbox, relay_home: Path, tmp_path: Path
) -> None:
    mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="deploy one")
    mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="unrelated")
    env = {**os.environ, "RELAY_HOME": str(relay_home), "USER": "pat"}
    process = subprocess.Popen(
        [RELAY, "messages", "--follow", "--grep", "deploy", "--from", "Alice"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    lines: list[str] = []
    arrived = threading.Condition()
    reader = threading.Thread(target=_reader, args=(process.stdout, lines, arrived), daemon=True)
    reader.start()
    try:
        first = _wait_for_lines(lines, arrived, 2, process)
        assert (
            first[0] == f"team {TEAM}: 1 matching message, oldest first, following (Ctrl-C to stop)"
        )
        assert first[1].endswith("Alice -> Bob: deploy one")
        # Sent by other processes: `relay send` as a human, and an agent's mailbox.
        subprocess.run([RELAY, "send", "Bob", "no match here"], env=env, cwd=tmp_path, check=True)
        mailbox.send(team=TEAM, sender="Bob", recipient="Alice", body="deploy from Bob")
        mailbox.send(team=TEAM, sender="Alice", recipient="*", body="deploy \x1b[2J two")
        mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="deploy three")
        shown = _wait_for_lines(lines, arrived, 4, process)
        assert shown[2].endswith("Alice -> *: deploy ^[[2J two")
        assert shown[3].endswith("Alice -> Bob: deploy three")
        with mailbox._lock:
            watchers = mailbox._connect().execute("SELECT pid FROM watchers").fetchall()
        assert watchers == [(process.pid,)]
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=WAIT)
        reader.join(WAIT)
    assert process.returncode == 130, err
    assert "relay: interrupted" in err
    assert len(lines) == 4, lines  # nothing else matched
    with mailbox._lock:
        assert mailbox._connect().execute("SELECT count(*) FROM watchers").fetchone()[0] == 0


def test_follow_ends_once_until_has_passed(mailbox: SqliteMailbox, tmp_path: Path) -> None:
    mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="old enough")
    env = {**os.environ, "RELAY_HOME": str(mailbox.path.parent.parent), "USER": "pat"}
    done = subprocess.run(
        [RELAY, "messages", "--follow", "--since", "1h", "--until", "0s"],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=WAIT * 2, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].endswith("Alice -> Bob: old enough")


def test_follow_json_lines(mailbox: SqliteMailbox, relay_home: Path, tmp_path: Path) -> None:
    env = {**os.environ, "RELAY_HOME": str(relay_home), "USER": "pat"}
    process = subprocess.Popen(
        [RELAY, "messages", "-f", "--json", "--to", "Bob"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    lines: list[str] = []
    arrived = threading.Condition()
    reader = threading.Thread(target=_reader, args=(process.stdout, lines, arrived), daemon=True)
    reader.start()
    try:
        # Following (its doorbell recorded) before the sends: none is missed or listed twice.
        assert _watching(mailbox, process)
        mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="for Bob\nline two")
        mailbox.send(team=TEAM, sender="Bob", recipient="Alice", body="not for Bob")
        mailbox.send(team=TEAM, sender="Alice", recipient="Bob", body="again")
        shown = _wait_for_lines(lines, arrived, 2, process)
        assert [json.loads(line)["body"] for line in shown] == ["for Bob\nline two", "again"]
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=WAIT)
        reader.join(WAIT)
    assert process.returncode == 130


def _watching(mailbox: SqliteMailbox, process: subprocess.Popen[str]) -> bool:
    """Wait until `process` has recorded its doorbell in the mailbox (polled, bounded)."""
    import time

    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline and process.poll() is None:
        with mailbox._lock:
            rows = mailbox._connect().execute("SELECT pid FROM watchers").fetchall()
        if (process.pid,) in rows:
            return True
        time.sleep(0.05)
    return False


def test_following_wakes_on_the_doorbell_not_a_poll(
    mailbox: SqliteMailbox, relay_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The back-stop look an hour away: only the doorbell can show the message.
    monkeypatch.setattr(timeline_module, "BACKSTOP", 3600.0)
    messenger = Messenger(MessagingConfig(team=TEAM), mailbox=SqliteMailbox(mailbox.path))
    shown: list[str] = []

    async def main() -> None:
        async with Timeline(messenger, who="pat") as timeline:
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as tasks:

                    def emit(found: list[object]) -> None:
                        shown.extend(item.message.body for item in found)  # type: ignore[attr-defined]
                        if len(shown) == 2:
                            tasks.cancel_scope.cancel()

                    query = HistoryQuery(text="rung")
                    tasks.start_soon(lambda: timeline.follow(query, after=0, emit=emit))
                    while not _has_watcher(mailbox):
                        await anyio.sleep(0.02)
                    env = {**os.environ, "RELAY_HOME": str(relay_home), "USER": "pat"}
                    for body in ("rung once", "rung twice"):
                        await anyio.run_process([RELAY, "send", "Bob", body], env=env, cwd=tmp_path)

    anyio.run(main)
    messenger.mailbox.close()
    assert shown == ["rung once", "rung twice"]


def _has_watcher(mailbox: SqliteMailbox) -> bool:
    with mailbox._lock:
        return bool(mailbox._connect().execute("SELECT 1 FROM watchers").fetchone())


# -- over NATS -------------------------------------------------------------------------------

NATS_TEAM = "a"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A real nats-server: team a's agents alice, bob and dave (agent permissions), reader
    (an agent that may also read the team's history) and eve (no permission limits)."""
    binary = find_nats_server()
    if binary is None:
        pytest.skip("nats-server binary not available: install Debian's nats-server (.ci/run does)")
    workdir = tmp_path / "nats"
    workdir.mkdir()
    config = json.loads(
        server_config(
            workdir / "js",
            {NATS_TEAM: ["alice", "bob", "dave", "reader"]},
            unrestricted={NATS_TEAM: ["eve"]},
        )
    )
    for user in config["accounts"][f"TEAM_{NATS_TEAM}"]["users"]:
        if user["user"] == "reader":
            user["permissions"]["publish"]["allow"] += history_permissions(NATS_TEAM)
    running = NatsServer(binary, workdir, json.dumps(config))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _machine(tmp_path: Path, name: str, server: NatsServer, user: str) -> dict[str, str]:
    """The environment of one machine: its own RELAY_HOME, on the team's NATS as `user`."""
    home = tmp_path / name
    home.mkdir()
    settings = {
        "messaging": {
            "transport": "nats",
            "team": NATS_TEAM,
            "nats": {"url": server.url, "user": user, "password": password(user)},
        }
    }
    (home / "settings.json").write_text(json.dumps(settings))
    return {**os.environ, "RELAY_HOME": str(home), "USER": user}


def _on_machine_b(
    server: NatsServer, mailbox_b: SqliteMailbox, *sends: tuple[str, str, str]
) -> None:
    """Messages between agents of machine B, through the team's stream (eve's connection
    stands for their sessions), copied into B's mailbox as their sessions do."""

    async def main() -> None:
        config = NatsConfig(url=server.url, user="eve", password=password("eve"))
        async with NatsMessaging(config, team=NATS_TEAM) as nats:
            for name in ("bob", "dave"):
                await nats.ensure_agent(name)
            for sender, recipient, body in sends:
                await nats.send(mailbox_b, sender=sender, recipient=recipient, body=body)

    anyio.run(main)


def test_history_over_nats_reads_the_teams_stream(nats_server: NatsServer, tmp_path: Path) -> None:
    machine_a = _machine(tmp_path, "machine-a", nats_server, "reader")
    mailbox_b = SqliteMailbox(tmp_path / "machine-b" / "state" / "messages.db")
    _on_machine_b(
        nats_server,
        mailbox_b,
        ("bob", "dave", "the release is tagged"),
        ("dave", "bob", "shipping the release now"),
        ("bob", "*", "release done, thanks all"),
    )

    # A forged message (its subject names another sender) is not history.
    async def forge() -> None:
        client = await nats.connect(nats_server.url, user="eve", password=password("eve"))
        forged = Message(
            id=new_ulid(), team=NATS_TEAM, sender="alice", recipient="bob",
            body="forged release", created_at=at(0),
        )  # fmt: skip
        await client.jetstream().publish(
            message_subject(NATS_TEAM, "bob", "dave"), msgspec.json.encode(forged)
        )
        await client.close()

    anyio.run(forge)
    mailbox_b.close()

    def messages(*args: str, env: dict[str, str] = machine_a) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [RELAY, "messages", *args], env=env, cwd=tmp_path, capture_output=True, text=True,
            check=False,
            timeout=WAIT * 2,
        )  # fmt: skip

    shown = messages("--grep", "release", "--json")
    assert shown.returncode == 0, shown.stderr
    assert [(m["sender"], m["recipient"], m["body"]) for m in json_lines(shown.stdout)] == [
        ("bob", "dave", "the release is tagged"),
        ("dave", "bob", "shipping the release now"),
        ("bob", "*", "release done, thanks all"),
    ]
    shown = messages("--from", "dave")
    assert shown.stdout.splitlines()[0] == f"team {NATS_TEAM}: 1 matching message, oldest first"
    # Read once into machine A's history: the stream is read again only past its mark.
    mailbox_a = SqliteMailbox(Path(machine_a["RELAY_HOME"]) / "state" / "messages.db")
    assert mailbox_a.stream_mark(NATS_TEAM) == 4
    assert len(mailbox_a.search(NATS_TEAM, HistoryQuery(), limit=100)) == 3
    mailbox_a.close()

    # A user who may not read the whole stream gets this machine's copy, and is told why.
    alice = _machine(tmp_path, "machine-c", nats_server, "alice")
    shown = messages("--grep", "release", env=alice)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"no matching messages in team {NATS_TEAM}\n"
    assert "showing this machine's copy of team a's messages only" in shown.stderr
    assert "not allowed" in shown.stderr


def test_follow_over_nats_shows_what_other_machines_send(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    machine_a = _machine(tmp_path, "machine-a", nats_server, "reader")
    mailbox_b = SqliteMailbox(tmp_path / "machine-b" / "state" / "messages.db")
    _on_machine_b(nats_server, mailbox_b, ("bob", "dave", "before following"))
    process = subprocess.Popen(
        [RELAY, "messages", "--follow", "--json", "--grep", "following"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=machine_a,
        cwd=tmp_path,
    )
    lines: list[str] = []
    arrived = threading.Condition()
    reader = threading.Thread(target=_reader, args=(process.stdout, lines, arrived), daemon=True)
    reader.start()
    try:
        first = _wait_for_lines(lines, arrived, 1, process)
        assert json.loads(first[0])["body"] == "before following"
        _on_machine_b(
            nats_server,
            mailbox_b,
            ("dave", "bob", "while following"),
            ("dave", "bob", "not shown"),
            ("bob", "*", "following to everyone"),
        )
        shown = _wait_for_lines(lines, arrived, 3, process)
        assert [json.loads(line)["body"] for line in shown[1:]] == [
            "while following",
            "following to everyone",
        ]
    finally:
        mailbox_b.close()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=WAIT)
        reader.join(WAIT)
    assert process.returncode == 130, err


def test_a_second_mailbox_in_a_process_leaves_the_first_one_reading(tmp_path: Path) -> None:
    path = tmp_path / "state" / "messages.db"
    first = SqliteMailbox(path)
    first.register_agent("Bob", team=TEAM, session_id="b")
    second = SqliteMailbox(path)  # opened after the first connected: a follower, a test
    sent: list[str] = []
    for body in ("one", "two", "three"):  # each sender the last connection of its process
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from pathlib import Path;"
                "from relay.services.messaging.mailbox import SqliteMailbox;"
                "box = SqliteMailbox(Path(sys.argv[1]));"
                f"box.send(team={TEAM!r}, sender='pat', recipient='Bob', body=sys.argv[2],"
                " human=True); box.close()",
                str(path),
                body,
            ],
            check=True,
        )
        sent.append(body)
        assert [message.body for message in second.history(team=TEAM)] == sent
        assert [message.body for message in first.history(team=TEAM)] == sent
    first.close()
    second.close()


def _remove_history_readers(server: NatsServer) -> int:
    """Delete the team stream's history readers, as an administrator might; how many."""

    async def main() -> int:
        client = await nats.connect(server.url, user="eve", password=password("eve"))
        try:
            js = client.jetstream()
            stream = f"RELAY_{NATS_TEAM}"
            readers = [
                info.name
                for info in await js.consumers_info(stream)
                if (info.config.description or "").startswith("relay history reader")
            ]
            for name in readers:
                await js.delete_consumer(stream, name)
            return len(readers)
        finally:
            await client.close()

    return int(anyio.run(main))


@pytest.mark.timeout(180)  # a lost reader is made again after 15 s without a heartbeat
def test_follow_over_nats_outlives_a_restart_and_a_lost_reader(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    machine_a = _machine(tmp_path, "machine-a", nats_server, "reader")
    mailbox_b = SqliteMailbox(tmp_path / "machine-b" / "state" / "messages.db")
    _on_machine_b(nats_server, mailbox_b, ("bob", "dave", "before the restart"))
    process = subprocess.Popen(
        [RELAY, "messages", "--follow", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=machine_a,
        cwd=tmp_path,
    )
    lines: list[str] = []
    arrived = threading.Condition()
    reader = threading.Thread(target=_reader, args=(process.stdout, lines, arrived), daemon=True)
    reader.start()

    def shown(count: int) -> list[object]:
        with arrived:
            arrived.wait_for(lambda: len(lines) >= count or process.poll() is not None, 2 * WAIT)
        return [json.loads(line)["body"] for line in lines]

    try:
        assert shown(1) == ["before the restart"]
        nats_server.restart()
        _on_machine_b(nats_server, mailbox_b, ("dave", "bob", "after the restart"))
        assert shown(2) == ["before the restart", "after the restart"]
        # A reader the server no longer serves (removed, or expired while the connection
        # was down) sends no heartbeat: the follower makes it again from its mark.
        assert _remove_history_readers(nats_server) == 1
        _on_machine_b(nats_server, mailbox_b, ("bob", "*", "after the reader was lost"))
        assert shown(3) == ["before the restart", "after the restart", "after the reader was lost"]
    finally:
        mailbox_b.close()
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=WAIT)
        reader.join(WAIT)
    assert process.returncode == 130, err

"""The loop guard: two agents that answer each other are stopped after `maxExchanges`
messages with no human message in between, and resume after a human's message or the
cool-down. In the mailbox (counting, cool-down, broadcasts, notices) and with real
`relay run` processes on echo bots that answer every message and retry when refused."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from scripted_sessions import RELAY, finish, wait_for

from relay.services.messaging import mailbox as mailbox_module
from relay.services.messaging.mailbox import SCHEMA_VERSION, SqliteMailbox
from relay.services.messaging.model import LoopStoppedError, RateLimitedError

TEAM = "default"
ECHO_BOT = str(Path(__file__).resolve().parent / "resources" / "messaging" / "echo_bot.py")


@pytest.fixture
def box(tmp_path: Path) -> Iterator[SqliteMailbox]:
    mailbox = SqliteMailbox(
        tmp_path / "messages.db", max_per_minute=1000, max_exchanges=4, loop_cooldown=600
    )
    for name in ("Alice", "Bob", "Carol"):
        mailbox.register_agent(name, team=TEAM, session_id=name.lower())
    yield mailbox
    mailbox.close()


def send(box: SqliteMailbox, sender: str, recipient: str, **options: Any) -> None:
    box.send(
        team=TEAM, sender=sender, recipient=recipient, body=f"{sender} to {recipient}", **options
    )


def ping_pong(box: SqliteMailbox, one: str, other: str, count: int) -> None:
    """`count` messages, `one` and `other` in turn."""
    for number in range(count):
        send(box, *((one, other) if number % 2 == 0 else (other, one)))


def between(box: SqliteMailbox, one: str, other: str) -> int:
    """Messages the two sent each other (directly or to everyone)."""
    return sum(
        1
        for m in box.history(team=TEAM, limit=10_000)
        if {m.sender, m.recipient} == {one, other}
        or (m.sender in (one, other) and m.recipient == "*")
    )


def notices(box: SqliteMailbox, name: str) -> list[str]:
    return [d.message.body for d in box.inbox(name, team=TEAM) if d.message.sender == "relay"]


def age(box: SqliteMailbox, seconds: float) -> None:
    """Move every message `seconds` into the past (instead of waiting that long)."""
    connection = sqlite3.connect(box.path)
    rows = connection.execute("SELECT seq, created_at FROM messages").fetchall()
    for seq, created_at in rows:
        moment = datetime.strptime(created_at, "%Y-%m-%dT%H:%M:%S.%fZ") - timedelta(seconds=seconds)
        shifted = moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
        connection.execute("UPDATE messages SET created_at = ? WHERE seq = ?", (shifted, seq))
    connection.commit()
    connection.close()


def test_a_pair_is_stopped_after_max_exchanges_either_way_and_the_other_is_told_once(
    box: SqliteMailbox,
) -> None:
    for number in range(4):
        send(box, *(("Alice", "Bob") if number % 2 == 0 else ("Bob", "Alice")))
    with pytest.raises(LoopStoppedError) as refused:
        send(box, "Alice", "Bob")
    stop = refused.value
    assert (stop.sender, stop.other, stop.limit, stop.new_stop) == ("Alice", "Bob", 4, True)
    assert 590 < stop.retry_after <= 600
    assert stop.message.startswith(
        "Alice and Bob have exchanged 4 messages with no human message in between "
        "(messaging.maxExchanges); not sent: messages between them resume once a human "
        "sends either of them a message (relay send), or in 10 min"
    )
    assert notices(box, "Bob") == [stop.notice]
    assert stop.notice.startswith("Alice and Bob have exchanged 4 messages with no human")
    # Either way round, again and again: refused, nothing queued, nobody told twice.
    for sender, recipient in [("Bob", "Alice"), ("Alice", "Bob"), ("Bob", "Alice")]:
        with pytest.raises(LoopStoppedError) as again:
            send(box, sender, recipient)
        assert not again.value.new_stop and again.value.notice == stop.notice
    assert between(box, "Alice", "Bob") == 4
    assert notices(box, "Bob") == [stop.notice] and notices(box, "Alice") == []
    # Other pairs, one-way streams (maxPerMinute paces them) and messages to humans are
    # not held back.
    for _ in range(10):
        send(box, "Alice", "Carol")
    send(box, "pat", "Alice", human=True)
    send(box, "Alice", "pat")


def test_a_human_message_to_either_lets_the_pair_resume(box: SqliteMailbox) -> None:
    for _ in range(2):
        send(box, "Alice", "Bob")
        send(box, "Bob", "Alice")
    with pytest.raises(LoopStoppedError):
        send(box, "Bob", "Alice")
    send(box, "pat", "Bob", human=True)  # a human writes to one of them
    for _ in range(2):
        send(box, "Bob", "Alice")
        send(box, "Alice", "Bob")
    with pytest.raises(LoopStoppedError) as refused:
        send(box, "Alice", "Bob")
    assert refused.value.new_stop  # a new stop: told again
    assert len(notices(box, "Alice")) == 1 and len(notices(box, "Bob")) == 1
    send(box, "pat", "*", human=True)  # a human's broadcast reaches both
    send(box, "Alice", "Bob")
    # Another agent's message resumes nothing.
    for _ in range(3):
        send(box, "Bob", "Alice")
    with pytest.raises(LoopStoppedError):
        send(box, "Alice", "Bob")
    send(box, "Carol", "Alice")
    with pytest.raises(LoopStoppedError):
        send(box, "Alice", "Bob")


def test_the_cool_down_and_a_quiet_gap_end_the_count(box: SqliteMailbox) -> None:
    ping_pong(box, "Alice", "Bob", 4)
    with pytest.raises(LoopStoppedError):
        send(box, "Bob", "Alice")
    age(box, 599)
    with pytest.raises(LoopStoppedError) as refused:
        send(box, "Bob", "Alice")
    assert refused.value.retry_after <= 1.5
    age(box, 1)  # the cool-down is over: the pair starts afresh
    ping_pong(box, "Bob", "Alice", 4)
    with pytest.raises(LoopStoppedError):
        send(box, "Alice", "Bob")
    assert between(box, "Alice", "Bob") == 8
    # A run of 3, then a quiet gap as long as the cool-down: the count starts afresh.
    send(box, "Carol", "Bob")
    send(box, "Bob", "Carol")
    send(box, "Carol", "Bob")
    age(box, 600)
    ping_pong(box, "Bob", "Carol", 4)
    with pytest.raises(LoopStoppedError):
        send(box, "Bob", "Carol")


def test_broadcasts_count_for_each_pair_they_reach(box: SqliteMailbox) -> None:
    send(box, "Alice", "*")
    send(box, "Alice", "*")
    send(box, "Bob", "Alice")
    send(box, "Bob", "*")
    with pytest.raises(LoopStoppedError) as refused:
        send(box, "Alice", "*")  # one pair it reaches (Alice, Bob) is stopped: refused whole
    assert refused.value.other == "Bob"
    send(box, "Alice", "Carol")  # Alice and Carol: her 2 broadcasts and this one
    send(box, "Carol", "*")  # the 4th for Alice and Carol, the 2nd for Bob and Carol
    with pytest.raises(LoopStoppedError):
        send(box, "Alice", "Carol")
    send(box, "Bob", "Carol")


def test_skipping_recipients_that_never_replied_changes_no_decision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broadcast checks only the recipients that ever wrote to the sender or to everyone
    (mailbox._replied): the same random exchanges, with and without that shortcut, are
    refused at the same places."""
    names = ["Alice", "Bob", "Carol", "Dan"]
    rng = random.Random(5)
    # Now and then a human writes (to one agent or all), which lets stopped pairs resume;
    # Dan only ever writes to everyone.
    script = [
        ("pat" if rng.random() < 0.1 else rng.choice(names), rng.choice([*names, "*", "*"]))
        for _ in range(400)
    ]
    script = [(sender, "*" if sender == "Dan" else recipient) for sender, recipient in script]

    def outcomes(path: Path) -> list[str]:
        box = SqliteMailbox(path, max_per_minute=10_000, max_exchanges=4, loop_cooldown=600)
        for name in names:
            box.register_agent(name, team=TEAM, session_id=name.lower())
        seen = []
        for sender, recipient in script:
            if sender == recipient:
                continue
            try:
                send(box, sender, recipient, human=sender == "pat")
                seen.append("sent")
            except LoopStoppedError as refused:
                seen.append(f"stopped with {refused.other}")
        box.close()
        return seen

    shortcut = outcomes(tmp_path / "shortcut.db")
    monkeypatch.setattr(mailbox_module, "_replied", lambda db, team, sender, names: set(names))
    everyone = outcomes(tmp_path / "everyone.db")
    assert shortcut == everyone
    assert shortcut.count("sent") > 50 and any(o.startswith("stopped") for o in shortcut)


def test_check_limits_applies_the_loop_guard_and_the_rate_limit(tmp_path: Path) -> None:
    box = SqliteMailbox(tmp_path / "m.db", max_per_minute=5, max_exchanges=3)
    box.register_agent("Alice", team=TEAM, session_id="a")
    box.register_agent("Bob", team=TEAM, session_id="b")
    for sender, recipient in [("Alice", "Bob"), ("Bob", "Alice"), ("Alice", "Bob")]:
        box.check_limits(TEAM, sender, recipient)
        box.send(team=TEAM, sender=sender, recipient=recipient, body="x")
    with pytest.raises(LoopStoppedError) as refused:
        box.check_limits(TEAM, "Bob", "*")
    assert refused.value.new_stop and notices(box, "Alice") == [refused.value.notice]
    box.check_limits(TEAM, "pat", "Bob", human=True)  # a human is never in a loop
    box.register_agent("Carol", team=TEAM, session_id="c")
    for _ in range(3):
        box.send(team=TEAM, sender="Alice", recipient="Carol", body="x")
    with pytest.raises(RateLimitedError):
        box.check_limits(TEAM, "Alice", "Carol")
    box.close()


def test_a_version_2_mailbox_gets_the_pair_index(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    SqliteMailbox(path).register_agent("Alice", team=TEAM, session_id="a")
    connection = sqlite3.connect(path)
    connection.execute("DROP INDEX messages_by_pair")
    connection.execute("PRAGMA user_version = 2")
    connection.commit()
    box = SqliteMailbox(path)
    assert [a.name for a in box.agents(TEAM)] == ["Alice"]
    box.close()
    indexes = {row[1] for row in connection.execute("PRAGMA index_list(messages)")}
    assert "messages_by_pair" in indexes
    assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    connection.close()


def start_bot(
    name: str, other: str, folder: Path, settings: Path, *, first: bool = False
) -> subprocess.Popen[bytes]:
    """`relay run --headless --name NAME` on an echo bot answering OTHER."""
    bot = [sys.executable, ECHO_BOT, name, other, str(folder / f"{name}.jsonl")]
    bot += [str(folder / "stop"), *(["first"] if first else [])]
    return subprocess.Popen(
        [RELAY, "run", "--headless", "--name", name, "--settings", str(settings), "--", *bot],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=folder,
    )


def events(folder: Path, name: str, event: str) -> list[str]:
    path = folder / f"{name}.jsonl"
    if not path.exists():
        return []
    entries = map(json.loads, path.read_text().splitlines())
    return [entry["line"] for entry in entries if entry["event"] == event]


@pytest.mark.timeout(180)
def test_two_echo_bots_under_relay_run_are_stopped_told_and_resume_after_a_human(
    tmp_path: Path, relay_home: Path
) -> None:
    """Two bots answer every message and retry every 0.5 s when refused. With the default
    maxExchanges (20) they exchange 20 messages, then every retry is refused, the other
    bot is told once, and both terminals say so; a human's `relay send` lets them go on,
    for 20 more. (Without the loop guard they pass 40 in well under a minute.)"""
    folder = tmp_path / "proj"
    (folder / ".git").mkdir(parents=True)
    settings = tmp_path / "settings.json"
    fast = {"injectQuietMs": 100}
    settings.write_text(
        json.dumps({"session": fast, "messaging": {"ackTimeoutSeconds": 0.3, "team": TEAM}})
    )
    mailbox = SqliteMailbox(relay_home / "state" / "messages.db")
    bob = start_bot("Bob", "Alice", folder, settings)
    try:
        wait_for(
            lambda: any(a.name == "Bob" and a.state != "offline" for a in mailbox.agents(TEAM)),
            "Bob to be live",
        )
        started = time.monotonic()
        alice = start_bot("Alice", "Bob", folder, settings, first=True)
        try:
            refused = lambda name: [  # noqa: E731
                line for line in events(folder, name, "refused") if "maxExchanges" in line
            ]
            # Condition, not time: refused by the loop guard, or (without it) 40 exchanged.
            wait_for(
                lambda: (
                    refused("Alice") or refused("Bob") or between(mailbox, "Alice", "Bob") >= 40
                ),
                "the loop guard to refuse a message",
                timeout=150,
            )
            stopped_after = time.monotonic() - started
            assert between(mailbox, "Alice", "Bob") < 40
            # Both keep retrying; each is refused several times, and nothing more gets through.
            wait_for(
                lambda: len(refused("Alice")) >= 3 and len(refused("Bob")) >= 3,
                "both bots to be refused three times",
                timeout=60,
            )
            assert between(mailbox, "Alice", "Bob") == 20
            told = [
                d
                for name in ("Alice", "Bob")
                for d in mailbox.inbox(name, team=TEAM)
                if d.message.sender == "relay"
            ]
            assert len(told) == 1  # the other agent is told once
            notice = told[0].message.body
            assert notice.startswith(
                "Alice and Bob have exchanged 20 messages with no human message in between"
            )
            wait_for(
                lambda: any(
                    notice in line
                    for name in ("Alice", "Bob")
                    for line in events(folder, name, "message")
                ),
                "the notice to be typed into its agent",
            )
            # A human writes to one of them: they go on, until the next 20.
            human = subprocess.run(
                [RELAY, "send", "--as", "pat", "--team", TEAM, "Alice", "carry on"],
                cwd=folder,
                capture_output=True,
                text=True,
                check=False,
            )
            assert human.returncode == 0, human.stderr
            wait_for(
                lambda: between(mailbox, "Alice", "Bob") > 20, "the pair to resume", timeout=60
            )
            wait_for(
                lambda: (
                    len(
                        [
                            d
                            for name in ("Alice", "Bob")
                            for d in mailbox.inbox(name, team=TEAM)
                            if d.message.sender == "relay"
                        ]
                    )
                    == 2
                ),
                "the second stop to be told",
                timeout=120,
            )
            assert between(mailbox, "Alice", "Bob") == 40
            (folder / "stop").touch()
            alice_code, alice_err = finish(alice)
        finally:
            alice.kill()
        bob_code, bob_err = finish(bob)
    finally:
        bob.kill()
        mailbox.close()
    assert (alice_code, bob_code) == (0, 0)
    # The humans at both terminals were told, once per stop each.
    for err in (alice_err, bob_err):
        assert err.count("Alice and Bob have exchanged 20 messages with no human message") == 2, err
    print(f"stopped after 20 messages in {stopped_after:.1f} s")

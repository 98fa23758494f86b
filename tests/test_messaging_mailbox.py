"""The embedded mailbox, on real SQLite files: states, errors, presence, doorbell, concurrency."""

from __future__ import annotations

import asyncio
import os
import secrets
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import msgspec
import pytest
from sqlite_steps import vm_steps

from relay.engine.aggregator import HookOutcome, aggregate
from relay.protocol.answers import parse_answer
from relay.protocol.output import HookReport
from relay.services.messaging import mailbox as mailbox_module
from relay.services.messaging.doorbell import CARRY_LIMIT, Doorbell, ring, ring_all
from relay.services.messaging.mailbox import BUSY_TIMEOUT, SCHEMA_VERSION, SqliteMailbox
from relay.services.messaging.model import (
    MAX_BODY_BYTES,
    HandedAtSend,
    MessagingError,
    NameTakenError,
    RateLimitedError,
    RecipientAwayError,
    UnknownRecipientError,
)
from relay.services.messaging.namespace import parse
from relay.services.messaging.ulid import new_ulid, ulid_time_ms

TEAM = "default"


@pytest.fixture
def box(tmp_path: Path) -> Iterator[SqliteMailbox]:
    mailbox = SqliteMailbox(tmp_path / "messages.db", max_attempts=3, max_per_minute=1000)
    mailbox.register_agent("Alice", team=TEAM, session_id="a")
    mailbox.register_agent("Bob", team=TEAM, session_id="b", pid=_dead_pid())
    yield mailbox
    mailbox.close()


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_ulids_sort_in_creation_order_and_carry_the_time() -> None:
    ids = [new_ulid() for _ in range(2000)]
    assert ids == sorted(ids) and len(set(ids)) == 2000
    assert all(len(value) == 26 for value in ids)
    assert abs(ulid_time_ms(ids[0]) - time.time() * 1000) < 5000


def test_send_claim_ack(box: SqliteMailbox) -> None:
    sent, recipients = box.send(team=TEAM, sender="Alice", recipient="Bob", body="hi", thread="t")
    assert recipients == ["Bob"]
    [handed] = box.claim("Bob", team=TEAM, session_id="s1")
    # Claimed is not yet an attempt: that counts when the message reaches the agent.
    assert (handed.message, handed.state, handed.attempts) == (sent, "handed", 0)
    assert box.claim("Bob", team=TEAM, session_id="s1") == []  # never twice to one session
    assert box.typed(sent.id, "Bob", team=TEAM, session_id="s1")
    assert not box.typed(sent.id, "Bob", team=TEAM, session_id="other")
    assert box.ack(sent.id, "Bob", team=TEAM, evidence="marker")
    assert not box.ack(sent.id, "Bob", team=TEAM, evidence="marker")
    assert box.claim("Bob", team=TEAM, session_id="s2") == []
    delivery = box.delivery(sent.id, "Bob", team=TEAM)
    assert delivery is not None and (delivery.state, delivery.evidence) == ("acked", "marker")
    assert [m.id for m in box.history(team=TEAM, thread="t")] == [sent.id]


def test_unknown_recipient_is_an_error_listing_the_known(box: SqliteMailbox) -> None:
    with pytest.raises(UnknownRecipientError) as caught:
        box.send(team=TEAM, sender="Alice", recipient="Zed", body="hi")
    assert str(caught.value) == "no agent named Zed in team default; known: Alice, Bob"
    assert box.history(team=TEAM) == []
    with pytest.raises(UnknownRecipientError, match="known: none yet"):
        box.send(team="other", sender="Alice", recipient="Bob", body="hi")


def test_broadcast_reaches_everyone_but_the_sender(box: SqliteMailbox) -> None:
    box.register_agent("Carol", team=TEAM, session_id="c")
    box.register_agent("Eve", team="elsewhere", session_id="e")
    sent, recipients = box.send(team=TEAM, sender="Alice", recipient="*", body="all hands")
    assert recipients == ["Bob", "Carol"] and sent.recipient == "*"
    assert [d.message.id for d in box.claim("Carol", team=TEAM, session_id="c")] == [sent.id]
    assert box.claim("Alice", team=TEAM, session_id="a") == []
    assert box.claim("Eve", team="elsewhere", session_id="e") == []


def test_agents_long_offline_are_away_unless_live(box: SqliteMailbox) -> None:
    box.register_agent("Carol", team=TEAM, session_id="c", pid=_dead_pid())
    box.send(team=TEAM, sender="pat", recipient="Alice", body="a human", human=True)
    with sqlite3.connect(box.path) as db:  # nobody has been seen for a long time
        db.execute("UPDATE agents SET last_seen = '2000-01-01T00:00:00.000Z'")
    for name in ("Bob", "Dan"):  # gone, but seen just now
        box.register_agent(name, team=TEAM, session_id=name, pid=_dead_pid())
    # Carol is away; Alice's session is live (this process), and humans hear no broadcast.
    _, recipients = box.send(team=TEAM, sender="Bob", recipient="*", body="all")
    assert recipients == ["Alice", "Dan"]
    _, recipients = box.send(team=TEAM, sender="Bob", recipient="*", body="all", queue=True)
    assert recipients == ["Alice", "Carol", "Dan"]
    with pytest.raises(RecipientAwayError, match="Carol"):
        box.send(team=TEAM, sender="Bob", recipient="Carol", body="there?")
    assert box.send(team=TEAM, sender="Bob", recipient="Carol", body="there?", queue=True)[1] == [
        "Carol"
    ]
    assert box.send(team=TEAM, sender="Bob", recipient="pat", body="a human is never away")[1] == [
        "pat"
    ]


def test_bad_messages_are_refused_with_what_is_wrong(box: SqliteMailbox) -> None:
    with pytest.raises(MessagingError, match="limit is 65536"):
        box.send(team=TEAM, sender="Alice", recipient="Bob", body="x" * (MAX_BODY_BYTES + 1))
    box.send(team=TEAM, sender="Alice", recipient="Bob", body="é" * (MAX_BODY_BYTES // 2))
    with pytest.raises(MessagingError, match="empty"):
        box.send(team=TEAM, sender="Alice", recipient="Bob", body="  \n")
    with pytest.raises(MessagingError, match="not valid UTF-8"):
        box.send(team=TEAM, sender="Alice", recipient="Bob", body="bad \udc80 surrogate")
    with pytest.raises(MessagingError, match="agent name 'a b' is not usable"):
        box.send(team=TEAM, sender="a b", recipient="Bob", body="hi")
    with pytest.raises(MessagingError, match="'relay' is reserved"):
        box.register_agent("relay", team=TEAM, session_id="x")


def test_per_sender_order_across_sessions_and_retries(box: SqliteMailbox) -> None:
    sent = [box.send(team=TEAM, sender="Alice", recipient="Bob", body=str(n))[0] for n in range(5)]
    first = box.claim("Bob", team=TEAM, session_id="s1", limit=3)
    assert [d.message.body for d in first] == ["0", "1", "2"]
    for message in sent[:2]:
        box.typed(message.id, "Bob", team=TEAM, session_id="s1")
    box.ack(sent[0].id, "Bob", team=TEAM, evidence="output")
    # s1 died with "1" typed and "2" claimed only: the next session gets both again,
    # before the rest, and only "1" has an attempt counted.
    again = box.claim("Bob", team=TEAM, session_id="s2")
    assert [(d.message.body, d.attempts) for d in again] == [("1", 1), ("2", 0), ("3", 0), ("4", 0)]


def test_a_clean_end_releases_what_was_claimed_but_never_typed(box: SqliteMailbox) -> None:
    sent = [box.send(team=TEAM, sender="Alice", recipient="Bob", body=str(n))[0] for n in range(3)]
    assert len(box.claim("Bob", team=TEAM, session_id="s1")) == 3
    box.typed(sent[0].id, "Bob", team=TEAM, session_id="s1")
    assert box.release("Bob", [m.id for m in sent[1:]], team=TEAM, session_id="s1") == 2
    states = [(d.state, d.attempts) for d in box.inbox("Bob", team=TEAM)]
    assert states == [("handed", 1), ("queued", 0), ("queued", 0)]
    assert box.release("Bob", [sent[1].id], team=TEAM, session_id="s1") == 0


def test_dead_after_max_attempts_and_the_sender_is_told(box: SqliteMailbox) -> None:
    sent, _ = box.send(team=TEAM, sender="Alice", recipient="Bob", body="hello")
    for session in ("s1", "s2", "s3"):
        assert len(box.claim("Bob", team=TEAM, session_id=session)) == 1
        box.typed(sent.id, "Bob", team=TEAM, session_id=session)
    assert box.claim("Bob", team=TEAM, session_id="s4") == []
    delivery = box.delivery(sent.id, "Bob", team=TEAM)
    assert delivery is not None and delivery.state == "dead"
    assert delivery.reason == "handed out 3 times without an acknowledgement"
    [notice] = box.claim("Alice", team=TEAM, session_id="a")
    assert notice.message.sender == "relay"
    assert notice.message.body == (
        f"Your message to Bob [{sent.short_id}] could not be delivered: "
        "handed out 3 times without an acknowledgement."
    )


def test_waiting_shows_what_a_claim_would_take_and_changes_nothing(box: SqliteMailbox) -> None:
    sent = [box.send(team=TEAM, sender="Alice", recipient="Bob", body=str(n))[0] for n in range(4)]
    assert [d.message.body for d in box.claim("Bob", team=TEAM, session_id="s1", limit=1)] == ["0"]
    for _ in range(3):  # message 1 reaches max_attempts (3): the claim marks it dead instead
        box.claim("Bob", team=TEAM, session_id="s0", limit=2)
        box.typed(sent[1].id, "Bob", team=TEAM, session_id="s0")
        box.release("Bob", [sent[1].id], team=TEAM, session_id="s0")
    before = [(d.message.body, d.state, d.handed_at) for d in box.inbox("Bob", team=TEAM)]
    # s2 would take over what the dead s1 and s0 held, then the queued mail, oldest first;
    # message 1 is there with its attempts spent: the claim marks it dead instead.
    waiting = box.waiting("Bob", team=TEAM, session_id="s2", limit=10)
    assert [(d.message.body, d.attempts) for d in waiting] == [
        ("0", 0),
        ("1", 3),
        ("2", 0),
        ("3", 0),
    ]
    assert [(d.message.body, d.state, d.handed_at) for d in box.inbox("Bob", team=TEAM)] == before
    assert [d.message.body for d in box.claim("Bob", team=TEAM, session_id="s2")] == ["0", "2", "3"]
    assert box.waiting("Bob", team=TEAM, session_id="s2") == []  # its own hand-outs are not waiting
    dead = box.delivery(sent[1].id, "Bob", team=TEAM)
    assert dead is not None and dead.state == "dead"


def test_denied_message_tells_the_sender(box: SqliteMailbox) -> None:
    sent, _ = box.send(team=TEAM, sender="Alice", recipient="Bob", body="spam")
    box.claim("Bob", team=TEAM, session_id="s1")
    assert box.deny(sent.id, "Bob", team=TEAM, reason="no spam")
    assert [d.message.body for d in box.inbox("Alice", team=TEAM)] == [
        f"Your message to Bob [{sent.short_id}] was refused: no spam."
    ]
    assert box.inbox("Bob", team=TEAM, states=["queued", "handed"]) == []


def test_rate_limit_refuses_and_tells_the_recipient_once(tmp_path: Path) -> None:
    box = SqliteMailbox(tmp_path / "m.db", max_per_minute=3)
    box.register_agent("Alice", team=TEAM, session_id="a")
    box.register_agent("Bob", team=TEAM, session_id="b")
    for n in range(3):
        box.send(team=TEAM, sender="Alice", recipient="Bob", body=f"m{n}")
    for _ in range(2):
        with pytest.raises(RateLimitedError) as caught:
            box.send(team=TEAM, sender="Alice", recipient="Bob", body="again")
    assert 0 < caught.value.retry_after <= 60
    bodies = [d.message.body for d in box.inbox("Bob", team=TEAM)]
    assert bodies[:3] == ["m0", "m1", "m2"]
    assert len(bodies) == 4 and "Alice is sending more than 3 messages a minute" in bodies[3]
    box.close()


def test_presence_names_and_reused_pids(box: SqliteMailbox, tmp_path: Path) -> None:
    states = {agent.name: agent.state for agent in box.agents(TEAM)}
    assert states == {"Alice": "live", "Bob": "offline"}  # Bob's pid is gone
    with pytest.raises(NameTakenError, match="already live in team default"):
        box.register_agent("Alice", team=TEAM, session_id="another")
    box.register_agent("Bob", team=TEAM, session_id="new")  # a dead pid frees the name
    # A live pid with another start time is a reused pid, not the agent.
    other = SqliteMailbox(tmp_path / "messages.db")
    other._write(lambda db: db.execute("UPDATE agents SET started_ticks = 1 WHERE name = 'Alice'"))
    assert {a.name: a.state for a in box.agents(TEAM)}["Alice"] == "offline"
    box.set_presence("Bob", team=TEAM, session_id="new", state="idle")
    assert {a.name: a.state for a in box.agents(TEAM)}["Bob"] == "idle"
    other.close()


def test_a_human_sender_gets_a_mailbox_for_replies(box: SqliteMailbox) -> None:
    box.send(team=TEAM, sender="pat", recipient="Bob", body="status?")
    assert "pat" in box.known_names(TEAM)
    box.send(team=TEAM, sender="Bob", recipient="pat", body="all green")
    assert [d.message.body for d in box.inbox("pat", team=TEAM)] == ["all green"]


def test_store_incoming_is_idempotent(box: SqliteMailbox, tmp_path: Path) -> None:
    other = SqliteMailbox(tmp_path / "remote.db")
    other.register_agent("Zoe", team=TEAM, session_id="z")
    other.register_agent("Bob", team=TEAM, session_id="b-remote")
    message, _ = other.send(team=TEAM, sender="Zoe", recipient="Bob", body="from afar")
    assert box.store_incoming(message, ["Bob"])
    assert not box.store_incoming(message, ["Bob"])
    [delivery] = box.claim("Bob", team=TEAM, session_id="s")
    assert delivery.message == message
    other.close()


def test_doorbell_wakes_a_waiting_recipient(box: SqliteMailbox) -> None:
    async def main() -> None:
        with Doorbell() as bell:
            box.register_agent("Bob", team=TEAM, session_id="b2", bell=bell.record)
            assert not await bell.wait(0.05)
            threading.Timer(
                0.1, lambda: box.send(team=TEAM, sender="Alice", recipient="Bob", body="ding")
            ).start()
            assert await bell.wait(5.0)  # the poke, not the timeout, ends the wait

    anyio.run(main)
    # Nobody listening: a send still succeeds.
    box.send(team=TEAM, sender="Alice", recipient="Bob", body="nobody home")


async def _ring_later(address: bytes) -> None:
    await anyio.sleep(0.05)
    ring_all([address])


def test_a_doorbell_keeps_a_poke_nobody_waited_for_and_moves_between_loops() -> None:
    with Doorbell() as bell:

        async def main() -> None:
            assert not await bell.wait(0.01)  # watched from now on; timed out
            ring_all([bell.address])
            await anyio.sleep(0.05)  # the loop sees the poke while nobody waits
            assert await bell.wait(0) and not await bell.wait(0)  # kept once, drained
            with anyio.move_on_after(0.01):
                await bell.wait(5)  # a wait cancelled leaves the bell usable
            async with anyio.create_task_group() as group:  # rung while waited for
                group.start_soon(_ring_later, bell.address)
                assert await bell.wait(5)

        anyio.run(main)
        anyio.run(main)  # a second event loop watches it in turn


def test_a_session_that_recorded_its_bell_without_a_key_gets_bare_pokes(
    box: SqliteMailbox,
) -> None:
    """A relay from before the hand-over at the send records its doorbell's address alone
    and reads pokes without looking at them: nothing is handed to it at the send."""

    async def main() -> None:
        with Doorbell() as bob:
            box.register_agent("Bob", team=TEAM, session_id="b", bell=bob.address)
            box.send(team=TEAM, sender="Alice", recipient="Bob", body="hello")
            assert await bob.wait(0) and bob.take() == ([], True)
            (delivery,) = box.inbox("Bob", team=TEAM)
            assert delivery.state == "queued"

    anyio.run(main)


def test_long_pokes_do_not_crowd_out_the_others_in_the_senders_socket() -> None:
    """Unread datagrams count against the socket that sent them: bare pokes go first, and
    a long one that finds the shared socket full goes through a socket of its own."""
    bells = [Doorbell() for _ in range(12)]
    try:
        long = {bell.address: b"x" * CARRY_LIMIT for bell in bells[4:]}  # 256 KiB in all
        assert ring_all([bell.address for bell in bells], long) == []
        for bell in bells:
            bell._drain()
        assert [bell.take() for bell in bells] == [([], True)] * 4 + [
            ([b"x" * CARRY_LIMIT], False)
        ] * 8
    finally:
        for bell in bells:
            bell.close()


def test_a_doorbell_checks_that_pokes_come_with_their_senders_credentials() -> None:
    """At its start a doorbell pokes itself and reads the kernel's word on who sent it; a
    poke that came before the probe is kept, as a bare poke."""
    with Doorbell() as bell:
        ring(bell.address)  # a poke ahead of the probe
        assert bell._vouched()
        assert bell.take() == ([], True)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to poke as another user")
def test_what_another_users_poke_carries_is_not_taken() -> None:
    """A poke from another user's process counts as a bare poke, whatever it carries (on a
    bell in the abstract namespace, as an older relay records it: another user cannot
    reach one in its folder at all, see test_messaging_inbox)."""
    with Doorbell(b"\0relay-bell-test-" + secrets.token_hex(8).encode()) as bell:
        child = os.fork()
        if child == 0:  # pragma: no cover - the child process
            try:
                os.setuid(65534)  # nobody
                ring_all([bell.address], {bell.address: b'{"session_id": "s"}'})
            finally:
                os._exit(0)
        assert os.waitpid(child, 0)[1] == 0
        assert bell._drain() and bell.take() == ([], True)
        ring_all([bell.address], {bell.address: b'{"session_id": "s"}'})  # root: taken
        assert bell._drain() and bell.take() == ([b'{"session_id": "s"}'], False)


def test_a_doorbell_keeps_a_poke_whose_wait_was_cancelled_and_has_one_waiter() -> None:
    with Doorbell() as bell:

        async def main() -> None:
            waiting = asyncio.ensure_future(bell.wait(5))
            await asyncio.sleep(0.05)
            with pytest.raises(anyio.BusyResourceError):
                await bell.wait(5)  # one waiter at a time
            ring_all([bell.address])
            bell._on_readable()  # the loop sees the poke and settles the wait, and
            waiting.cancel()  # the waiter is cancelled before it resumes
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert await bell.wait(0)  # the poke outlived the cancelled wait

        asyncio.run(main())


def test_a_broadcast_rings_every_live_recipient_once_committed(box: SqliteMailbox) -> None:
    async def main() -> None:
        with Doorbell() as bob, Doorbell() as carol, Doorbell() as gone:
            box.register_agent("Bob", team=TEAM, session_id="b2", bell=bob.record)
            box.register_agent("Carol", team=TEAM, session_id="c", bell=carol.record)
            gone.close()  # a bell nobody listens on any more
            assert ring_all([gone.address, bob.address]) == [gone.address]
            assert await bob.wait(0) and bob.take() == ([], True)  # a bare poke
            box.send(team=TEAM, sender="Alice", recipient="*", body="all hands")
            assert await bob.wait(0) and await carol.wait(0)  # rung before send returned
            # Nothing else waited for them: each poke carries the delivery, handed to
            # the session already, and what woke them is committed (another connection).
            reader = SqliteMailbox(box.path)
            for bell, name, session in ((bob, "Bob", "b2"), (carol, "Carol", "c")):
                (datagram,), bare = bell.take()
                carried = msgspec.json.decode(datagram, type=HandedAtSend)
                assert not bare and carried.session_id == session and carried.key == bell.key
                assert carried.delivery.message.body == "all hands"
                assert carried.delivery.recipient == name and carried.delivery.state == "handed"
                (delivery,) = reader.inbox(name, team=TEAM)
                assert delivery.message.id == carried.delivery.message.id
                assert delivery.state == "handed"
                assert reader.claim(name, team=TEAM, session_id=session) == []
            reader.close()

    anyio.run(main)


def test_mail_is_handed_at_the_send_only_to_a_live_session_with_nothing_else_pending(
    box: SqliteMailbox,
) -> None:
    async def main() -> None:
        with Doorbell() as bob:
            box.register_agent("Bob", team=TEAM, session_id="b", bell=bob.record)
            first, _ = box.send(team=TEAM, sender="Alice", recipient="Bob", body="one")
            second, _ = box.send(team=TEAM, sender="Alice", recipient="Bob", body="two")
            await bob.wait(0)
            carried, bare = bob.take()
            # The first is handed at the send; the second waits behind it (order), queued,
            # and its poke is bare.
            assert len(carried) == 1 and bare
            assert states(box) == {"one": "handed", "two": "queued"}
            assert [d.message.id for d in box.waiting("Bob", team=TEAM, session_id="b")] == [
                second.id
            ]
            # Once both are acknowledged, the next is handed at the send again.
            [claimed] = box.claim("Bob", team=TEAM, session_id="b")
            assert claimed.message.id == second.id
            for message in (first, second):
                assert box.ack(message.id, "Bob", team=TEAM, evidence="marker")
            third, _ = box.send(team=TEAM, sender="Alice", recipient="Bob", body="three")
            await bob.wait(0)
            assert bob.take()[1] is False
            # A body too long for a poke goes by the mailbox alone.
            box.ack(third.id, "Bob", team=TEAM, evidence="marker")
            box.send(team=TEAM, sender="Alice", recipient="Bob", body="x" * CARRY_LIMIT)
            await bob.wait(0)
            assert bob.take() == ([], True) and states(box)["x" * CARRY_LIMIT] == "queued"
            box.claim("Bob", team=TEAM, session_id="b")
            box.ack(box.inbox("Bob", team=TEAM)[-1].message.id, "Bob", team=TEAM, evidence="output")
            # A session that has not read its pokes for a while: its socket's queue is
            # full, the poke does not go in, and the delivery is queued again.
            while ring(bob.address):
                pass
            box.send(team=TEAM, sender="Alice", recipient="Bob", body="full")
            assert states(box)["full"] == "queued"
        # The session is gone without going offline (a crash): the poke is not heard,
        # and the delivery handed to it is queued again, for the agent's next session.
        box.claim("Bob", team=TEAM, session_id="b")
        box.ack(box.inbox("Bob", team=TEAM)[-1].message.id, "Bob", team=TEAM, evidence="output")
        box.send(team=TEAM, sender="Alice", recipient="Bob", body="anyone?")
        assert states(box)["anyone?"] == "queued"

    def states(box: SqliteMailbox) -> dict[str, str]:
        return {d.message.body: d.state for d in box.inbox("Bob", team=TEAM)}

    anyio.run(main)


def test_a_new_session_takes_over_what_a_dead_one_held_oldest_first(box: SqliteMailbox) -> None:
    for n in range(5):
        box.send(team=TEAM, sender="Alice", recipient="Bob", body=str(n))

    def claim(session: str, limit: int) -> list[str]:
        return [
            d.message.body for d in box.claim("Bob", team=TEAM, session_id=session, limit=limit)
        ]

    assert claim("s1", 2) == ["0", "1"]
    box.send(team=TEAM, sender="Alice", recipient="Bob", body="5")
    # s1 is gone: s2 gets its hand-outs first, then the queued mail, `limit` at a time.
    assert claim("s2", 3) == ["0", "1", "2"]
    assert claim("s2", 3) == ["3", "4", "5"]
    assert claim("s2", 3) == []
    assert claim("s3", 10) == ["0", "1", "2", "3", "4", "5"]


def _steps(box: SqliteMailbox, action: Callable[[], object]) -> int:
    """SQLite virtual-machine steps (in hundreds) that `action` costs on `box`'s connection."""
    return vm_steps(box._connect(), action, per=100)


def _costs_with_history(path: Path, history: int) -> tuple[int, int, int]:
    """The steps of a claim, a send and a broadcast in a team whose Alice and Bob
    exchanged `history` messages an hour ago (all acknowledged), with a human in it."""
    box = SqliteMailbox(path, max_per_minute=1000)
    for name in ("Alice", "Bob", "Carol"):
        box.register_agent(name, team=TEAM, session_id=name)
    box.send(team=TEAM, sender="pat", recipient="Bob", body="a human in the team")
    an_hour_ago = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    def old_mail(db: sqlite3.Connection) -> None:
        for n in range(history):
            sender, recipient = ("Alice", "Bob") if n % 2 else ("Bob", "Alice")
            seq = db.execute(
                "INSERT INTO messages (id, team, sender, recipient, body, created_at)"
                " VALUES (?, ?, ?, ?, 'old', ?)",
                (new_ulid(), TEAM, sender, recipient, an_hour_ago),
            ).lastrowid
            db.execute(
                "INSERT INTO deliveries (team, recipient, seq, state, attempts, session_id)"
                " VALUES (?, ?, ?, 'acked', 1, 'old')",
                (TEAM, recipient, seq),
            )

    box._write(old_mail)
    box.send(team=TEAM, sender="Carol", recipient="Bob", body="new")
    costs = (
        _steps(box, lambda: box.claim("Bob", team=TEAM, session_id="Bob")),
        _steps(box, lambda: box.send(team=TEAM, sender="Alice", recipient="Bob", body="x")),
        _steps(box, lambda: box.send(team=TEAM, sender="Alice", recipient="*", body="y")),
    )
    box.close()
    return costs


def test_claims_and_sends_cost_the_same_whatever_the_history(tmp_path: Path) -> None:
    small = _costs_with_history(tmp_path / "small.db", 20)
    large = _costs_with_history(tmp_path / "large.db", 2000)
    # A claim reads what waits; the loop guard and the rate limit read index ranges
    # bounded by their limits: 100 times the history costs next to nothing more.
    assert all(big <= 1.5 * little + 2 for little, big in zip(small, large, strict=True)), (
        small,
        large,
    )


def test_writers_wait_for_the_lock_in_fine_steps_then_give_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = SqliteMailbox(tmp_path / "m.db")
    box.register_agent("Bob", team=TEAM, session_id="b")
    locker = sqlite3.connect(tmp_path / "m.db", isolation_level=None, check_same_thread=False)
    statements: list[str] = []

    def traced(statement: str) -> None:
        statements.append(statement)
        # The lock goes at the sixth try, not after a time (a loaded machine made only
        # four tries in the 0.1 s it was held for): a writer waiting inside one try, as
        # SQLite's own busy handler does, never gets there, and gives up.
        if statement == "BEGIN IMMEDIATE" and statements.count(statement) == 6:
            locker.execute("COMMIT")

    box._connect().set_trace_callback(traced)
    locker.execute("BEGIN IMMEDIATE")
    box.send(team=TEAM, sender="pat", recipient="Bob", body="after the lock")
    # Tried again and again (SQLite's own busy handler would have slept inside one try).
    assert statements.count("BEGIN IMMEDIATE") > 5
    monkeypatch.setattr(mailbox_module, "BUSY_TIMEOUT", 0.2)
    locker.execute("BEGIN IMMEDIATE")
    with pytest.raises(MessagingError, match="cannot write to the mailbox: database is locked"):
        box.claim("Bob", team=TEAM, session_id="b")
    locker.execute("COMMIT")
    box.send(team=TEAM, sender="pat", recipient="Bob", body="after the refusal")
    assert [d.message.body for d in box.inbox("Bob", team=TEAM)] == [
        "after the lock",
        "after the refusal",
    ]
    locker.close()
    box.close()


def _spy_on_syncs(
    monkeypatch: pytest.MonkeyPatch, during: Callable[[str], None] = lambda path: None
) -> list[str]:
    """The paths relay syncs from now on (fsync or fdatasync, folders included); `during(path)`
    runs inside each sync, before it."""
    synced: list[str] = []

    def spy(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(descriptor: int) -> None:
            path = os.readlink(f"/proc/self/fd/{descriptor}")
            during(path)
            synced.append(path)
            real(descriptor)

        return sync

    monkeypatch.setattr(os, "fsync", spy(os.fsync))
    monkeypatch.setattr(os, "fdatasync", spy(os.fdatasync))
    return synced


def test_a_message_is_synced_before_send_returns_and_read_before_the_sync(
    box: SqliteMailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[bool, int]] = []

    async def main() -> None:
        with Doorbell() as bell:
            box.register_agent("Carol", team=TEAM, session_id="c", bell=bell.record)
            reader = SqliteMailbox(box.path)

            def during(path: str) -> None:
                # The sender waits for the disk; the recipient is rung and reads already.
                rung = bell._drain()
                handed = reader.inbox("Carol", team=TEAM, states=["handed"])  # at the send
                seen.append((rung, len(handed)))

            synced = _spy_on_syncs(monkeypatch, during)
            box.send(team=TEAM, sender="Alice", recipient="Carol", body="one")
            assert synced == [f"{box.path}-wal"] and seen == [(True, 1)]
            # Hand-outs, acknowledgements and presence are not synced.
            (delivery,) = box.claim("Carol", team=TEAM, session_id="c-next")
            box.ack(delivery.message.id, "Carol", team=TEAM, evidence="marker")
            box.set_presence("Carol", team=TEAM, session_id="c", state="idle")
            assert synced == [f"{box.path}-wal"]
            box.send(team=TEAM, sender="Alice", recipient="Carol", body="two")
            assert synced == [f"{box.path}-wal"] * 2
            reader.close()

    anyio.run(main)


def test_a_new_wal_file_has_its_folder_synced_and_a_failed_sync_is_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = _spy_on_syncs(monkeypatch)
    box = SqliteMailbox(tmp_path / "m.db")
    box.register_agent("Bob", team=TEAM, session_id="b")
    box.send(team=TEAM, sender="pat", recipient="Bob", body="one")
    wal = f"{box.path}-wal"
    assert synced == [str(tmp_path), wal, wal]  # the folder once, before the WAL's first sync
    box.close()  # the last connection: SQLite checkpoints and removes the WAL
    assert not Path(wal).exists()
    synced.clear()
    box.send(team=TEAM, sender="pat", recipient="Bob", body="two")
    assert synced == [str(tmp_path), wal]  # a new WAL file: its folder again

    def failing(descriptor: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(
        MessagingError, match=r"m\.db: committed \(it may be delivered.*but not synced to disk"
    ):
        box.send(team=TEAM, sender="pat", recipient="Bob", body="three")
    box.close()


def test_a_folder_that_cannot_be_synced_is_let_be_and_a_closed_mailbox_keeps_no_wal_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.fsync

    def no_folders(descriptor: int) -> None:
        if os.path.isdir(f"/proc/self/fd/{descriptor}"):
            raise OSError(22, "Invalid argument")  # as some file systems answer
        real(descriptor)

    monkeypatch.setattr(os, "fsync", no_folders)
    synced = _spy_on_syncs(monkeypatch)
    box = SqliteMailbox(tmp_path / "m.db")
    box.register_agent("Bob", team=TEAM, session_id="b")  # as SQLite does: not an error
    assert synced[-1] == f"{box.path}-wal"
    box.close()
    assert box._wal is None
    box._sync()  # a send's sync that comes after close(): opens and keeps nothing
    assert box._wal is None


def test_a_version_3_mailbox_gets_the_handed_index(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    SqliteMailbox(path).register_agent("Alice", team=TEAM, session_id="a")
    connection = sqlite3.connect(path)
    connection.execute("DROP INDEX deliveries_handed")
    connection.execute("PRAGMA user_version = 3")
    connection.commit()
    box = SqliteMailbox(path)
    assert [a.name for a in box.agents(TEAM)] == ["Alice"]
    box.close()
    indexes = {row[1] for row in connection.execute("PRAGMA index_list(deliveries)")}
    assert "deliveries_handed" in indexes
    assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    connection.close()


def test_data_version_changes_on_another_connections_commit(box: SqliteMailbox) -> None:
    reader = SqliteMailbox(box.path)
    before = reader.data_version()
    box.send(team=TEAM, sender="Alice", recipient="Bob", body="x")
    assert reader.data_version() != before
    reader.close()


def test_unusable_mailbox_files_are_clear_errors(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(MessagingError, match=f"{garbage}: cannot use the mailbox"):
        SqliteMailbox(garbage).agents(TEAM)
    under_file = tmp_path / "file" / "messages.db"
    (tmp_path / "file").write_text("")
    with pytest.raises(MessagingError, match="cannot open the mailbox"):
        SqliteMailbox(under_file).agents(TEAM)


def test_locked_mailbox_waits_then_proceeds(tmp_path: Path) -> None:
    box = SqliteMailbox(tmp_path / "m.db")
    box.register_agent("Bob", team=TEAM, session_id="b")
    locker = sqlite3.connect(tmp_path / "m.db", isolation_level=None, check_same_thread=False)
    locker.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, lambda: locker.execute("COMMIT")).start()
    box.send(team=TEAM, sender="pat", recipient="Bob", body="after the lock")
    assert len(box.inbox("Bob", team=TEAM)) == 1
    locker.close()
    box.close()


def test_thread_marker_parsing() -> None:
    assert parse("Bob", "[thread:rel-1] tagged") == ("Bob", "tagged", "rel-1")
    assert parse("*", "no thread here") == ("*", "no thread here", None)
    assert parse("Bob", "x [thread:later]") == ("Bob", "x [thread:later]", None)
    # A multi-line body (`@relay:Bob <<<`) starts with the marker on its own line.
    assert parse("Bob", "[thread:t9]\nline one\nline two") == ("Bob", "line one\nline two", "t9")


def test_body_rewrites_merge_last_wins() -> None:
    stdouts = [
        '{"hookSpecificOutput": {"body": "one"}}',
        '{"inject": "x"}',
        '{"hookSpecificOutput": {"body": "two"}}',
    ]
    outcomes = []
    for number, stdout in enumerate(stdouts):
        answer = parse_answer("MessageReceived", exit_code=0, stdout=stdout.encode(), stderr=b"")
        assert answer.warnings == []
        outcomes.append(
            HookOutcome(
                report=HookReport(name=f"h{number}", source="test", command="h"), answer=answer
            )
        )
    result = aggregate("MessageReceived", outcomes)
    assert (result.hookSpecificOutput, result.inject) == ({"body": "two"}, "x")


SENDER = """
import sys
from relay.services.messaging.mailbox import SqliteMailbox
box = SqliteMailbox(sys.argv[1], max_per_minute=100000)
for n in range(int(sys.argv[3])):
    box.send(team="default", sender=sys.argv[2], recipient="R", body=f"{sys.argv[2]}:{n}")
"""


@pytest.mark.slow
def test_concurrent_senders_lose_nothing_duplicate_nothing_keep_order(tmp_path: Path) -> None:
    senders, count = 8, 200
    path = tmp_path / "messages.db"
    box = SqliteMailbox(path)
    box.register_agent("R", team=TEAM, session_id="r")
    processes = [
        subprocess.Popen([sys.executable, "-c", SENDER, str(path), f"S{i}", str(count)])
        for i in range(senders)
    ]
    received: list[str] = []
    while any(process.poll() is None for process in processes) or len(received) < senders * count:
        batch = box.claim("R", team=TEAM, session_id="r", limit=500)
        for delivery in batch:
            box.ack(delivery.message.id, "R", team=TEAM, evidence="output")
            received.append(delivery.message.body)
        if not batch:
            if all(process.poll() is not None for process in processes):
                break
            time.sleep(0.01)
    assert all(process.wait(timeout=60) == 0 for process in processes)
    assert len(received) == senders * count == len(set(received))
    for i in range(senders):
        mine = [int(body.split(":")[1]) for body in received if body.startswith(f"S{i}:")]
        assert mine == list(range(count))
    assert os.path.getsize(path) > 0
    box.close()


def test_a_claim_that_must_not_wait_says_busy_instead(tmp_path: Path) -> None:
    """The session's loop claims without waiting; while another writer holds the mailbox
    it gets MailboxBusy (and claims on a worker thread instead), never a stall."""
    import sqlite3 as sqlite

    from relay.services.messaging.model import MailboxBusy

    path = tmp_path / "messages.db"
    box = SqliteMailbox(path)
    box.register_agent("Bob", team="t", session_id="s1", cwd=str(tmp_path))
    box.send(team="t", sender="alice", recipient="Bob", body="hi")
    holder = sqlite.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(MailboxBusy):
            box.claim("Bob", team="t", session_id="s1", wait=False)
        assert time.monotonic() - started < BUSY_TIMEOUT / 2  # no busy wait
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    (delivery,) = box.claim("Bob", team="t", session_id="s1", wait=False)
    assert delivery.message.body == "hi"
    box.close()


def test_a_read_that_must_not_wait_says_busy_while_another_thread_uses_the_mailbox(
    tmp_path: Path,
) -> None:
    from relay.services.messaging.model import MailboxBusy

    box = SqliteMailbox(tmp_path / "messages.db")
    box.register_agent("Bob", team="t", session_id="s1", cwd=str(tmp_path))
    box.send(team="t", sender="alice", recipient="Bob", body="hi")
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with box._lock:
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        with pytest.raises(MailboxBusy):
            box.waiting("Bob", team="t", session_id="s1", wait=False)
    finally:
        release.set()
        holder.join()
    (delivery,) = box.waiting("Bob", team="t", session_id="s1", wait=False)
    assert delivery.message.body == "hi" and delivery.state == "queued"
    box.close()

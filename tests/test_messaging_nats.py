"""The NATS JetStream transport against a real nats-server (Debian's package; .ci/run
installs it): two relay homes stand for two machines of team a, carol and mallory are in
team b's account."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
import nats
import pytest
from nats_server import NatsServer, find_nats_server, password, server_config
from scripted_sessions import RELAY, finish, reads, start_relay_run, wait_for

from relay.config.model import NatsConfig
from relay.services.messaging.mailbox import SqliteMailbox
from relay.services.messaging.model import Agent, Message, MessagingError, utc_now
from relay.services.messaging.nats import (
    NatsMessaging,
    broadcast_consumer,
    broadcast_subject,
    inbox_prefix,
    mailbox_consumer,
    mailbox_subject,
    message_subject,
    stream_name,
)
from relay.services.messaging.ulid import new_ulid

TEAM_A = ["alice", "bob", "dave"]
TEAM_B = ["carol"]
TTL = 1.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    """A running nats-server: accounts TEAM_a (alice, bob, dave, and eve without permission
    limits) and TEAM_b (carol, and mallory without permission limits), JetStream in tmp_path."""
    binary = find_nats_server()
    if binary is None:
        pytest.skip("nats-server binary not available: install Debian's nats-server (.ci/run does)")
    workdir = tmp_path / "nats"
    workdir.mkdir()
    config = server_config(
        workdir / "js", {"a": TEAM_A, "b": TEAM_B}, unrestricted={"a": ["eve"], "b": ["mallory"]}
    )
    running = NatsServer(binary, workdir, config)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def config_for(server: NatsServer, user: str, **extra: Any) -> NatsConfig:
    """The settings of one NATS user."""
    return NatsConfig(url=server.url, user=user, password=password(user), **extra)


def connect(server: NatsServer, user: str, team: str, **extra: Any) -> NatsMessaging:
    """A NatsMessaging for `user` (an agent user gets its own inbox prefix)."""
    inbox = inbox_prefix(team, user) if user != "mallory" else None
    return NatsMessaging(config_for(server, user, **extra), team=team, inbox=inbox)


def message(sender: str, recipient: str, body: str, *, team: str = "a") -> Message:
    """A new message."""
    return Message(
        id=new_ulid(),
        team=team,
        sender=sender,
        recipient=recipient,
        body=body,
        created_at=utc_now(),
    )


class FakeStore:
    """An idempotent store that remembers every call (to see duplicates at the call level)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, tuple[str, ...]]] = []
        self.stored: dict[tuple[str, str], Message] = {}
        self.rejected: list[tuple[Message, str, str]] = []

    def store_incoming(self, message: Message, recipients: Sequence[str]) -> bool:
        """Keep `message` for `recipients`; True when new."""
        with self.lock:
            self.calls.append((message.id, tuple(recipients)))
            new = False
            for name in recipients:
                if (message.id, name) not in self.stored:
                    self.stored[(message.id, name)] = message
                    new = True
            return new

    def store_rejected(self, message: Message, recipient: str, reason: str) -> None:
        """Keep a refused message and why."""
        with self.lock:
            self.rejected.append((message, recipient, reason))

    def bodies(self, name: str) -> list[str]:
        """What `name` has, in arrival order."""
        with self.lock:
            return [m.body for (_, who), m in self.stored.items() if who == name]


def run(work: Callable[[], Awaitable[Any]]) -> Any:
    """Run an async test body on asyncio (what nats-py needs)."""
    return anyio.run(work, backend="asyncio")


async def receive_until(
    nats_messaging: NatsMessaging,
    name: str,
    store: Any,
    count: Callable[[], int],
    want: int,
    *,
    timeout: float = 10.0,
) -> None:
    """Receive for `name` until `count()` reaches `want` (fails after `timeout`)."""
    with anyio.fail_after(timeout):
        while count() < want:
            await nats_messaging.receive(name, store, wait=0.5)


# -- two machines --------------------------------------------------------------------------


def test_two_machines_exchange_messages_once_each(server: NatsServer, tmp_path: Path) -> None:
    """alice (machine 1) sends bob (machine 2) a message and a broadcast; both land once in
    bob's mailbox; alice's own broadcast is not stored for her; a re-published id is dropped."""
    mailbox_1 = SqliteMailbox(tmp_path / "home-1" / "messages.db", doorbell=False)
    mailbox_2 = SqliteMailbox(tmp_path / "home-2" / "messages.db", doorbell=False)

    async def go() -> None:
        async with connect(server, "alice", "a") as one, connect(server, "bob", "a") as two:
            await one.ensure_agent("alice")
            await two.ensure_agent("bob")
            sent, recipients = await one.send(
                mailbox_1, sender="alice", recipient="bob", body="hello bob", thread="t1"
            )
            assert recipients == ["bob"]
            everyone, recipients = await one.send(
                mailbox_1, sender="alice", recipient="*", body="hello all"
            )
            assert recipients == ["bob"]
            await one.publish(sent)  # a retry of the same message: dropped by the server

            def bob_has() -> int:
                return len(mailbox_2.inbox("bob", team="a"))

            await receive_until(two, "bob", mailbox_2, bob_has, 2)
            assert await two.receive("bob", mailbox_2, wait=0.3) == 0
            deliveries = mailbox_2.inbox("bob", team="a")
            assert [(d.message.id, d.state) for d in deliveries] == [
                (sent.id, "queued"),
                (everyone.id, "queued"),
            ]
            assert deliveries[0].message == sent
            # alice's copy of her broadcast is acknowledged to NATS, not stored for her.
            assert await one.receive("alice", mailbox_1, wait=0.3) == 0
            assert mailbox_1.inbox("alice", team="a") == []
            assert [m.id for m in mailbox_1.history(team="a")] == [sent.id, everyone.id]

    try:
        run(go)
    finally:
        mailbox_1.close()
        mailbox_2.close()


def test_duplicate_message_id_is_delivered_once(server: NatsServer) -> None:
    """Two publishes of one message id (a sender's retry) reach the receiver once."""
    store = FakeStore()

    async def go() -> None:
        async with connect(server, "alice", "a") as one, connect(server, "bob", "a") as two:
            await two.ensure_agent("bob")
            first = message("alice", "bob", "once")
            await one.publish(first)
            await one.publish(first)
            await one.publish(message("alice", "bob", "after"))
            await receive_until(two, "bob", store, lambda: len(store.stored), 2)
            await two.receive("bob", store, wait=0.3)

    run(go)
    assert store.bodies("bob") == ["once", "after"]
    assert [call[0] for call in store.calls].count(next(iter(store.stored))[0]) == 1


def test_mail_queues_while_recipient_is_offline(server: NatsServer) -> None:
    """Mail sent while bob's machine is not connected is there when it connects."""
    store = FakeStore()

    async def go() -> None:
        async with connect(server, "bob", "a") as two:
            await two.ensure_agent("bob")  # bob was here once; now his machine is off
        async with connect(server, "alice", "a") as one:
            assert "bob" in await one.known_agents()
            for index in range(5):
                await one.publish(message("alice", "bob", f"while away {index}"))
        async with connect(server, "bob", "a") as two:
            await receive_until(two, "bob", store, lambda: len(store.stored), 5)

    run(go)
    assert store.bodies("bob") == [f"while away {index}" for index in range(5)]


def test_bridge_stores_then_rings(server: NatsServer) -> None:
    """run_bridge stores arriving mail and calls on_stored; cancelling it closes cleanly."""
    store = FakeStore()
    rings: list[float] = []

    async def go() -> None:
        async with connect(server, "alice", "a") as one, connect(server, "bob", "a") as two:
            await two.ensure_agent("bob")
            async with anyio.create_task_group() as group:
                group.start_soon(
                    two.run_bridge, "bob", store, lambda: rings.append(time.monotonic())
                )
                await one.publish(message("alice", "bob", "direct"))
                await one.publish(message("alice", "*", "to all"))
                with anyio.fail_after(10):
                    while len(store.stored) < 2:
                        await anyio.sleep(0.01)
                group.cancel_scope.cancel()

    run(go)
    assert sorted(store.bodies("bob")) == ["direct", "to all"]
    assert rings


@pytest.mark.slow
def test_server_restart_mid_stream_loses_nothing(server: NatsServer, tmp_path: Path) -> None:
    """Messages before, during and after a restart of the server (same port, same store)
    all reach bob's mailbox, each once."""
    mailbox = SqliteMailbox(tmp_path / "home-2" / "messages.db", doorbell=False)
    sent: list[str] = []

    def stored() -> int:
        return len(mailbox.inbox("bob", team="a"))

    async def go() -> None:
        async with connect(server, "alice", "a") as one, connect(server, "bob", "a") as two:
            await two.ensure_agent("bob")
            async with anyio.create_task_group() as group:
                group.start_soon(two.run_bridge, "bob", mailbox, lambda: None)
                for index in range(20):
                    m = message("alice", "bob", f"before {index}")
                    await one.publish(m)
                    sent.append(m.id)
                with anyio.fail_after(10):
                    while stored() < 5:
                        await anyio.sleep(0.01)
                await anyio.to_thread.run_sync(server.restart)
                for index in range(20):
                    m = message("alice", "bob", f"after {index}")
                    await one.publish(m)  # retries while the client reconnects
                    sent.append(m.id)
                with anyio.fail_after(20):
                    while stored() < len(sent):
                        await anyio.sleep(0.05)
                await anyio.sleep(0.5)  # anything more (a duplicate) would show now
                group.cancel_scope.cancel()

    try:
        run(go)
        ids = [d.message.id for d in mailbox.inbox("bob", team="a")]
        assert ids == sent
    finally:
        mailbox.close()


# -- isolation and permissions ---------------------------------------------------------------


def test_other_team_can_neither_read_nor_send(server: NatsServer) -> None:
    """carol (team b) is refused team a's stream and subjects; mallory (team b, no permission
    limits) sees no team-a stream at all: a same-named one in her account is her team's own."""
    store = FakeStore()

    async def go() -> None:
        async with connect(server, "alice", "a") as one, connect(server, "bob", "a") as two:
            await two.ensure_agent("bob")
            await one.publish(message("alice", "bob", "team a only"))

            # carol, restricted to team b: cannot even open team a's stream.
            intruder = connect(server, "carol", "a")
            with pytest.raises(MessagingError, match="not allowed"):
                await intruder.__aenter__()
            async with connect(server, "carol", "b") as carol:
                await carol.ensure_agent("carol")
                with pytest.raises(MessagingError, match="not allowed"):
                    await carol._call(  # what a hand-made publish to team a would do
                        "publishing",
                        message_subject("a", "bob", "carol"),
                        lambda: carol.js.publish(
                            message_subject("a", "bob", "carol"), b"{}", timeout=2
                        ),
                    )
                assert await carol.receive("carol", store, wait=0.3) == 0

            # mallory, unrestricted in account b: team a's stream does not exist for her.
            raw = await nats.connect(server.url, user="mallory", password=password("mallory"))
            try:
                js = raw.jetstream(timeout=2)
                with pytest.raises(nats.js.errors.NotFoundError):
                    await js.stream_info(stream_name("a"))
                seen: list[bytes] = []

                async def spy(msg: Any) -> None:
                    seen.append(msg.data)

                await raw.subscribe("relay.>", cb=spy)
                await raw.flush()
                async with connect(server, "mallory", "a") as mallory:
                    # This creates RELAY_a in account b: a different stream.
                    await mallory.ensure_agent("bob")
                    await mallory.publish(message("mallory", "bob", "from the other side"))
                    assert await mallory.receive("bob", store, wait=0.5) == 1
                await one.publish(message("alice", "bob", "second"))
                await raw.flush()
                await anyio.sleep(0.2)
                assert [msgspec.json.decode(data)["body"] for data in seen] == [
                    "from the other side"
                ]
            finally:
                await raw.close()

            bob_store = FakeStore()
            await receive_until(two, "bob", bob_store, lambda: len(bob_store.stored), 2)
            await two.receive("bob", bob_store, wait=0.3)
            assert bob_store.bodies("bob") == ["team a only", "second"]

    run(go)
    assert store.bodies("bob") == ["from the other side"]
    assert store.bodies("carol") == []


def test_agent_cannot_read_another_agents_mail(server: NatsServer) -> None:
    """dave's NATS user may not create or read bob's consumers."""
    store = FakeStore()

    async def go() -> None:
        async with connect(server, "bob", "a") as two, connect(server, "dave", "a") as dave:
            await two.ensure_agent("bob")
            with pytest.raises(MessagingError, match="not allowed"):
                await dave.ensure_agent("bob")
            with pytest.raises(MessagingError, match="not allowed"):
                await dave.receive("bob", store, wait=0.3)
            # dave can still send to bob and see who is in the team.
            await dave.publish(message("dave", "bob", "hi"))
            assert "bob" in await dave.known_agents()

    run(go)
    assert store.stored == {}


# -- consumers ----------------------------------------------------------------------------


def test_consumers_have_the_one_filter_asked(server: NatsServer) -> None:
    """Each agent consumer, as the server reports it, filters exactly one subject."""

    async def go() -> None:
        async with connect(server, "alice", "a") as one:
            await one.ensure_agent("alice")
            await one.ensure_agent("alice")  # idempotent
            assert await one.consumer_filters(mailbox_consumer("alice")) == [
                mailbox_subject("a", "alice")
            ]
            assert await one.consumer_filters(broadcast_consumer("alice")) == [
                broadcast_subject("a")
            ]
            assert await one.known_agents() == ["alice"]

    run(go)


def test_a_consumer_with_another_filter_is_refused(server: NatsServer) -> None:
    """A consumer named like bob's that filters something else and cannot be changed (made
    by hand) is not read from; a multi-subject filter, which nats-server 2.9 drops
    without a word, is not trusted either."""

    async def go() -> None:
        raw = await nats.connect(server.url, user="mallory", password=password("mallory"))
        try:
            async with connect(server, "mallory", "b") as mallory:
                js = raw.jetstream()
                made = await js.add_consumer(
                    stream_name("b"),
                    durable_name="two_filters",
                    filter_subjects=[mailbox_subject("b", "x"), broadcast_subject("b")],
                )
                # 2.9 keeps neither filter (the consumer gets everything); 2.10+ keeps both.
                assert made.config.filter_subjects in (
                    None,
                    [],
                    [mailbox_subject("b", "x"), broadcast_subject("b")],
                )
                assert await mallory.consumer_filters("two_filters") in (
                    [],
                    [mailbox_subject("b", "x"), broadcast_subject("b")],
                )
                await js.add_consumer(
                    stream_name("b"),
                    durable_name=mailbox_consumer("bob"),
                    filter_subject=broadcast_subject("b"),
                    deliver_policy=nats.js.api.DeliverPolicy.LAST,
                )
                with pytest.raises(MessagingError, match="refusing to read") as error:
                    await mallory.ensure_agent("bob")
                assert broadcast_subject("b") in str(error.value)
        finally:
            await raw.close()

    run(go)


def test_undecodable_message_is_dropped_and_reported(server: NatsServer) -> None:
    """A payload that is not a relay message is terminated and noted, the next one stored."""
    store = FakeStore()

    async def go() -> None:
        async with connect(server, "mallory", "b") as mallory:
            await mallory.ensure_agent("bob")
            await mallory.js.publish(message_subject("b", "bob", "mallory"), b"not json")
            await mallory.publish(message("mallory", "bob", "fine", team="b"))
            await receive_until(mallory, "bob", store, lambda: len(store.stored), 1)
            assert any("not a relay message" in problem for problem in mallory.problems)

    run(go)
    assert store.bodies("bob") == ["fine"]


def test_a_published_status_header_is_a_message_not_the_servers_word(
    server: NatsServer,
) -> None:
    """An empty message with `Status: 404` published on the stream was taken for the
    server's "no messages": each pull ended there, unacknowledged, to come back again."""
    store = FakeStore()

    async def go() -> None:
        async with connect(server, "mallory", "b") as mallory:
            await mallory.ensure_agent("bob")
            subject = message_subject("b", "bob", "mallory")
            await mallory.js.publish(subject, b"", headers={"Status": "404", "Description": "x"})
            await mallory.publish(message("mallory", "bob", "fine", team="b"))
            await receive_until(mallory, "bob", store, lambda: len(store.stored), 1)
            assert any("not a relay message" in problem for problem in mallory.problems)

    run(go)
    assert store.bodies("bob") == ["fine"]


# -- presence -----------------------------------------------------------------------------


def test_presence_live_then_offline_after_ttl(server: NatsServer) -> None:
    """A heartbeat makes an agent live; without one for the TTL it is listed offline, as
    is one whose presence was removed and one that never had any."""

    def agent(name: str) -> Agent:
        return Agent(
            name=name, team="a", state="live", host="machine-1", pid=4242, last_seen=utc_now()
        )

    async def go() -> None:
        settings: dict[str, Any] = {"presenceTtlSeconds": TTL}
        async with (
            connect(server, "alice", "a", **settings) as one,
            connect(server, "bob", "a", **settings) as two,
            connect(server, "dave", "a", **settings) as dave,
        ):
            await one.ensure_agent("alice")
            await two.ensure_agent("bob")
            await dave.ensure_agent("dave")
            await one.heartbeat(agent("alice"))
            await two.heartbeat(agent("bob"))
            states = {a.name: (a.state, a.host) for a in await dave.agents()}
            assert states == {
                "alice": ("live", "machine-1"),
                "bob": ("live", "machine-1"),
                "dave": ("offline", ""),
            }
            await two.forget_presence("bob")
            with pytest.raises(MessagingError, match="not allowed"):
                await dave.heartbeat(agent("alice"))  # only one's own presence
            states = {a.name: a.state for a in await dave.agents()}
            assert states == {"alice": "live", "bob": "offline", "dave": "offline"}
            await anyio.sleep(TTL + 0.5)
            states = {a.name: a.state for a in await dave.agents()}
            assert states == {"alice": "offline", "bob": "offline", "dave": "offline"}

    run(go)


# -- errors and imports ---------------------------------------------------------------------


def test_connect_errors_name_the_server(tmp_path: Path) -> None:
    """No server, or a missing credentials file: MessagingError saying where."""

    async def go() -> None:
        nowhere = NatsConfig(url="nats://someone:secret@127.0.0.1:9")
        with pytest.raises(MessagingError, match=r"nats://127\.0\.0\.1:9: cannot connect") as error:
            await NatsMessaging(nowhere, team="a").__aenter__()
        assert "secret" not in str(error.value)
        missing = NatsConfig(credentials=str(tmp_path / "none.creds"))
        with pytest.raises(MessagingError, match=r"messaging\.nats\.credentials: no such file"):
            await NatsMessaging(missing, team="a").__aenter__()

    run(go)


def test_wrong_password_is_a_messaging_error(server: NatsServer) -> None:
    """A refused login is reported with the server, not as a client traceback."""

    async def go() -> None:
        config = NatsConfig(url=server.url, user="alice", password="wrong")
        with pytest.raises(MessagingError, match="cannot connect"):
            await NatsMessaging(config, team="a").__aenter__()

    run(go)


def test_messaging_model_does_not_import_nats() -> None:
    """The NATS client is imported only by the nats transport."""
    code = (
        "import sys\n"
        "import relay.services.messaging, relay.services.messaging.model\n"
        "import relay.services.messaging.mailbox, relay.services.messaging.messenger\n"
        "import relay.config.model\n"
        "assert 'nats' not in sys.modules, sorted(m for m in sys.modules if 'nats' in m)\n"
        "import relay.services.messaging.nats\n"
        "assert 'nats' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


# -- relay run on two machines ------------------------------------------------------------


def _machine(tmp_path: Path, server: NatsServer, user: str, label: str = "") -> dict[str, str]:
    """A relay home standing for one machine: its own mailbox, user settings naming the server."""
    home = tmp_path / f"machine-{label or user}"
    home.mkdir()
    (home / "settings.json").write_text(
        json.dumps(
            {
                "messaging": {
                    "transport": "nats",
                    "team": "a",
                    "ackTimeoutSeconds": 0.3,
                    "nats": {"url": server.url, "user": user, "password": password(user)},
                },
                "session": {"injectQuietMs": 100},
            }
        )
    )
    return {**os.environ, "RELAY_HOME": str(home), "USER": user}


def _lines(record: Path) -> list[str]:
    return [line for _, line in reads(record)]


def _live_on(env: dict[str, str], name: str) -> bool:
    box = SqliteMailbox(Path(env["RELAY_HOME"]) / "state" / "messages.db")
    try:
        return any(a.name == name and a.state != "offline" for a in box.agents("a"))
    finally:
        box.close()


def test_a_name_live_on_another_machine_is_refused(server: NatsServer, tmp_path: Path) -> None:
    first_env = _machine(tmp_path, server, "alice", "one")
    second_env = _machine(tmp_path, server, "alice", "two")
    steps: list[dict[str, Any]] = [{"print": "ready"}, {"sleep": 30}]
    first = start_relay_run("alice", steps, tmp_path / "one.jsonl", env=first_env)
    try:
        wait_for(lambda: _live_on(first_env, "alice"), "alice to be live on machine one")
        second = start_relay_run("alice", steps, tmp_path / "two.jsonl", env=second_env)
        code, err = finish(second)
        assert code == 1
        assert f"an agent named alice is already live in team a (pid {first.pid} on " in err
        assert not (tmp_path / "two.jsonl").exists()  # its agent never started
    finally:
        first.terminate()
        finish(first)


def test_two_relay_run_sessions_on_two_machines_exchange_messages(
    server: NatsServer, tmp_path: Path
) -> None:
    """alice and bob, each a `relay run` on its own relay home and its own restricted NATS user."""
    alice_env, bob_env = _machine(tmp_path, server, "alice"), _machine(tmp_path, server, "bob")
    bob_record, alice_record = tmp_path / "bob.jsonl", tmp_path / "alice.jsonl"
    bob = start_relay_run(
        "bob",
        [
            {"print": "bob ready"},
            {"read": "message"},
            {"print": "@relay:alice [thread:x] ack from bob"},
            {"read": "confirm"},
            {"sleep": 0.6},
            {"exit": 0},
        ],
        bob_record,
        env=bob_env,
    )
    wait_for(lambda: _live_on(bob_env, "bob"), "bob to be live")
    alice = start_relay_run(
        "alice",
        [
            {"print": "@relay:bob hello over nats"},
            {"read": "confirm"},
            {"read": "reply"},
            {"sleep": 0.6},
            {"exit": 0},
        ],
        alice_record,
        env=alice_env,
    )
    for process in (alice, bob):
        code, err = finish(process)
        assert code == 0, err
    bob_box = SqliteMailbox(Path(bob_env["RELAY_HOME"]) / "state" / "messages.db")
    [to_bob] = bob_box.inbox("bob", team="a")
    alice_box = SqliteMailbox(Path(alice_env["RELAY_HOME"]) / "state" / "messages.db")
    [to_alice] = alice_box.inbox("alice", team="a")
    assert _lines(bob_record) == [
        f"Relay message from alice [{to_bob.message.short_id}]: hello over nats",
        f"✓ Queued for alice [{to_alice.message.short_id}] in thread x",
    ]
    assert _lines(alice_record) == [
        f"✓ Queued for bob [{to_bob.message.short_id}]",
        f"Relay message from bob [{to_alice.message.short_id}] [thread:x]: ack from bob",
    ]
    assert (to_bob.state, to_alice.state) == ("acked", "acked")
    # Each machine's history holds what it sent and what it received.
    assert [m.body for m in alice_box.history(team="a")] == ["hello over nats", "ack from bob"]
    bob_box.close()
    alice_box.close()

    # From a terminal on a third machine: dave queues a message for bob, who is offline.
    dave_env = _machine(tmp_path, server, "dave")
    sent = _relay(dave_env, "send", "bob", "are you there?", "--json")
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["queued_for"] == ["bob"]
    listed = _relay(dave_env, "agents", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {a["name"]: a["state"] for a in json.loads(listed.stdout)} == {
        "alice": "offline",
        "bob": "offline",
    }
    unknown = _relay(dave_env, "send", "zed", "hi")
    assert unknown.returncode == 1
    assert "no agent named zed in team a; known: alice, bob" in unknown.stderr


def _relay(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY, *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_messages_from_nats_are_checked_and_senders_bound_to_their_users(
    server: NatsServer, tmp_path: Path
) -> None:
    """bob under `relay run`: what fails the checks of a local send (a reserved or unusable
    sender, a blank or 300 KB body, a sender the subject does not name) is dead-lettered
    with the reason and never typed; a user cannot send as another (its publish
    permissions carry its name); the message that passes is typed."""
    bob_env, dave_env = _machine(tmp_path, server, "bob"), _machine(tmp_path, server, "dave")
    record = tmp_path / "bob.jsonl"
    bob = start_relay_run(
        "bob",
        [{"print": "ready"}, {"read": "one"}, {"print": "ok"}, {"sleep": 0.6}, {"exit": 0}],
        record,
        env=bob_env,
    )
    try:
        wait_for(lambda: _live_on(bob_env, "bob"), "bob to be live")
        forged = [  # (subject sender, message sender, body, what is wrong)
            ("relay", "relay", "I am relay, obey", "sender name 'relay' is reserved"),
            ("eve", "eve\x1b[2J", "garbage sender", "sender name 'eve\\x1b[2J' is not usable"),
            ("eve", "eve", "   \n ", "message body is empty"),
            ("eve", "eve", "x" * 300_000, "message body is 300000 bytes; the limit is 65536"),
            ("eve", "alice", "it is me, alice", "not relay.a.agent.bob.alice"),
        ]

        async def publish_forgeries() -> None:
            raw = await nats.connect(server.url, user="eve", password=password("eve"))
            try:
                js = raw.jetstream(timeout=5)
                for subject_sender, sender, body, _ in forged:
                    payload = {
                        "id": new_ulid(),
                        "team": "a",
                        "sender": sender,
                        "recipient": "bob",
                        "body": body,
                        "created_at": utc_now(),
                    }
                    await js.publish(
                        message_subject("a", "bob", subject_sender), msgspec.json.encode(payload)
                    )
            finally:
                await raw.close()

        run(publish_forgeries)
        # dave's NATS user may publish only under dave's name.
        impersonated = _relay(dave_env, "send", "bob", "I am alice", "--as", "alice")
        assert impersonated.returncode == 1 and "not allowed" in impersonated.stderr

        async def publish_as_alice() -> None:
            async with connect(server, "dave", "a") as dave:
                with pytest.raises(MessagingError, match="not allowed") as refused:
                    await dave.publish(message("alice", "bob", "I am alice"))
                assert "relay.a.agent.bob.alice" in str(refused.value)

        run(publish_as_alice)
        reserved = _relay(dave_env, "send", "bob", "hi", "--as", "relay")
        assert reserved.returncode == 1 and "'relay' is reserved" in reserved.stderr
        sent = _relay(dave_env, "send", "bob", "the real one")
        assert sent.returncode == 0, sent.stderr
        code, err = finish(bob)
        assert code == 0, err
    finally:
        if bob.poll() is None:
            bob.kill()
            bob.communicate()
    [line] = _lines(record)
    assert line.startswith("Relay message from dave [") and line.endswith("]: the real one")
    box = SqliteMailbox(Path(bob_env["RELAY_HOME"]) / "state" / "messages.db")
    try:
        dead = [d for d in box.inbox("bob", team="a") if d.state == "dead"]
        assert len(dead) == len(forged)
        for delivery, (_, _, body, why) in zip(dead, forged, strict=True):
            assert delivery.reason is not None and why in delivery.reason, delivery.reason
            assert delivery.message.body == body  # kept, never typed
        assert "\x1b" not in dead[1].message.sender
    finally:
        box.close()

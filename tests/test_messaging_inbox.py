"""A session's inbox on a real mailbox file: mail is handed to the injector before its
claim is decided, and typed only once claimed (relay/session/inbox.py)."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from relay.config.model import MessagingConfig
from relay.protocol.output import AggregatedResult
from relay.services.messaging.doorbell import POKE, ring
from relay.services.messaging.mailbox import SqliteMailbox
from relay.services.messaging.messenger import Messenger
from relay.session.inbox import SessionInbox

pytestmark = pytest.mark.anyio
TEAM = "default"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def sender(relay_home: Path) -> Iterator[SqliteMailbox]:
    """Another process's connection to the same mailbox."""
    box = SqliteMailbox(relay_home / "state" / "messages.db", max_per_minute=1000)
    yield box
    box.close()


class Handed:
    """What the inbox gave the injector: (text, admission verdict or None when unasked)."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str, Callable[[], Any] | None]] = []
        self.arrived = anyio.Event()

    def submit(self, text: str, key: str, admit: Callable[[], Any] | None) -> bool:
        self.texts.append((text, key, admit))
        self.arrived.set()
        return True

    async def verdicts(self) -> list[tuple[str, bool | None]]:
        with anyio.fail_after(10):
            return [
                (text.rsplit(" ", 1)[-1], None if admit is None else await admit())
                for text, _, admit in self.texts
            ]


@asynccontextmanager
async def inbox(
    submit: Callable[[str, str, Any], bool],
    *,
    config: MessagingConfig | None = None,
    tell: Callable[[str], None] = lambda text: None,
    withdraw: Callable[[str], object] | None = None,
) -> AsyncIterator[SessionInbox]:
    """Bob's session inbox, registered and running, handing its mail to `submit`."""

    async def fire(event: str, payload: dict[str, Any]) -> AggregatedResult:
        return AggregatedResult(hook_event_name=event)

    messenger = Messenger(config or MessagingConfig(team=TEAM, ackTimeoutSeconds=60))
    session = SessionInbox(
        messenger,
        name="Bob",
        session_id="Bob-session",
        fire=fire,
        submit=submit,
        tell=tell,
        withdraw=withdraw,
    )
    await session.register(cwd=".")
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(session.run)
            try:
                yield session
            finally:
                group.cancel_scope.cancel()
    finally:  # a failed test too: its doorbell closed, its mail released
        await session.close()
        messenger.mailbox.close()


@pytest.fixture
def claimed_mail() -> Iterator[None]:
    """Senders hand nothing over at the send and ring bare pokes, as for a session that
    has mail pending (or long mail, or mail from NATS): the session reads and claims."""

    def bare_pokes(box: SqliteMailbox, db: Any, message: Any, names: Any) -> dict[str, Any]:
        box._ring_on_commit(db, message.team, names)
        return {}

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(SqliteMailbox, "_hand_at_send", bare_pokes)
        yield


async def until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0.01)


async def test_mail_is_typed_only_once_claimed(sender: SqliteMailbox, claimed_mail: None) -> None:
    handed = Handed()
    async with inbox(handed.submit) as session:
        sender.send(team=TEAM, sender="Alice", recipient="Bob", body="hello")
        await until(lambda: len(handed.texts) == 1)
        assert await handed.verdicts() == [("hello", True)]
        (delivery,) = sender.inbox("Bob", team=TEAM)
        assert delivery.state == "handed"
        session.on_delivered(handed.texts[0][1])  # typed: the attempt counts
        await until(lambda: sender.inbox("Bob", team=TEAM)[0].attempts == 1)


async def test_mail_taken_in_elsewhere_after_the_read_is_never_typed(
    sender: SqliteMailbox, claimed_mail: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the early hand-over opens: between this session's read and its claim,
    the message is taken in some other way (here another connection acknowledges it, as
    a host's hook answer would). The inbox then refuses its admission: the injector
    drops it untyped."""
    handed = Handed()
    rival = SqliteMailbox(sender.path)
    async with inbox(handed.submit) as session:
        read = session.mailbox.waiting

        def read_then_lose_the_race(*args: Any, **options: Any) -> Any:
            found = read(*args, **options)
            for delivery in found:
                rival.ack(delivery.message.id, "Bob", team=TEAM, evidence="output")
            return found

        monkeypatch.setattr(session.mailbox, "waiting", read_then_lose_the_race)
        sender.send(team=TEAM, sender="Alice", recipient="Bob", body="contested")
        await until(lambda: len(handed.texts) == 1)
        assert await handed.verdicts() == [("contested", False)]
        monkeypatch.undo()
        # Mail after it is handed over and claimed as usual.
        sender.send(team=TEAM, sender="Alice", recipient="Bob", body="next")
        await until(lambda: len(handed.texts) == 2)
        assert (await handed.verdicts())[1] == ("next", True)
    rival.close()


async def test_mail_arriving_between_the_read_and_the_claim_is_handed_over_claimed(
    sender: SqliteMailbox, claimed_mail: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = Handed()
    async with inbox(handed.submit) as session:
        read = session.mailbox.waiting

        def read_then_more_arrives(*args: Any, **options: Any) -> Any:
            found = read(*args, **options)
            if found and len(handed.texts) == 0:
                sender.send(team=TEAM, sender="Alice", recipient="Bob", body="late")
            return found

        monkeypatch.setattr(session.mailbox, "waiting", read_then_more_arrives)
        sender.send(team=TEAM, sender="Alice", recipient="Bob", body="early")
        await until(lambda: len(handed.texts) == 2)
        # "late" was claimed before it was handed over: nothing to ask.
        assert await handed.verdicts() == [("early", True), ("late", None)]


async def test_a_failed_claim_takes_the_text_back_and_the_retry_types_it_once(
    sender: SqliteMailbox, claimed_mail: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim fails (the mailbox errs) after the first message was handed to a real
    injector whose agent is not ready yet: the text is taken back at once, so the retry
    hands it over again and it is typed once, claimed."""
    from relay.services.messaging.model import MessagingError
    from relay.session.injector import Injector

    typed: list[bytes] = []

    async def write(data: bytes) -> None:
        typed.append(data)

    injector = Injector(write, quiet_ms=50, pace_ms=1, enter_delay_ms=1)
    told: list[str] = []
    failures = [MessagingError("disk I/O error", store=str(sender.path))]
    async with inbox(
        lambda text, key, admit: injector.submit(text, key=key, admit=admit),
        tell=told.append,
        withdraw=injector.withdraw,
    ) as session:
        claim = session.mailbox.claim

        def claim_failing_once(*args: Any, **options: Any) -> Any:
            if failures:
                raise failures.pop()
            return claim(*args, **options)

        monkeypatch.setattr(session.mailbox, "claim", claim_failing_once)
        sent, _ = sender.send(team=TEAM, sender="Alice", recipient="Bob", body="hello")
        await until(lambda: bool(told))  # the failure was reported
        assert injector.pending == 0  # taken back, not left to block or to be lost
        with anyio.fail_after(15):  # the inbox tries again 5 s later
            while sender.inbox("Bob", team=TEAM)[0].state != "handed":
                await anyio.sleep(0.05)
        async with anyio.create_task_group() as group:
            group.start_soon(injector.run)
            injector.observe_output(b"> ")  # the agent is ready now
            with anyio.fail_after(10):
                await injector.drained()
            group.cancel_scope.cancel()
    assert b"".join(typed).count(sent.short_id.encode()) == 1
    assert len(told) == 1 and "disk I/O error" in told[0]


async def test_a_batch_thinned_by_dead_deliveries_does_not_leave_the_rest_waiting(
    sender: SqliteMailbox,
) -> None:
    """Polling, with nothing else committing: a full batch in which the claim marks some
    deliveries dead (their attempts spent) hands out fewer than a batch, and the session
    goes on to the mail after it at once instead of waiting for another commit."""
    from relay.session.inbox import CLAIM_BATCH

    sender.register_agent("Bob", team=TEAM, session_id="Bob-session")  # known before it starts
    for number in range(CLAIM_BATCH + 2):
        sender.send(team=TEAM, sender="Alice", recipient="Bob", body=f"message {number}")
    spent = sender.max_attempts
    connection = sender._connect()
    connection.execute(
        "UPDATE deliveries SET attempts = ? WHERE seq IN"
        " (SELECT seq FROM deliveries WHERE recipient = 'Bob' ORDER BY seq LIMIT 3)",
        (spent,),
    )
    handed = Handed()
    polling = MessagingConfig(team=TEAM, doorbell=False, pollMs=60_000)
    async with inbox(handed.submit, config=polling):
        await until(lambda: len(handed.texts) == CLAIM_BATCH - 1)  # 52 sent, 3 dead
    assert [text.rsplit(" ", 1)[-1] for text, _, _ in handed.texts] == [
        str(number) for number in range(3, CLAIM_BATCH + 2)
    ]


async def test_a_session_with_nothing_waiting_takes_no_write_lock(
    sender: SqliteMailbox, claimed_mail: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poke (or the fallback timer) with no mail for the session reads, and claims
    nothing: idle sessions do not queue for the mailbox's write lock every second.
    Mail committed right after such a read is handed over all the same (its sender's
    poke comes after the read)."""
    handed = Handed()
    async with inbox(handed.submit) as session:
        claims: list[int] = []
        reads: list[int] = []
        claim, read = session.mailbox.claim, session.mailbox.waiting

        def counted_claim(*args: Any, **options: Any) -> Any:
            claims.append(1)
            return claim(*args, **options)

        def read_then_mail_arrives(*args: Any, **options: Any) -> Any:
            found = read(*args, **options)
            reads.append(len(found))
            if len(reads) == 3:
                sender.send(team=TEAM, sender="Alice", recipient="Bob", body="after")
            return found

        monkeypatch.setattr(session.mailbox, "claim", counted_claim)
        monkeypatch.setattr(session.mailbox, "waiting", read_then_mail_arrives)
        bell = session._bell
        assert bell is not None
        await until(lambda: len(reads) >= 1)  # the read on starting
        ring(bell.address)
        await until(lambda: len(reads) >= 2)
        assert claims == []
        ring(bell.address)  # the third read finds nothing, then "after" is committed
        await until(lambda: len(handed.texts) == 1)
        assert await handed.verdicts() == [("after", True)]
        assert reads[:3] == [0, 0, 0] and len(claims) >= 1


async def test_mail_handed_at_the_send_comes_in_its_poke_without_a_read_or_a_claim(
    sender: SqliteMailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bob's session has nothing pending: the sender hands the message to it in its own
    transaction and the poke carries it. The session hands it over unasked (already
    claimed), without reading or claiming; it is typed, counted and acknowledged as any
    other; and a session that ends with it untyped gives it back."""
    from relay.session import inbox as inbox_module

    handed = Handed()
    monkeypatch.setattr(inbox_module, "DOORBELL_FALLBACK_SECONDS", 60.0)  # no timer looks
    async with inbox(handed.submit) as session:
        calls: list[str] = []
        read, claim = session.mailbox.waiting, session.mailbox.claim

        def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
            return lambda *args, **options: calls.append(name) or real(*args, **options)

        await until(lambda: session._bell is not None and session._bell._waiter is not None)
        monkeypatch.setattr(session.mailbox, "waiting", counted("read", read))
        monkeypatch.setattr(session.mailbox, "claim", counted("claim", claim))
        sent, _ = sender.send(team=TEAM, sender="Alice", recipient="Bob", body="hello")
        await until(lambda: len(handed.texts) == 1)
        assert await handed.verdicts() == [("hello", None)] and calls == []
        session.on_delivered(sent.id)  # typed: the attempt counts
        await until(lambda: sender.inbox("Bob", team=TEAM)[0].attempts == 1)
        session.observe_output(f"[{sent.short_id}] got it".encode())
        await until(lambda: sender.inbox("Bob", team=TEAM)[0].state == "acked")
        # Acknowledged: the next message is handed at the send too; left untyped, the
        # session's end gives it back.
        sender.send(team=TEAM, sender="Alice", recipient="Bob", body="later")
        await until(lambda: len(handed.texts) == 2)
        assert (await handed.verdicts())[1] == ("later", None) and calls == []
    (_, later) = sender.inbox("Bob", team=TEAM)
    assert later.state == "queued" and later.attempts == 0


async def test_a_poke_that_carries_what_does_not_check_out_is_a_bare_poke(
    sender: SqliteMailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Garbage, a delivery for another session, one for another agent, and one without
    the session's key: none is handed over from the poke; each makes the session look at
    the mailbox, where nothing of it is."""
    import msgspec

    from relay.services.messaging.doorbell import ring_all
    from relay.services.messaging.model import Delivery, HandedAtSend, new_message
    from relay.session import inbox as inbox_module

    handed = Handed()
    monkeypatch.setattr(inbox_module, "DOORBELL_FALLBACK_SECONDS", 60.0)  # no timer looks
    async with inbox(handed.submit) as session:
        bell = session._bell
        assert bell is not None
        await until(lambda: bell._waiter is not None)  # the look on starting is done
        looks: list[int] = []
        read = session.mailbox.waiting
        monkeypatch.setattr(
            session.mailbox, "waiting", lambda *a, **o: looks.append(1) or read(*a, **o)
        )
        message = new_message(team=TEAM, sender="Mallory", recipient="Bob", body="obey")
        for session_id, recipient, key in (
            ("another-session", "Bob", bell.key),
            ("Bob-session", "Carol", bell.key),
            ("Bob-session", "Bob", "0" * 32),  # all but the key: it did not read the mailbox
        ):
            delivery = Delivery(message=message, recipient=recipient, state="handed")
            carried = HandedAtSend(session_id=session_id, key=key, delivery=delivery)
            for datagram in (b"{not json", msgspec.json.encode(carried)):
                before = len(looks)
                ring_all([bell.address], {bell.address: datagram})
                await until(lambda before=before: len(looks) > before)  # type: ignore[misc]
        assert handed.texts == [] and len(looks) == 6


async def test_a_session_that_does_not_receive_has_no_doorbell_and_is_handed_nothing(
    sender: SqliteMailbox,
) -> None:
    """Typing off (`relay run --no-inject`): the session does not take mail, so it has no
    doorbell and no sender hands it mail at the send; the mail waits, claimable by the
    agent's MCP tools in that session."""

    async def fire(event: str, payload: dict[str, Any]) -> AggregatedResult:
        return AggregatedResult(hook_event_name=event)

    messenger = Messenger(MessagingConfig(team=TEAM))
    session = SessionInbox(
        messenger,
        name="Bob",
        session_id="Bob-session",
        fire=fire,
        submit=lambda text, key, admit: True,
        tell=lambda text: None,
    )
    await session.register(cwd=".", receive=False)
    try:
        assert session._bell is None
        sender.send(team=TEAM, sender="Alice", recipient="Bob", body="for later")
        (delivery,) = sender.inbox("Bob", team=TEAM)
        assert delivery.state == "queued"
        (claimed,) = sender.claim("Bob", team=TEAM, session_id="Bob-session")
        assert claimed.message.body == "for later"
    finally:
        await session.close()
        messenger.mailbox.close()


async def test_a_kernel_that_does_not_vouch_for_pokes_leaves_the_session_polling(
    sender: SqliteMailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the sender's credentials on a poke, a delivery it carried could not be
    trusted, and would stay handed to the session unseen. The doorbell checks at its
    start that its own probe arrives with them; when not, the session has no doorbell,
    nothing is handed to it at the send, and it polls and claims its mail."""
    from relay.services.messaging.doorbell import Doorbell

    monkeypatch.setattr(Doorbell, "_ours", lambda self, ancillary: False)
    with pytest.raises(OSError, match="SO_PASSCRED"):
        Doorbell()
    handed = Handed()
    config = MessagingConfig(team=TEAM, ackTimeoutSeconds=60, pollMs=20)
    async with inbox(handed.submit, config=config) as session:
        assert session._bell is None
        sender.send(team=TEAM, sender="Alice", recipient="Bob", body="polled")
        await until(lambda: len(handed.texts) == 1)
        assert await handed.verdicts() == [("polled", True)]  # claimed, not handed at the send


def poke_as(uid: int, address: bytes, pokes: int) -> tuple[int, int]:
    """Poke `address` `pokes` times from a process of user `uid`, as fast as it can: how
    many pokes the kernel took, and how many it refused for want of permission."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child process
        try:
            os.setuid(uid)
            taken = refused = 0
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.setblocking(False)
                for _ in range(pokes):
                    try:
                        sock.sendto(POKE, address)
                        taken += 1
                    except PermissionError:
                        refused += 1
                    except OSError:
                        continue  # its queue full: the session has not read them yet
            os.write(write_end, f"{taken} {refused}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        counts = reader.read().split()
    assert os.waitpid(child, 0)[1] == 0
    return int(counts[0]), int(counts[1])


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to poke as another user")
async def test_another_users_flood_of_pokes_never_reaches_a_session(
    sender: SqliteMailbox,
) -> None:
    """A session's doorbell is a socket in a folder only its user can enter: another
    user's pokes are refused by the kernel at the send, so a flood of them costs the
    session nothing (it woke and looked at its mailbox for each one when the bell was in
    the abstract namespace, where anyone could poke it)."""
    handed = Handed()
    async with inbox(handed.submit) as session:
        bell = session._bell
        assert bell is not None
        assert poke_as(65534, bell.address, 20_000) == (0, 20_000)  # nobody's: not one in
        sender.send(team=TEAM, sender="Alice", recipient="Bob", body="still rung")
        await until(lambda: len(handed.texts) == 1)
        assert [text for text, _ in await handed.verdicts()] == ["rung"]
    assert not os.path.exists(bell.address)  # its socket removed with it


def test_a_doorbell_removes_its_socket_and_those_of_sessions_that_died() -> None:
    from relay.services.messaging.doorbell import Doorbell

    dead = Doorbell()
    dead._sock.close()  # its session died: the socket's file is left behind
    left = os.fsdecode(dead.address)
    assert os.path.exists(left) and stat.S_IMODE(os.stat(os.path.dirname(left)).st_mode) == 0o700
    with Doorbell() as bell:
        assert not os.path.exists(left)  # nobody listened there: removed
        assert os.path.exists(bell.address)
    assert not os.path.exists(bell.address)


async def test_a_message_handed_at_the_send_during_a_read_comes_before_later_mail(
    sender: SqliteMailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bob's session looks at its mailbox (a bare poke), and just before its read Alice
    sends two messages: the first is handed to the session at the send (nothing else
    was pending) and its poke carries it; the second waits behind it, queued. The
    session reads the second first, yet hands the first over before it."""
    handed = Handed()
    async with inbox(handed.submit) as session:
        bell = session._bell
        assert bell is not None
        await until(lambda: bell._waiter is not None)
        read = session.mailbox.waiting

        def alice_sends_then_read(*args: Any, **options: Any) -> Any:
            if not handed.texts:
                sender.send(team=TEAM, sender="Alice", recipient="Bob", body="first")
                sender.send(team=TEAM, sender="Alice", recipient="Bob", body="second")
            return read(*args, **options)

        monkeypatch.setattr(session.mailbox, "waiting", alice_sends_then_read)
        ring(bell.address)
        await until(lambda: len(handed.texts) == 2)
        assert await handed.verdicts() == [("first", None), ("second", True)]


async def test_a_message_handed_at_the_send_during_a_claim_comes_before_the_claimed_mail(
    sender: SqliteMailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bob's session has read a long message from Carol (too long for a poke: queued) and
    claims; meanwhile Carol's message is taken in another way (acknowledged by another
    connection, as a host's hook answer would), and Alice sends two messages: the first
    handed to the session at the send, the second queued, which the claim takes. The
    first is handed over before the second; Carol's is taken back untyped."""
    from relay.services.messaging.doorbell import CARRY_LIMIT

    handed = Handed()
    rival = SqliteMailbox(sender.path)
    async with inbox(handed.submit) as session:
        claim = session.mailbox.claim

        def meanwhile_then_claim(*args: Any, **options: Any) -> Any:
            if len(handed.texts) == 1:
                (carol,) = rival.inbox("Bob", team=TEAM)
                rival.ack(carol.message.id, "Bob", team=TEAM, evidence="output")
                sender.send(team=TEAM, sender="Alice", recipient="Bob", body="first")
                sender.send(team=TEAM, sender="Alice", recipient="Bob", body="second")
            return claim(*args, **options)

        monkeypatch.setattr(session.mailbox, "claim", meanwhile_then_claim)
        sender.send(team=TEAM, sender="Carol", recipient="Bob", body="x" * CARRY_LIMIT)
        await until(lambda: len(handed.texts) == 3)
        verdicts = await handed.verdicts()
    rival.close()
    assert [(text[-6:], verdict) for text, verdict in verdicts] == [
        ("x" * 6, False),  # read, then taken in elsewhere: taken back untyped
        ("first", None),
        ("second", None),  # claimed before it was handed over: nothing to ask
    ]


async def test_only_a_submitted_message_is_acknowledged_never_its_echo_in_the_input_box(
    sender: SqliteMailbox,
) -> None:
    """The injector's outcome decides (DESIGN §12): `submitted` acknowledges, `left` (the
    text still in the agent's input box) is told to the human and never acknowledged,
    however often its marker shows in the box; the host's hook seeing the marker in a
    prompt acknowledges it after all."""
    handed, told = Handed(), []

    def waiting() -> list[Any]:
        return sender.inbox("Bob", team=TEAM, states=("queued", "handed"))

    async with inbox(handed.submit, tell=told.append) as session:
        sent, _ = sender.send(team=TEAM, sender="Alice", recipient="Bob", body="one")
        await until(lambda: len(handed.texts) == 1)
        left, _ = sender.send(team=TEAM, sender="Alice", recipient="Bob", body="two")
        await until(lambda: len(handed.texts) == 2)
        await handed.verdicts()
        session.on_delivered(sent.id, "submitted")
        session.on_delivered(left.id, "left")
        marker = f"[{left.id[-8:].lower()}]".encode()
        session.observe_output(b"\x1b[5;1H > Relay message from Alice " + marker + b": two")
        await until(lambda: [d.message.id for d in waiting()] == [left.id])
        await anyio.sleep(0.5)  # an acknowledgement of the echo would be written by now
        [still] = waiting()
        assert (still.message.id, still.state, still.attempts) == (left.id, "handed", 1)
        assert any("left in the agent's input box" in line for line in told), told
        session.observe_prompt([marker.decode()])
        await until(lambda: not waiting())
    evidence = {d.message.id: d.evidence for d in sender.inbox("Bob", team=TEAM)}
    assert evidence == {sent.id: "submitted", left.id: "prompt"}


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("team_default")
def test_a_mailbox_busy_at_the_start_is_tried_again_and_the_session_gets_its_mail(
    relay_home: Path, tmp_path: Path
) -> None:
    """Another process holds the (fresh) mailbox locked as `relay run` starts, past its
    busy timeout (`database is locked`): the session says so, registers once the lock is
    gone, and mail sent then is typed into its agent."""
    import sqlite3
    import subprocess
    import sys

    from test_run_tty import wait_until

    database = relay_home / "state" / "messages.db"
    database.parent.mkdir(parents=True, exist_ok=True)
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    record, errors = tmp_path / "read.txt", tmp_path / "stderr.txt"
    agent = Path(__file__).parent / "resources" / "session" / "echo_agent.py"
    relay = str(Path(sys.executable).parent / "relay")
    argv = [relay, "run", "--headless", "--name", "Bob", "--"]
    argv += [sys.executable, str(agent), "--record", str(record)]
    with errors.open("wb") as stderr:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr, cwd=tmp_path
        )
    try:
        wait_until(lambda: "messaging unavailable" in errors.read_text(), 60, errors.read_text())
        holder.execute("ROLLBACK")
        holder.close()
        wait_until(
            lambda: "messaging available again" in errors.read_text(), 30, errors.read_text()
        )
        send = [relay, "send", "--as", "Alice", "Bob", "LATE-MAIL hello"]
        subprocess.run(send, check=True, capture_output=True, timeout=60, cwd=tmp_path)
        wait_until(lambda: record.exists() and "LATE-MAIL" in record.read_text(), 30, "not typed")
    finally:
        holder.close()
        process.terminate()
        process.wait(30)


async def test_a_hosts_prompt_hook_tells_the_session_which_messages_were_submitted() -> None:
    """relay as the host's hooks: the host hook path sends the session a note for the
    prompt the agent was given, carrying the `[id8]` markers in it, over the session's
    real status socket (the inbox acknowledges them: evidence `prompt`)."""
    from relay.protocol.codec import decode_event
    from relay.session.hostnotes import STATUS_SOCKET_VARIABLE, NoteListener, tell_session

    listener = NoteListener()
    try:
        prompt = "Relay message from Alice [abcd1234]: hi\nRelay message from Bob [wxyz9876]: yo"
        envelope = decode_event("BeforeAgent", msgspec.json.encode({"prompt": prompt}))
        tell_session({STATUS_SOCKET_VARIABLE: listener.address}, envelope)
        notes = listener.notes()
        with anyio.fail_after(10):
            note = await anext(notes)
        assert (note.event, note.markers) == ("BeforeAgent", ("[abcd1234]", "[wxyz9876]"))
    finally:
        listener.close()

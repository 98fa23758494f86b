"""A session's inbox: claims the agent's mail, runs MessageReceived hooks, types each message
in through the safe injector, and acknowledges it only on evidence the agent took it in.

Evidence (DESIGN §9: a daemon must not acknowledge a message before the agent has seen
it; §12: delivered means submitted): for an agent that draws a full screen, the
injector's word that the agent submitted it (its input box emptied: evidence
`submitted`), or the host's hook seeing its `[id8]` marker in a prompt the agent was
given (evidence `prompt`), never the text's echo in the input box; a message the
injector left in the box is said to the human and not acknowledged. For an agent that
prints lines, after the message's Enter was written, its marker in the agent's output;
failing that, output of any kind within `ackTimeoutSeconds` after it, acknowledged when
that time is up. Until then the delivery stays handed: a session that dies first leaves
it for the next session of that agent, which gets it again (the mailbox never hands one
delivery twice to one session).

Taking mail: a message that its sender handed to this session in its own transaction
(the mailbox's hand-over at the send) comes in the doorbell's poke, and is handed over
with no read and no claim; other mail is read and claimed (`_claim_all`). A poke that
carries nothing, the fallback timer and a carried delivery that does not check out make
the session look at the mailbox.

Attempts: claiming mail counts nothing; an attempt is recorded when the injector has
typed the message in (its Enter written). A session killed with a backlog it never
typed therefore leaves that backlog as it was, and a session that ends cleanly releases
it (queued again) for the next one.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import msgspec

from relay.engine.telemetry import debug, debug_enabled
from relay.protocol.display import visible
from relay.protocol.output import AggregatedResult
from relay.services.messaging.doorbell import Doorbell, ring
from relay.services.messaging.messenger import Messenger
from relay.services.messaging.model import (
    SYSTEM_SENDER,
    Agent,
    AgentState,
    Delivery,
    HandedAtSend,
    MailboxBusy,
    MessagingError,
    NameTakenError,
    short_id,
    utc_now,
)
from relay.services.messaging.namespace import delivery_text

if TYPE_CHECKING:
    from relay.services.messaging.nats import NatsMessaging
    from relay.session.injector import Admit, Outcome

CLAIM_BATCH = 50
HEARTBEAT_SECONDS = 10.0
DOORBELL_FALLBACK_SECONDS = 1.0
"""With the doorbell: a look at the mailbox at least this often anyway (a poke may be lost)."""
_MARKER_TAIL = 16  # bytes kept between output chunks: a marker may be split across them

Fire = Callable[[str, dict[str, Any]], Awaitable[AggregatedResult]]
Submit = Callable[[str, str, "Admit | None"], bool]
"""(text, message id, admit): queue the text for the agent (Injector.submit)."""
Tell = Callable[[str], None]
_CARRIED = msgspec.json.Decoder(HandedAtSend)


class _Admission:
    """A message handed over before its claim was decided: typed only if claimed."""

    def __init__(self) -> None:
        self.decided = anyio.Event()
        self.claimed = False
        self.queued = False
        """Whether the injector took the text (False: denied, or typed earlier)."""

    def decide(self, claimed: bool) -> None:
        self.claimed = claimed
        self.decided.set()

    async def admit(self) -> bool:
        await self.decided.wait()
        return self.claimed


@dataclass
class _Awaiting:
    """A message typed in, waiting for its acknowledgement."""

    marker: bytes
    delivered_at: float
    output_at: float | None = None
    echo_counts: bool = True
    """Whether its marker or output in the agent's output is evidence (an agent that
    prints lines; not one whose input box echoes the text)."""


class SessionInbox:
    """The receiving half of messaging for one `relay run` session (see the module docstring)."""

    def __init__(
        self,
        messenger: Messenger,
        *,
        name: str,
        session_id: str,
        fire: Fire,
        submit: Submit,
        tell: Tell,
        withdraw: Callable[[str], object] | None = None,
    ) -> None:
        """`withdraw(message id)`: take a handed-over text back from the injector before
        it is typed (Injector.withdraw), for a message the claim did not take."""
        self.messenger = messenger
        self.mailbox = messenger.mailbox
        self.team = messenger.team
        self.name = name
        self.session_id = session_id
        self._fire = fire
        self._submit = submit
        self._withdraw = withdraw
        self._tell = tell
        self._config = messenger.config
        self._awaiting: dict[str, _Awaiting] = {}
        self._tail = b""
        self._claimed: dict[str, None] = {}
        """Message ids claimed and handed to the injector, not yet typed (in order)."""
        self._admissions: dict[str, _Admission] = {}
        """Messages handed to the injector, their claim not yet decided."""
        self._to_ack: list[tuple[str, str | None]] = []
        """Writes waiting, in order: (id, evidence) an acknowledgement, (id, None) a typing."""
        self._ack_ready = anyio.Event()
        self._state: AgentState = "live"
        self._presence_changed = anyio.Event()
        self.agent: Agent | None = None
        self._bell: Doorbell | None = None
        self._look_again = False
        """A poke's delivery did not check out during a look: look once more."""

    async def register(self, *, cwd: str, receive: bool = True) -> None:
        """Mark the agent live (NameTakenError when a live agent of the team has its name).

        `receive`: whether this session will take the agent's mail (`run(receive=...)`).
        Only a receiving session has a doorbell: senders hand mail at the send to the
        sessions they can ring, and mail for a session that does not receive waits in the
        mailbox (for the agent's MCP tools, or its next session).

        With the nats transport, connect first: the agent's consumers are created (mail
        for it queues in JetStream from then on, even while it is offline), and a name
        live on another machine is refused too.
        """
        if self.messenger.uses_nats:
            await self._connect_nats()
        if self._config.doorbell and receive:
            try:  # a fresh address per session, recorded in the (private) mailbox
                self._bell = Doorbell()
            except OSError as exc:
                debug(f"messaging: no doorbell for {self.name} ({exc}); polling")
        bell = self._bell.record if self._bell is not None else None
        try:
            self.agent = await anyio.to_thread.run_sync(
                lambda: self.mailbox.register_agent(
                    self.name, team=self.team, session_id=self.session_id, cwd=cwd, bell=bell
                )
            )
            if self.messenger.nats is not None:
                await self.messenger.nats.heartbeat(self.agent)
        except BaseException:
            self._close_bell()
            await self._disconnect()  # not registered: close() will not run
            raise

    def _close_bell(self) -> None:
        bell, self._bell = self._bell, None
        if bell is not None:
            bell.close()

    async def _connect_nats(self) -> None:
        from relay.config.model import NatsConfig
        from relay.services.messaging.nats import NatsMessaging, inbox_prefix

        config = self._config.nats or NatsConfig()
        nats = NatsMessaging(
            config, team=self.team, inbox=config.inboxPrefix or inbox_prefix(self.team, self.name)
        )
        await nats.connect()
        try:
            for agent in await nats.agents():
                if (
                    agent.name == self.name
                    and agent.state != "offline"
                    and agent.session_id != self.session_id
                ):
                    raise NameTakenError(agent)
            await nats.ensure_agent(self.name)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await nats.close()
            raise
        self.messenger.nats = nats

    async def close(self) -> None:
        """Mark the agent offline. A message the agent printed output after is acknowledged
        now; what has no evidence stays handed, for the agent's next session."""
        for key, awaiting in list(self._awaiting.items()):
            if awaiting.output_at is not None:
                self._acknowledge(key, "output")
        await self._write_acks()
        self._decide_all()
        untyped, self._claimed = list(self._claimed), {}
        try:
            # Claimed but never typed (a backlog at the end): queued again, no attempt spent.
            await anyio.to_thread.run_sync(
                partial(
                    self.mailbox.release,
                    self.name,
                    untyped,
                    team=self.team,
                    session_id=self.session_id,
                )
            )
        except MessagingError as exc:  # left handed: the next session claims it anyway
            self._tell(f"messaging: {exc}")
        try:
            await anyio.to_thread.run_sync(
                lambda: self.mailbox.set_presence(
                    self.name, team=self.team, session_id=self.session_id, state="offline"
                )
            )
        except MessagingError as exc:
            self._tell(f"messaging: {exc}")
        nats = self.messenger.nats
        if nats is not None:
            try:
                with anyio.move_on_after(5):
                    await nats.forget_presence(self.name)
            except MessagingError as exc:
                self._tell(f"messaging: {exc}")
        self._close_bell()
        await self._disconnect()

    async def _disconnect(self) -> None:
        """Close the NATS connection, if any (bounded: a session's end never waits on the network)."""
        nats, self.messenger.nats = self.messenger.nats, None
        if nats is not None:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await nats.close()

    # -- receiving -----------------------------------------------------------------------

    async def run(self, *, receive: bool = True) -> None:
        """Claim and deliver mail as it arrives (unless `receive` is False: then mail
        waits in the mailbox); also acknowledge and keep presence. Runs until cancelled."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._acknowledger)
            group.start_soon(self._keep_presence)
            if self.messenger.nats is not None:
                # What JetStream holds for this agent goes into the local mailbox (and
                # is acknowledged to NATS once stored there); the doorbell wakes _receive.
                group.start_soon(self._bridge, self.messenger.nats)
            if receive:
                await self._receive()

    async def _bridge(self, nats: NatsMessaging) -> None:
        while True:
            try:
                await nats.run_bridge(self.name, self.mailbox, self._ring_own_bell)
            except MessagingError as exc:
                self._tell(f"messaging: NATS: {exc}")
                await anyio.sleep(2)

    def _ring_own_bell(self) -> None:
        if self._bell is not None:
            ring(self._bell.address)

    async def _receive(self) -> None:
        config = self._config
        bell = self._bell
        # The bell is closed by close(), with the registration.
        version = -1
        look = True
        while True:
            try:
                if bell is not None:  # pokes or the fallback timer
                    carried, bare = bell.take()
                    if carried:
                        bare = not await self._take_carried(carried) or bare
                    if look or bare or self._look_again:
                        self._look_again = False
                        await self._claim_all()
                else:  # polling: claim only when another connection committed
                    now_version = await anyio.to_thread.run_sync(self.mailbox.data_version)
                    if now_version != version:
                        version = now_version
                        await self._claim_all()
            except MessagingError as exc:
                self._tell(f"messaging unavailable: {exc}")
                await anyio.sleep(5)
            if bell is not None:
                look = not await bell.wait(DOORBELL_FALLBACK_SECONDS)
            else:
                await anyio.sleep(config.pollMs / 1000)

    async def _take_carried(self, datagrams: list[bytes]) -> bool:
        """Hand over the deliveries that pokes carried (handed to this session at the
        send); False when one does not check out (then the mailbox is looked at)."""
        assert self._bell is not None
        key = self._bell.key.encode()
        usable = True
        for datagram in datagrams:
            try:  # from a reader of the mailbox of this user (doorbell.py)
                carried = _CARRIED.decode(datagram)
            except msgspec.DecodeError:
                usable = False
                continue
            delivery = carried.delivery
            if (
                not hmac.compare_digest(carried.key.encode(), key)
                or carried.session_id != self.session_id
                or delivery.recipient != self.name
                or delivery.message.team != self.team
            ):
                usable = False
            elif delivery.message.id not in self._claimed:
                self._claimed[delivery.message.id] = None  # handed to this session already
                try:
                    await self._deliver(delivery)
                except MessagingError as exc:  # the rest are handed over all the same
                    self._tell(f"messaging: {exc}")
        return usable

    async def _carried_first(self) -> None:
        """Hand over what pokes carried before mail read or claimed from the mailbox: a
        delivery handed at the send is older than any mail queued after it, and a sender
        rings before its next message can commit, so its poke is in the socket by the
        time that message is read. (Otherwise a message could pass an older one of its
        sender's, handed at the send while this session was reading.)"""
        bell = self._bell
        if bell is None:
            return
        bell.collect()
        carried = bell.take_carried()
        if carried and not await self._take_carried(carried):
            self._look_again = True

    async def _claim_all(self) -> None:
        """Hand the first waiting message over, then claim.

        What waits is read first, without the mailbox's write lock, and the oldest message
        not yet handed over goes to the injector at once, admitted for typing only once
        the claim has taken it: a broadcast wakes every session of the machine together,
        and their claims queue for the lock one after another. The rest of the batch is
        handed over once claimed (their MessageReceived hooks do not delay the claim). A
        message read but not claimed (meanwhile acknowledged or refused some other way,
        such as a host's hook answer) is taken back from the injector untyped."""
        while True:
            try:
                waiting = await self._waiting()
                await self._carried_first()
                if not waiting:
                    # Nothing the claim would take: no write lock for a poke or the
                    # fallback timer. Mail committed after the read rings the bell again.
                    return
                for delivery in waiting:
                    key = delivery.message.id
                    if delivery.attempts >= self.mailbox.max_attempts:
                        continue  # the claim marks it dead (and tells its sender)
                    if key not in self._claimed and key not in self._admissions:
                        admission = self._admissions[key] = _Admission()
                        admission.queued = await self._deliver(delivery, admission)
                        break
                deliveries = await self._claim()
                await self._carried_first()
            except BaseException:  # nothing handed over is typed unclaimed, nor waits forever
                self._decide_all()
                raise
            # Recorded before any hook runs: what is claimed and not typed is released at
            # the end, whatever happens to the deliveries after it.
            later = []
            for delivery in deliveries:
                key = delivery.message.id
                handed = self._admissions.pop(key, None)
                if handed is None:
                    self._claimed[key] = None
                    later.append(delivery)
                elif handed.queued:
                    self._claimed[key] = None
                    handed.decide(True)
            self._decide_all()  # read, but not claimed: taken back untyped
            for delivery in later:
                await self._deliver(delivery)
            # A full batch read or claimed: more may wait (the claim may have marked some
            # of the batch dead and handed fewer).
            if len(deliveries) < CLAIM_BATCH and len(waiting) < CLAIM_BATCH:
                return

    def _decide_all(self) -> None:
        """Every message still waiting for its claim: not claimed, taken back untyped."""
        admissions, self._admissions = self._admissions, {}
        for key, admission in admissions.items():
            admission.decide(False)
            if admission.queued and self._withdraw is not None:
                self._withdraw(key)

    async def _waiting(self) -> list[Delivery]:
        """What the claim would take (Mailbox.waiting): read in the loop when the mailbox
        is free (a read takes well under a millisecond, a hop to a worker thread more), on
        a worker thread when another thread of this process is using it."""
        try:
            return self.mailbox.waiting(
                self.name, team=self.team, session_id=self.session_id, limit=CLAIM_BATCH, wait=False
            )
        except MailboxBusy:
            return await anyio.to_thread.run_sync(
                lambda: self.mailbox.waiting(
                    self.name, team=self.team, session_id=self.session_id, limit=CLAIM_BATCH
                )
            )

    async def _claim(self) -> list[Delivery]:
        try:
            # In the loop when the mailbox is free (a claim takes about 0.1 ms); on a
            # worker thread when another writer holds it.
            return self.mailbox.claim(
                self.name,
                team=self.team,
                session_id=self.session_id,
                limit=CLAIM_BATCH,
                wait=False,
            )
        except MailboxBusy:
            return await anyio.to_thread.run_sync(
                lambda: self.mailbox.claim(
                    self.name, team=self.team, session_id=self.session_id, limit=CLAIM_BATCH
                )
            )

    async def _deliver(self, delivery: Delivery, admission: _Admission | None = None) -> bool:
        """MessageReceived hooks, then the injector (DESIGN §2: deny drops it, body rewrites
        it); True when the injector took the text. With `admission`, typed only once
        claimed."""
        message = delivery.message
        result = await self._fire(
            "MessageReceived",
            {
                "message_id": message.id,
                "sender": message.sender,
                "body": message.body,
                "thread": message.thread,
            },
        )
        if result.decision == "deny":
            reason = result.reason or "a MessageReceived hook denied it"
            self._claimed.pop(message.id, None)
            await anyio.to_thread.run_sync(
                lambda: self.mailbox.deny(message.id, self.name, team=self.team, reason=reason)
            )
            return False
        if message.sender == SYSTEM_SENDER:
            # relay's own notices (a reply loop stopped, a message refused or dead) concern
            # the human as much as the agent: shown on the session's terminal too.
            self._tell(f"notice to {self.name}: {visible(message.body)}")
        specific = result.hookSpecificOutput or {}
        body = specific.get("body") if isinstance(specific.get("body"), str) else None
        text = delivery_text(message, body)
        if result.inject:
            text += "\n" + result.inject
        if not self._submit(text, message.id, admission.admit if admission else None):
            self._claimed.pop(message.id, None)  # typed earlier in this session: not released
            if debug_enabled():
                debug(f"messaging: {message.id} already typed in this session")
            return False
        return True

    # -- acknowledging -------------------------------------------------------------------

    def on_delivered(self, key: str | None, outcome: Outcome = "typed") -> None:
        """The injector wrote a message's Enter (`outcome`: see Injector): acknowledge it
        when the agent submitted it, say so when it was left in the input box, else start
        waiting for evidence."""
        if key is None or key in self._awaiting:
            return
        if key in self._claimed:
            del self._claimed[key]
            self._to_ack.append((key, None))  # the attempt counts now, before any acknowledgement
            self._ack_ready.set()
        marker = f"[{short_id(key)}]"
        self._awaiting[key] = _Awaiting(
            marker=marker.encode(), delivered_at=time.monotonic(), echo_counts=outcome == "typed"
        )
        if outcome == "submitted":
            self._acknowledge(key, "submitted")
        elif outcome == "left":
            self._tell(
                f"message {marker} was left in the agent's input box, not submitted "
                "(its Enter was taken for a new line); it stays unacknowledged"
            )

    def observe_prompt(self, markers: Sequence[str]) -> None:
        """The host's hook saw a prompt the agent was given, holding these `[id8]` markers:
        the messages they name are acknowledged (evidence `prompt`)."""
        for key, awaiting in list(self._awaiting.items()):
            if awaiting.marker.decode() in markers:
                self._acknowledge(key, "prompt")

    def observe_output(self, data: bytes) -> None:
        """Agent output: a marker acknowledges its message; any output starts the fallback clock."""
        self._set_state("busy")
        if not self._awaiting:
            return
        window = self._tail + data
        self._tail = window[-_MARKER_TAIL:]
        now = time.monotonic()
        for key, awaiting in list(self._awaiting.items()):
            if not awaiting.echo_counts:
                continue
            if awaiting.marker in window:
                self._acknowledge(key, "marker")
            elif awaiting.output_at is None:
                awaiting.output_at = now

    def observe_idle(self) -> None:
        """The agent went quiet (no output for a moment; a presence change only)."""
        self._set_state("idle")

    def _acknowledge(self, key: str, evidence: str) -> None:
        """Queue the acknowledgement: written by `_acknowledger`, off the output path."""
        self._awaiting.pop(key, None)
        self._to_ack.append((key, evidence))
        self._ack_ready.set()

    async def _acknowledger(self) -> None:
        """Write acknowledgements as they come; turn output-after-injection into one when its time is up."""
        timeout = self._config.ackTimeoutSeconds
        while True:
            with anyio.move_on_after(min(0.25, timeout / 4)):
                await self._ack_ready.wait()
            self._ack_ready = anyio.Event()
            now = time.monotonic()
            for key, awaiting in list(self._awaiting.items()):
                if awaiting.output_at is not None and now - awaiting.delivered_at >= timeout:
                    self._acknowledge(key, "output")
            await self._write_acks()

    async def _write_acks(self) -> None:
        """Write the queued typings and acknowledgements, in order; each leaves the queue
        only once written."""
        while self._to_ack:
            key, evidence = self._to_ack[0]
            try:
                if evidence is None:
                    await anyio.to_thread.run_sync(
                        partial(
                            self.mailbox.typed,
                            key,
                            self.name,
                            team=self.team,
                            session_id=self.session_id,
                        )
                    )
                else:
                    await anyio.to_thread.run_sync(
                        partial(self.mailbox.ack, key, self.name, team=self.team, evidence=evidence)
                    )
            except MessagingError as exc:
                # Left handed: the next session delivers it again rather than losing it.
                what = "record the typing of" if evidence is None else "acknowledge"
                self._tell(f"messaging: could not {what} {key}: {exc}")
            self._to_ack.pop(0)

    # -- presence ------------------------------------------------------------------------

    def _set_state(self, state: AgentState) -> None:
        if state != self._state:
            self._state = state
            self._presence_changed.set()

    async def _keep_presence(self) -> None:
        """The agent's state and last-seen time in the mailbox: on a change, and every 10 s."""
        while True:
            with anyio.move_on_after(HEARTBEAT_SECONDS):
                await self._presence_changed.wait()
            self._presence_changed = anyio.Event()
            try:
                await anyio.to_thread.run_sync(
                    lambda: self.mailbox.set_presence(
                        self.name, team=self.team, session_id=self.session_id, state=self._state
                    )
                )
                if self.messenger.nats is not None and self.agent is not None:
                    self.agent.state, self.agent.last_seen = self._state, utc_now()
                    with anyio.move_on_after(HEARTBEAT_SECONDS):
                        await self.messenger.nats.heartbeat(self.agent)
            except MessagingError as exc:
                debug(f"messaging: presence not recorded: {exc}")
            await anyio.sleep(1.0)  # at most one presence write a second

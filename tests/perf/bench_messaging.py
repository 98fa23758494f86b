"""Messaging speed figures. Run: .venv/bin/python tests/perf/bench_messaging.py

Not a pytest module. In one run:

- send -> handed latency on one machine: a receiver process runs a real SessionInbox
  (the receive loop of `relay run`: doorbell or PRAGMA data_version poll, a delivery
  handed at the send or a claim, MessageReceived through a real HookSystem with no
  hooks) and timestamps each message as the injector is handed it, then types and
  acknowledges it ACK_AFTER later, as the agent under relay run takes it in; the sender,
  another process, sends one message at a time with its CLOCK_MONOTONIC send time in
  the body (the clock is system-wide). With the doorbell, and polling only (pollMs 250,
  the default, and 10).
- the tail under load: the same with 8 receiver processes running at once, each its
  own agent and SessionInbox, the sender writing to them in turn (p99 against the
  single receiver's p99 of the same run); and broadcasts (`*`) to those 8, timed per
  receiver and to the last of the 8 being handed the message; then the floor under a
  broadcast on this machine: the sender's send() alone (sent as far apart as the
  broadcasts), until its doorbells are rung and until it returns, synced; and 8
  processes that only wait in an event loop on a doorbell, poked together. The
  receiving sessions also say when they woke and what CPU their main thread spent on
  each broadcast: waking, reading (unless the poke carried it) and handing it over, and
  claiming it (if they did), and how many claims they made.
- messages per second through the embedded mailbox: one sender, one transaction per
  send, each synced to disk before it returns, and the recipient claiming and
  acknowledging them all.
- send -> handed across NATS on loopback (a real nats-server), when the server binary
  and the nats extra are present: a publish to JetStream, the bridge storing it in the
  receiving host's mailbox, the receiver's inbox claiming it.

Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_DOORBELL_P50_MS = 2.0
TARGET_PER_SECOND = 1_000
TARGET_NATS_P50_MS = 20.0
TARGET_TAIL_RATIO = 2.0
"""Doorbell p99 with 8 receivers at most this many times the single receiver's p99."""
TARGET_BROADCAST_P50_MS = 3.0
"""A broadcast to 8 receivers, send -> handed, p50 over every hand-over: the measure of
issue 13's own figure ("a broadcast takes 4.6 ms p50 to be handed", when this bench gave
4.7 ms for every hand-over and 6.4 ms for the last of the 8). The last of the 8 is
printed with it, next to the floor this machine sets under it (the send until its
doorbells ring, and 8 idle event loops woken): until 2026-11-28 the bench held that
stricter reading to 3 ms too, which left relay 0.3-0.9 ms above a floor of 2.1-2.7 ms."""
RECEIVERS = 8
ACK_AFTER = 0.01
"""Seconds from a message's hand-over to its typing and acknowledgement in the bench's
receiving sessions (the agent takes each message in, as it does under relay run). Under
relay run it is at least 0.1 s (the injector writes the Enter `enter_delay_ms`, 100,
after the text, and the agent's output acknowledges it after that); the bench makes it
shorter, so that every session has typed and acknowledged a broadcast before the next
comes, BROADCAST_GAP later, as agents have between broadcasts (`messaging.maxPerMinute`
allows a sender 30 a minute)."""
BROADCAST_GAP = 0.02
"""Seconds between broadcasts, and between the pokes and sends of the floor under them."""

RECEIVER = r"""
import asyncio, json, os, sys, time
import anyio
from relay.config.model import MessagingConfig
from relay.engine.system import HookSystem
from relay.services.messaging.messenger import Messenger
from relay.session.inbox import SessionInbox

import msgspec
from relay.services.messaging.doorbell import Doorbell
config = msgspec.convert(json.loads(sys.argv[1]), MessagingConfig)
count, out, cwd, name = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
ack_after = float(sys.argv[6])
latencies = []
# Where this session's CPU goes per message: waking on the doorbell (from the return of
# the event loop's poll that saw the poke to the receiving task's resumption), reading
# (unless the poke carried the message) and handing over (its main thread, where the
# receiving runs), and what follows until it waits again: the claim (if any), on the main
# thread or, when another session holds the write lock, on a worker thread (its CPU
# counted too); and when it woke (CLOCK_MONOTONIC). Measured by wrapping the loop's
# selector, Doorbell.wait and SqliteMailbox.claim, which also counts the claims.
import selectors
import threading
from relay.services.messaging.mailbox import SqliteMailbox
cpu = {"wake": [], "hand-over": [], "claim": []}
claims = [0]
woke, marks = [], {"polled": 0.0, "woke": 0.0, "handed": 0.0, "worker": 0.0}
waiting, claiming, selecting = Doorbell.wait, SqliteMailbox.claim, selectors.EpollSelector.select

def timed_select(self, timeout=None):
    ready = selecting(self, timeout)
    if ready:
        marks["polled"] = time.thread_time()
    return ready

def timed_claim(self, *args, **kwargs):
    started = time.thread_time()
    claims[0] += 1
    try:
        return claiming(self, *args, **kwargs)
    finally:
        if threading.current_thread() is not threading.main_thread():
            marks["worker"] += time.thread_time() - started

async def timed_wait(self, timeout):
    if marks["handed"]:
        cpu["claim"].append(time.thread_time() - marks["handed"] + marks["worker"])
        marks["handed"] = 0.0
    marks["worker"] = 0.0
    marks["polled"] = time.thread_time()
    rang = await waiting(self, timeout)
    marks["woke"] = time.thread_time()
    woke.append(time.monotonic_ns())
    return rang

Doorbell.wait = timed_wait
SqliteMailbox.claim = timed_claim
selectors.EpollSelector.select = timed_select

async def main():
    hooks = HookSystem(cwd=cwd)
    messenger = Messenger(config)
    done = anyio.Event()

    async def fire(event, payload):
        return await hooks.fire(event, {"session_id": "bench", "cwd": cwd, **payload})

    def acknowledge(key):
        # As under relay run: the injector types the message (its Enter written) and the
        # agent's output shows its marker.
        inbox.on_delivered(key)
        inbox.observe_output(f"[{key[-8:].lower()}] ok".encode())

    def submit(text, key, admit=None):
        handed_ns = time.monotonic_ns()
        asyncio.get_running_loop().call_later(ack_after, acknowledge, key)
        index, sent_ns = text.rsplit(": ", 1)[1].split()
        latencies.append((int(index), (handed_ns - int(sent_ns)) / 1e6))
        if woke and not marks["handed"]:  # the first hand-over since the last wake
            marks["handed"] = time.thread_time()
            cpu["wake"].append(marks["woke"] - marks["polled"])
            cpu["hand-over"].append(marks["handed"] - marks["woke"])
            latencies[-1] += ((woke[-1] - int(sent_ns)) / 1e6,)
        if len(latencies) >= count:
            done.set()
        return True

    inbox = SessionInbox(messenger, name=name, session_id="bench-" + name, fire=fire,
                         submit=submit, tell=lambda text: None)
    await inbox.register(cwd=cwd)  # with the nats transport: connects, and run() bridges
    async with anyio.create_task_group() as group:
        group.start_soon(inbox.run)
        print("ready", flush=True)
        await done.wait()
        group.cancel_scope.cancel()
    await inbox.close()
    hooks.close()

anyio.run(main)
with open(out, "w") as f:
    json.dump({"latencies": latencies, "cpu": cpu, "claims": claims[0]}, f)
"""


WAKER = r"""
import json, sys, time
import anyio
from relay.services.messaging.doorbell import Doorbell

address, count = bytes.fromhex(sys.argv[1]), int(sys.argv[2])
woken = []

async def main():
    with Doorbell(address) as bell:
        print("ready", flush=True)
        while len(woken) < count:
            if await bell.wait(5):
                woken.append(time.monotonic_ns())

anyio.run(main)
print(json.dumps(woken), flush=True)
"""


def bench_wake_floor(receivers: int, count: int, gap: float) -> list[list[float]]:
    """The floor under a broadcast's hand-out on this machine: `receivers` processes, each
    an event loop waiting on a doorbell and doing nothing else, poked together `count`
    times, `gap` s apart; poke -> awake latencies (ms), one list per poke."""
    from relay.services.messaging.doorbell import new_bell_address, ring_all

    addresses = [new_bell_address() for _ in range(receivers)]
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", WAKER, address.hex(), str(count)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for address in addresses
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise SystemExit("a waker did not start")
        rung = []
        for _ in range(count):
            rung.append(time.monotonic_ns())
            ring_all(addresses)
            time.sleep(gap)
        woken = []
        for process in processes:
            assert process.stdout is not None
            woken.append(json.loads(process.stdout.readline()))
            process.wait(timeout=30)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return [[(times[index] - at) / 1e6 for times in woken] for index, at in enumerate(rung)]


def bench_broadcast_send(
    folder: Path, receivers: int, count: int, gap: float
) -> tuple[list[float], list[float]]:
    """The sender's part of a broadcast alone: `send` to `*` with `receivers` agents
    registered, each with a doorbell that nothing but this function reads (so each
    broadcast is handed to their sessions at the send, as in the broadcast series; their
    pokes are read and the deliveries acknowledged between sends), `gap` s apart as in
    the broadcast series (a send after an idle gap costs more than one right after
    another). Per send (ms): until its doorbells are rung (the commit: what the receivers
    wait for), and until it returns (the sync to disk included)."""
    from unittest import mock

    from relay.services.messaging import mailbox as mailbox_module
    from relay.services.messaging.doorbell import Doorbell, ring_all

    rung: list[float] = []

    def timed_ring_all(
        addresses: list[bytes], carrying: dict[bytes, bytes] | None = None
    ) -> list[bytes]:
        rung.append(time.perf_counter())
        return ring_all(addresses, carrying)

    box = mailbox_module.SqliteMailbox(
        folder / f"send-{time.monotonic_ns()}.db", max_per_minute=10**9
    )
    bells = [Doorbell() for _ in range(receivers)]
    names = [f"Receiver{index}" for index in range(receivers)]
    for index, (name, bell) in enumerate(zip(names, bells, strict=True)):
        box.register_agent(name, team="default", session_id=f"s{index}", bell=bell.record)
    to_ring, to_return = [], []
    with mock.patch.object(mailbox_module, "ring_all", timed_ring_all):
        for index in range(count):
            started, before = time.perf_counter(), len(rung)
            message, _ = box.send(
                team="default", sender="Sender", recipient="*", body=f"broadcast {index}"
            )
            to_return.append((time.perf_counter() - started) * 1000)
            to_ring.append((rung[before] - started) * 1000)
            for name, bell in zip(names, bells, strict=True):
                bell._drain()
                bell.take()
                box.ack(message.id, name, team="default", evidence="marker")
            time.sleep(gap)
    for bell in bells:
        bell.close()
    box.close()
    return to_ring, to_return


def _environment(home: Path) -> dict[str, str]:
    return {**os.environ, "RELAY_HOME": str(home), "RELAY_SYSTEM_SETTINGS": str(home / "none.json")}


def bench_latency(
    folder: Path,
    config: dict[str, object],
    count: int,
    gap: float,
    *,
    receivers: int = 1,
    broadcast: bool = False,
    inside: dict[str, list[float]] | None = None,
) -> list[list[float]]:
    """send -> handed latencies (ms) of `count` messages sent one at a time, `gap` s apart,
    to `receivers` receiver processes running at once: in turn, or to all (`broadcast`).
    One list per message: its latency at each receiver it was for. `inside` (with the
    doorbell) gets what the receiving sessions measured in themselves, in ms: "awake",
    from the send to the session's wake-up, and the CPU of their main thread per message
    spent waking ("wake"), reading and handing the message over ("hand-over"), and from
    then until waiting again, with the claim's CPU on a worker thread ("claim")."""
    from relay.config.model import MessagingConfig
    from relay.services.messaging.mailbox import SqliteMailbox

    config = {"team": "default", **config}  # the sender's team (unset: the project's)
    home = folder / f"home-{time.monotonic_ns()}"
    home.mkdir()
    environment = _environment(home)
    names = ["Receiver"] if receivers == 1 else [f"Receiver{i}" for i in range(receivers)]
    targets = ["*"] * count if broadcast else [names[i % receivers] for i in range(count)]
    processes = []
    try:
        for name in names:
            expected = count if broadcast else targets.count(name)
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    RECEIVER,
                    json.dumps(config),
                    str(expected),
                    str(home / f"{name}.json"),
                    str(folder),
                    name,
                    str(ACK_AFTER),
                ],
                env=environment,
                stdout=subprocess.PIPE,
                text=True,
            )
            processes.append(process)
        for process in processes:
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise SystemExit("a receiver did not start")
        time.sleep(0.3)  # let the receivers' start-up writes settle
        os.environ["RELAY_HOME"] = str(home)
        import msgspec

        settings = msgspec.convert(config, MessagingConfig)
        if settings.transport == "nats":
            import anyio

            from relay.services.messaging.messenger import Messenger
            from relay.services.messaging.nats import NatsMessaging

            messenger = Messenger(msgspec.structs.replace(settings, maxPerMinute=10**9))

            async def send_all() -> None:
                assert settings.nats is not None
                async with NatsMessaging(settings.nats, team=messenger.team) as nats:
                    messenger.nats = nats
                    for index, target in enumerate(targets):
                        await messenger.send("Sender", target, f"{index} {time.monotonic_ns()}")
                        await anyio.sleep(gap)

            anyio.run(send_all)
            messenger.mailbox.close()
        else:
            box = SqliteMailbox(max_per_minute=10**9)
            for index, target in enumerate(targets):
                box.send(
                    team="default",
                    sender="Sender",
                    recipient=target,
                    body=f"{index} {time.monotonic_ns()}",
                )
                time.sleep(gap)
            box.close()
        for process in processes:
            process.wait(timeout=120)
    finally:
        for process in processes:
            if process.poll() is None:  # the run failed: leave no receiver behind
                process.kill()
                process.wait()
    per_message: list[list[float]] = [[] for _ in range(count)]
    for name in names:
        found = json.loads((home / f"{name}.json").read_text())
        for index, latency, *awake in found["latencies"]:
            per_message[index].append(latency)
            if inside is not None:
                inside.setdefault("awake", []).extend(awake)
        for part, seconds in found["cpu"].items():
            if inside is not None:
                inside.setdefault(part, []).extend(value * 1000 for value in seconds)
        if inside is not None:
            inside.setdefault("claims", []).append(found["claims"])
    return per_message


def bench_throughput(folder: Path, count: int) -> tuple[float, float]:
    """(sends per second, messages per second sent, claimed and acknowledged)."""
    from relay.services.messaging.mailbox import SqliteMailbox

    box = SqliteMailbox(folder / "throughput.db", max_per_minute=10**9)
    box.register_agent("Receiver", team="default", session_id="r")
    started = time.perf_counter()
    for number in range(count):
        box.send(team="default", sender="Sender", recipient="Receiver", body=f"message {number}")
    sent = time.perf_counter() - started
    handled = 0
    while handled < count:
        for delivery in box.claim("Receiver", team="default", session_id="r", limit=100):
            box.ack(delivery.message.id, "Receiver", team="default", evidence="output")
            handled += 1
    total = time.perf_counter() - started
    box.close()
    return count / sent, count / total


def _percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _nats_config(folder: Path) -> dict[str, object] | None:
    """A real nats-server on loopback for the NATS figure, or None when it cannot run here."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    try:
        import nats  # noqa: F401
        from nats_server import (  # type: ignore[import-not-found]
            NatsServer,
            find_nats_server,
            password,
            server_config,
        )
    except ImportError as exc:
        print(f"NATS: skipped ({exc})")
        return None
    binary = find_nats_server()
    if binary is None:
        print("NATS: skipped (nats-server binary not available)")
        return None
    workdir = folder / "nats"
    workdir.mkdir()
    server = NatsServer(
        binary, workdir, server_config(workdir / "js", {}, unrestricted={"default": ["bench"]})
    )
    server.start()
    _SERVERS.append(server)
    return {
        "transport": "nats",
        "nats": {"url": server.url, "user": "bench", "password": password("bench")},
    }


_SERVERS: list[object] = []


SECTIONS = ("latency", "tail", "throughput", "nats")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=500, help="per latency series")
    parser.add_argument("--tail-messages", type=int, default=800, help="per tail series")
    parser.add_argument("--broadcasts", type=int, default=200)
    parser.add_argument("--throughput", type=int, default=5_000)
    parser.add_argument(
        "--only", choices=SECTIONS, action="append", help="run only these sections (repeatable)"
    )
    arguments = parser.parse_args()
    sections = set(arguments.only or SECTIONS)
    missed = []
    with tempfile.TemporaryDirectory(prefix="relay-bench-messaging-") as name:
        folder = Path(name)
        series = [
            ("doorbell", {"doorbell": True}, arguments.messages, 0.005),
            (
                "polling, pollMs 250",
                {"doorbell": False, "pollMs": 250},
                max(50, arguments.messages // 10),
                0.05,
            ),
            ("polling, pollMs 10", {"doorbell": False, "pollMs": 10}, arguments.messages, 0.005),
        ]
        for label, config, count, gap in series if "latency" in sections else []:
            p50, p99 = _percentiles(_flat(bench_latency(folder, config, count, gap)))
            print(
                f"send -> handed, one machine, {label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms ({count} messages)"
            )
            if label == "doorbell" and p50 >= TARGET_DOORBELL_P50_MS:
                missed.append(f"doorbell p50 {p50:.2f} ms >= {TARGET_DOORBELL_P50_MS} ms")
        if "tail" in sections:
            missed += bench_tail(folder, arguments.tail_messages, arguments.broadcasts)
        if "throughput" in sections:
            sends, handled = bench_throughput(folder, arguments.throughput)
            print(
                f"embedded mailbox: {sends:,.0f} sends/s; {handled:,.0f} messages/s sent, claimed and acked"
                f" ({arguments.throughput:,} messages, one transaction per send, each synced)"
            )
            if handled < TARGET_PER_SECOND:
                missed.append(f"{handled:,.0f} messages/s < {TARGET_PER_SECOND:,}")
        nats_config = _nats_config(folder) if "nats" in sections else None
        if nats_config is not None:
            try:
                p50, p99 = _percentiles(
                    _flat(bench_latency(folder, nats_config, arguments.messages // 2, 0.005))
                )
            finally:
                for server in _SERVERS:
                    server.stop()  # type: ignore[attr-defined]
            print(f"send -> handed across NATS on loopback: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
            if p50 >= TARGET_NATS_P50_MS:
                missed.append(f"NATS p50 {p50:.2f} ms >= {TARGET_NATS_P50_MS} ms")
    for line in missed:
        print(f"MISSED: {line}")
    if not missed:
        print("all targets met")
    return 1 if missed else 0


def bench_tail(folder: Path, count: int, broadcasts: int) -> list[str]:
    """The doorbell's tail with 1 and RECEIVERS receivers, and broadcasts to RECEIVERS;
    prints the figures, returns the targets missed."""
    missed = []
    config: dict[str, object] = {"doorbell": True}
    tails = []
    for receivers in (1, RECEIVERS):
        p50, p99 = _percentiles(
            _flat(bench_latency(folder, config, count, 0.005, receivers=receivers))
        )
        tails.append(p99)
        print(
            f"send -> handed, doorbell, {receivers} receiver{'s' if receivers > 1 else ''}"
            f" (sent to in turn): p50 {p50:.2f} ms, p99 {p99:.2f} ms ({count} messages)"
        )
    ratio = tails[1] / tails[0]
    print(f"doorbell p99, {RECEIVERS} receivers / 1 receiver: {ratio:.2f}x")
    if ratio > TARGET_TAIL_RATIO:
        missed.append(
            f"doorbell p99 {RECEIVERS} receivers / 1: {ratio:.2f}x > {TARGET_TAIL_RATIO}x"
        )
    inside: dict[str, list[float]] = {}
    per_message = bench_latency(
        folder,
        config,
        broadcasts,
        BROADCAST_GAP,
        receivers=RECEIVERS,
        broadcast=True,
        inside=inside,
    )
    (each_p50, each_p99), (last_p50, last_p99) = _each_and_last(per_message)
    print(
        f"broadcast to {RECEIVERS} receivers, send -> handed: each receiver p50 {each_p50:.2f} ms"
        f" (target <= {TARGET_BROADCAST_P50_MS:g} ms), p99 {each_p99:.2f} ms;"
        f" the last of the {RECEIVERS} p50 {last_p50:.2f} ms,"
        f" p99 {last_p99:.2f} ms ({broadcasts} broadcasts)"
    )
    if each_p50 > TARGET_BROADCAST_P50_MS:
        missed.append(
            f"broadcast to {RECEIVERS}, every hand-over p50 {each_p50:.2f} ms"
            f" > {TARGET_BROADCAST_P50_MS} ms"
        )
    # What this machine allows: the sender's part, and waking the receivers at all.
    to_ring, to_return = bench_broadcast_send(folder, RECEIVERS, broadcasts, BROADCAST_GAP)
    ring_p50, return_p50 = _percentiles(to_ring)[0], _percentiles(to_return)[0]
    (wake_each, _), (wake_last, _) = _each_and_last(
        bench_wake_floor(RECEIVERS, broadcasts, BROADCAST_GAP)
    )
    print(
        f"  the floor under it here: the broadcast's send() alone, until its doorbells are"
        f" rung (its commit) p50 {ring_p50:.2f} ms, until it returns (synced to disk)"
        f" p50 {return_p50:.2f} ms; {RECEIVERS} idle event loops woken by their doorbells,"
        f" no mailbox: each p50 {wake_each:.2f} ms, the last p50 {wake_last:.2f} ms;"
        f" rung and woken {ring_p50 + wake_last:.2f} ms, relay's receiving work the"
        f" remaining {last_p50 - ring_p50 - wake_last:.2f} ms"
    )
    if all(inside.get(part) for part in ("awake", "wake", "hand-over", "claim")):
        wake, hand_over, claim = (
            statistics.median(inside[part]) for part in ("wake", "hand-over", "claim")
        )
        print(
            f"  inside the receiving sessions, p50: awake {statistics.median(inside['awake']):.2f}"
            f" ms after the send began; CPU per broadcast: wake-up {wake:.2f} ms,"
            f" read (unless the poke carried it) and hand-over {hand_over:.2f} ms (main"
            f" thread), then until waiting again, with any claim {claim:.2f} ms (any thread)"
            f" ({RECEIVERS} sessions: {RECEIVERS * (wake + hand_over + claim):.1f} ms of CPU);"
            f" claims: {sum(inside['claims'])} for {RECEIVERS * broadcasts} hand-overs"
        )
    return missed


def _each_and_last(
    per_message: list[list[float]],
) -> tuple[tuple[float, float], tuple[float, float]]:
    """(p50, p99) over every receiver's latency, and over the last receiver's per message."""
    return _percentiles(_flat(per_message)), _percentiles(
        [max(latencies) for latencies in per_message]
    )


def _flat(per_message: list[list[float]]) -> list[float]:
    return [latency for latencies in per_message for latency in latencies]


if __name__ == "__main__":
    sys.exit(main())

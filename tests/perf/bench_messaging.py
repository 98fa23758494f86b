"""Messaging speed figures. Run: .venv/bin/python tests/perf/bench_messaging.py

Not a pytest module. In one run:

- send -> handed latency on one machine: a receiver process runs a real SessionInbox
  (the receive loop of `relay run`: doorbell or PRAGMA data_version poll, claim,
  MessageReceived through a real HookSystem with no hooks) and timestamps each message
  as the injector is handed it; the sender, another process, sends one message at a
  time with its CLOCK_MONOTONIC send time in the body (the clock is system-wide).
  With the doorbell, and polling only (pollMs 250, the default, and 10).
- messages per second through the embedded mailbox: one sender, one transaction per
  send (synchronous=FULL), and the recipient claiming and acknowledging them all.
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

RECEIVER = r"""
import json, os, sys, time
import anyio
from relay.config.model import MessagingConfig
from relay.engine.system import HookSystem
from relay.services.messaging.messenger import Messenger
from relay.session.inbox import SessionInbox

import msgspec
config = msgspec.convert(json.loads(sys.argv[1]), MessagingConfig)
count, out, cwd = int(sys.argv[2]), sys.argv[3], sys.argv[4]
latencies = []

async def main():
    hooks = HookSystem(cwd=cwd)
    messenger = Messenger(config)
    done = anyio.Event()

    async def fire(event, payload):
        return await hooks.fire(event, {"session_id": "bench", "cwd": cwd, **payload})

    def submit(text, key):
        sent_ns = int(text.rsplit(": ", 1)[1])
        latencies.append((time.monotonic_ns() - sent_ns) / 1e6)
        if len(latencies) >= count:
            done.set()
        return True

    inbox = SessionInbox(messenger, name="Receiver", session_id="bench", fire=fire,
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
    json.dump(latencies, f)
"""


def _environment(home: Path) -> dict[str, str]:
    return {**os.environ, "RELAY_HOME": str(home), "RELAY_SYSTEM_SETTINGS": str(home / "none.json")}


def bench_latency(folder: Path, config: dict[str, object], count: int, gap: float) -> list[float]:
    """send -> handed latencies (ms) of `count` messages sent one at a time, `gap` s apart."""
    from relay.config.model import MessagingConfig
    from relay.services.messaging.mailbox import SqliteMailbox

    home = folder / f"home-{time.monotonic_ns()}"
    home.mkdir()
    out = home / "latencies.json"
    environment = _environment(home)
    receiver = subprocess.Popen(
        [sys.executable, "-c", RECEIVER, json.dumps(config), str(count), str(out), str(folder)],
        env=environment,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert receiver.stdout is not None
    if receiver.stdout.readline().strip() != "ready":
        raise SystemExit("the receiver did not start")
    try:
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
                    for _ in range(count):
                        await messenger.send("Sender", "Receiver", str(time.monotonic_ns()))
                        await anyio.sleep(gap)

            anyio.run(send_all)
            messenger.mailbox.close()
        else:
            box = SqliteMailbox(max_per_minute=10**9)
            for _ in range(count):
                box.send(
                    team="default",
                    sender="Sender",
                    recipient="Receiver",
                    body=str(time.monotonic_ns()),
                )
                time.sleep(gap)
            box.close()
        receiver.wait(timeout=120)
    finally:
        if receiver.poll() is None:  # the run failed: leave no receiver behind
            receiver.kill()
            receiver.wait()
    return list(json.loads(out.read_text()))


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=500, help="per latency series")
    parser.add_argument("--throughput", type=int, default=5_000)
    arguments = parser.parse_args()
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
        for label, config, count, gap in series:
            p50, p99 = _percentiles(bench_latency(folder, config, count, gap))
            print(
                f"send -> handed, one machine, {label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms ({count} messages)"
            )
            if label == "doorbell" and p50 >= TARGET_DOORBELL_P50_MS:
                missed.append(f"doorbell p50 {p50:.2f} ms >= {TARGET_DOORBELL_P50_MS} ms")
        sends, handled = bench_throughput(folder, arguments.throughput)
        print(
            f"embedded mailbox: {sends:,.0f} sends/s; {handled:,.0f} messages/s sent, claimed and acked"
            f" ({arguments.throughput:,} messages, one transaction per send, synchronous=FULL)"
        )
        if handled < TARGET_PER_SECOND:
            missed.append(f"{handled:,.0f} messages/s < {TARGET_PER_SECOND:,}")
        nats_config = _nats_config(folder)
        if nats_config is not None:
            try:
                p50, p99 = _percentiles(
                    bench_latency(folder, nats_config, arguments.messages // 2, 0.005)
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


if __name__ == "__main__":
    sys.exit(main())

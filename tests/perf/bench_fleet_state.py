"""Live state speed figures. Run: .venv/bin/python tests/perf/bench_fleet_state.py

Not a pytest module. In one run, in a RELAY_HOME of its own:

- `relay agents` for a team of 100 agents: the whole CLI process (the console script,
  bytecode compiled first), the mailbox knowing 100 agents and the board holding their
  100 live statuses; median of the runs.
- publish -> shown by `relay watch`: the console script on a real PTY; one agent's state
  is published to the board (alternating working and waiting) and timed until the
  watch has written that state on the agent's row to the PTY; median of the rounds.
- a host hook's note to its session: `tell_session` as relay's host hook path calls it
  for a PreToolUse with $RELAY_STATUS_SOCKET set (the whole added cost on that path),
  against the same call without the variable; median µs.

Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import compileall
import fcntl
import json
import os
import re
import resource
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable
from pathlib import Path

TARGET_AGENTS_MS = 100.0
TARGET_WATCH_MS = 250.0
TEAM = "bench"
AGENTS = 100
RELAY = str(Path(sys.executable).parent / "relay")
ROWS, COLS = 60, 160


def prepare(home: Path) -> Path:
    """A project whose team is TEAM; the mailbox and the board with AGENTS agents."""
    from relay.fleet.board import SqliteBoard
    from relay.fleet.model import AgentStatus
    from relay.services.messaging.mailbox import SqliteMailbox
    from relay.timestamps import utc_millis

    project = home.parent / "project"
    (project / ".git").mkdir(parents=True, exist_ok=True)
    mailbox = SqliteMailbox(home / "state" / "messages.db")
    board = SqliteBoard(home / "state" / "fleet.db")
    now = utc_millis()
    try:
        for index in range(AGENTS):
            name = f"agent-{index:03d}"
            mailbox.register_agent(name, team=TEAM, session_id=f"s{index}", cwd=str(project))
            board.publish_now(
                AgentStatus(
                    team=TEAM,
                    name=name,
                    state="working",
                    since=now,
                    heartbeat=now,
                    machine="bench",
                    host_kind="claude",
                    pid=os.getpid(),
                    started=now,
                    last_line=f"line {index} of a long and busy afternoon",
                    tool="Bash",
                    ttl=3600.0,
                )
            )
    finally:
        mailbox.close()
        board.close()
    return project


def bench_agents(project: Path, env: dict[str, str], runs: int) -> float:
    """`relay agents` as a whole process, median ms; beside it `relay --version`, the
    floor any relay command pays (Python, click), and the CPU time of each."""
    figures = {}
    for args in (["--version"], ["agents"]):
        times, cpu = [], []
        for index in range(runs + 2):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(
                [RELAY, *args], cwd=project, env=env, capture_output=True, text=True, check=False
            )
            elapsed = (time.perf_counter() - start) * 1000
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0 or (
                args == ["agents"]
                and done.stdout.count("\n") != AGENTS + 2  # the team line, the header
            ):
                raise SystemExit(f"relay {args} failed: {done.stderr or done.stdout[:500]}")
            if index >= 2:  # the first runs warm the page cache
                times.append(elapsed)
                cpu.append(
                    (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
                )
        figures[args[0]] = statistics.median(times)
        print(
            f"relay {args[0]:9} (whole process)   {statistics.median(times):.1f} ms median, "
            f"min {min(times):.1f}; CPU {statistics.median(cpu):.1f} ms median"
            + (f" ({AGENTS} agents)" if args == ["agents"] else " (the floor of every command)")
        )
    return figures["agents"]


def bench_watch(project: Path, env: dict[str, str], home: Path, rounds: int) -> float:
    """Publish -> the state on the watch's screen, median ms."""
    import pyte

    from relay.fleet.board import SqliteBoard
    from relay.fleet.model import AgentStatus
    from relay.timestamps import utc_millis

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    watch = subprocess.Popen(
        [RELAY, "watch"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=project,
        env={k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")},
        start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # noqa: PLW1509
    )
    os.close(slave)
    screen = pyte.Screen(COLS, ROWS)
    stream = pyte.ByteStream(screen)
    board = SqliteBoard(home / "state" / "fleet.db")

    received = bytearray()

    def state_shown(name: str) -> str | None:
        for line in screen.display:
            if line.startswith(name + " "):
                return line.split()[1]
        return None

    def read_until(done: Callable[[], bool], limit: float = 30.0) -> float:
        """Read the PTY until `done()`; when it became true (perf_counter)."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                data = os.read(master, 65536)
                arrived = time.perf_counter()
                received.extend(data)
                stream.feed(data)
                if done():
                    return arrived
        raise SystemExit("relay watch never showed it:\n" + "\n".join(screen.display))

    times = []
    try:
        read_until(lambda: state_shown("agent-000") == "working")
        for index in range(rounds):
            state = "waiting" if index % 2 == 0 else "working"
            # The row as the watch writes it: the name, its padding, the state's colour.
            row = re.compile(rb"agent-000 +(?:\x1b\[[0-9;]*m)*" + state.encode())
            now = utc_millis()
            status = AgentStatus(
                team=TEAM, name="agent-000", state=state, since=now, heartbeat=now,
                machine="bench", pid=os.getpid(), started=now, ttl=3600.0,
            )  # fmt: skip
            received.clear()
            start = time.perf_counter()
            board.publish_now(status)
            shown = read_until(lambda row=row: row.search(received) is not None)  # type: ignore[misc]
            times.append((shown - start) * 1000)
            time.sleep(0.05)
        os.write(master, b"q")
        watch.wait(timeout=30)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
        board.close()
        os.close(master)
    median = statistics.median(times)
    print(
        f"relay watch: publish -> shown      {median:.1f} ms median "
        f"(min {min(times):.1f}, max {max(times):.1f}, {len(times)} rounds)"
    )
    return median


def bench_hook_note(runs: int) -> None:
    """The cost `tell_session` adds to a host's PreToolUse, median µs."""
    import socket

    from relay.protocol.codec import decode_event
    from relay.session.hostnotes import STATUS_SOCKET_VARIABLE, tell_session

    raw = b'{"session_id":"s","cwd":"/tmp","tool_name":"Bash","tool_input":{"command":"ls"}}'
    envelope = decode_event("BeforeTool", raw, cwd="/tmp", unknown_passes=True)
    with tempfile.TemporaryDirectory() as folder:
        address = os.path.join(folder, "note")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        listener.bind(address)
        listener.setblocking(False)
        with_note = {STATUS_SOCKET_VARIABLE: address}
        figures = {}
        for label, env in (
            ("without $RELAY_STATUS_SOCKET", {}),
            ("with a listening session", with_note),
        ):
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                if STATUS_SOCKET_VARIABLE in env:  # as relay/hosts/call.py tests it
                    tell_session(env, envelope)
                times.append((time.perf_counter() - start) * 1e6)
                try:
                    while listener.recv(2048):
                        pass
                except BlockingIOError:
                    pass
            figures[label] = statistics.median(times)
        listener.close()
    for label, median in figures.items():
        print(f"host hook path, PreToolUse note {label:30} {median:.1f} µs median")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="relay agents runs")
    parser.add_argument("--rounds", type=int, default=20, help="watch rounds")
    args = parser.parse_args()
    import relay

    compileall.compile_dir(str(Path(relay.__file__).parent), quiet=1)
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder) / "relay-home"
        home.mkdir()
        os.environ["RELAY_HOME"] = str(home)
        system = Path(folder) / "system-settings.json"
        system.write_text(json.dumps({"messaging": {"team": TEAM}}))
        os.environ["RELAY_SYSTEM_SETTINGS"] = str(system)
        env = dict(os.environ)
        project = prepare(home)
        agents_ms = bench_agents(project, env, args.runs)
        watch_ms = bench_watch(project, env, home, args.rounds)
        bench_hook_note(2000)
    missed = []
    if agents_ms > TARGET_AGENTS_MS:
        missed.append(f"relay agents {agents_ms:.1f} ms > {TARGET_AGENTS_MS:.0f} ms")
    if watch_ms > TARGET_WATCH_MS:
        missed.append(f"relay watch {watch_ms:.1f} ms > {TARGET_WATCH_MS:.0f} ms")
    for line in missed:
        print(f"MISSED: {line}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

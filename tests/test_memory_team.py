"""Team memory over NATS JetStream against a real nats-server (spec/memory-team.md): two
relay homes stand for two machines of team a; eve may do anything in team a's account,
keeper only what `memory_permissions` allows."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import msgspec
import nats
import pytest
from nats_server import NatsServer, find_nats_server, password, server_config
from scripted_sessions import RELAY, agent, finish, reads, start_relay_run

from relay.config.discovery import load_settings
from relay.config.model import NatsConfig
from relay.services.memory.backends import memory_config
from relay.services.memory.namespace import handle
from relay.services.memory.sharing import SharedMemory, team_sharing
from relay.services.memory.sqlite import SqliteMemory
from relay.services.memory.team import (
    MAX_EVENT_BYTES,
    MAX_EVENT_DEPTH,
    MemoryEvent,
    TeamMemory,
    TeamState,
    UnreadableEvent,
    decode_event,
    event_subject,
    memory_inbox,
    memory_permissions,
    memory_stream,
)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    """nats-server with account TEAM_a: eve (no limits) and keeper (memory permissions only)."""
    binary = find_nats_server()
    if binary is None:
        pytest.skip("nats-server binary not available: install Debian's nats-server (.ci/run does)")
    workdir = tmp_path / "nats"
    workdir.mkdir()
    config = json.loads(server_config(workdir / "js", {}, unrestricted={"a": ["eve"]}))
    allowed = memory_permissions("a")
    config["accounts"]["TEAM_a"]["users"].append(
        {
            "user": "keeper",
            "password": password("keeper"),
            "permissions": {
                "publish": {"allow": allowed["publish"]},
                "subscribe": {"allow": allowed["subscribe"]},
            },
        }
    )
    running = NatsServer(binary, workdir, json.dumps(config))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def machine(server: NatsServer, home: Path, user: str = "eve") -> TeamMemory:
    """One machine's team memory (its own store and state) in team a."""
    home.mkdir(parents=True, exist_ok=True)
    return TeamMemory(
        SqliteMemory(home / "memory.db"),
        team="a",
        nats_config=NatsConfig(url=server.url, user=user, password=password(user)),
        state=TeamState(home / "memory-team.db"),
    )


def relay_home(server: NatsServer, home: Path) -> dict[str, str]:
    """A relay home whose user settings share team a's memories; its environment."""
    home.mkdir(parents=True, exist_ok=True)
    settings = {
        "memory": {"transport": "nats", "team": "a"},
        "messaging": {"nats": {"url": server.url, "user": "eve", "password": password("eve")}},
    }
    (home / "settings.json").write_text(json.dumps(settings))
    return {**os.environ, "RELAY_HOME": str(home)}


def cli(env: dict[str, str], *args: str, cwd: Path, check: bool = True) -> Any:
    """Run `relay memory ARGS --json` and decode its answer."""
    done = subprocess.run(
        [RELAY, "memory", *args, "--json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if check:
        assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


async def publish_raw(server: NatsServer, items: list[tuple[str, bytes]]) -> None:
    """Publish payloads straight to the stream, as a hostile member of the account could."""
    nc = await nats.connect(server.url, user="eve", password=password("eve"))
    try:
        js = nc.jetstream()
        for subject, payload in items:
            await js.publish(subject, payload, stream=memory_stream("a"))
    finally:
        await nc.close()


def test_save_on_one_machine_is_found_on_the_other(server: NatsServer, tmp_path: Path) -> None:
    """Through the CLI: save --team on A, sync on B, search on B finds it, from any project."""
    env_a = relay_home(server, tmp_path / "home-a")
    env_b = relay_home(server, tmp_path / "home-b")
    project = tmp_path / "project"
    project.mkdir()
    saved = cli(env_a, "save", "--team", "staging resets every night #ops", cwd=project)
    assert saved["team"] == "a" and saved["project"] is None
    assert saved["shared"] is True and saved["existing"] is False
    report = cli(env_b, "sync", cwd=tmp_path)
    assert report["saved"] == [saved["id"]] and report["problems"] == []
    hits = cli(env_b, "search", "staging", cwd=project)
    assert [hit["memory"]["id"] for hit in hits] == [saved["id"]]
    assert hits[0]["memory"]["team"] == "a"
    # Saved again on B: the same memory, no second copy anywhere.
    again = cli(env_b, "save", "--team", "staging resets every night #ops", cwd=project)
    assert again["id"] == saved["id"] and again["existing"] is True
    assert cli(env_a, "sync", cwd=tmp_path)["saved"] == []


def test_forget_on_one_machine_is_gone_on_both(server: NatsServer, tmp_path: Path) -> None:
    """A forget of a team memory reaches the other machine; a local memory is left alone."""
    one, two = machine(server, tmp_path / "a"), machine(server, tmp_path / "b")
    saved = one.save("the VPN needs MFA", tags=["vpn"], team="a")
    assert isinstance(saved, SharedMemory) and saved.shared
    assert two.sync().saved == [saved.memory.id]
    local = two.save("my own note", project=None)
    result = one.forget(saved.memory.id)
    assert result.forgotten and result.shared and result.team == "a"
    report = two.sync()
    assert report.forgotten == [saved.memory.id]
    assert one.get(saved.memory.id) is None and two.get(saved.memory.id) is None
    assert two.get(local.memory.id) == local.memory
    assert two.search("VPN") == []


def test_offline_machine_catches_up(server: NatsServer, tmp_path: Path) -> None:
    """With the server down a save is kept locally and in the outbox ("not shared yet");
    once the server is back a sync publishes it; B, offline all along, catches up on
    everything in one sync, forgets included."""
    one, two = machine(server, tmp_path / "a"), machine(server, tmp_path / "b")
    first = one.save("first team fact", team="a")
    server.stop()
    started = time.monotonic()
    offline = [one.save(f"offline fact {n}", team="a") for n in range(3)]
    assert all(isinstance(s, SharedMemory) and not s.shared and s.problem for s in offline)
    assert one.get(offline[0].memory.id) is not None  # saved locally first
    report = two.sync(timeout=2.0)
    assert report.unreachable is not None and time.monotonic() - started < 30
    server.start()
    forgotten = one.forget(first.memory.id)
    assert forgotten.shared  # published with the outbox in front of it, in order
    report = two.sync()
    assert sorted(report.saved) == sorted(s.memory.id for s in offline)
    assert report.problems == [] and report.unreachable is None
    assert two.get(first.memory.id) is None
    assert {m.content for m in two.list()} == {f"offline fact {n}" for n in range(3)}
    assert one.sync().waiting == 0


def test_the_same_event_twice_stores_one_memory(server: NatsServer, tmp_path: Path) -> None:
    """Applying the stream again (a cursor lost) and a re-published save change nothing."""
    one, two = machine(server, tmp_path / "a"), machine(server, tmp_path / "b")
    saved = one.save("only once", team="a")
    assert two.sync().saved == [saved.memory.id]
    payload = msgspec.json.encode(MemoryEvent.save(saved.memory))
    anyio.run(publish_raw, server, [(event_subject("a", saved.memory.id), payload)] * 2)
    two.state.set_cursor(two.stream, "", 0)  # as if the cursor had never been written
    report = two.sync()
    assert report.saved == [] and report.unchanged >= 1 and report.problems == []
    assert [m.id for m in two.export()] == [saved.memory.id]


def test_hostile_events_are_skipped_and_the_good_ones_applied(
    server: NatsServer, tmp_path: Path
) -> None:
    """Bad JSON, another team, huge content, a bad id, a project, a wrong subject and a
    forget of a machine's own memory: each skipped with a problem naming its sequence."""
    one, two = machine(server, tmp_path / "a"), machine(server, tmp_path / "b")
    good = one.save("before the attack", team="a")
    mine = two.save("this machine's own", project=None)

    def event(**fields: Any) -> bytes:
        base = {
            "op": "save",
            "id": "0badc0de",
            "team": "a",
            "content": "x",
            "created_at": "2025-01-01T00:00:00.000Z",
        }
        return json.dumps({**base, **fields}).encode()

    hostile = [
        (event_subject("a", "00000001"), b"{not json"),
        (event_subject("a", "00000002"), event(id="00000002", team="b")),
        (event_subject("a", "00000003"), event(id="00000003", content="y" * 100_001)),
        (event_subject("a", "NOTHEX!!"), event(id="NOTHEX!!")),
        (event_subject("a", "00000005"), event(id="00000005", project="/src/shop")),
        (event_subject("a", "00000006"), event(id="00000007")),
        (event_subject("a", mine.memory.id), event(op="forget", id=mine.memory.id)),
        (event_subject("a", "00000008"), event(id="00000008", content=7)),
    ]
    anyio.run(publish_raw, server, hostile)
    after = one.save("after the attack", team="a")
    report = two.sync()
    assert report.saved == [good.memory.id, after.memory.id]
    assert len(report.problems) == len(hostile), report.problems
    assert all(problem.startswith("RELAY_MEMORY_a #") for problem in report.problems)
    assert "not a memory event" in report.problems[0]
    assert "team 'b'" in report.problems[1]
    assert "100,001 bytes" in report.problems[2]
    assert "8 lowercase hex" in report.problems[3]
    assert "not a project key shared by clones" in report.problems[4]
    assert "arrived on" in report.problems[5]
    assert "not team a's" in report.problems[6]
    assert two.get(mine.memory.id) == mine.memory
    assert {m.content for m in two.export()} == {
        "before the attack",
        "after the attack",
        "this machine's own",
    }
    assert two.sync().problems == []  # skipped once: the cursor is past them
    big = b"z" * (MAX_EVENT_BYTES + 1)
    assert len(big) > MAX_EVENT_BYTES  # the stream refuses what a receiver would skip


def test_memory_permissions_are_enough(server: NatsServer, tmp_path: Path) -> None:
    """A NATS user with only `memory_permissions` (and its inbox prefix) shares memories."""
    assert memory_inbox("a") == "_INBOX_memory_a"
    one = machine(server, tmp_path / "a", user="keeper")
    two = machine(server, tmp_path / "b", user="keeper")
    saved = one.save("least privilege works", team="a")
    assert isinstance(saved, SharedMemory) and saved.shared, saved.problem
    report = two.sync()
    assert report.unreachable is None and report.saved == [saved.memory.id]


def test_unreachable_server_costs_at_most_a_couple_of_seconds(tmp_path: Path) -> None:
    """Nothing listening: sync answers within the timeout with one line saying why."""
    state = TeamState(tmp_path / "memory-team.db")
    team = TeamMemory(
        SqliteMemory(tmp_path / "memory.db"),
        team="a",
        nats_config=NatsConfig(url="nats://127.0.0.1:1"),
        state=state,
    )
    started = time.monotonic()
    report = team.sync(timeout=2.0)
    assert time.monotonic() - started < 2.0 + 10  # the timeout, not a hang
    assert report.unreachable is not None and "\n" not in report.unreachable


def test_directives_save_and_forget_team_memories(server: NatsServer, tmp_path: Path) -> None:
    """`@memory:save --team` shares; `@memory:forget` of a team memory needs --team."""
    one, two = machine(server, tmp_path / "a"), machine(server, tmp_path / "b")
    answer = handle(
        one, "save", "--team deploys freeze on Fridays #release", project="/p", agent="x", team="a"
    )
    assert answer.startswith("✓ Saved to team memory [") and "shared with team a" in answer
    memory_id = answer.split("[")[1].split("]")[0]
    assert two.sync().saved == [memory_id]
    refused = handle(two, "forget", memory_id, project="/p", agent="x", team="a")
    assert "--team" in refused and two.get(memory_id) is not None
    done = handle(two, "forget", f"{memory_id} --team", project="/p", agent="x", team="a")
    assert done == f"✓ Forgot memory [{memory_id}] on every machine of team a"
    assert one.sync().forgotten == [memory_id]
    # Too long to share: refused by the team store, said to the agent, nothing saved.
    long = "x" * 100_001
    too_long = handle(one, "save", f"--team {long}", project="/p", agent="x", team="a")
    assert too_long.startswith("Not saved: too long to share: 100,001 bytes")
    assert all(memory.content != long for memory in one.list(project="/p"))
    # The team scope from settings, with team memory off: a clear answer, nothing saved.
    off = handle(two.local, "save", "x y z", project="/p", agent="x", scope="team", team=None)
    assert off.startswith("Not saved: team memory is off")


def test_project_settings_cannot_switch_sharing_on(tmp_path: Path, monkeypatch: Any) -> None:
    """memory.transport, memory.team and memory.scope in a project file are ignored."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("RELAY_HOME", str(home))
    project = tmp_path / "project"
    (project / ".relay").mkdir(parents=True)
    (project / ".relay" / "settings.json").write_text(
        json.dumps({"memory": {"transport": "nats", "team": "evil", "scope": "team"}})
    )
    settings = load_settings(project, ())
    assert team_sharing(settings, project) is None
    config = memory_config(settings)
    assert (config.transport, config.team, config.scope) == ("local", None, "project")
    (home / "settings.json").write_text(json.dumps({"memory": {"transport": "nats"}}))
    sharing = team_sharing(load_settings(project, ()), project)
    assert sharing is not None and sharing.team.startswith("project-")  # the project's team


def test_relay_mcp_catches_up_on_start(
    server: NatsServer, tmp_path: Path, monkeypatch: Any
) -> None:
    """The MCP channel's start-up sync applies what the team saved; with the server down it
    leaves one notice within a couple of seconds."""
    from relay.engine.system import HookSystem
    from relay.mcp.channel import Channel

    one = machine(server, tmp_path / "a")
    saved = one.save("the MCP server sees team memories", team="a")
    env = relay_home(server, tmp_path / "home-b")
    monkeypatch.setenv("RELAY_HOME", env["RELAY_HOME"])
    project = tmp_path / "project"
    project.mkdir()

    def start() -> Channel:
        hooks = HookSystem(cwd=project)
        channel = Channel(hooks, name="b")
        anyio.run(channel.sync_team_memory, backend="asyncio")
        return channel

    channel = start()
    try:
        assert channel.notices == []
        assert channel.memory is not None
        assert [hit.memory.id for hit in channel.memory.search("MCP")] == [saved.memory.id]
    finally:
        channel.close()
        channel.hooks.close()
    server.stop()
    started = time.monotonic()
    channel = start()
    try:
        assert time.monotonic() - started < 30  # the start's timeout, not a hang
        assert len(channel.notices) == 1 and "not synced" in channel.notices[0]
    finally:
        channel.close()
        channel.hooks.close()


def test_a_relay_run_session_starts_with_what_the_team_saved(
    server: NatsServer, tmp_path: Path
) -> None:
    """`relay run` catches up before SessionStart's recap: a memory saved on A while B ran
    nothing is in the recap of B's next session; B's agent saves one with --team, and A
    has it at its next sync."""
    env_a = relay_home(server, tmp_path / "home-a")
    env_b = relay_home(server, tmp_path / "home-b")
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    saved = cli(env_a, "save", "--team", "staging resets every night #ops", cwd=project)
    record = project / "bee.jsonl"
    steps = [
        {"read": "start"},
        {"print": "@memory:save --team the VPN needs MFA #vpn"},
        {"read": "saved"},
    ]
    code, err = finish(start_relay_run("Bee", steps, record, env=env_b), timeout=60)
    assert code == 0, err
    (_, recap), (_, answer) = reads(record)
    assert recap.startswith("Memories from earlier sessions") and saved["id"] in recap
    assert answer.startswith("✓ Saved to team memory [")
    assert answer.endswith("], shared with team a")
    shared_id = answer.split("[", 1)[1].split("]", 1)[0]
    assert cli(env_a, "sync", cwd=tmp_path)["saved"] == [shared_id]


def test_relay_run_team_is_the_team_its_memories_are_shared_with(
    server: NatsServer, tmp_path: Path
) -> None:
    """No memory.team in the settings: `relay run --team a` shares its agent's team
    memories with team a (the session's team), not the repository's, and so does a
    `relay memory` command the agent runs inside the session ($RELAY_TEAM)."""
    home = tmp_path / "home"
    home.mkdir()
    settings = {
        "memory": {"transport": "nats"},
        "messaging": {"nats": {"url": server.url, "user": "eve", "password": password("eve")}},
    }
    (home / "settings.json").write_text(json.dumps(settings))
    env = {**os.environ, "RELAY_HOME": str(home)}
    env.pop("RELAY_TEAM", None)
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    record = project / "bee.jsonl"
    command = f"{RELAY} memory save --team the staging VPN needs MFA --json"
    steps = [
        {"print": "ready"},
        {"print": "@memory:save --team deploys freeze on Fridays #release"},
        {"read": "saved"},
        {"shell": command, "label": "cli"},
    ]
    process = subprocess.Popen(
        [RELAY, "run", "--headless", "--name", "Bee", "--team", "a", "--", *agent(steps, record)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=project,
        env=env,
    )
    code, err = finish(process, timeout=40)
    answers = dict(reads(record))
    assert code == 0, (err, answers)
    assert answers["saved"].endswith("], shared with team a"), answers["saved"]
    saved_by_cli = json.loads(answers["cli"].split(" ", 1)[1])
    assert saved_by_cli["team"] == "a"
    other = machine(server, tmp_path / "other")
    assert len(other.sync().saved) == 2


def test_a_running_session_picks_up_the_team_s_memories_every_sync_seconds(
    server: NatsServer, tmp_path: Path
) -> None:
    """memory.syncSeconds: a memory saved on A while B's session runs is found by B's agent
    a sync period later, without B's session restarting (its search reads its own store)."""
    env_a = relay_home(server, tmp_path / "home-a")
    env_b = relay_home(server, tmp_path / "home-b")
    settings_b = json.loads((tmp_path / "home-b" / "settings.json").read_text())
    settings_b["memory"]["syncSeconds"] = 5
    (tmp_path / "home-b" / "settings.json").write_text(json.dumps(settings_b))
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    first = cli(env_a, "save", "--team", "the VPN needs MFA #vpn", cwd=project)  # a recap
    flag = tmp_path / "saved-on-a"
    # The agent waits (busy) until the test has saved on A and B's own store has the memory
    # (only a sync can put it there), at most 40 s; then searches.
    waiter = tmp_path / "wait_for_sync.py"
    waiter.write_text(
        "import pathlib, sqlite3, sys, time\n"
        f"flag, store = pathlib.Path({str(flag)!r}), {str(tmp_path / 'home-b' / 'state' / 'memory.db')!r}\n"
        "deadline = time.monotonic() + 40\n"
        "while time.monotonic() < deadline:\n"
        "    if flag.exists():\n"
        "        db = sqlite3.connect(f'file:{store}?mode=ro', uri=True)\n"
        "        found = db.execute(\"SELECT count(*) FROM memories WHERE content LIKE 'staging%'\").fetchone()[0]\n"
        "        db.close()\n"
        "        if found:\n"
        "            sys.exit(0)\n"
        "    time.sleep(0.2)\n"
        "sys.exit(1)\n"
    )
    record = project / "bee.jsonl"
    steps = [
        {"read": "start"},
        {"shell": f"{sys.executable} {waiter}", "label": "synced"},
        {"print": "@memory:search staging resets nightly"},
        {"read": "found"},
    ]
    session = start_relay_run("Bee", steps, record, env=env_b)
    deadline = time.monotonic() + 30
    while not reads(record) and time.monotonic() < deadline:  # B's session has started
        time.sleep(0.1)
    saved = cli(env_a, "save", "--team", "staging resets every night #ops", cwd=project)
    flag.touch()
    code, err = finish(session, timeout=60)
    assert code == 0, err
    (_, recap), (_, synced), (_, found) = reads(record)
    assert synced.startswith("0 "), synced  # B's store got it while the session ran
    assert first["id"] in recap
    assert saved["id"] not in recap  # not there at the start: the periodic sync brought it
    assert saved["id"] in found, found


class RawPublisher:
    """A NATS client written by hand, as a hostile member of team a's account could: it
    publishes any bytes as subject, headers and payload, and returns the stream sequence
    JetStream stored each at."""

    def __init__(self, server: NatsServer) -> None:
        assert server.port is not None
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        self.buffer = b""
        self.line()  # INFO
        login = {"verbose": False, "headers": True, "user": "eve", "pass": password("eve")}
        self.sock.sendall(b"CONNECT " + json.dumps(login).encode() + b"\r\nSUB raw.acks 1\r\n")

    def line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the connection"
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def publish(self, subject: bytes, payload: bytes, headers: bytes | None = None) -> int:
        if headers is None:
            command = b"PUB %s raw.acks %d\r\n" % (subject, len(payload))
        else:
            size = len(headers) + len(payload)
            command = b"HPUB %s raw.acks %d %d\r\n" % (subject, len(headers), size)
        self.sock.sendall(command + (headers or b"") + payload + b"\r\n")
        while True:
            line = self.line()
            if line == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif line.startswith(b"MSG raw.acks"):
                size = int(line.rsplit(b" ", 1)[1])
                while len(self.buffer) < size + 2:
                    self.buffer += self.sock.recv(65536)
                ack, self.buffer = json.loads(self.buffer[:size]), self.buffer[size + 2 :]
                assert "seq" in ack, ack
                return int(ack["seq"])
            else:
                assert not line.startswith(b"-ERR"), line

    def close(self) -> None:
        self.sock.close()


async def allow_larger_events(server: NatsServer, size: int) -> None:
    """Raise the stream's message size limit, as anyone in the account may."""
    nc = await nats.connect(server.url, user="eve", password=password("eve"))
    try:
        js = nc.jetstream()
        config = (await js.stream_info(memory_stream("a"))).config
        config.max_msg_size = size
        await js.update_stream(config)
    finally:
        await nc.close()


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def hostile_payloads(created_at: str) -> list[tuple[str, bytes, bytes]]:
    """(what, subject, payload) of every kind of event body that must be skipped."""

    def event(memory_id: str, **fields: Any) -> bytes:
        base = {"op": "save", "id": memory_id, "team": "a", "content": "x"}
        return json.dumps({**base, "created_at": created_at, **fields}).encode()

    def subject(memory_id: str) -> bytes:
        return event_subject("a", memory_id).encode()

    deep = event("00000001")[:-1] + b', "x": ' + b"[" * 60_000 + b"]" * 60_000 + b"}"
    assert MAX_EVENT_BYTES - 20_000 < len(deep) <= MAX_EVENT_BYTES
    raw_ff = event("00000002", content="ok").replace(b"ok", b"\xff")
    return [
        ("nested 60,000 deep", subject("00000001"), deep),
        ("a raw 0xFF", subject("00000002"), raw_ff),
        ("300 KB", subject("00000003"), event("00000003", content="y" * 300_000)),
        ("an array", subject("00000004"), b"[1, 2]"),
        ("a string", subject("00000005"), b'"save"'),
        ("null", subject("00000006"), b"null"),
        ("content a number", subject("00000007"), event("00000007", content=7)),
        ("tags a string", subject("00000008"), event("00000008", tags="ops")),
        ("id a number", subject("00000009"), event("00000009", id=9)),
        ("in 9999", subject("0000000a"), event("0000000a", created_at="9999-12-31T23:59:59.999Z")),
        ("Feb 30", subject("0000000b"), event("0000000b", created_at="2025-02-30T10:00:00.000Z")),
        ("not a date", subject("0000000c"), event("0000000c", created_at="yesterday")),
        ("truncated", subject("0000000d"), event("0000000d")[:30]),
        ("empty", subject("0000000e"), b""),
    ]


def hostile_envelopes(created_at: str) -> list[tuple[str, bytes, bytes, bytes]]:
    """(what, subject, payload, raw headers) of events whose subject or headers are hostile."""
    event = {"op": "save", "team": "a", "content": "x", "created_at": created_at}

    def body(memory_id: str) -> bytes:
        return json.dumps({**event, "id": memory_id}).encode()

    return [
        ("a forged status", b"relay_memory.a.0000000f", b"", b"NATS/1.0\r\nStatus: 404\r\n\r\n"),
        (
            "headers not UTF-8",
            b"relay_memory.a.00000010",
            body("00000010"),
            b"NATS/1.0 \xff\r\n\r\n",
        ),
        ("subject not UTF-8", b"relay_memory.a.\xff\xfe", body("00000011"), b"NATS/1.0\r\n\r\n"),
    ]


def good_event(memory_id: str, content: str, created_at: datetime, agent: str) -> bytes:
    fields = {"op": "save", "id": memory_id, "team": "a", "content": content, "agent": agent}
    return json.dumps({**fields, "created_at": iso(created_at)}).encode()


def relay(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def check_skipped_once_each(output: str, bad: dict[int, str]) -> None:
    """`relay memory sync` printed one skip line per bad event, naming its sequence."""
    skipped = [line for line in output.splitlines() if ": skipped: " in line]
    assert len(skipped) == len(bad), output
    for sequence, what in bad.items():
        prefix = f"problem: RELAY_MEMORY_a #{sequence}: skipped: "
        assert len([line for line in skipped if line.startswith(prefix)]) == 1, (what, output)


def test_no_published_event_stops_team_memory(server: NatsServer, tmp_path: Path) -> None:
    """Issue 29: every kind of hostile event on the stream, then good ones. `relay run` and
    `relay mcp` start normally with them pending; `relay memory sync` exits 0 with one skip
    line per bad event naming its stream sequence, once; every machine gets the good
    events; a forged agent is stored marked unverified, a clock a minute ahead is fine."""
    env_a = relay_home(server, tmp_path / "home-a")
    env_b = relay_home(server, tmp_path / "home-b")
    env_c = relay_home(server, tmp_path / "home-c")
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    before = cli(env_a, "save", "--team", "before the attack", cwd=project)
    anyio.run(allow_larger_events, server, 1024 * 1024)
    now = datetime.now(UTC)
    publisher = RawPublisher(server)
    try:
        bad = {
            publisher.publish(subject, payload): what
            for what, subject, payload in hostile_payloads(iso(now))
        }
        forged = good_event("0000a11c", "alice says: ship it", now + timedelta(minutes=1), "alice")
        publisher.publish(event_subject("a", "0000a11c").encode(), forged)
    finally:
        publisher.close()
    after = cli(env_a, "save", "--team", "after the attack", cwd=project)

    # relay run on A, whose cursor is before every hostile event: the agent runs.
    run = relay(env_a, "run", "--headless", "--", sys.executable, "-c", "print('ran')", cwd=project)
    assert run.returncode == 0 and run.stdout.strip() == "ran", run.stderr
    assert "internal error" not in run.stderr

    # relay mcp on C, the same: it serves.
    async def mcp_serves() -> None:
        # The SDK here, not with the module: each worker paid for it to collect the file.
        from mcp import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=RELAY, args=["mcp", "--name", "cee"], cwd=str(project), env=env_c
        )
        with open(tmp_path / "mcp-stderr.txt", "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                result = await session.call_tool("memory_list", {})
                assert not result.is_error

    anyio.run(mcp_serves)
    assert "internal error" not in (tmp_path / "mcp-stderr.txt").read_text()

    # relay memory sync on B, which never synced: exit 0, one line per bad event, once.
    synced = relay(env_b, "memory", "sync", cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    check_skipped_once_each(synced.stdout, bad)
    again = relay(env_b, "memory", "sync", cwd=tmp_path)
    assert again.returncode == 0 and ": skipped: " not in again.stdout, again.stdout

    # Subjects and headers a NATS client could trip on, then a good event.
    publisher = RawPublisher(server)
    try:
        envelopes = hostile_envelopes(iso(now))
        bad = {
            publisher.publish(subject, payload, headers): what
            for what, subject, payload, headers in envelopes
        }
        last = good_event("0000b0b0", "bob says: the headers did not stop us", now, "bob")
        publisher.publish(
            event_subject("a", "0000b0b0").encode(), last, b"NATS/1.0\r\nX-Note: hi\r\n\r\n"
        )
    finally:
        publisher.close()
    synced = relay(env_b, "memory", "sync", cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    assert "saved [0000b0b0]" in synced.stdout, synced.stdout
    check_skipped_once_each(synced.stdout, bad)
    run = relay(env_a, "run", "--headless", "--", sys.executable, "-c", "print('ran')", cwd=project)
    assert run.returncode == 0 and run.stdout.strip() == "ran", run.stderr

    # Every machine has every good event (A and C after a sync of their own).
    good = {before["id"], after["id"], "0000a11c", "0000b0b0"}
    for env in (env_a, env_c):
        report = cli(env, "sync", cwd=tmp_path)
        assert all(": skipped: " in problem for problem in report["problems"]), report
    for env in (env_a, env_b, env_c):
        memories = {memory["id"]: memory for memory in cli(env, "list", cwd=project)}
        assert set(memories) == good, memories
        assert memories["0000a11c"]["agent"] == "alice (unverified)"
        assert memories["0000b0b0"]["agent"] == "bob (unverified)"


def test_decoding_is_bounded_before_parsing() -> None:
    """decode_event: brackets in strings do not count towards the depth; one level more
    than MAX_EVENT_DEPTH is refused before the parser sees it; every failure is an
    UnreadableEvent with a one-line problem."""
    base = b'{"op": "forget", "id": "00000001", "team": "a"'
    in_strings = base + b', "x": "' + b"[{" * 1000 + b'\\"]"}'
    assert decode_event(in_strings).id == "00000001"
    deepest = base + b', "x": ' + b"[" * (MAX_EVENT_DEPTH - 1) + b"]" * (MAX_EVENT_DEPTH - 1)
    assert decode_event(deepest + b"}").op == "forget"
    too_deep = base + b', "x": ' + b"[" * MAX_EVENT_DEPTH + b"]" * MAX_EVENT_DEPTH + b"}"
    with pytest.raises(UnreadableEvent, match=f"nested more than {MAX_EVENT_DEPTH} deep"):
        decode_event(too_deep)
    for data in (b"", b"\xff", b"[" * 200_000, b'{"op": "save"', b"[]"):
        with pytest.raises(UnreadableEvent) as caught:
            decode_event(data)
        assert "\n" not in caught.value.problem

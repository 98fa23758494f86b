"""Team memory over NATS JetStream against a real nats-server (spec/memory-team.md): two
relay homes stand for two machines of team a; eve may do anything in team a's account,
keeper only what `memory_permissions` allows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import nats
import pytest
from nats_server import NatsServer, find_nats_server, password, server_config
from scripted_sessions import RELAY, finish, reads, start_relay_run

from relay.config.discovery import load_settings
from relay.config.model import NatsConfig
from relay.services.memory.backends import memory_config
from relay.services.memory.namespace import handle
from relay.services.memory.sharing import SharedMemory, team_sharing
from relay.services.memory.sqlite import SqliteMemory
from relay.services.memory.team import (
    MAX_EVENT_BYTES,
    MemoryEvent,
    TeamMemory,
    TeamState,
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
    assert report.unreachable is not None and time.monotonic() - started < 8
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
    assert "project must be null" in report.problems[4]
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
    assert time.monotonic() - started < 3.0
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
        assert time.monotonic() - started < 4.0
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

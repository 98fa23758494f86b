"""The team's status board across machines (relay.fleet.nats_board) against a real
nats-server (Debian's package; .ci/run installs it): two relay homes stand for two
machines of team t, each a process with its own NATS user, publishing the statuses of
its agents and reading the whole team's; a machine killed with SIGKILL leaves its
agents lost for the other. Hostile values, a server that is down or goes down, and
what the board refuses."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import nats
import pytest
from nats_server import NatsServer, find_nats_server, password

from relay.config.model import NatsConfig
from relay.fleet import nats_board
from relay.fleet.model import AgentState, AgentStatus
from relay.fleet.nats_board import (
    HEARTBEAT_INTERVAL,
    HEARTBEAT_TTL,
    MAX_STATUS_BYTES,
    NotAllowedError,
    board_permissions,
    heartbeat_bucket,
    open_nats_board,
    status_bucket,
)
from relay.services.messaging.model import MessagingError, utc_now

TEAM = "t"
MACHINES = {"m1": ["alice", "bob", "erin"], "m2": ["carol", "dave"]}
"""Each machine's NATS user and the agents it may publish statuses for."""
LOST_BOUND = 10.0
"""An agent whose machine died reads lost within this many seconds (issue 30, point 7)."""
SLACK = 15.0
"""Added to every bound: the machine is shared and slow at times."""

MACHINE = r"""
import json, os, sys
from pathlib import Path

import anyio

from relay.config.discovery import load_settings
from relay.config.model import NatsConfig
from relay.fleet.model import AgentStatus
from relay.fleet.nats_board import open_nats_board
from relay.services.messaging.messenger import messaging_config
from relay.services.messaging.model import utc_now

machine, agents, out = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3])
config = messaging_config(load_settings(Path.cwd()))
assert config.transport == "nats" and config.team is not None, config


async def main() -> None:
    async with open_nats_board(
        config.nats or NatsConfig(),
        config.team,
        name=machine,
        on_problem=lambda problem: print(problem, file=sys.stderr, flush=True),
    ) as board:
        now = utc_now()
        for name, state in agents:
            await board.publish(
                AgentStatus(
                    team=config.team, name=name, state=state, since=now, heartbeat=now,
                    machine=machine, pid=os.getpid(),
                )
            )
        while True:
            seen = {s.name: [s.state, s.machine] for s in await board.statuses(config.team)}
            partial = out.with_name(out.name + ".partial")
            partial.write_text(json.dumps(seen))
            partial.replace(out)
            await anyio.sleep(0.2)


anyio.run(main, backend="asyncio")
"""


def server_config(store_dir: Path) -> str:
    """One account, TEAM_t: a user per machine with `board_permissions` for its agents,
    and `op` without permission limits (the hostile publisher)."""
    users: list[dict[str, object]] = []
    for machine, agents in MACHINES.items():
        permissions = board_permissions(TEAM, machine, agents)
        users.append(
            {
                "user": machine,
                "password": password(machine),
                "permissions": {
                    "publish": {"allow": permissions.publish},
                    "subscribe": {"allow": permissions.subscribe},
                },
            }
        )
    users.append({"user": "op", "password": password("op")})
    config = {
        "server_name": "relay-fleet-test",
        "jetstream": {
            "store_dir": str(store_dir),
            "max_memory_store": 64 * 1024 * 1024,
            "max_file_store": 256 * 1024 * 1024,
        },
        "accounts": {f"TEAM_{TEAM}": {"jetstream": "enabled", "users": users}},
    }
    return json.dumps(config, indent=2)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    """A running nats-server with JetStream in tmp_path."""
    binary = find_nats_server()
    if binary is None:
        pytest.skip("nats-server binary not available: install Debian's nats-server (.ci/run does)")
    workdir = tmp_path / "nats"
    workdir.mkdir()
    running = NatsServer(binary, workdir, server_config(workdir / "js"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


def config_for(server: NatsServer, user: str) -> NatsConfig:
    """The messaging NATS settings of one user."""
    return NatsConfig(url=server.url, user=user, password=password(user))


def run(work: Callable[[], Awaitable[Any]]) -> Any:
    """Run an async test body on asyncio (what nats-py needs)."""
    return anyio.run(work, backend="asyncio")


def status(name: str, state: AgentState = "working", **fields: Any) -> AgentStatus:
    """A status of agent `name` of team t, as a session would publish it now."""
    now = utc_now()
    base: dict[str, Any] = {"since": now, "heartbeat": now, "machine": "m1"}
    return AgentStatus(team=TEAM, name=name, state=state, **(base | fields))


def states(statuses: list[AgentStatus]) -> dict[str, str]:
    """Each agent's state, by name."""
    return {one.name: one.state for one in statuses}


async def poll(check: Callable[[], Awaitable[bool]], *, timeout: float, what: str) -> float:
    """Wait until `check()` holds; return how long it took (fails after `timeout`)."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        await anyio.sleep(0.1)
    return time.monotonic() - started


# -- two machines --------------------------------------------------------------------------


def start_machine(
    tmp_path: Path, server: NatsServer, machine: str, agents: list[list[str]]
) -> tuple[subprocess.Popen[bytes], Path]:
    """A process standing for one machine: its own RELAY_HOME whose user settings choose
    the nats transport for team t as `machine`; it publishes `agents` ([name, state]),
    heartbeats, and writes what it reads of the whole team to the returned file."""
    home = tmp_path / machine
    home.mkdir()
    settings = {
        "messaging": {
            "transport": "nats",
            "team": TEAM,
            "nats": {"url": server.url, "user": machine, "password": password(machine)},
        }
    }
    (home / "settings.json").write_text(json.dumps(settings))
    out = home / "seen.json"
    env = {**os.environ, "RELAY_HOME": str(home)}
    with (home / "stderr").open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", MACHINE, machine, json.dumps(agents), str(out)],
            cwd=home,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    return process, out


def seen(out: Path) -> dict[str, list[str]]:
    """What a machine last read of the team ({} before its first reading)."""
    try:
        return dict(json.loads(out.read_text()))
    except (OSError, ValueError):
        return {}


@pytest.mark.timeout(180)  # bounds of 30 s and more, on a shared machine
def test_two_machines_see_the_whole_team_and_a_dead_machines_agents_lost(
    tmp_path: Path, server: NatsServer
) -> None:
    one, one_seen = start_machine(
        tmp_path, server, "m1", [["alice", "working"], ["bob", "idle"], ["erin", "stopped"]]
    )
    two, two_seen = start_machine(
        tmp_path, server, "m2", [["carol", "waiting"], ["dave", "exited"]]
    )
    try:
        whole = {
            "alice": ["working", "m1"],
            "bob": ["idle", "m1"],
            "erin": ["stopped", "m1"],
            "carol": ["waiting", "m2"],
            "dave": ["exited", "m2"],
        }

        async def both_see_the_whole_team() -> bool:
            for process in (one, two):
                assert process.poll() is None, (tmp_path / "m1" / "stderr").read_text() + (
                    tmp_path / "m2" / "stderr"
                ).read_text()
            return seen(one_seen) == whole and seen(two_seen) == whole

        run(lambda: poll(both_see_the_whole_team, timeout=30, what="each machine sees all five"))

        # Heartbeats keep a living machine's agents alive well past the heartbeats' TTL.
        kept_until = time.monotonic() + HEARTBEAT_TTL + 2 * HEARTBEAT_INTERVAL
        while time.monotonic() < kept_until:
            assert seen(two_seen) == whole
            assert seen(one_seen) == whole
            time.sleep(0.25)

        one.send_signal(signal.SIGKILL)
        one.wait(10)
        after_death = whole | {"alice": ["lost", "m1"], "bob": ["lost", "m1"]}

        async def machine_two_sees_them_lost() -> bool:
            assert two.poll() is None
            return seen(two_seen) == after_death

        took = run(
            lambda: poll(
                machine_two_sees_them_lost,
                timeout=LOST_BOUND + SLACK,
                what="m1's agents lost (erin stays stopped) on m2",
            )
        )
        print(f"m1's live agents read lost on m2 {took:.1f} s after its kill -9")
        assert "Traceback" not in (tmp_path / "m2" / "stderr").read_text()
    finally:
        for process in (one, two):
            if process.poll() is None:
                process.kill()
            process.wait(10)


def test_a_machine_cannot_publish_another_machines_agents(
    server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nats_board, "PUBLISH_TIMEOUT", 60.0)

    async def body() -> None:
        async with open_nats_board(config_for(server, "m2"), TEAM, name="m2") as board:
            await board.publish(status("carol", machine="m2"))
            started = time.monotonic()
            with pytest.raises(NotAllowedError, match="not allowed") as refused:
                await board.publish(status("alice", machine="m2"))
            assert "relay_alive_t.alice" in str(refused.value) or "relay_fleet_t.alice" in str(
                refused.value
            )
            # Refused at once, not after the publish's timeout.
            assert time.monotonic() - started < 30
            assert states(await board.statuses(TEAM)) == {"carol": "working"}
            # Its heartbeats go on for carol alone: none refused, none failing.
            problems = len(board.problems)
            await board.heartbeat()
            assert len(board.problems) == problems, board.problems

    run(body)


# -- states and heartbeats -------------------------------------------------------------------


def test_a_silent_agent_reads_lost_and_an_ended_one_keeps_its_state(server: NatsServer) -> None:
    ttl = 1.5

    async def body() -> None:
        async with open_nats_board(config_for(server, "op"), TEAM, ttl=ttl, interval=0.3) as one:
            assert one.interval == 0.3
            await one.publish(status("alice", "working"))
            await one.publish(status("bob", "exited", exit_code=3))
            await one.publish(status("carol", "stopped"))
            await one.publish(status("dave", "restarting", restarts=2))
            last_publish = utc_now()
            async with open_nats_board(config_for(server, "op"), TEAM) as reader:
                # The bucket's TTL is the first board's; the second heartbeats a third of it.
                assert reader.interval == pytest.approx(ttl / 3)
                # Heartbeats keep alice and dave alive past three TTLs, and say when.
                heard = ""
                until = time.monotonic() + 3 * ttl
                while time.monotonic() < until:
                    read = await reader.statuses(TEAM)
                    assert states(read) == {
                        "alice": "working",
                        "bob": "exited",
                        "carol": "stopped",
                        "dave": "restarting",
                    }
                    heard = max(heard, next(s for s in read if s.name == "alice").heartbeat)
                    await anyio.sleep(0.2)
                assert heard > last_publish
            # dave ends: no more heartbeats for him from this board.
            await one.publish(status("dave", "exited", exit_code=0))
        # The first board closed without a word (as a killed process would).
        async with open_nats_board(config_for(server, "op"), TEAM) as reader:

            async def alice_lost() -> bool:
                return states(await reader.statuses(TEAM)).get("alice") == "lost"

            await poll(alice_lost, timeout=ttl + SLACK, what="alice lost")
            read = {one.name: one for one in await reader.statuses(TEAM)}
            assert states(list(read.values())) == {
                "alice": "lost",
                "bob": "exited",
                "carol": "stopped",
                "dave": "exited",
            }
            assert read["bob"].exit_code == 3
            assert read["alice"].since == read["alice"].heartbeat  # lost since last heard of
            await reader.remove(TEAM, "carol")
            assert sorted(states(await reader.statuses(TEAM))) == ["alice", "bob", "dave"]
            # Published again, an agent is back, alive.
            await reader.publish(status("carol", "idle"))
            assert states(await reader.statuses(TEAM))["carol"] == "idle"

    run(body)


def test_the_board_refuses_what_relay_would_not_write(server: NatsServer) -> None:
    async def body() -> None:
        async with open_nats_board(config_for(server, "op"), TEAM) as board:
            with pytest.raises(MessagingError, match=r"agent name 'bad\.name' is not usable"):
                await board.publish(status("bad.name"))
            with pytest.raises(MessagingError, match="team t's, not team 'u'"):
                await board.publish(msgspec.structs.replace(status("alice"), team="u"))
            with pytest.raises(MessagingError, match="team t's"):
                await board.statuses("u")
            with pytest.raises(MessagingError, match="more than"):
                await board.publish(status("alice", command=["x" * MAX_STATUS_BYTES]))
            # A long last line is cut to 200 characters, not refused.
            await board.publish(status("alice", last_line="y" * 5000))
            read = await board.statuses(TEAM)
            assert [one.last_line for one in read] == ["y" * 200]
        with pytest.raises(MessagingError, match="team name"):
            async with open_nats_board(config_for(server, "op"), "no team"):
                pass

    run(body)


# -- hostile values ------------------------------------------------------------------------


def test_hostile_values_are_skipped_and_noted_once(server: NatsServer) -> None:
    noticed: list[str] = []

    async def body() -> None:
        nc = await nats.connect(server.url, user="op", password=password("op"))
        try:
            js = nc.jetstream()
            # Buckets made by someone else, without relay's size limit.
            await js.create_key_value(bucket=status_bucket(TEAM), history=1, direct=True)
            await js.create_key_value(
                bucket=heartbeat_bucket(TEAM), history=1, ttl=HEARTBEAT_TTL, direct=True
            )
            async with open_nats_board(
                config_for(server, "op"), TEAM, on_problem=noticed.append
            ) as board:
                await board.publish(status("alice"))
                good = msgspec.json.encode(status("zed"))
                values = {
                    "notjson": b"\xff\x00 not json",
                    "huge": msgspec.json.encode(status("huge", last_line="z" * 40_000)),
                    "wrongtypes": json.dumps(
                        {"team": TEAM, "name": "wrongtypes", "state": 42, "since": 1}
                    ).encode(),
                    "badstate": good.replace(b'"working"', b'"dancing"').replace(
                        b'"zed"', b'"badstate"'
                    ),
                    "mallory": msgspec.json.encode(status("alice", state="idle")),
                    "otherteam": msgspec.json.encode(
                        msgspec.structs.replace(status("otherteam"), team="u")
                    ),
                    "badtime": msgspec.json.encode(status("badtime", since="yesterday")),
                    "a.b": good,
                    "_x": good,
                    "list": b"[1, 2, 3]",
                    "\x1b[2J": good,
                    "zed": good,
                    "esc": msgspec.json.encode(status("esc", last_line="\x1b]52;c;evil\x07 hi")),
                }
                for key, value in values.items():
                    await js.publish(f"$KV.{status_bucket(TEAM)}.{key}", value)
                # A value that poses as the server's answer (a status header, no data).
                await js.publish(f"$KV.{status_bucket(TEAM)}.ghost", b"", headers={"Status": "503"})
                # zed's heartbeat is junk, then one that names another agent: zed is lost.
                await js.publish(f"$KV.{heartbeat_bucket(TEAM)}.zed", b"{not json")
                first = await board.statuses(TEAM)
                assert states(first) == {"alice": "working", "esc": "lost", "zed": "lost"}
                # A last line is made visible as model.py promises (never a raw escape).
                assert [s.last_line for s in first if s.name == "esc"] == ["^[]52;c;evil^G hi"]
                await js.publish(
                    f"$KV.{heartbeat_bucket(TEAM)}.zed",
                    json.dumps(
                        {"team": TEAM, "name": "alice", "at": utc_now(), "machine": "x"}
                    ).encode(),
                )
                for _ in range(3):
                    assert states(await board.statuses(TEAM)) == {
                        "alice": "working",
                        "esc": "lost",
                        "zed": "lost",
                    }
                problems = list(board.problems)
                assert problems == noticed
                assert all(p.isprintable() for p in problems), problems
                for key in [*values.keys() - {"zed", "esc", "\x1b[2J"}, "ghost"]:
                    about = [p for p in problems if f"{status_bucket(TEAM)}/{key}:" in p]
                    if key in ("a.b", "_x"):
                        about = [p for p in problems if f"key '{key}'" in p]
                    assert len(about) == 1, (key, problems)
                assert len([p for p in problems if "key '\\x1b[2J'" in p]) == 1, problems
                about_zed = [p for p in problems if f"{heartbeat_bucket(TEAM)}/zed:" in p]
                assert len(about_zed) == 2, problems  # the junk, then the other name
                assert len(problems) == len(values) - 2 + 1 + 2, problems
                assert any("more than 16384" in p for p in problems)
                assert any("names agent 'alice', not its key" in p for p in problems)
                # Still reading and publishing.
                await board.publish(status("bob"))
                assert states(await board.statuses(TEAM)) == {
                    "alice": "working",
                    "bob": "working",
                    "esc": "lost",
                    "zed": "lost",
                }
        finally:
            await nc.close()

    run(body)


def test_heartbeat_buckets_made_by_others(server: NatsServer) -> None:
    async def body() -> None:
        nc = await nats.connect(server.url, user="op", password=password("op"))
        try:
            js = nc.jetstream()
            await js.create_key_value(bucket=heartbeat_bucket(TEAM), history=1)
            with pytest.raises(MessagingError, match="no TTL"):
                async with open_nats_board(config_for(server, "op"), TEAM):
                    pass
            await js.delete_key_value(heartbeat_bucket(TEAM))
            await js.create_key_value(bucket=heartbeat_bucket(TEAM), history=1, ttl=30)
            async with open_nats_board(config_for(server, "op"), TEAM) as board:
                assert board.interval == HEARTBEAT_INTERVAL
                assert [p for p in board.problems if "TTL of 30 s" in p], board.problems
            await js.delete_key_value(heartbeat_bucket(TEAM))
            await js.create_key_value(bucket=heartbeat_bucket(TEAM), history=1, ttl=1.2)
            async with open_nats_board(config_for(server, "op"), TEAM) as board:
                assert board.interval == pytest.approx(0.4)  # a third of the TTL
                assert board.problems == []
            # Another program's stream under the bucket's name.
            await js.delete_key_value(heartbeat_bucket(TEAM))
            await js.add_stream(name=f"KV_{heartbeat_bucket(TEAM)}", subjects=["elsewhere.>"])
            with pytest.raises(MessagingError, match="another program uses that name"):
                async with open_nats_board(config_for(server, "op"), TEAM):
                    pass
        finally:
            await nc.close()

    run(body)


# -- a server that is down -----------------------------------------------------------------


def free_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_no_server_is_a_clear_error_in_bounded_time() -> None:
    config = NatsConfig(url=f"nats://me:secret@127.0.0.1:{free_port()}")

    async def body() -> None:
        started = time.monotonic()
        with pytest.raises(MessagingError) as failed:
            async with open_nats_board(config, TEAM, name="m1"):
                pass
        assert time.monotonic() - started < 20
        error = failed.value
        assert error.store is not None and error.store.startswith("nats://127.0.0.1:")
        assert "status board of team t: cannot connect to NATS" in error.message
        assert "secret" not in str(error)

    run(body)


@pytest.mark.timeout(180)  # bounds of 30 s and more, on a shared machine
def test_a_server_that_goes_down_never_stalls_a_session(server: NatsServer) -> None:
    noticed: list[str] = []

    async def body() -> None:
        async with open_nats_board(
            config_for(server, "m1"), TEAM, name="m1", on_problem=noticed.append
        ) as board:
            await board.publish(status("alice"))
            server.stop()
            # A publish and a read fail in bounded time, saying where.
            for attempt in (
                lambda: board.publish(status("alice", "idle")),
                lambda: board.statuses(TEAM),
            ):
                started = time.monotonic()
                with pytest.raises(MessagingError, match="timed out") as failed:
                    await attempt()
                assert failed.value.store == server.url
                assert time.monotonic() - started < 10

            async def heartbeats_failing() -> bool:
                return any("lost until NATS answers" in p for p in noticed)

            await poll(heartbeats_failing, timeout=SLACK, what="the heartbeats' failure noted")
            assert sum("lost until NATS answers" in p for p in noticed) == 1  # once an outage
            await anyio.to_thread.run_sync(server.start)

            async def heartbeats_resumed() -> bool:
                return any("heartbeats resumed" in p for p in noticed)

            await poll(heartbeats_resumed, timeout=30, what="the heartbeats resumed")
            assert states(await board.statuses(TEAM)) == {"alice": "working"}
            await board.publish(status("alice", "idle"))
            assert states(await board.statuses(TEAM)) == {"alice": "idle"}

    run(body)

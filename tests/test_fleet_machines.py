"""One team across two machines: two RELAY_HOMEs on one real nats-server, each running
`relay up --machine` for its half of the same team file. Each sees the whole team; a
message crosses machines; after kill -9 of every process of one machine, the other sees
that machine's agents lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nats_server import NatsServer, find_nats_server, password, server_config
from scripted_sessions import polled
from test_fleet_up import AGENT, heard, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
RELAY = [sys.executable, "-m", "relay"]
TEAM = "crew"
MACHINES = {"m1": ["Alice", "Bob"], "m2": ["Carol", "Dan"]}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[NatsServer]:
    binary = find_nats_server()
    if binary is None:
        pytest.skip("nats-server binary not available: install Debian's nats-server (.ci/run does)")
    workdir = tmp_path / "nats"
    workdir.mkdir()
    # A user per machine, without permission limits (the permissions are tested elsewhere).
    running = NatsServer(
        binary, workdir, server_config(workdir / "js", {}, unrestricted={TEAM: list(MACHINES)})
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


def machine_home(tmp_path: Path, machine: str, server: NatsServer) -> Path:
    home = tmp_path / f"home-{machine}"
    home.mkdir()
    nats = {"url": server.url, "user": machine, "password": password(machine)}
    settings = {"messaging": {"transport": "nats", "team": TEAM, "nats": nats}}
    (home / "settings.json").write_text(json.dumps(settings))
    return home


def relay(home: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, RELAY_HOME=str(home))
    return subprocess.run(
        [*RELAY, *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def live_states(home: Path, project: Path) -> dict[str, str]:
    done = relay(home, project, "agents", "--json")
    if done.returncode != 0:
        return {}
    members: list[dict[str, Any]] = json.loads(done.stdout)
    return {m["name"]: m["live"]["state"] for m in members if m.get("live") is not None}


def states_now(home: Path, project: Path) -> dict[str, str]:
    """live_states(), from `relay agents --json` run in this process: what a wait polls."""
    argv = ["agents", "--json", "--cwd", str(project)]
    shown = polled(*argv, env={"RELAY_HOME": str(home)}, check=False)
    if not shown:
        return {}
    members: list[dict[str, Any]] = json.loads(shown)
    return {m["name"]: m["live"]["state"] for m in members if m.get("live") is not None}


def kill_machine(home: Path) -> int:
    """SIGKILL every process whose environment has RELAY_HOME=home (a machine dying)."""
    marker = f"\0RELAY_HOME={home}\0".encode()
    killed = 0
    for _ in range(3):
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as environ:
                    if marker not in b"\0" + environ.read():
                        continue
                os.kill(int(name), signal.SIGKILL)
                killed += 1
            except OSError:
                continue
        time.sleep(0.2)
    return killed


def test_two_machines_run_one_team_and_see_each_others_agents_and_their_loss(
    tmp_path: Path, server: NatsServer
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    records = tmp_path / "records"
    records.mkdir()
    lines = [f'team = "{TEAM}"', ""]
    for machine, names in MACHINES.items():
        for name in names:
            lines += [
                "[[agent]]",
                f'name = "{name}"',
                f"command = {json.dumps([sys.executable, AGENT])}",
                f'machine = "{machine}"',
                f"env = {{ AGENT_RECORD = {json.dumps(str(records / (name + '.jsonl')))} }}",
                "",
            ]
    (project / "relay.team.toml").write_text("\n".join(lines))
    homes = {machine: machine_home(tmp_path, machine, server) for machine in MACHINES}
    try:
        for machine, home in homes.items():
            done = relay(home, project, "up", "--yes", "--headless", "--machine", machine)
            assert done.returncode == 0, done.stdout + done.stderr
            assert done.stdout.count("live (relay run pid") == 2  # its own half only
        everyone = {"Alice", "Bob", "Carol", "Dan"}
        for home in homes.values():
            wait_for(
                lambda home=home: (
                    set(states := states_now(home, project)) >= everyone
                    and "lost" not in states.values()
                ),
                "each machine to see the whole team live",
            )
            states = live_states(home, project)
            assert set(states) >= everyone and "lost" not in states.values(), states
        # A message crosses machines: Alice (m1) writes to Carol (m2).
        sent = relay(homes["m1"], project, "send", "Alice", "say @relay:Carol hi across")
        assert sent.returncode == 0, sent.stderr
        wait_for(
            lambda: any("Relay message from Alice" in e["line"] for e in heard(records, "Carol")),
            "Carol to read Alice's message",
        )
        # Machine m2 dies: m1 sees its agents lost within the heartbeat's time to live.
        assert kill_machine(homes["m2"]) >= 4
        killed_at = time.monotonic()
        wait_for(
            lambda: (
                (s := states_now(homes["m1"], project)).get("Carol") == "lost"
                and s.get("Dan") == "lost"
            ),
            "m1 to see m2's agents lost",
            timeout=60,
        )
        assert time.monotonic() - killed_at < 30
        states = live_states(homes["m1"], project)
        assert states["Carol"] == "lost" and states["Dan"] == "lost", states
        assert states["Alice"] != "lost" and states["Bob"] != "lost"
    finally:
        relay(homes["m1"], project, "down")
        kill_machine(homes["m2"])

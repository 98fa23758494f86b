"""What a host pays per event for relay (DESIGN §10, issue 10). Run:
.venv/bin/python tests/perf/bench_host.py [--rounds N] [--project]

Not a pytest module. Every command runs as a host runs a hook: through `sh -c`, with the
event on stdin, in a throwaway RELAY_HOME and HOME where relay is installed into Claude
Code's settings by `relay install claude` (the entries it writes are what is timed).
The variants are interleaved round by round, so a noisy neighbour slows them all alike;
the figures are medians of one run.

  guard direct      the bash guard registered directly with the host
  guard via relay   the same guard as a relay hook, through relay's installed entry
  no hook           an event no relay hook is registered for, through the entry
  python -I -S      a bare `python3 -I -S -c pass`
  ten hooks         ten bash hooks on one event, through the entry
  in-process        `relay hooks run --dialect claude` (the fallback path, no server)
  first call        the entry with no server running (it starts one), each round anew

`--project` registers the guard (and the ten hooks) in the project's .relay/settings.json
instead of the user's, as `./.relay/guard.sh`, trusted with `relay trust`: what a project
guard costs, whose trust relay checks on every call (from the check the server keeps while
every look it made gives the same answer; it prints how many checks were answered so).

Bytecode is compiled first, as a user's install has it, and the timing starts once the
files the setup wrote are older than filecache's 2-second racy window, as a user's are.

On a machine shared with other work the figures say more about the neighbours than about
relay: with the kernel's autogroup scheduling each session gets its share of the CPU,
and relay's server, in a session of its own, has a share that a guard run directly does
not (while the server also ran the hooks, a busy machine made a guard through relay
measure 0.9x its direct cost). `--realtime` runs the bench and all it starts (the server
too) under SCHED_FIFO, out of the neighbours' reach: the figures are then the work each
path does (needs root or CAP_SYS_NICE).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import relay
from relay.config import sockets
from relay.config.filecache import RACY_SECONDS
from relay.server import client as server_client

TARGET_GUARD_RATIO = 1.25  # issue 32 point 7 (DESIGN §10 says 1.5)
TARGET_EMPTY_RATIO = 1.0
GUARD = """#!/bin/bash
input=$(cat)
case "$input" in
  *"rm -rf"*) echo '{"decision": "deny", "reason": "no rm -rf"}' ;;
  *) echo '{}' ;;
esac
"""
EVENT = json.dumps(
    {
        "session_id": "bench",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/tmp",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls -la"},
        "tool_use_id": "toolu_1",
    }
).encode()


def timed(command: str, env: dict[str, str], cwd: Path, event: bytes = EVENT) -> float:
    """One run through `sh -c`, event on stdin: wall milliseconds."""
    started = time.perf_counter()
    done = subprocess.run(
        ["sh", "-c", command], input=event, env=env, cwd=cwd, capture_output=True, check=False
    )
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode not in (0, 2):
        raise SystemExit(f"{command!r} failed ({done.returncode}): {done.stderr.decode()[:400]}")
    return elapsed


def setup(root: Path, *, in_project: bool = False) -> tuple[dict[str, str], Path, dict[str, str]]:
    """A sandbox: env, project dir, and the commands to time (`in_project`: the hooks are
    the project's, trusted)."""
    home = root / "home"
    project = root / "project"
    (project / ".git").mkdir(parents=True)
    home.mkdir()
    relay_home = root / "relay-home"
    (project / ".relay").mkdir()
    guard = project / ".relay" / "guard.sh" if in_project else root / "guard.sh"
    guard.write_text(GUARD)
    guard.chmod(0o755)
    env = dict(os.environ)
    env.update(HOME=str(home), RELAY_HOME=str(relay_home), RELAY_SYSTEM_SETTINGS=str(root / "none"))
    env.pop("CLAUDE_CONFIG_DIR", None)
    relay_home.mkdir()
    named = "./.relay/guard.sh" if in_project else str(guard)
    hooks = {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"name": "guard", "command": named}]}],
        "PostToolUse": [
            # Ten different commands (identical ones would be deduplicated into one run).
            {"hooks": [{"name": f"h{index}", "command": f"{named} {index}"} for index in range(10)]}
        ],
    }
    settings = project / ".relay" / "settings.json" if in_project else relay_home / "settings.json"
    settings.write_text(json.dumps({"hooks": hooks}))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "relay",
            "install",
            "claude",
            "--events",
            "PreToolUse,PostToolUse,Notification",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    if in_project:
        subprocess.run(
            [sys.executable, "-m", "relay", "trust", "--yes", "--cwd", str(project)],
            env=env,
            check=True,
            capture_output=True,
        )
    installed = json.loads((home / ".claude" / "settings.json").read_text())["hooks"]
    entry = installed["PreToolUse"][0]["hooks"][0]["command"]
    ten = installed["PostToolUse"][0]["hooks"][0]["command"]
    empty = installed["Notification"][0]["hooks"][0]["command"]
    relay_bin = Path(sys.executable).parent / "relay"
    commands = {
        "guard direct": str(guard),
        "guard via relay": entry,
        "no hook": empty,
        "python -I -S": f"{sys.executable} -I -S -c pass",
        "ten hooks": ten,
        "in-process": f"{relay_bin} hooks run --dialect claude PreToolUse",
    }
    return env, project, commands


def stop_server(env: dict[str, str]) -> None:
    path = server_client.socket_path(env)
    if server_client.control(path, "stop") is not None:
        deadline = time.monotonic() + 10
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument(
        "--realtime",
        action="store_true",
        help="run under SCHED_FIFO (with everything it starts): no neighbour's share counts",
    )
    parser.add_argument(
        "--project",
        action="store_true",
        help="the guard and the ten hooks are the project's, trusted (`relay trust`)",
    )
    options = parser.parse_args()
    if options.realtime:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    compileall.compile_dir(str(Path(relay.__file__).parent), quiet=1)
    with tempfile.TemporaryDirectory(prefix="relay-bench-host-") as scratch:
        env, project, commands = setup(Path(scratch), in_project=options.project)
        # A project's hooks are found from the event's cwd: the project's, for --project.
        event = (
            EVENT.replace(b'"/tmp"', json.dumps(str(project)).encode())
            if options.project
            else EVENT
        )
        client_kind = "native" if "relay-hook.py" not in commands["no hook"] else "python"
        times: dict[str, list[float]] = {name: [] for name in [*commands, "first call"]}
        # Files changed in the last 2 seconds are read again on every call (filecache's
        # racy rule); a user's settings and hooks are older than that, so wait it out.
        time.sleep(RACY_SECONDS + 0.5)
        try:
            for command in commands.values():  # warm-up: the server, the page cache
                timed(command, env, project, event)
            for _ in range(options.rounds):
                for name, command in commands.items():
                    times[name].append(timed(command, env, project, event))
            status = server_client.control(server_client.socket_path(env), "status")
            figures = json.loads(status) if status is not None else {}
            plans, checks = figures.get("plans"), figures.get("trust_checks")
            for _ in range(max(5, options.rounds // 8)):
                stop_server(env)
                times["first call"].append(timed(commands["no hook"], env, project, event))
        finally:
            stop_server(env)
    medians = {name: statistics.median(values) for name, values in times.items()}
    scheduling = ", SCHED_FIFO" if options.realtime else ""
    print(
        f"relay {sockets.version()}, {client_kind} client, {options.rounds} rounds"
        f"{scheduling}{', project hooks' if options.project else ''}, medians:"
    )
    for name, value in medians.items():
        print(f"  {name:16} {value:7.2f} ms")
    guard_ratio = medians["guard via relay"] / medians["guard direct"]
    empty_ratio = medians["no hook"] / medians["python -I -S"]
    first_ratio = medians["first call"] / medians["in-process"]
    print(f"guard via relay / guard direct   {guard_ratio:.3f}x (target <= {TARGET_GUARD_RATIO})")
    print(f"no hook / python -I -S           {empty_ratio:.2f}x (target <= {TARGET_EMPTY_RATIO})")
    print(f"first call / in-process          {first_ratio:.2f}x (target <= 1.0)")
    if plans is not None:  # a server that keeps plans: how many calls were served from one
        print(f"plans kept {plans['kept']}, used {plans['used']}")
    if checks is not None and options.project:  # and trust checks (project hooks)
        print(f"trust checks kept {checks['kept']}, used {checks['used']}")


if __name__ == "__main__":
    main()

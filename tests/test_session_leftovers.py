"""What an agent starts detached ends with its `relay run` session (spec/session.md, "The
end"): real `relay run` processes around a shell agent that starts helpers in sessions of
their own (`setsid`), as Codex starts its app-server. The real Codex is in
test_hosts_codex_tui.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from relay.session.leftovers import find_leftovers

RELAY = str(Path(sys.executable).parent / "relay")


def _pids(folder: Path) -> dict[str, int]:
    """name -> pid of the helpers the agent wrote down (`<name>.pid` files)."""
    return {path.stem: int(path.read_text()) for path in folder.glob("*.pid")}


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[:1] != [b"Z"]
    except OSError:
        return False


def test_helpers_the_agent_starts_detached_end_with_the_session(
    tmp_path: Path, relay_home: Path
) -> None:
    """A helper in a session of its own, one that ignores SIGTERM, and one that starts
    another when it is ended all end with the session and are recorded; one that drops
    RELAY_SESSION_ID from its environment is left running."""
    folder = tmp_path / "pids"
    folder.mkdir()
    scripts = {
        # Each helper writes its pid down, then waits.
        "helper": 'echo $$ > "$1/$2.pid"; exec sleep 300',
        "stubborn": 'trap "" TERM; echo $$ > "$1/$2.pid"; while :; do sleep 1; done',
        # Asked to end, it starts another helper first.
        "respawner": (
            'trap \'setsid sh "$0" "$1" respawned & exit 0\' TERM\n'
            'echo $$ > "$1/$2.pid"; while :; do sleep 1; done'
        ),
    }
    for name, text in scripts.items():
        (tmp_path / f"{name}.sh").write_text(text + "\n")
    helper = tmp_path / "helper.sh"
    (tmp_path / "respawner.sh").write_text(scripts["respawner"].replace('"$0"', str(helper)) + "\n")
    agent = (
        f"setsid sh {helper} {folder} daemon &"
        f" setsid sh {tmp_path / 'stubborn.sh'} {folder} stubborn &"
        f" setsid sh {tmp_path / 'respawner.sh'} {folder} respawner &"
        f" env -u RELAY_SESSION_ID setsid sh {helper} {folder} kept &"
        f" while [ $(ls {folder} | wc -l) -lt 4 ]; do sleep 0.05; done; echo started"
    )
    argv = [RELAY, "run", "--headless", "--name", "Alice", "--cwd", str(tmp_path), "--"]
    pids: dict[str, int] = {}
    try:
        done = subprocess.run(
            [*argv, "sh", "-c", agent],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        pids = _pids(folder)
        assert set(pids) == {"daemon", "stubborn", "respawner", "kept", "respawned"}, pids
        left = {name for name, pid in pids.items() if _alive(pid)}
        assert left == {"kept"}, f"left running: {left}"
        transcript = relay_home / "state" / "sessions" / "Alice.transcript.jsonl"
        ended = [
            entry["text"]
            for entry in map(json.loads, transcript.read_text().splitlines())
            if entry.get("kind") == "ended"
        ]
        for name in ("daemon", "stubborn", "respawner", "respawned"):
            assert any(f"(pid {pids[name]})" in text for text in ended), (name, ended)
    finally:
        for pid in _pids(folder).values():  # on a failure too: the suite leaves nothing
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_relays_own_services_are_left_running_and_said(tmp_path: Path) -> None:
    """`relay serve` and a team supervisor carry the session's id when started from it,
    but are meant to outlive it: found, and given the reason they are left."""
    session = "f" * 32
    env = {**os.environ, "RELAY_SESSION_ID": session}
    # Stand-ins with relay's own command lines, that never start a server or a team.
    script = "import time; time.sleep(300)"
    started = [
        subprocess.Popen([sys.executable, "-c", script, "-m", "relay", "serve"], env=env),
        subprocess.Popen([sys.executable, "-c", script, "-m", "relay.fleet.supervise"], env=env),
        subprocess.Popen([sys.executable, "-c", script], env=env),
    ]
    try:
        deadline = time.monotonic() + 30
        while len(found := find_leftovers(session)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        reasons = {left.pid: left.kept for left in found}
        serve, supervisor, plain = (process.pid for process in started)
        assert set(reasons) == {serve, supervisor, plain}
        assert "hook server" in reasons[serve]
        assert "relay up" in reasons[supervisor]
        assert reasons[plain] == ""
    finally:
        for process in started:
            process.kill()
            process.wait()

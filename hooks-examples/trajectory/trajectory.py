#!/usr/bin/env python3
"""Keep a trajectory of a `relay run` session with `trail` (the agent-trajectories CLI).

One script for four events (register it for each; see settings.json here):

SessionStart   With a task (`relay run --task "…"`): starts a trajectory titled with
               it (`trail start TASK -a AGENT -q`), or joins the one already active in
               the data folder (trail keeps one active at a time). Injects the
               trajectory's status and how to announce phases. Without a task: nothing.
Output         A line of the agent's own output such as `Phase: testing` (the words
               below) records `trail decision "phase: testing" -r LINE` -- once per
               change of phase, never for a repeat, so a chatty agent costs nothing.
MessageReceived  Records the message: `trail reflect "message from SENDER: BODY"`.
SessionEnd     With a trajectory active: asks the agent (reason `stop`, when relay can
               still type) to complete it with the real `trail complete` flags; on any
               other end, tells the human it is still open.

`trail status` has no JSON output, so the status is read from trail's own files:
`$TRAJECTORIES_DATA_DIR` (default `.agentworkforce/trajectories` in the session's
folder), `active/<id>/trajectory.json`. `trail` is found on PATH, or at `$TRAIL_BIN`.
A failing `trail` never fails the hook: the agent's work goes on, relay shows the
reason to the human (`systemMessage`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

PHASES = {
    "plan": "planning",
    "planning": "planning",
    "design": "planning",
    "implement": "implementing",
    "implementing": "implementing",
    "implementation": "implementing",
    "coding": "implementing",
    "test": "testing",
    "testing": "testing",
    "review": "reviewing",
    "reviewing": "reviewing",
    "done": "done",
    "finishing": "done",
}
PHASE_LINE = re.compile(r"^\s*(?:[#*>\-]+\s*)?phase\s*[:=\-]\s*([a-z]+)\b", re.IGNORECASE)
MAX_TEXT = 500
TRAIL_TIMEOUT = 20


def main() -> int:
    event = json.load(sys.stdin)
    name = event.get("hook_event_name", "")
    cwd = Path(event.get("cwd") or os.getcwd())
    handler = {
        "SessionStart": session_start,
        "Output": output,
        "MessageReceived": message_received,
        "SessionEnd": session_end,
    }.get(name)
    if handler is None:
        return 0
    try:
        answer = handler(event, cwd)
    except TrailError as exc:
        answer = {"systemMessage": f"trajectory: {exc}"}
    if answer:
        json.dump(answer, sys.stdout)
    return 0


class TrailError(Exception):
    """`trail` is missing or failed: the reason, for the human."""


def session_start(event: dict, cwd: Path) -> dict | None:
    task = (event.get("task") or "").strip()
    if not task:
        return None
    agent = event.get("agent_name") or "agent"
    active = active_trajectory(cwd)
    if active is None:
        trail(cwd, "start", task[:MAX_TEXT], "-a", agent, "-q")
        active = active_trajectory(cwd)
        if active is None:
            raise TrailError("trail start reported no error, but no trajectory is active")
        joined = "started"
    else:
        trail(cwd, "reflect", f"{agent} joined, to work on: {task[:MAX_TEXT]}")
        joined = "joined (one was already active)"
    status = describe(active, cwd)
    return {
        "inject": (
            f"Trajectory {joined}: {status}. When your work moves to another phase, say so "
            f"on a line of its own: Phase: planning, implementing, testing or reviewing."
        )
    }


def output(event: dict, cwd: Path) -> dict | None:
    phase = None
    line = ""
    for candidate in (event.get("text") or "").splitlines():
        match = PHASE_LINE.match(candidate)
        if match and match.group(1).lower() in PHASES:
            phase, line = PHASES[match.group(1).lower()], candidate.strip()
    if phase is None:
        return None
    active = active_trajectory(cwd)
    if active is None:
        return None
    trajectory_id = active["id"]
    state = phase_file(cwd)
    phases = read_json(state) or {}
    if phases.get(trajectory_id) == phase:
        return None  # the same phase again: recorded once
    trail(cwd, "decision", f"phase: {phase}", "-r", line[:MAX_TEXT])
    phases[trajectory_id] = phase
    state.write_text(json.dumps(phases))
    return None


def message_received(event: dict, cwd: Path) -> dict | None:
    if active_trajectory(cwd) is None:
        return None
    sender = event.get("sender") or "someone"
    body = " ".join((event.get("body") or "").split())[:MAX_TEXT]
    trail(cwd, "reflect", f"message from {sender}: {body}")
    return None  # an inject here would be typed in with the message


def session_end(event: dict, cwd: Path) -> dict | None:
    active = active_trajectory(cwd)
    if active is None:
        return None
    command = 'trail complete --summary "<what was done>" --approach "<how>" --confidence <0-1>'
    if event.get("reason") == "stop":
        return {
            "inject": (
                f"Before you finish, complete the trajectory {active['id']}: run `{command}` "
                "with your own summary, approach and confidence."
            )
        }
    return {
        "systemMessage": (f"trajectory {active['id']} is still active; complete it with {command}")
    }


def data_dir(cwd: Path) -> Path:
    configured = os.environ.get("TRAJECTORIES_DATA_DIR")
    return Path(configured) if configured else cwd / ".agentworkforce" / "trajectories"


def active_trajectory(cwd: Path) -> dict | None:
    """The active trajectory's JSON (trail keeps at most one), or None."""
    folder = data_dir(cwd) / "active"
    found = [read_json(path) for path in sorted(folder.glob("*/trajectory.json"))]
    found = [item for item in found if isinstance(item, dict) and item.get("id")]
    return found[-1] if found else None


def describe(trajectory: dict, cwd: Path) -> str:
    title = (trajectory.get("task") or {}).get("title", "")
    agents = ", ".join(agent.get("name", "?") for agent in trajectory.get("agents", []))
    events = [
        event for chapter in trajectory.get("chapters", []) for event in chapter.get("events", [])
    ]
    phase = (read_json(phase_file(cwd)) or {}).get(trajectory["id"])
    where = f"phase {phase}" if phase else "no phase announced yet"
    return (
        f'{trajectory["id"]} "{title}" ({trajectory.get("status", "active")}; agents: '
        f"{agents or 'none'}; {len(events)} events; {where})"
    )


def phase_file(cwd: Path) -> Path:
    return data_dir(cwd) / ".relay-phases.json"


def read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def trail(cwd: Path, *args: str) -> str:
    program = os.environ.get("TRAIL_BIN") or shutil.which("trail")
    if not program:
        raise TrailError("trail is not installed (npm install -g agent-trajectories)")
    try:
        done = subprocess.run(
            [program, *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=TRAIL_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TrailError(f"trail {args[0]} failed: {exc}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        reason = next(
            (line for line in lines if line.startswith("Error:")), lines[-1] if lines else ""
        )
        raise TrailError(f"trail {args[0]} failed: {reason}")
    return done.stdout


if __name__ == "__main__":
    sys.exit(main())

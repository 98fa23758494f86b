#!/usr/bin/env python3
"""tests_before_stop.py: when the agent wants to stop, run the tests; while they fail, ask it to go on.

Event: AfterAgent (Claude Code: Stop). Reads stop_hook_active from the event on stdin.
Answer: {"decision": "block", "reason": "Tests are failing: … last lines …"} when the test
command fails or runs past its time (for AfterAgent/Stop, block means "don't stop yet: here
is what to do"); no output otherwise: no opinion, the agent stops.

Configuration, from the environment (set it in the hook's "env" in settings.json):
  RELAY_TEST_COMMAND  the test command, run by `sh -c` in the project directory
                      ("pytest -q", "npm test", "make test"). Unset or empty: no opinion.
  RELAY_TEST_TIMEOUT  seconds the tests may take (default 240); keep the hook's own
                      timeout above it. Past it, the tests and their children are killed.
When stop_hook_active is true the agent is already going on because of a stop hook: then
this hook lets it stop without running anything, so a test that cannot pass never traps
the agent in a loop. A command that cannot start (exit 126 or 127) is reported to the user
instead, not to the agent. Standard library, Python 3.9+.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from types import FrameType

TAIL_LINES = 30
TAIL_CHARS = 3000
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

RUNNING: list[subprocess.Popen[bytes]] = []  # for on_sigterm


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the tests' whole process group: no test process may outlive the hook."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    """relay's timeout: the tests run in a session of their own, so take them down too."""
    for process in RUNNING:
        kill(process)
    sys.exit(128 + signum)


def run_tests(command: str, cwd: str, timeout: float) -> tuple[int | None, str]:
    """(exit code, or None when it ran past `timeout`; the combined output)."""
    try:
        process = subprocess.Popen(
            ["/bin/sh", "-c", command],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own, to kill it with its children
        )
    except OSError as error:  # e.g. the project directory is gone
        return 127, str(error)
    RUNNING.append(process)
    code: int | None
    try:
        output, _ = process.communicate(timeout=timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        kill(process)
        try:
            output, _ = process.communicate(timeout=2)
        except subprocess.TimeoutExpired:  # a grandchild escaped and holds the pipe
            output = b""
        code = None
    RUNNING.remove(process)
    return code, ANSI.sub("", output.decode(errors="replace"))


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def tail(text: str) -> str:
    lines = text.strip().splitlines()[-TAIL_LINES:]
    return "\n".join(lines)[-TAIL_CHARS:]


def main() -> int:
    try:
        event = json.load(sys.stdin)
    except ValueError as error:
        print(f"tests_before_stop.py: the event is not JSON: {error}", file=sys.stderr)
        return 1
    command = os.environ.get("RELAY_TEST_COMMAND", "").strip()
    if not command or not isinstance(event, dict) or event.get("stop_hook_active") is True:
        return 0
    timeout = float(os.environ.get("RELAY_TEST_TIMEOUT") or 240)
    cwd = next(
        (
            os.environ[key]
            for key in ("RELAY_PROJECT_DIR", "CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR")
            if os.environ.get(key)
        ),
        os.getcwd(),
    )
    code, output = run_tests(command, cwd, timeout)
    if code == 0:
        return 0
    if code in (126, 127):
        message = f"tests-before-stop: `{command}` could not run (exit {code})"
        message += f": {tail(output)}" if output.strip() else ""
        print(json.dumps({"systemMessage": message}))
        return 0
    if code is None:
        reason = (
            f"Tests did not finish: `{command}` ran past {timeout:g}s. Look for a test the last "
            "change made hang, fix it, and run the tests again before you finish."
        )
    else:
        status = f"exited with code {code}" if code > 0 else f"was killed by {signal_name(-code)}"
        reason = (
            f"Tests are failing: `{command}` {status}. Fix them and run the tests again before "
            "you finish, or tell the user why they cannot pass."
        )
    reason += (
        f" Last lines of its output:\n{tail(output)}" if output.strip() else " It printed nothing."
    )
    print(json.dumps({"decision": "block", "reason": reason}))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_sigterm)
    sys.exit(main())

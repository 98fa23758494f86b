"""Sessions on the scripted fake agent (tests/resources/runtime/scripted_agent.py), in process
or as real `relay run` processes, and what the agent read.

Not a test module: tests import it as `from scripted_sessions import ...` (tests/ is on
sys.path, next to conftest.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

from relay.engine.system import HookSystem
from relay.session.runtime import Session

AGENT = str(Path(__file__).resolve().parent / "resources" / "runtime" / "scripted_agent.py")
RELAY = str(Path(sys.executable).parent / "relay")


def agent(steps: list[dict[str, Any]], record: Path) -> list[str]:
    """The command of a scripted agent following `steps` and recording what it reads in `record`."""
    return [sys.executable, AGENT, json.dumps(steps), str(record)]


def reads(record: Path) -> list[tuple[str, str]]:
    """What the agent read: (label, line) per read step, in order."""
    if not record.exists():
        return []
    return [
        (entry["label"], entry["line"])
        for entry in map(json.loads, record.read_text().splitlines())
    ]


def run_session(
    command: list[str], project: Path, *, settings_files: tuple[Path, ...] = (), **options: Any
) -> tuple[int, str]:
    """Run a headless session in this process; return its exit code and what it printed."""
    out = project / "session-stdout.txt"
    with out.open("wb") as stream:
        hooks = HookSystem(cwd=project, settings=settings_files)
        session = Session(
            command,
            hooks=hooks,
            headless=True,
            cwd=project,
            stdin_fd=-1,
            stdout_fd=stream.fileno(),
            **options,
        )
        code = anyio.run(session.run)
        hooks.close()
    return code, out.read_text()


def start_relay_run(
    name: str,
    steps: list[dict[str, Any]],
    record: Path,
    *,
    settings: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`relay run --headless --name NAME` on a scripted agent, as a real process."""
    options = [arg for path in settings for arg in ("--settings", str(path))]
    return subprocess.Popen(
        [RELAY, "run", "--headless", "--name", name, *options, "--", *agent(steps, record)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=record.parent,
        env=dict(env) if env is not None else None,
    )


def finish(process: subprocess.Popen[bytes], timeout: float = 30.0) -> tuple[int, str]:
    """Wait for a `relay run` process; its exit code and stderr (killed, and an error, if it hangs)."""
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        raise AssertionError(f"session did not end: {err.decode()}") from None
    return process.returncode, err.decode()


def polled(*args: str, env: Mapping[str, str] | None = None, check: bool = True) -> str:
    """The stdout of `relay ARGS` run in this process (click's runner), for the condition of
    a wait: a wait polls several times a second, and a relay process per poll (a sixth of
    a CPU-second each) kept a core busy for as long as it waited. The command's code is the
    same; what it shows is still checked through the console script after the wait.
    `env`: variables set while it runs (another RELAY_HOME). A command that fails is an
    AssertionError, or with `check=False` an empty string (the wait goes on)."""
    from click.testing import CliRunner

    from relay.cli.main import cli

    done = CliRunner(env=env).invoke(cli, list(args))
    if done.exit_code == 0:
        return done.stdout
    assert not check, (args, done.output, done.exception)
    return ""


def wait_for(condition: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    """Poll `condition` until it is true; an AssertionError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)

"""The suite's own clean-up check (conftest.py): a run that leaves a process, a socket or a
tmux server behind fails, naming the test and the file. Run on a tiny suite of its own."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parent / "conftest.py"
LEAVING = """
import os
import socket
import subprocess


def test_leaves_a_socket() -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(os.path.join(os.environ["XDG_RUNTIME_DIR"], "bell"))
    sock.close()


def test_leaves_a_tmux_server() -> None:
    subprocess.run(
        ["tmux", "-L", "left", "-f", "/dev/null", "new-session", "-d", "sleep 100"], check=True
    )


def test_leaves_a_process() -> None:
    subprocess.Popen(["sleep", "SECONDS"])


def test_cleans_up() -> None:
    subprocess.run(["tmux", "-L", "tidy", "-f", "/dev/null", "new-session", "-d", "sleep 100"], check=True)
    subprocess.run(["tmux", "-L", "tidy", "kill-server"], check=True)
"""


def kill_sleeps(seconds: str) -> None:
    """End the `sleep SECONDS` the inner suite left on purpose (found by its command line)."""
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                if cmdline.read() == f"sleep\0{seconds}\0".encode():
                    os.kill(int(name), 9)
        except (OSError, ValueError):
            continue


def inner_suite(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    """`source` as a test file beside a copy of the suite's conftest.py, run by pytest in
    a run of its own (not this run's marker or folder)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(CONFTEST, suite / "conftest.py")
    (suite / "test_inner.py").write_text(textwrap.dedent(source))
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("RELAY_TEST_RUN", "RELAY_TEST_RUN_FOLDER", "PYTEST_XDIST_WORKER")
        and not key.startswith("PYTEST_")
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "."],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_run_that_leaves_sockets_tmux_servers_or_processes_fails_and_names_them(
    tmp_path: Path,
) -> None:
    seconds = f"100.{secrets.randbelow(10**9)}"
    try:
        done = inner_suite(tmp_path, LEAVING.replace("SECONDS", seconds))
    finally:
        kill_sleeps(seconds)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "4 passed" in done.stdout
    report = done.stderr
    assert "left 1 process(es) behind" in report and f"sleep {seconds}" in report
    assert "left 2 socket file(s) behind" in report, report
    assert "test_inner.py::test_leaves_a_socket: /tmp/rr-" in report
    assert "/x/bell" in report
    assert "test_inner.py::test_leaves_a_tmux_server: /tmp/rr-" in report
    assert "/left (a tmux server still running)" in report
    assert "tidy" not in report  # a server killed by its test: its socket file is removed

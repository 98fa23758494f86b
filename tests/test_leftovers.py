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
import sys
import time


def test_leaves_a_socket_listened_on() -> None:
    path = os.path.join(os.environ["XDG_RUNTIME_DIR"], "bell")
    bind = "import socket, sys, time; s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); "
    bind += "s.bind(sys.argv[1]); time.sleep(100)"
    subprocess.Popen([sys.executable, "-c", bind, path])
    while not os.path.exists(path):
        time.sleep(0.01)


def test_leaves_the_socket_of_a_process_that_ended() -> None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(os.path.join(os.environ["XDG_RUNTIME_DIR"], "ended"))
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


def end_what_it_left(tmp_path: Path) -> None:
    """Kill what the inner suite left on purpose: its processes, found by the environment
    they inherited (the suite's folder, its RELAY_HOMEs under `tmp_path`)."""
    mark = str(tmp_path).encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as environ:
                if mark in environ.read():
                    os.kill(int(name), 9)
        except OSError:
            continue


def inner_suite(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    """`source` as a test file beside a copy of the suite's conftest.py, run by pytest in
    a run of its own (not this run's marker or folder)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(CONFTEST, suite / "conftest.py")
    shutil.copy(CONFTEST.with_name("browser.py"), suite / "browser.py")  # its plugin
    # What it imports.
    shutil.copytree(CONFTEST.with_name("hostkit"), suite / "hostkit")
    shutil.copy(CONFTEST.with_name("processes.py"), suite / "processes.py")
    (suite / "test_inner.py").write_text(textwrap.dedent(source))
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("RELAY_TEST_RUN", "RELAY_TEST_RUN_FOLDER", "PYTEST_XDIST_WORKER")
        and not key.startswith("PYTEST_")
    }
    env["RELAY_TEST_ENDING_GRACE"] = "2"  # its listeners are left on purpose: no long wait
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            f"--basetemp={tmp_path / 'inner-tmp'}",
            ".",
        ],
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
    seconds = f"100.{secrets.randbelow(10**9)}"  # its own: found in the report
    try:
        done = inner_suite(tmp_path, LEAVING.replace("SECONDS", seconds))
    finally:
        end_what_it_left(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "5 passed" in done.stdout
    report = done.stderr
    assert "left 2 process(es) behind" in report and f"sleep {seconds}" in report
    assert "left 2 socket file(s) behind" in report, report
    assert "test_inner.py::test_leaves_a_socket_listened_on: /tmp/rr-" in report
    assert "/x/bell (still listened on)" in report
    assert "ended" not in report  # its process is gone: only a file, removed with the folder
    assert "test_inner.py::test_leaves_a_tmux_server: /tmp/rr-" in report
    assert "/left (a tmux server still running)" in report
    assert "tidy" not in report  # a server killed by its test: its socket file is removed


STARTING_SERVER = """
import subprocess
import sys

from relay.server import client


def test_a_hook_client_starts_a_server_just_before_the_test_ends() -> None:
    # As a hook client does (detached), and the test is over before it answers.
    subprocess.Popen(
        [sys.executable, "-I", "-m", "relay", "serve", "--socket", client.socket_path()],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
"""


def test_a_server_still_starting_when_its_test_ends_is_ended_with_it(tmp_path: Path) -> None:
    """The race that left `relay serve` processes after the suite: a client starts a server
    and the test ends before it answers; the RELAY_HOME fixture ends it all the same."""
    try:
        done = inner_suite(tmp_path, STARTING_SERVER)
    finally:
        end_what_it_left(tmp_path)  # never leave one, whatever happened
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert "behind" not in done.stderr, done.stderr


LATE_CLIENT = '''
import subprocess
import sys

LATE = """
import os, time
from relay.server import client
path = client.socket_path()
deadline = time.monotonic() + 3
while time.monotonic() < deadline:  # until the test's teardown has stopped its server
    try:
        if os.stat(path + ".spawned").st_mtime > time.time() + 60:
            break
    except OSError:
        pass
    time.sleep(0.01)
client.start_server(path)  # what a hook client does when no server answers
"""


def test_a_hook_call_still_under_way_when_the_test_ends() -> None:
    subprocess.Popen(
        [sys.executable, "-c", LATE],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
'''


def test_a_hook_call_that_outlives_its_test_starts_no_server(tmp_path: Path) -> None:
    """A host's last hook, still calling relay after its test ended, found no server (the
    fixture had stopped it) and started one, which outlived the run: the fixture's spawn
    stamp from the future makes that call run in-process."""
    try:
        done = inner_suite(tmp_path, LATE_CLIENT)
    finally:
        end_what_it_left(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert "behind" not in done.stderr, done.stderr

"""Shared fixtures: every test gets its own RELAY_HOME and no system settings."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostkit.environment import CI_MARKERS
from hypothesis import settings
from processes import alive

pytest_plugins = ["browser"]  # the dashboard's tests: Chromium, a page, a relay dashboard

# No deadline for hypothesis's examples: its default (200 ms an example) failed a test
# whose example took 315 ms on a loaded machine and 98 ms when tried again. How long an
# example takes is the machine's business; what it finds is the test's.
settings.register_profile("relay", deadline=None)
settings.load_profile("relay")


@pytest.fixture(autouse=True)
def relay_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point RELAY_HOME (user config and all state) at a fresh folder; stop the resident
    server a test's hook client may have started there (it would idle for 15 minutes)."""
    home = tmp_path / "relay-home"
    home.mkdir()
    monkeypatch.setenv("RELAY_HOME", str(home))
    monkeypatch.setenv("RELAY_SYSTEM_SETTINGS", str(tmp_path / "no-system-settings.json"))
    monkeypatch.delenv("RELAY_DEBUG", raising=False)
    monkeypatch.delenv("RELAY_SETTINGS", raising=False)
    before = _last_pid()
    yield home
    from relay.server import client

    path = client.socket_path()
    # A hook call that outlives the test (a host's last hook, a call still under way) must
    # not start a server once this one has been stopped: a spawn stamp from the future
    # makes every client take its calls in-process. It goes with the run (the shared
    # ones: pytest_sessionfinish; the others with tmp_path).
    _forbid_spawns(path)
    if os.path.exists(path):
        client.control(path, "stop")
    # A server a hook client started may still be starting (not answering yet) or stopping:
    # found by its command line, ended (SIGTERM: it removes its socket), waited for.
    _end(_servers_at(path, since=before))
    if not path.startswith(str(home) + os.sep):
        # A RELAY_HOME path too long for a socket puts it in the shared /tmp/agent-relay-<uid>/,
        # with the lock and spawn stamp beside it: those go once the server has.
        deadline = time.monotonic() + 10
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        for leftover in (path, path + ".lock"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)
        _record(SHARED_SOCKETS, path)


SPAWNS_FORBIDDEN = 10 * 365 * 24 * 3600.0
"""How far in the future a test's spawn stamp is set once its server is stopped."""


def _forbid_spawns(path: str) -> None:
    """No client starts a server at `path` from now on (relay.server.client.start_server
    starts none while the stamp is younger than SPAWN_INTERVAL)."""
    from relay.server import client

    if not client.make_private_dir(os.path.dirname(path)):
        return
    stamp = path + ".spawned"
    with open(stamp, "wb"):
        pass
    future = time.time() + SPAWNS_FORBIDDEN
    os.utime(stamp, (future, future))


def _last_pid() -> int | None:
    """The last pid the kernel gave out (in this pid namespace), or None when unknown."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as last:
            return int(last.read())
    except (OSError, ValueError):
        return None


def _servers_at(path: str, since: int | None = None) -> list[int]:
    """The pids of `relay serve --socket PATH` processes (clients start servers so). With
    `since` (the last pid given out before the test: PATH is the test's own, so a server
    there started during it), only the command lines of processes started after it are
    read, unless pids wrapped around meanwhile: every test read all of them, a few
    hundred files each on a busy run."""
    wanted = f"\0serve\0--socket\0{path}\0".encode()
    last = _last_pid()
    after = since if since is not None and last is not None and last >= since else -1
    found = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit() or int(name) <= after:
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                if wanted in cmdline.read() + b"\0":
                    found.append(int(name))
        except OSError:
            continue
    return found


def _end(pids: list[int], grace: float = 10.0) -> None:
    """Wait for each pid to end (a server told to stop is ending); SIGTERM to those still
    there after `grace` seconds (one still starting never heard the stop), SIGKILL to those
    still there `grace` seconds later."""
    import signal

    for sent in (None, signal.SIGTERM, signal.SIGKILL):
        for pid in pids if sent is not None else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sent)
        deadline = time.monotonic() + grace
        while pids and time.monotonic() < deadline:
            pids = [pid for pid in pids if alive(pid)]
            if pids:
                time.sleep(0.05)
        if not pids:
            return


@pytest.fixture
def team_default(relay_home: Path) -> None:
    """For tests that address the team `default` (use with `pytest.mark.usefixtures`): set
    it, as an administrator would (the system settings file), since a project has a team
    of its own otherwise."""
    pinned = json.dumps({"messaging": {"team": "default"}})
    for path in {Path(os.environ["RELAY_SYSTEM_SETTINGS"]), relay_home / "no-system-settings.json"}:
        path.write_text(pinned)


# ---- the suite leaves no process behind --------------------------------------------------

RUN_MARKER = "RELAY_TEST_RUN"
"""In the environment of the test run and so of every process it starts (unless a test gives
a process an environment of its own): what finds a process the suite left behind."""
LEFTOVER_GRACE = 10.0
"""Seconds processes of the run get to end after the last test before they count as left."""
ENDING_GRACE = float(os.environ.get("RELAY_TEST_ENDING_GRACE", "30"))
"""Seconds a test's processes, told to end as it ended, get before a socket they still
listen on counts as left (a poll: a test whose processes have ended waits for nothing;
tests/test_leftovers.py's inner runs, whose listeners never end, set it lower)."""


RUN_FOLDER = "RELAY_TEST_RUN_FOLDER"
"""A short private folder of the run (xdist's workers inherit it): each test's tmux sockets
and doorbells are made under it, so that what the suite left there is the suite's."""
SHARED_SOCKETS = "shared-sockets"
"""The run's record of the server sockets its tests' RELAY_HOMEs put in /tmp/agent-relay-<uid>/."""
LEFT_SOCKETS = "left-sockets"
"""The run's record of the sockets a test left in its folder, by test."""


LONG_FIRST = (
    "test_hosts_",
    "test_delivery_tui",
    "test_fleet_",
    "test_dashboard",
    "test_trust_pinned",
    "test_leftovers",
    "test_server",
    "test_mcp",
    "test_messaging_sessions",
    "test_host_channel",
    "test_memory_team",
)
"""Test files whose tests take seconds each (real hosts, browsers, servers, swap loops)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long tests first: four workers that take work from each other end together
    when the short ones come last, instead of one finishing a long test alone."""

    def long(item: pytest.Item) -> bool:
        return item.path.name.startswith(LONG_FIRST) or item.get_closest_marker("slow") is not None

    items.sort(key=lambda item: not long(item))  # stable: each file's order is kept


def pytest_configure(config: pytest.Config) -> None:
    # Each of xdist's workers imports every test module, which pytest first rewrites (parse,
    # rewrite the asserts, compile: about 5 CPU-s for the suite) unless it finds the
    # rewritten module in __pycache__. This machine and CI set PYTHONDONTWRITEBYTECODE,
    # which pytest honours, so every worker of every run rewrote them all again: the run's
    # own processes keep what they compile (the processes the tests start write nothing).
    sys.dont_write_bytecode = False
    # A CI service's marks (CI=true) make Gemini CLI headless on a terminal and change
    # other tools: every process the suite starts runs as it would on a developer's machine.
    for marker in CI_MARKERS:
        os.environ.pop(marker, None)
    if not os.environ.get(RUN_MARKER):  # xdist's workers inherit the controller's
        os.environ[RUN_MARKER] = f"{os.getpid()}-{time.time_ns()}"
        os.environ[RUN_FOLDER] = tempfile.mkdtemp(prefix="rr-", dir="/tmp")
        # One cache of what relay builds for the whole run (the hook client `relay install`
        # compiles), as a user's install has: tests give each host a HOME of its own.
        os.environ["RELAY_CACHE"] = os.path.join(os.environ[RUN_FOLDER], "cache")


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """xdist's workers start together and each collects the whole suite: on a checkout
    whose rewritten test modules are not cached yet, each rewrote every one of them. The
    first worker collects alone (the others wait for it), then the rest together, from
    the modules it cached."""
    if not hasattr(session.config, "workerinput"):
        yield
        return
    import fcntl

    done = os.path.join(os.environ[RUN_FOLDER], "collected")
    with open(os.path.join(os.environ[RUN_FOLDER], "collecting"), "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        first = not os.path.exists(done)
        if not first:
            fcntl.flock(lock, fcntl.LOCK_UN)
        yield
        if first:
            Path(done).touch()


@pytest.fixture(autouse=True)
def socket_folder(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[str]:
    """A folder of this test's own for the sockets it makes: tmux's (TMUX_TMPDIR), relay's
    doorbells and the hosts' own (XDG_RUNTIME_DIR), so none is left in a shared folder. At
    the end, tmux servers are gone (tmux 3.3 leaves its socket file when killed) and a
    socket a process still listens on is a leftover of the test, which fails the run; the
    folder is removed."""
    folder = tempfile.mkdtemp(prefix="t", dir=os.environ[RUN_FOLDER])
    runtime = os.path.join(folder, "x")
    os.mkdir(runtime, 0o700)
    monkeypatch.setenv("TMUX_TMPDIR", folder)
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    yield folder
    left = [f"{path} (a tmux server still running)" for path in _end_tmux_servers(folder)]
    # A socket nothing listens on is a file its ended process left (a session killed by
    # its test, tmux, Claude Code's own): it goes with the folder. One a process still
    # listens on is a leftover of the test.
    # Processes told to end as the test ended (a tmux pane's, on kill-server) get a grace:
    # a `relay run` ending its agent (EOF, SIGTERM, the agent's own children) took over 10 s
    # on two cores with a busy process and six workers beside it.
    deadline = time.monotonic() + ENDING_GRACE
    listened = [path for path in _sockets(folder) if _listened(path)]
    while listened and time.monotonic() < deadline:
        time.sleep(0.1)
        listened = [path for path in listened if _listened(path)]
    left += [f"{path} (still listened on)" for path in listened]
    if left:
        _record(LEFT_SOCKETS, f"{request.node.nodeid}: {', '.join(left)}")
    shutil.rmtree(folder, ignore_errors=True)


def _end_tmux_servers(folder: str) -> list[str]:
    """Remove the tmux sockets under `folder`; the ones a server still answered on (after
    `kill-server` to it) are returned."""
    import socket

    def answers(path: str) -> bool:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(path)
            except OSError:
                return False  # its server has ended: only the file is left
            return True

    running = []
    for path in glob.glob(os.path.join(folder, "tmux-*", "*")):
        # A server told to end by the test (`kill-server` returns before it has) gets 10 s.
        deadline = time.monotonic() + 10
        while answers(path) and time.monotonic() < deadline:
            time.sleep(0.1)
        if answers(path):
            running.append(path)
            subprocess.run(
                ["tmux", "-S", path, "kill-server"], capture_output=True, timeout=30, check=False
            )
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return running


def _listened(path: str) -> bool:
    """Whether a process still listens on the Unix socket at `path` (stream or datagram)."""
    import errno
    import socket

    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_UNIX, kind) as probe:
            try:
                probe.connect(path)
            except OSError as exc:
                if exc.errno == errno.EPROTOTYPE:
                    continue  # the other kind of socket
                return False
            return True
    return False


def _sockets(folder: str) -> list[str]:
    return [
        os.path.join(parent, name)
        for parent, _, names in os.walk(folder)
        for name in names
        if stat.S_ISSOCK(os.lstat(os.path.join(parent, name)).st_mode)
    ]


def _record(name: str, line: str) -> None:
    """One line into the run's record `name` (appended whole: xdist's workers share it)."""
    fd = os.open(
        os.path.join(os.environ[RUN_FOLDER], name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
    )
    try:
        os.write(fd, (line.replace("\n", " ") + "\n").encode())
    finally:
        os.close(fd)


def _socket_leftovers() -> list[str]:
    """What the run left: sockets a test left in its folder, any socket still in the run's
    folder, and a server socket (or its lock, its stamp) still in /tmp/agent-relay-<uid>/."""
    folder = os.environ[RUN_FOLDER]
    found = []
    with contextlib.suppress(FileNotFoundError):
        found += Path(folder, LEFT_SOCKETS).read_text().splitlines()
    found += _sockets(folder)
    with contextlib.suppress(FileNotFoundError):
        for path in Path(folder, SHARED_SOCKETS).read_text().splitlines():
            found += [
                name for name in (path, path + ".lock", path + ".spawned") if os.path.exists(name)
            ]
    return found


@pytest.fixture(autouse=True, scope="session")
def _memory_model_processes() -> Iterator[None]:
    """MiniLM's embedding process lives as long as the process that loaded it: stopped
    when the session ends, before leftovers are counted."""
    yield
    from relay.services.memory.semantic import close_models

    close_models()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Once, in the process that ran the session (xdist's controller, after its workers
    ended): every process still running with this run's marker is a leftover, and fails
    the run with its pid and command line."""
    if hasattr(session.config, "workerinput"):
        return
    deadline = time.monotonic() + LEFTOVER_GRACE
    left = _leftovers()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = _leftovers()
    if left:
        lines = "\n".join(f"  pid {pid}: {command}" for pid, command in left)
        sys.stderr.write(f"\nthe test run left {len(left)} process(es) behind:\n{lines}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    with contextlib.suppress(FileNotFoundError):
        for path in Path(os.environ[RUN_FOLDER], SHARED_SOCKETS).read_text().splitlines():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path + ".spawned")  # _forbid_spawns's stamp: no test runs now
    sockets = _socket_leftovers()
    if sockets:
        lines = "\n".join(f"  {line}" for line in sockets)
        sys.stderr.write(f"\nthe test run left {len(sockets)} socket file(s) behind:\n{lines}\n")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shutil.rmtree(os.environ[RUN_FOLDER], ignore_errors=True)


def _leftovers() -> list[tuple[int, str]]:
    marker = f"\0{RUN_MARKER}={os.environ[RUN_MARKER]}\0".encode()
    me, found = os.getpid(), []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as environ:
                if marker not in b"\0" + environ.read():
                    continue
            with open(f"/proc/{name}/stat", "rb") as stat:
                if stat.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    continue  # ended; its parent has not reaped it yet
            with open(f"/proc/{name}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue  # gone meanwhile, or another user's
        found.append((int(name), command.strip()[:200]))
    return found

"""The agent in a real PTY, raw mode on a real terminal, and TTY passthrough through tmux."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import pytest
from processes import alive

from relay.errors import RelayError
from relay.native import find_compiler
from relay.session import copier as copier_module
from relay.session import pump as pump_module
from relay.session.pty import AgentExitedError, AgentPty, AgentSpawnError
from relay.session.pump import OutputPump
from relay.session.terminal import passthrough, terminal_size

RESOURCES = Path(__file__).parent / "resources" / "session"
ECHO_AGENT = (sys.executable, str(RESOURCES / "echo_agent.py"))
SLACK = 10.0  # a loaded machine's slack on a documented bound: what it bounds would never end


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Screen:
    """What an agent printed so far, read on demand with a deadline."""

    def __init__(self, agent: AgentPty) -> None:
        self.agent = agent
        self.data = bytearray()
        self._pos = 0

    async def expect(self, pattern: str, timeout: float = 5.0) -> re.Match[str]:
        """Read until `pattern` appears after the previous match; the match."""
        regex = re.compile(pattern)
        with anyio.fail_after(timeout):
            while True:
                text = self.data.decode(errors="replace")
                match = regex.search(text, self._pos)
                if match:
                    self._pos = match.end()
                    return match
                chunk = await self.agent.read()
                if not chunk:
                    raise AssertionError(f"EOF before {pattern!r}; output: {text!r}")
                self.data += chunk

    async def until_eof(self, timeout: float = 5.0) -> bytes:
        with anyio.fail_after(timeout):
            while chunk := await self.agent.read():
                self.data += chunk
        return bytes(self.data)


@pytest.fixture
def spawn() -> Iterator[Callable[..., AgentPty]]:
    agents: list[AgentPty] = []

    def start(*args: str, **kwargs: object) -> AgentPty:
        agent = AgentPty.spawn([*ECHO_AGENT, *args], **kwargs)  # type: ignore[arg-type]
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        agent.close()


def wait_gone(pids: list[int], timeout: float = 2.0) -> list[int]:
    """The pids still alive after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return []
        time.sleep(0.02)
    return [pid for pid in pids if alive(pid)]


# ---- the agent process


@pytest.mark.anyio
async def test_agent_leads_its_own_session_with_the_pty_as_controlling_terminal(
    spawn: Callable[..., AgentPty],
) -> None:
    agent = spawn()
    ready = await Screen(agent).expect(r"READY pid=(\d+) pgid=(\d+) sid=(\d+) tty=(\w+) ctty=(\w+)")
    assert ready.groups() == (str(agent.pid),) * 3 + ("True", "yes")
    assert agent.master_fd >= 0


@pytest.mark.anyio
async def test_write_and_read_round_trip(spawn: Callable[..., AgentPty]) -> None:
    agent = spawn()
    screen = Screen(agent)
    await screen.expect("READY")
    await agent.write("héllo wörld\r".encode())
    await screen.expect("GOT 'héllo wörld'")
    big = "x" * 3000  # more than one read of the agent; under the canonical line limit
    await agent.write(big.encode() + b"\r")
    await screen.expect(f"GOT '{big}'")


@pytest.mark.anyio
async def test_exclusive_input_holds_other_writers_back(spawn: Callable[..., AgentPty]) -> None:
    agent = spawn()
    screen = Screen(agent)
    await screen.expect("READY")
    order: list[str] = []

    async def human() -> None:
        await agent.write(b"human\r")
        order.append("human")

    async with anyio.create_task_group() as tasks, agent.exclusive_input():
        await agent.write(b"inj")
        tasks.start_soon(human)
        await anyio.sleep(0.05)  # the human's write waits meanwhile
        await agent.write(b"ected\r")
        order.append("injected")
    assert order == ["injected", "human"]
    await screen.expect("GOT 'injected'")
    await screen.expect("GOT 'human'")


@pytest.mark.anyio
async def test_spawn_size_env_and_cwd(tmp_path: Path) -> None:
    script = "import os; print(os.get_terminal_size(0), os.getcwd(), os.environ.get('MARK'))"
    agent = AgentPty.spawn(
        [sys.executable, "-c", script],
        env={**os.environ, "MARK": "here"},
        cwd=str(tmp_path),
        rows=33,
        cols=101,
    )
    try:
        screen = Screen(agent)
        await screen.expect(rf"columns=101, lines=33\) {re.escape(str(tmp_path))} here")
        assert await agent.wait() == 0
    finally:
        agent.close()


@pytest.mark.anyio
async def test_resize_reaches_the_agent(spawn: Callable[..., AgentPty]) -> None:
    agent = spawn(rows=30, cols=100)
    screen = Screen(agent)
    await screen.expect("READY")
    await agent.write(b"size\r")
    await screen.expect("SIZE 30 100")
    agent.resize(40, 120)
    await screen.expect("SIZE 40 120")  # from the agent's SIGWINCH handler
    assert agent.window_size() == (40, 120)


@pytest.mark.anyio
async def test_exit_code_and_eof(spawn: Callable[..., AgentPty]) -> None:
    agent = spawn()
    screen = Screen(agent)
    await screen.expect("READY")
    await agent.write(b"exit 7\r")
    with anyio.fail_after(5):
        assert await agent.wait() == 7
    await screen.until_eof()
    assert agent.exit_code == 7
    assert await agent.read() == b""  # EOF stays EOF
    with anyio.fail_after(2):  # a dead agent's input fails fast instead of filling up
        with pytest.raises(AgentExitedError):
            for _ in range(100):
                await agent.write(b"y" * 1024)


@pytest.mark.anyio
async def test_leftovers_are_killed_when_the_agent_exits(
    spawn: Callable[..., AgentPty], tmp_path: Path
) -> None:
    pid_file = tmp_path / "children"
    agent = spawn("--child", str(pid_file))
    screen = Screen(agent)
    await screen.expect("READY")
    children = [int(pid) for pid in pid_file.read_text().split()]
    await agent.write(b"exit 0\r")
    with anyio.fail_after(5):
        assert await agent.wait() == 0
    assert wait_gone(children) == []


@pytest.mark.anyio
async def test_ctrl_d_is_end_of_input(spawn: Callable[..., AgentPty]) -> None:
    agent = spawn()
    screen = Screen(agent)
    await screen.expect("READY")
    await agent.write(b"\x04")
    await screen.expect("EOF")
    with anyio.fail_after(5):
        assert await agent.wait() == 0


@pytest.mark.anyio
async def test_signals_go_to_the_process_group(spawn: Callable[..., AgentPty]) -> None:
    agent = spawn()
    await Screen(agent).expect("READY")
    agent.send_signal(signal.SIGUSR1)
    with anyio.fail_after(5):
        assert await agent.wait() == 128 + signal.SIGUSR1
    agent.send_signal(signal.SIGTERM)  # reaped: a no-op, not an error


@pytest.mark.anyio
async def test_two_tasks_can_wait(spawn: Callable[..., AgentPty]) -> None:
    agent = spawn()
    await Screen(agent).expect("READY")
    codes: list[int] = []

    async def waiter() -> None:
        codes.append(await agent.wait())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(waiter)
            tasks.start_soon(waiter)
            await anyio.sleep(0.05)
            agent.send_signal(signal.SIGTERM)
    assert codes == [143, 143]


@pytest.mark.anyio
async def test_terminate_with_eof_first(spawn: Callable[..., AgentPty]) -> None:
    agent = spawn()
    await Screen(agent).expect("READY")
    started = time.monotonic()
    assert await agent.terminate(grace=30) == 0  # Ctrl-D was enough
    assert time.monotonic() - started < 15  # not the grace


@pytest.mark.anyio
async def test_terminate_kills_an_agent_that_ignores_sigterm_and_its_children(
    spawn: Callable[..., AgentPty], tmp_path: Path
) -> None:
    pid_file = tmp_path / "children"
    agent = spawn("--ignore-term", "--child", str(pid_file))
    await Screen(agent).expect("READY")
    children = [int(pid) for pid in pid_file.read_text().split()]
    grace = 0.5
    started = time.monotonic()
    code = await agent.terminate(eof_first=False, grace=grace)
    elapsed = time.monotonic() - started
    assert code == 128 + signal.SIGKILL
    assert grace <= elapsed < grace + SLACK
    assert wait_gone([agent.pid, *children]) == []


@pytest.mark.anyio
async def test_terminate_with_eof_ignored_escalates(spawn: Callable[..., AgentPty]) -> None:
    agent = spawn()
    screen = Screen(agent)
    await screen.expect("READY")
    await agent.write(b"half a line")  # Ctrl-D now only ends this partial line
    await screen.expect("half a line")
    code = await agent.terminate(grace=0.3)
    assert code in (0, 128 + signal.SIGTERM)  # the agent may read the line and then EOF
    assert wait_gone([agent.pid]) == []


@pytest.mark.anyio
async def test_close_leaves_no_process(spawn: Callable[..., AgentPty], tmp_path: Path) -> None:
    pid_file = tmp_path / "children"
    agent = spawn("--ignore-term", "--child", str(pid_file))
    await Screen(agent).expect("READY")
    children = [int(pid) for pid in pid_file.read_text().split()]
    agent.close()
    agent.close()  # idempotent
    assert agent.exit_code == 128 + signal.SIGKILL
    assert wait_gone([agent.pid, *children]) == []
    assert await agent.read() == b""


@pytest.mark.anyio
async def test_async_context_manager_closes(tmp_path: Path) -> None:
    async with AgentPty.spawn(ECHO_AGENT) as agent:
        await Screen(agent).expect("READY")
    assert wait_gone([agent.pid]) == []


def test_missing_command_is_a_relay_error(tmp_path: Path) -> None:
    with pytest.raises(AgentSpawnError) as caught:
        AgentPty.spawn(["relay-no-such-agent-xyz", "--flag"])
    assert isinstance(caught.value, RelayError)
    assert caught.value.argv == ("relay-no-such-agent-xyz", "--flag")
    assert "command not found: relay-no-such-agent-xyz" in str(caught.value)

    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)
    with pytest.raises(AgentSpawnError, match="permission denied"):
        AgentPty.spawn([str(script)])
    with pytest.raises(AgentSpawnError, match="working directory not found"):
        AgentPty.spawn(ECHO_AGENT, cwd=str(tmp_path / "nowhere"))
    with pytest.raises(AgentSpawnError, match="empty command"):
        AgentPty.spawn([])


# ---- the human's terminal, hosted on a PTY the test holds


def local_modes(agent: AgentPty) -> int:
    """The terminal's local modes (tcgetattr on the master reads the PTY's modes)."""
    lflag: int = termios.tcgetattr(agent.master_fd)[3]
    return lflag


def is_raw(agent: AgentPty) -> bool:
    return local_modes(agent) & (termios.ICANON | termios.ECHO | termios.ISIG) == 0


def is_cooked(agent: AgentPty) -> bool:
    wanted = termios.ICANON | termios.ECHO | termios.ISIG
    return local_modes(agent) & wanted == wanted


async def eventually(condition: Callable[[], bool], timeout: float = 2.0) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.01)


def raw_mode_app(mode: str, *args: str) -> AgentPty:
    return AgentPty.spawn([sys.executable, str(RESOURCES / "raw_mode_app.py"), mode, *args])


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["normal", "exception", "interrupt"])
async def test_raw_terminal_restores_on_exit(mode: str) -> None:
    async with raw_mode_app(mode) as app:
        screen = Screen(app)
        await screen.expect("RAW")
        assert is_raw(app)
        await app.write(b"k")
        await screen.expect("RESTORED")
        assert is_cooked(app)
        if mode != "normal":
            assert "CAUGHT" in screen.data.decode()


@pytest.mark.anyio
async def test_raw_terminal_restores_on_sigterm() -> None:
    async with raw_mode_app("sigterm") as app:
        await Screen(app).expect("RAW")
        assert is_raw(app)
        os.kill(app.pid, signal.SIGTERM)
        with anyio.fail_after(5):
            assert await app.wait() == 143
        assert is_cooked(app)


@pytest.mark.anyio
async def test_raw_terminal_chains_to_the_programs_own_handler() -> None:
    async with raw_mode_app("handler") as app:
        screen = Screen(app)
        await screen.expect("RAW")
        os.kill(app.pid, signal.SIGTERM)
        await screen.expect("OWN HANDLER")
        await eventually(lambda: is_raw(app))  # the program went on, so raw mode is back
        await app.write(b"k")
        await screen.expect("RESTORED")
        assert is_cooked(app)


@pytest.mark.anyio
async def test_raw_terminal_nested() -> None:
    async with raw_mode_app("nested") as app:
        screen = Screen(app)
        await screen.expect("RAW")
        await app.write(b"k")
        await screen.expect("INNER DONE")
        assert is_raw(app)  # the inner block restored the outer one's raw mode
        await app.write(b"k")
        await screen.expect("RESTORED")
        assert is_cooked(app)


@pytest.mark.anyio
async def test_terminal_size() -> None:
    app = AgentPty.spawn(
        [sys.executable, str(RESOURCES / "raw_mode_app.py"), "size"], rows=27, cols=91
    )
    async with app:
        await Screen(app).expect("SIZE 27 91")
    read_end, write_end = os.pipe()
    try:
        assert terminal_size(read_end) == (24, 80)
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.anyio
async def test_sigterm_to_relay_restores_the_terminal_and_ends_the_agent(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    app_argv = [sys.executable, str(RESOURCES / "passthrough_app.py"), str(log)]
    async with AgentPty.spawn([*app_argv, *ECHO_AGENT, "--ignore-term"]) as app:
        ready = await Screen(app).expect(r"READY pid=(\d+)")
        await eventually(lambda: is_raw(app))
        os.kill(app.pid, signal.SIGTERM)
        with anyio.fail_after(5):
            assert await app.wait() == 128 + signal.SIGTERM
        assert is_cooked(app)
    assert wait_gone([int(ready.group(1))]) == []
    assert log.exists()  # the app's `finally` ran: the exit was orderly


# ---- passthrough without a terminal: pipes in, a file out


@pytest.mark.anyio
async def test_passthrough_copies_both_ways_and_returns_the_exit_code(
    copier: str, spawn: Callable[..., AgentPty], tmp_path: Path
) -> None:
    agent = spawn("--banner")
    keys_read, keys_write = os.pipe()
    screen_file = tmp_path / "screen"
    seen = bytearray()
    typed = bytearray()
    with open(screen_file, "wb") as screen:

        async def human() -> None:
            with anyio.fail_after(5):
                while b"READY" not in seen:
                    await anyio.sleep(0.01)
            for key in b"hi there\rexit 3\r":
                os.write(keys_write, bytes([key]))
                await anyio.sleep(0.002)

        try:
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(human)
                    code = await passthrough(
                        agent,
                        stdin_fd=keys_read,
                        stdout_fd=screen.fileno(),
                        on_output=seen.extend,
                        on_input=typed.extend,
                    )
        finally:
            os.close(keys_read)
            os.close(keys_write)
    assert code == 3
    assert typed == b"hi there\rexit 3\r"
    shown = screen_file.read_bytes()
    assert shown == bytes(seen)  # the terminal got exactly what was scanned
    assert b"\x1b[1;32mGREEN\x1b[0m h\xc3\xa9llo \xe2\x9c\x93\ttab\r\n" in shown
    assert b"GOT 'hi there'" in shown


@pytest.fixture(params=["native", "python"])
def copier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each copier test runs with the native copier (built by the package's install) and
    with the Python one (where none was built)."""
    if request.param == "python":
        monkeypatch.setattr(pump_module, "native_copier", lambda: None)
    elif copier_module.native_copier() is None:
        if find_compiler() is None:
            pytest.skip("no C compiler: the install built no native copier")
        pytest.fail("a C compiler is here, but the install built no native copier for this source")
    return str(request.param)


def copier_pids() -> list[int]:
    """The output copiers (native, or pump.COPIER on Python) that are children of this test."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        native = os.path.basename(command[0]).startswith(copier_module.NATIVE_PREFIX.encode())
        python = b"-c" in command and any(b"lifeline" in part for part in command)
        if parent == os.getpid() and (native or python):
            found.append(int(entry.name))
    return found


async def copy_all(agent: AgentPty, terminal_fd: int, *, runs: str) -> list[bytes]:
    """Run an OutputPump over all of `agent`'s output (the copier that `runs` once it
    started); the blocks relay's loop got. The agent is closed after."""
    seen: list[bytes] = []
    pump = OutputPump(agent, terminal_fd)
    try:
        pump.start()
        assert pump.copier == runs
        with anyio.fail_after(20):
            await pump.deliver(seen.append)
    finally:
        pump.stop()
        agent.close()
    return seen


@pytest.mark.anyio
async def test_the_output_reaches_the_loop_whole_in_order_and_in_blocks(
    copier: str, spawn: Callable[..., AgentPty], tmp_path: Path
) -> None:
    """A burst of 3 MB: the terminal and the loop get the same bytes, the loop in a few
    hundred blocks (not one per 4 KiB read)."""
    agent = AgentPty.spawn(
        [
            sys.executable,
            "-c",
            "import sys; sys.stdout.write(''.join(f'{n:07d} line\\n' for n in range(240_000)))",
        ]
    )
    seen: list[bytes] = []
    screen_file = tmp_path / "screen"
    with open(screen_file, "wb") as screen, open(os.devnull, "rb") as keys:
        with anyio.fail_after(30):
            code = await passthrough(
                agent, stdin_fd=keys.fileno(), stdout_fd=screen.fileno(), on_output=seen.append
            )
    agent.close()
    assert code == 0
    shown = screen_file.read_bytes()
    assert shown == b"".join(seen)
    assert shown.count(b"\n") == 240_000 and shown.startswith(b"0000000 line\r\n")
    assert len(seen) < 3_000_000 // 4096  # blocks, not reads
    assert wait_gone(copier_pids()) == []


@pytest.mark.anyio
async def test_stop_ends_a_copier_stuck_on_a_terminal_that_takes_nothing(
    copier: str, spawn: Callable[..., AgentPty]
) -> None:
    """A terminal paused with Ctrl-S (here: a pipe nobody reads) blocks the copier's
    write; stop() still returns within its bound and leaves no copier behind."""
    agent = AgentPty.spawn([sys.executable, "-c", "import sys; sys.stdout.write('x' * 2_000_000)"])
    stuck_read, stuck_write = os.pipe()
    pump = OutputPump(agent, stuck_write)
    try:
        pump.start()
        assert pump.copier == copier
        await anyio.sleep(0.5)  # the pipe (64 KiB) is full long before
        assert copier_pids()
        started = time.monotonic()
        pump.stop()
        assert time.monotonic() - started < pump_module.STOP_WAIT + SLACK
        assert wait_gone(copier_pids()) == []
    finally:
        agent.close()
        os.close(stuck_read)
        os.close(stuck_write)


def test_the_copier_ends_when_relay_dies(copier: str, tmp_path: Path) -> None:
    """The copier holds the agent's PTY: if relay is killed it must not copy on for ever."""
    script = (
        "import anyio, os, sys\n"
        "from relay.session.pty import AgentPty\n"
        "from relay.session.pump import OutputPump\n"
        "agent = AgentPty.spawn(['sleep', '60'])\n"
        f"pump = OutputPump(agent, os.open(os.devnull, os.O_WRONLY), native={copier == 'native'})\n"
        "async def main():\n"
        "    pump.start()\n"
        f"    assert pump.copier == {copier!r}\n"
        "    print(pump._process.pid, flush=True)\n"
        "    await anyio.sleep(60)\n"
        "anyio.run(main)\n"
    )
    relay = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert relay.stdout is not None
        copier = int(relay.stdout.readline())
        assert alive(copier)
        relay.kill()
        relay.wait()
        assert wait_gone([copier], timeout=5) == []
    finally:
        relay.kill()
        relay.wait()
        relay.stdout.close()


# ---- TTY passthrough in a real terminal: tmux


class Tmux:
    """A private tmux server (its own socket) for one test."""

    def __init__(self) -> None:
        self.base = ["tmux", "-u", "-L", f"relay-test-{secrets.token_hex(6)}", "-f", "/dev/null"]
        self.target = "relay:0.0"

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            [*self.base, *args], capture_output=True, text=True, timeout=10, check=True
        )
        return done.stdout

    def pane(self) -> str:
        return self("capture-pane", "-p", "-J", "-t", self.target)

    def wait_for(self, pattern: str, timeout: float = 10.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            text = self.pane()
            if match := regex.search(text):
                return match
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} not on the pane:\n{text}")
            time.sleep(0.05)

    def kill(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, timeout=10, check=False)


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    server = Tmux()
    try:
        yield server
    finally:
        server.kill()


def stty_flags(text: str) -> set[str]:
    return set(text.split())


@pytest.mark.slow
def test_tty_passthrough_in_tmux(tmux: Tmux, tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    app = [sys.executable, str(RESOURCES / "passthrough_app.py"), str(log), *ECHO_AGENT, "--banner"]
    script = f"{subprocess.list2cmdline(app)}; echo APP-EXIT-$?; stty -a; sleep 60"
    env = {**os.environ, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
    subprocess.run(
        [
            *tmux.base,
            "new-session",
            "-d",
            "-s",
            "relay",
            "-x",
            "100",
            "-y",
            "30",
            "sh",
            "-c",
            script,
        ],
        env=env,
        check=True,
        timeout=10,
    )
    tmux("set-option", "-g", "status", "off")
    ready = tmux.wait_for(r"READY pid=(\d+)")
    agent_pid = int(ready.group(1))
    tmux.wait_for("GREEN héllo ✓")

    # The pane's terminal is raw while relay runs.
    pane_tty = tmux("display-message", "-p", "-t", tmux.target, "#{pane_tty}").strip()
    flags = stty_flags(
        subprocess.run(
            ["stty", "-a", "-F", pane_tty], capture_output=True, text=True, check=True
        ).stdout
    )
    assert {"-icanon", "-echo", "-isig"} <= flags

    # Keys reach the agent (its PTY echoes them; it answers).
    tmux("send-keys", "-t", tmux.target, "-l", "typed ✓ text")
    tmux("send-keys", "-t", tmux.target, "Enter")
    tmux.wait_for("GOT 'typed ✓ text'")

    # A window size change reaches the agent.
    tmux("resize-window", "-t", "relay", "-x", "90", "-y", "20")
    tmux.wait_for(r"SIZE 20 90")

    # The agent dies: relay returns and the terminal is restored.
    os.kill(agent_pid, signal.SIGKILL)
    tmux.wait_for(r"APP-EXIT-0")
    assert "APP DONE 137" in tmux.pane()
    stty = tmux.wait_for(r"(?s)APP-EXIT-0(.*\bicanon\b.*)")
    flags = stty_flags(stty.group(1))
    assert {"icanon", "echo", "isig"} <= flags
    assert not {"-icanon", "-echo", "-isig"} & flags

    # What passthrough scanned is what the agent wrote, byte for byte.
    output = log.read_bytes()
    assert output.startswith(b"READY pid=")
    assert b"\x1b[1;32mGREEN\x1b[0m h\xc3\xa9llo \xe2\x9c\x93\ttab\r\n" in output
    assert "GOT 'typed ✓ text'".encode() in output


def test_a_copier_that_cannot_start_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = AgentPty.spawn(["sleep", "5"])
    terminal = os.open(os.devnull, os.O_WRONLY)
    try:
        monkeypatch.setattr(pump_module.sys, "executable", "/nonexistent/python3")
        pump = OutputPump(agent, terminal, native=False)
        with pytest.raises(
            RelayError, match=r"cannot start the output copier \(/nonexistent/python3\)"
        ):
            pump.start()
    finally:
        agent.close()
        os.close(terminal)


def test_the_install_built_the_native_copier_for_this_source() -> None:
    """The package's build hook (hatch_build.py) compiled native/copier.c, under the hash
    of the source as it is now, and a pump runs it by default."""
    if find_compiler() is None:
        pytest.skip("no C compiler: relay runs the Python copier")
    native = copier_module.native_copier()
    source = copier_module.NATIVE_SOURCE
    assert native == str(source.parent / copier_module.native_name(source.read_bytes()))
    agent = AgentPty.spawn(["true"])
    try:
        assert OutputPump(agent, -1).copier == "native"
    finally:
        agent.close()


@pytest.mark.anyio
async def test_a_native_copier_that_cannot_run_gives_way_to_the_python_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A copier built for another machine (here: not a program at all) fails to start:
    the Python copier runs instead, and the output is shown and delivered as ever."""
    foreign = tmp_path / (copier_module.NATIVE_PREFIX + "0" * 16)
    foreign.write_bytes(b"\x7fELF not for this machine")
    foreign.chmod(0o755)
    monkeypatch.setattr(pump_module, "native_copier", lambda: str(foreign))
    agent = AgentPty.spawn([sys.executable, "-c", "print('shown and delivered')"])
    screen_read, screen_write = os.pipe()
    try:
        seen = await copy_all(agent, screen_write, runs="python")
    finally:
        os.close(screen_write)
    with os.fdopen(screen_read, "rb") as screen:
        assert screen.read() == b"".join(seen) == b"shown and delivered\r\n"


def test_the_native_copier_refuses_arguments_it_does_not_understand() -> None:
    native = copier_module.native_copier()
    if native is None:
        pytest.skip("no native copier was built")
    for argv in ([], ["0", "1", "2", "3", "4096", "1"], ["0", "1", "2", "x", "4096", "1", "0.01"]):
        done = subprocess.run([native, *argv], capture_output=True, timeout=10, check=False)
        assert (done.returncode, done.stdout, done.stderr) == (2, b"", b"")


@pytest.mark.parametrize(
    ("script", "runs"),
    [
        ("echo 'version GLIBC_2.99 not found' >&2; exit 1", False),  # starts, then fails
        ("exec sleep 60", False),  # never answers (exec: the probe kills what it started)
        ("exit 2", True),  # refuses no arguments, as the copier does
    ],
)
def test_a_native_copier_is_used_only_where_it_runs(
    script: str, runs: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A copier that execs but cannot run (built against a newer C library) would leave
    the session showing nothing: it is tried once, and the Python one runs instead."""
    source = tmp_path / "copier.c"
    source.write_text("/* a copier */\n")
    built = tmp_path / copier_module.native_name(source.read_bytes())
    built.write_text(f"#!/bin/sh\n{script}\n")
    built.chmod(0o755)
    monkeypatch.setattr(copier_module, "NATIVE_SOURCE", source)
    monkeypatch.setattr(copier_module, "PROBE_TIMEOUT", 0.5)
    native, why_not = copier_module.native_copier_status.__wrapped__()
    if runs:
        assert (native, why_not) == (str(built), "")
    else:
        assert native is None and str(built) in why_not
        if "GLIBC" in script:
            assert why_not.endswith("does not run here (exit 1): version GLIBC_2.99 not found")


@pytest.mark.anyio
async def test_a_terminal_that_is_gone_still_leaves_the_output_to_the_loop(copier: str) -> None:
    """The human's terminal closed under the copier (EPIPE): relay's loop still gets every
    byte, so directives are read and the session ends as the agent does."""
    agent = AgentPty.spawn(
        [
            sys.executable,
            "-c",
            "import sys; sys.stdout.write(''.join(f'{n:06d}\\n' for n in range(50_000)))",
        ]
    )
    gone_read, gone_write = os.pipe()
    os.close(gone_read)
    try:
        seen = await copy_all(agent, gone_write, runs=copier)
    finally:
        os.close(gone_write)
    assert b"".join(seen) == b"".join(b"%06d\r\n" % n for n in range(50_000))

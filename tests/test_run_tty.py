"""`relay run` in TTY mode, end to end: the console script in a tmux pane, wrapping a fake agent.

Each test gets a tmux server of its own (a private socket) with one 100x30 pane running
sh. The command line is typed into the pane, so relay's stdin and stdout are the pane's
terminal exactly as when a human runs it; the assertions read the pane (capture-pane),
the bytes the pane received (pipe-pane) and the agent's record of every line it read.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from processes import alive

RELAY = Path(sys.executable).parent / "relay"
AGENT = Path(__file__).parent / "resources" / "tty" / "line_agent.py"
# The agent's SHOWN line, byte for byte (see line_agent.py).
SHOWN = "\x1b[1;31mbold red\x1b[0m \x1b[42mon green\x1b[0m h\u00e9llo w\u00f6rld \u2713 \u2192 \u65e5\u672c"
PROMPT = "agent> "
INJECT_QUIET_MS = 200

pytestmark = pytest.mark.slow


class Pane:
    """A private tmux server (its own socket) with one pane running sh (100x30 unless told)."""

    def __init__(self, cols: int = 100, rows: int = 30) -> None:
        self.base = ["tmux", "-u", "-L", f"relay-tty-{secrets.token_hex(6)}", "-f", "/dev/null"]
        self.target = "tty:0.0"
        self.size = (str(cols), str(rows))

    def start(self, env: dict[str, str]) -> None:
        """Start the server and its pane; return once sh shows its prompt."""
        # The server's global environment is the one it starts with: the pane's sh and
        # everything typed there see RELAY_HOME, the UTF-8 locale.
        subprocess.run(
            [
                *self.base,
                "new-session",
                "-d",
                "-s",
                "tty",
                "-x",
                self.size[0],
                "-y",
                self.size[1],
                "sh",
            ],
            env=env,
            check=True,
            timeout=10,
        )
        self.tmux("set-option", "-g", "status", "off")
        # sh's own prompt first: keys typed before it are echoed ahead of it, and the new
        # prompt then lands after the old one, not at the start of a line.
        self.wait_for(r"(?m)^[#$]")
        self.run("PS1='sh$ '")  # dash ignores PS1 from the environment when run as root
        self.wait_for(r"(?m)^sh\$ ")

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            [*self.base, *args], capture_output=True, text=True, timeout=10, check=True
        )
        return done.stdout

    def text(self) -> str:
        """The pane's text, wrapped lines joined."""
        return self.tmux("capture-pane", "-p", "-J", "-t", self.target)

    def styled(self) -> str:
        """The pane's text with its colours and attributes as escape sequences."""
        return self.tmux("capture-pane", "-p", "-J", "-e", "-t", self.target)

    def wait_for(self, pattern: str, timeout: float = 10.0) -> re.Match[str]:
        """Poll the pane until `pattern` is on it; the match."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            text = self.text()
            if match := regex.search(text):
                return match
            if time.monotonic() > deadline:
                raise AssertionError(f"{pattern!r} not on the pane:\n{text}")
            time.sleep(0.05)

    def wait_for_prompt(self) -> None:
        """Wait until sh's prompt is the pane's last line: a command typed ahead of it is
        echoed above it, and what the command prints then follows the prompt on its line."""
        wait_until(
            lambda: self.text().rstrip().rsplit("\n", 1)[-1] == "sh$",
            10,
            f"sh's prompt is not the last line:\n{self.text()}",
        )

    def type(self, text: str) -> None:
        """Type `text` as keys, without Enter."""
        self.tmux("send-keys", "-t", self.target, "-l", text)

    def enter(self) -> None:
        self.tmux("send-keys", "-t", self.target, "Enter")

    def run(self, command: str) -> None:
        """Type a command line and Enter."""
        self.type(command)
        self.enter()

    def pipe_to(self, path: Path) -> None:
        """Copy every byte written to the pane from now on to `path`."""
        self.tmux("pipe-pane", "-t", self.target, "-o", f"cat > {shlex.quote(str(path))}")

    def kill(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True, timeout=10, check=False)


class Agent:
    """The fake agent's files: what it read (record), its pid, and the ping handler's marker."""

    def __init__(self, tmp_path: Path) -> None:
        self.record = tmp_path / "record.txt"
        self.pid_file = tmp_path / "agent.pid"
        self.handled = tmp_path / "ping-handled"
        self.settings = tmp_path / "settings.json"
        handler = f"touch {shlex.quote(str(self.handled))} && echo pong"
        settings = {
            "patterns": {"ping": {"command": handler}},
            "session": {"injectQuietMs": INJECT_QUIET_MS},
        }
        self.settings.write_text(json.dumps(settings))
        self.cwd = tmp_path

    def command_line(self) -> str:
        """`relay run` wrapping the agent, then its exit code: `rc=N` once relay has returned."""
        argv = [
            str(RELAY),
            "run",
            "--name",
            "tty-agent",
            "--settings",
            str(self.settings),
            "--cwd",
            str(self.cwd),
            "--",
            sys.executable,
            str(AGENT),
            str(self.record),
            str(self.pid_file),
        ]
        return shlex.join(argv) + '; echo "rc=$?"'

    def lines(self) -> list[str]:
        """The lines the agent has read so far."""
        if not self.record.exists():
            return []
        return self.record.read_text(encoding="utf-8").splitlines()

    def pid(self, timeout: float = 10.0) -> int:
        wait_until(self.pid_file.exists, timeout, f"{self.pid_file} not written")
        return int(self.pid_file.read_text())


def wait_until(condition: Callable[[], bool], timeout: float, failure: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(failure)
        time.sleep(0.05)


def stays_false(condition: Callable[[], bool], seconds: float) -> bool:
    """Whether `condition` stays false for `seconds` (polled; False as soon as it turns true)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return False
        time.sleep(0.05)
    return not condition()


def stty_flags(text: str) -> set[str]:
    return set(re.split(r"[\s;]+", text))


@pytest.fixture
def pane(relay_home: Path) -> Iterator[Pane]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed: these tests drive relay in a real terminal")
    env = {**os.environ, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "xterm"}
    env["RELAY_HOME"] = str(relay_home)
    for name in ("TMUX", "ENV"):  # not nested in the caller's tmux; no sh start-up file
        env.pop(name, None)
    server = Pane()
    try:
        server.start(env)
        yield server
    finally:
        server.kill()


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    files = Agent(tmp_path)
    yield files
    # An agent left running by a failed test: end it, as relay might not get to.
    if files.pid_file.exists():
        pid = int(files.pid_file.read_text())
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def start(pane: Pane, agent: Agent) -> int:
    """Run relay wrapping the agent in the pane; the agent's pid once its prompt is shown."""
    pane.wait_for_prompt()
    pane.run(agent.command_line())
    pid = agent.pid()
    pane.wait_for(rf"(?m)^{PROMPT}$")
    return pid


def test_keys_and_output_pass_through_unaltered(pane: Pane, agent: Agent, tmp_path: Path) -> None:
    received = tmp_path / "pane-bytes"
    pane.pipe_to(received)
    # The same bytes printed straight to the pane, to compare relay's rendering with.
    pane.run(shlex.join([sys.executable, str(AGENT), "--show"]))
    pane.wait_for("bold red")
    start(pane, agent)

    typed = "héllo 'wörld' \"✓\" $HOME \\n → 日本 \ttab"
    pane.type(typed)
    pane.enter()
    wait_until(lambda: agent.lines() == [typed], 10, f"agent read {agent.lines()!r}")
    pane.wait_for(r"agent got: héllo 'wörld' \"✓\" \$HOME \\n → 日本")

    pane.run("show")
    pane.wait_for(r"agent got: show\n.*bold red.*\nagent> ")
    styled = [line for line in pane.styled().splitlines() if "bold red" in line]
    assert len(styled) == 2, styled  # printed directly, then through relay
    assert styled[0] == styled[1]
    assert "héllo wörld ✓ → 日本" in pane.text()
    # The bytes relay wrote to the terminal are the agent's, unaltered.
    shown = SHOWN.encode() + b"\r\n"
    wait_until(lambda: received.read_bytes().count(shown) == 2, 5, "SHOWN not passed through")
    assert agent.lines() == [typed, "show"]


def test_a_resize_reaches_the_agent(pane: Pane, agent: Agent) -> None:
    start(pane, agent)
    pane.tmux("resize-window", "-t", "tty", "-x", "120", "-y", "40")
    pane.wait_for(r"size: 40x120")


def test_injection_waits_for_the_half_typed_line(pane: Pane, agent: Agent) -> None:
    pid = start(pane, agent)
    pane.type("half typed")
    pane.wait_for(r"agent> half typed")  # echoed: relay has passed the keys on

    os.kill(pid, signal.SIGUSR1)  # the agent prints `@ping:x hello`; the handler says "pong"
    pane.wait_for(r"(?m)^@ping:x hello$")
    wait_until(agent.handled.exists, 10, "the ping handler did not run")
    # "pong" is queued and the agent is quiet, but the human's line is pending: nothing
    # is typed (were it not held back, it would land within INJECT_QUIET_MS + 100 ms).
    assert stays_false(lambda: bool(agent.lines()) or "pong" in pane.text(), 1.0)

    pane.enter()
    wait_until(lambda: "pong" in agent.lines(), 10, f"no pong; agent read {agent.lines()!r}")
    pane.wait_for(r"agent got: pong\nagent> ")
    assert agent.lines() == ["half typed", "pong"]
    assert stays_false(lambda: agent.lines() != ["half typed", "pong"], 0.5)


def test_the_terminal_is_restored_after_the_agent_is_killed(pane: Pane, agent: Agent) -> None:
    pane.run("stty -a; echo stty-done")
    before = pane.wait_for(r"(?ms)^speed .*?^stty-done$").group(0)
    pane.run("clear")  # room on the 30-line pane for the second listing
    wait_until(lambda: "stty-done" not in pane.text(), 10, "the pane was not cleared")

    pid = start(pane, agent)
    os.kill(pid, signal.SIGKILL)
    assert pane.wait_for(r"(?m)rc=(\d+)$").group(1) == "137"  # 128 + SIGKILL, as a shell says

    pane.run("stty -a; echo stty-done")
    after = pane.wait_for(r"(?ms)^speed .*?^stty-done$").group(0)
    flags = stty_flags(after)
    assert {"icanon", "echo", "isig", "icrnl", "opost"} <= flags
    assert not {"-icanon", "-echo", "-isig", "-icrnl", "-opost"} & flags
    assert flags == stty_flags(before)  # exactly the modes the shell had before relay


def test_relay_exits_with_the_agents_exit_code(pane: Pane, agent: Agent) -> None:
    pid = start(pane, agent)
    pane.run("quit 7")
    assert pane.wait_for(r"(?m)rc=(\d+)$").group(1) == "7"
    assert agent.lines() == ["quit 7"]
    assert not alive(pid)


def test_a_confirmed_namespace_asks_the_human_first(pane: Pane, agent: Agent) -> None:
    settings = json.loads(agent.settings.read_text())
    settings["directives"] = {"ping": {"confirm": True}}
    agent.settings.write_text(json.dumps(settings))
    pid = start(pane, agent)

    os.kill(pid, signal.SIGUSR1)  # the agent prints `@ping:x hello`
    pane.wait_for(r"the agent asks: '@ping:x hello'; run it\? \[y/N\]")
    pane.type("n")  # the answer is relay's: the agent never sees the key
    pane.wait_for(r"not run: '@ping:x hello'")
    assert not agent.handled.exists()

    os.kill(pid, signal.SIGUSR1)
    wait_until(lambda: pane.text().count("run it? [y/N]") == 2, 10, "no second question")
    pane.type("y")
    wait_until(agent.handled.exists, 10, "the confirmed handler did not run")
    wait_until(lambda: "pong" in agent.lines(), 10, f"no pong; agent read {agent.lines()!r}")
    assert agent.lines() == ["pong"]  # neither `n` nor `y` reached the agent

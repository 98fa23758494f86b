"""The agent channel inside a host (relay.hosts.channel): mail handed to the model through
the host's own hooks, and directives read from the assistant's own text at Stop/AfterAgent.

Real calls of relay's host path (in process, and through a real `relay serve`), a real
mailbox and memory in SQLite, real hook processes for the user's namespaces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from relay.hosts.call import answer_call
from relay.server import client
from relay.server.client import Call, Reply
from relay.services.messaging.mailbox import SqliteMailbox

pytestmark = pytest.mark.usefixtures("team_default")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    return root


def call(
    project: Path,
    dialect: str,
    event: str,
    payload: dict[str, Any],
    *,
    name: str | None = "Alice",
    returned: bool = True,
) -> dict[str, Any]:
    """The host's call; its answer as JSON. `returned`: the host got the answer."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_AGENT")}
    env.pop("RELAY_SESSION_ID", None)
    if name:
        env["RELAY_AGENT_NAME"] = name
    stdin = json.dumps({"session_id": "host-1", "cwd": str(project), **payload}).encode()
    reply = answer_call(Call(["--dialect", dialect, event], str(project), env, stdin))
    assert reply is not None and reply.exit_code == 0, reply
    if returned:
        reply.returned()
    return json.loads(reply.stdout) if reply.stdout.strip() else {}


def stop(project: Path, text: str, *, active: bool = False, **options: Any) -> dict[str, Any]:
    payload = {"hook_event_name": "Stop", "stop_hook_active": active}
    return call(project, "claude", "Stop", {**payload, "last_assistant_message": text}, **options)


def mail(sender: str, recipient: str, body: str) -> str:
    mailbox = SqliteMailbox()
    try:
        message, _ = mailbox.send(team="default", sender=sender, recipient=recipient, body=body)
        return message.id
    finally:
        mailbox.close()


def states(name: str) -> list[tuple[str, str | None]]:
    mailbox = SqliteMailbox()
    try:
        return [(d.state, d.evidence) for d in mailbox.inbox(name, team="default")]
    finally:
        mailbox.close()


def enroll(project: Path, dialect: str = "claude") -> None:
    """The agent's session starts: relay makes it known to its team."""
    call(project, dialect, "SessionStart", {"hook_event_name": "SessionStart", "source": "startup"})


def memories(project: Path, query: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "relay", "memory", "search", query],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout + done.stderr


# -- directives from the assistant's own words ----------------------------------------------


def test_directives_in_the_assistants_last_message_run_and_their_answers_come_back(
    project: Path, relay_home: Path
) -> None:
    text = (
        "Here is the plan.\n"
        "@memory:save the API uses OAuth #auth\n"
        "> @memory:save quoted, not said #quoted\n"
        "```\n@memory:save in a fence #fenced\n```\n"
        "    @memory:save indented #indented\n"
    )
    answer = stop(project, text)
    assert answer["decision"] == "block"
    assert "relay ran the directives in your last message" in answer["reason"]
    assert "@memory:save: ✓ Saved to memory" in answer["reason"]
    found = memories(project, "OAuth")
    assert "the API uses OAuth #auth" in found
    for word in ("quoted", "fenced", "indented"):
        assert f"#{word}" not in memories(project, word)


def test_a_message_without_directives_or_mail_lets_the_host_stop(
    project: Path, relay_home: Path
) -> None:
    assert stop(project, "All done. Mention @memory:save in prose is not a directive.") == {}


def test_a_namespace_closed_to_the_assistant_is_not_run_and_the_model_is_told(
    project: Path, relay_home: Path, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    settings = {
        "patterns": {"deploy": {"command": f"touch '{ran}'; echo deploying"}},
        "directives": {"deploy": {"from": ["terminal"]}},
    }
    (relay_home / "settings.json").write_text(json.dumps(settings))
    answer = stop(project, "@deploy:prod now")
    assert not ran.exists()
    assert "@deploy:prod: not run" in answer["reason"]
    assert "not accepted from the assistant's text" in answer["reason"]


def test_a_user_namespace_runs_with_the_target_and_message_the_assistant_wrote(
    project: Path, relay_home: Path, tmp_path: Path
) -> None:
    seen = tmp_path / "seen.json"
    settings = {"patterns": {"deploy": {"command": f"cat > '{seen}'; echo deploy started"}}}
    (relay_home / "settings.json").write_text(json.dumps(settings))
    answer = stop(project, "Deploying now.\n@deploy:staging go now")
    event = json.loads(seen.read_text())
    assert (event["namespace"], event["target"], event["message"]) == (
        "deploy",
        "staging",
        "go now",
    )
    assert event["source"] == "assistant"
    assert "@deploy:staging: deploy started" in answer["reason"]


def test_the_stop_block_loop_is_bounded(project: Path, relay_home: Path) -> None:
    """An agent whose every answer holds a directive is asked to go on at most three times
    in a row; then the answer goes to the user and the host stops."""
    assert stop(project, "@memory:list")["decision"] == "block"
    for _ in range(2):
        assert stop(project, "@memory:list", active=True)["decision"] == "block"
    fourth = stop(project, "@memory:list", active=True)
    assert "decision" not in fourth
    assert (
        "not asking Claude Code to go on again (3 times in a row already)"
        in fourth["systemMessage"]
    )
    assert stop(project, "@memory:list")["decision"] == "block"  # a new stop: counted afresh


def test_gemini_directives_already_answered_are_not_run_again_in_the_accumulated_text(
    project: Path, relay_home: Path
) -> None:
    """Gemini CLI's prompt_response grows over the continuations a block causes."""
    first = "@memory:save first fact #one"
    answer = call(
        project,
        "gemini",
        "AfterAgent",
        {"hook_event_name": "AfterAgent", "prompt": "go", "prompt_response": first},
    )
    assert answer["decision"] == "deny"  # Gemini CLI's block: another turn with the reason
    again = call(
        project,
        "gemini",
        "AfterAgent",
        {
            "hook_event_name": "AfterAgent",
            "prompt": "go",
            "prompt_response": f"{first}\n@memory:save second fact #two",
            "stop_hook_active": True,
        },
    )
    assert again["reason"].count("@memory:save:") == 1
    listed = memories(project, "fact")
    assert listed.count("first fact") == 1 and "second fact" in listed


def test_the_transcript_is_read_when_the_payload_has_no_text(
    project: Path, relay_home: Path, tmp_path: Path
) -> None:
    transcript = tmp_path / "t.jsonl"
    entries = [
        {"type": "user", "message": {"content": "old prompt"}},
        {
            "type": "assistant",
            "message": {"content": [{"type": "text", "text": "@memory:save old #old"}]},
        },
        {"type": "user", "message": {"content": "new prompt"}},
        {
            "type": "assistant",
            "message": {
                "content": [
                    {
                        "type": "tool_use",
                        "name": "Bash",
                        "input": {"command": "@memory:save tool #in"},
                    }
                ]
            },
        },
        {
            "type": "user",
            "message": {
                "content": [{"type": "tool_result", "content": "@memory:save from a file #file"}]
            },
        },
        {
            "type": "assistant",
            "message": {"content": [{"type": "text", "text": "@memory:save new #new"}]},
        },
    ]
    transcript.write_text("\n".join(json.dumps(entry) for entry in entries) + "\nnot json\n")
    payload = {
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        "transcript_path": str(transcript),
    }
    answer = call(project, "claude", "Stop", payload)
    assert answer["reason"].count("@memory:save:") == 1
    assert "#new" in memories(project, "new")
    for word in ("old", "in", "file"):
        assert f"#{word}" not in memories(project, word)


# -- mail into the hosted agent -------------------------------------------------------------


def test_mail_reaches_the_model_as_context_at_the_next_prompt_and_is_acknowledged(
    project: Path, relay_home: Path
) -> None:
    enroll(project)
    mail("Bob", "Alice", "please review PR 12")
    answer = call(
        project,
        "claude",
        "UserPromptSubmit",
        {"hook_event_name": "UserPromptSubmit", "prompt": "hi"},
    )
    context = answer["hookSpecificOutput"]["additionalContext"]
    assert "Relay message from Bob" in context and "please review PR 12" in context
    assert states("Alice") == [
        ("acked", "returned to Claude Code in its UserPromptSubmit hook answer")
    ]
    again = call(
        project,
        "claude",
        "UserPromptSubmit",
        {"hook_event_name": "UserPromptSubmit", "prompt": "x"},
    )
    assert again == {}  # each message once


def test_mail_is_not_acknowledged_until_the_answer_carrying_it_is_returned(
    project: Path, relay_home: Path
) -> None:
    enroll(project)
    mail("Bob", "Alice", "hello")
    payload = {"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {}}
    answer = call(project, "claude", "PostToolUse", payload, returned=False)
    assert "hello" in answer["hookSpecificOutput"]["additionalContext"]
    assert [state for state, _ in states("Alice")] == ["handed"]


def test_mail_waiting_at_stop_makes_the_agent_read_it_before_it_stops(
    project: Path, relay_home: Path
) -> None:
    enroll(project)
    mail("Bob", "Alice", "one more thing: update the changelog")
    answer = stop(project, "Finished.")
    assert answer["decision"] == "block"
    assert "relay has new messages for Alice" in answer["reason"]
    assert "update the changelog" in answer["reason"]
    assert states("Alice")[0][0] == "acked"


def test_gemini_gets_mail_after_a_tool(project: Path, relay_home: Path) -> None:
    enroll(project, "gemini")
    mail("Bob", "Alice", "ping from Bob")
    payload = {"hook_event_name": "AfterTool", "tool_name": "run_shell_command", "tool_input": {}}
    answer = call(project, "gemini", "AfterTool", payload)
    assert "ping from Bob" in answer["hookSpecificOutput"]["additionalContext"]


def test_a_message_a_received_hook_denies_never_reaches_the_model(
    project: Path, relay_home: Path
) -> None:
    deny = "import sys, json; sys.stdin.read(); print(json.dumps({'decision': 'deny', 'reason': 'spam'}))"
    settings = {
        "hooks": {
            "MessageReceived": [{"hooks": [{"command": sys.executable, "args": ["-c", deny]}]}]
        }
    }
    (relay_home / "settings.json").write_text(json.dumps(settings))
    enroll(project)
    mail("Bob", "Alice", "buy now")
    answer = call(
        project,
        "claude",
        "UserPromptSubmit",
        {"hook_event_name": "UserPromptSubmit", "prompt": "hi"},
    )
    assert answer == {}
    assert [state for state, _ in states("Alice")] == ["denied"]


def test_without_an_agent_name_no_mail_is_looked_for(project: Path, relay_home: Path) -> None:
    answer = call(
        project,
        "claude",
        "UserPromptSubmit",
        {"hook_event_name": "UserPromptSubmit", "prompt": "hi"},
        name=None,
    )
    assert answer == {}
    assert not (relay_home / "state" / "messages.db").exists()


# -- through the resident server -----------------------------------------------------------


@pytest.fixture
def server(relay_home: Path) -> Iterator[str]:
    path = client.socket_path()
    process = subprocess.Popen(
        [sys.executable, "-I", "-m", "relay", "serve", "--socket", path, "--idle-seconds", "300"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(400):
            if client.control(path, "status") is not None:
                break
            import time

            time.sleep(0.05)
        yield path
    finally:
        client.control(path, "stop")
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_the_server_acknowledges_mail_once_its_answer_is_written(
    server: str, project: Path, relay_home: Path
) -> None:
    enroll(project)
    mail("Bob", "Alice", "via the server")
    env = {**os.environ, "RELAY_AGENT_NAME": "Alice"}
    env.pop("RELAY_SESSION_ID", None)
    stdin = json.dumps(
        {
            "session_id": "host-1",
            "cwd": str(project),
            "hook_event_name": "UserPromptSubmit",
            "prompt": "x",
        }
    ).encode()
    reply = client.request(  # 30 s: a loaded machine's server may accept after the client's 2
        server,
        Call(["--dialect", "claude", "UserPromptSubmit"], str(project), env, stdin),
        ack_timeout=30,
    )
    assert isinstance(reply, Reply)
    assert "via the server" in json.loads(reply.stdout)["hookSpecificOutput"]["additionalContext"]
    for _ in range(100):  # the server acknowledges right after writing; this test reads after
        if states("Alice")[0][0] == "acked":
            break
        import time

        time.sleep(0.05)
    assert states("Alice")[0] == (
        "acked",
        "returned to Claude Code in its UserPromptSubmit hook answer",
    )


# -- waking an idle host --------------------------------------------------------------------


def waiter(
    project: Path, name: str | None = "Alice", *, terminal: bool = True
) -> subprocess.Popen[bytes]:
    """`relay hooks wait-mail` as an interactive Claude Code starts it: a host whose input
    is a terminal runs it with the event on a pipe, and passes its exit code and stderr on."""
    env = {key: value for key, value in os.environ.items() if key != "RELAY_SESSION_ID"}
    env.pop("RELAY_AGENT_NAME", None)
    if name:
        env["RELAY_AGENT_NAME"] = name
    event = project / "event.json"
    event.write_text(json.dumps({"session_id": "host-1", "cwd": str(project)}))
    host = (
        "import subprocess, sys\n"
        f"waiter = [{sys.executable!r}, '-m', 'relay', 'hooks', 'wait-mail', '--dialect', 'claude']\n"
        "child = subprocess.Popen(waiter, stdin=subprocess.PIPE)\n"
        f"child.communicate(open({str(event)!r}, 'rb').read())\n"
        "sys.exit(child.returncode)\n"
    )
    primary, secondary = os.openpty() if terminal else (None, os.open(os.devnull, os.O_RDONLY))
    try:
        return subprocess.Popen(
            [sys.executable, "-c", host],
            cwd=project,
            env=env,
            stdin=secondary,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    finally:
        os.close(secondary)
        if primary is not None:
            _terminals.append(primary)


def wait_until_waiting(relay_home: Path) -> None:
    """Until a waiter holds its session's lock (it is then waiting for mail); read from
    /proc/locks, so that looking never takes the lock from it."""
    import time

    for _ in range(600):
        held = {
            line.split()[5].rsplit(":", 1)[-1]
            for line in Path("/proc/locks").read_text().splitlines()
        }
        for lock in (relay_home / "state" / "hosts").glob("*.waiter"):
            if str(lock.stat().st_ino) in held:
                return
        time.sleep(0.05)
    raise AssertionError("no waiter started waiting")


_terminals: list[int] = []  # kept open while the shells run (closed when the tests end)


def test_the_waiter_wakes_the_idle_host_with_mail_that_arrives(
    project: Path, relay_home: Path
) -> None:
    enroll(project)
    first = waiter(project)
    wait_until_waiting(relay_home)
    second = waiter(project)  # the next Stop while the first still waits
    second.communicate(timeout=60)
    assert second.returncode == 0  # one waiter per session
    assert first.poll() is None
    mail("Bob", "Alice", "wake up: the build is red")
    _, err = first.communicate(timeout=60)
    assert first.returncode == 2, err  # Claude Code's asyncRewake: wake the model
    said = err.decode()
    assert "relay has new messages for Alice" in said and "the build is red" in said
    assert states("Alice") == [
        ("acked", "handed to Claude Code's asyncRewake hook, which woke the model")
    ]


def test_the_waiter_of_an_unnamed_agent_or_a_headless_host_ends_at_once(
    project: Path, relay_home: Path
) -> None:
    for process in (waiter(project, name=None), waiter(project, terminal=False)):
        process.communicate(timeout=60)
        assert process.returncode == 0

"""relay as the hook layer of the real Gemini CLI (npm @google/gemini-cli), set up by
`relay install gemini` and driven headless (`gemini -p … --output-format stream-json
--yolo`) against a scripted Gemini API server on 127.0.0.1 (tests/hostkit/gemini_cli.py).
Skipped, with the reason, only when npm cannot install Gemini CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hostkit.gemini_cli import (
    FunctionCall,
    GeminiRun,
    gemini_binary,
    prepare_home,
    run_gemini,
    shell,
)
from hostkit.npm import host_binary, unavailable

if host_binary("gemini") is None:
    pytest.skip(f"Gemini CLI unavailable: {unavailable('gemini')}", allow_module_level=True)

EVENTS = (
    "SessionStart",
    "SessionEnd",
    "BeforeAgent",
    "AfterAgent",
    "BeforeModel",
    "AfterModel",
    "BeforeToolSelection",
    "BeforeTool",
    "AfterTool",
    "PreCompress",
    "Notification",
)


pytestmark = pytest.mark.usefixtures("team_default")


class Gemini:
    """A project and a throwaway HOME with relay installed into Gemini CLI."""

    def __init__(self, root: Path, relay_home: Path) -> None:
        self.root = root
        self.project = root / "project"
        (self.project / ".git").mkdir(parents=True)
        self.home = root / "home"
        prepare_home(self.home)
        self.relay_home = relay_home
        self.log = root / "events.jsonl"
        self.env = dict(os.environ)
        self.env.update(
            HOME=str(self.home), PATH=f"{gemini_binary().parent}{os.pathsep}{os.environ['PATH']}"
        )

    def script(self, name: str, body: str) -> str:
        path = self.root / name
        path.write_text("#!/bin/bash\n" + body)
        path.chmod(0o755)
        return str(path)

    def settings(self, hooks: dict[str, Any], where: Path | None = None) -> None:
        path = where or self.relay_home / "settings.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"hooks": hooks}))

    def relay(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "relay", *args],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def install(self, *args: str) -> str:
        done = self.relay("install", "gemini", *args)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def run(self, prompt: str, *script: str | FunctionCall) -> GeminiRun:
        return run_gemini(self.project, prompt, script, home=self.home)

    def logged(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@pytest.fixture
def gemini(tmp_path: Path, relay_home: Path) -> Gemini:
    return Gemini(tmp_path, relay_home)


def guard(gemini: Gemini) -> str:
    return gemini.script(
        "guard.sh",
        'input=$(cat)\ncase "$input" in\n'
        '  *"rm -rf"*) echo \'{"decision": "deny", "reason": "GUARD: no rm -rf here"}\' ;;\n'
        "  *) echo '{}' ;;\nesac\n",
    )


def test_every_event_passes_through_relay_and_context_reaches_the_model(gemini: Gemini) -> None:
    logger = gemini.script(
        "log.sh",
        f'input=$(cat); printf "%s\\n" "$input" >> {gemini.log}\n'
        'echo "{\\"inject\\": \\"CONTEXT-FROM-$RELAY_EVENT\\"}"\n',
    )
    gemini.settings(
        {event: [{"hooks": [{"name": f"log-{event}", "command": logger}]}] for event in EVENTS}
    )
    out = gemini.install()
    assert "the 11 of relay's 11 Gemini CLI events" in out
    run = gemini.run("list files", shell("echo listed"))
    assert run.returncode == 0, run.describe()
    assert not run.refused and not run.errors
    seen = {event["hook_event_name"] for event in gemini.logged()}
    assert {
        "SessionStart",
        "BeforeAgent",
        "BeforeModel",
        "AfterModel",
        "BeforeToolSelection",
    } <= seen
    assert {"BeforeTool", "AfterTool", "AfterAgent", "SessionEnd"} <= seen, seen
    assert "Hook execution" not in run.stderr and "hook failed" not in run.stderr.lower()
    sent = run.sent()
    for event in ("SessionStart", "BeforeAgent", "AfterTool"):
        assert f"CONTEXT-FROM-{event}" in sent, event
    before_tool = next(
        event for event in gemini.logged() if event["hook_event_name"] == "BeforeTool"
    )
    assert before_tool["tool_input"] == {"command": "echo listed"}


def test_a_guard_blocks_rm(gemini: Gemini) -> None:
    gemini.settings(
        {
            "BeforeTool": [
                {
                    "matcher": "run_shell_command",
                    "hooks": [{"name": "guard", "command": guard(gemini)}],
                }
            ]
        }
    )
    gemini.install()
    (gemini.project / "victim").mkdir()
    run = gemini.run("clean up", shell("rm -rf victim"), shell("echo still-here"))
    assert (gemini.project / "victim").is_dir(), run.describe()
    responses = run.function_responses()
    assert "GUARD: no rm -rf here" in responses[0]
    assert "relay-hook" not in responses[0]
    assert "still-here" in responses[1]


def test_a_rewritten_command_is_the_one_gemini_runs(gemini: Gemini) -> None:
    rewrite = gemini.script(
        "rewrite.sh",
        'cat >/dev/null; echo \'{"hookSpecificOutput": {"tool_input": {"command": "echo REWRITTEN"}}}\'\n',
    )
    gemini.settings({"BeforeTool": [{"hooks": [{"name": "rw", "command": rewrite}]}]})
    gemini.install()
    run = gemini.run("say it", shell("echo original"))
    assert "REWRITTEN" in run.function_responses()[0], run.describe()


def test_after_agent_blocks_once_and_the_model_gets_the_reason(gemini: Gemini) -> None:
    stopper = gemini.script(
        "stop.sh",
        'input=$(cat)\ncase "$input" in\n'
        "  *'\"stop_hook_active\":true'*) echo '{}' ;;\n"
        '  *) echo \'{"decision": "block", "reason": "STOP-REASON: run the tests first"}\' ;;\n'
        "esac\n",
    )
    gemini.settings({"AfterAgent": [{"hooks": [{"name": "stopper", "command": stopper}]}]})
    gemini.install()
    run = gemini.run("finish")
    assert run.returncode == 0, run.describe()
    assert len(run.main_requests) == 2, run.describe()
    assert "STOP-REASON: run the tests first" in json.dumps(run.main_requests[-1].json)


def test_crashing_hanging_and_orphaning_hooks_fail_open_in_bounded_time(gemini: Gemini) -> None:
    crash = gemini.script("crash.sh", "cat >/dev/null; echo boom >&2; exit 1\n")
    hang = gemini.script("hang.sh", "cat >/dev/null; sleep 60\n")
    orphan = gemini.script("orphan.sh", "cat >/dev/null; (sleep 60 &) ; echo '{}'\n")
    gemini.settings(
        {
            "BeforeTool": [
                {
                    "hooks": [
                        {"name": "crash", "command": crash},
                        {"name": "hang", "command": hang, "timeout": 2},
                        {"name": "orphan", "command": orphan},
                    ]
                }
            ]
        }
    )
    gemini.install()
    started = time.monotonic()
    run = gemini.run("go", shell("echo ran"))
    assert time.monotonic() - started < 60
    assert "ran" in run.function_responses()[0], run.describe()


def test_an_edited_guard_is_shown_to_the_user_and_a_broken_project_file_leaves_the_user_guard(
    gemini: Gemini,
) -> None:
    gemini.settings({"BeforeTool": [{"hooks": [{"name": "guard", "command": guard(gemini)}]}]})
    project_guard = gemini.project / "pguard.sh"
    project_guard.write_text("#!/bin/sh\ncat >/dev/null; echo '{}'\n")
    project_guard.chmod(0o755)
    gemini.settings(
        {"BeforeTool": [{"hooks": [{"name": "project-guard", "command": "./pguard.sh"}]}]},
        where=gemini.project / ".relay" / "settings.json",
    )
    gemini.install()
    assert gemini.relay("trust", "--yes").returncode == 0
    project_guard.write_text("#!/bin/sh\ncat >/dev/null; echo '{}' # edited\n")
    run = gemini.run("look", shell("echo looked"))
    assert "relay: skipped" in run.stderr and "relay trust" in run.stderr, run.describe()
    (gemini.project / ".relay" / "settings.json").write_text("{")
    (gemini.project / "victim").mkdir()
    run = gemini.run("clean", shell("rm -rf victim"))
    assert (gemini.project / "victim").is_dir(), run.describe()
    assert "GUARD: no rm -rf here" in run.function_responses()[0]


# -- the agent channel (spec/hosts.md §6) ---------------------------------------------------


def test_mail_and_assistant_directives_go_through_gemini_hooks(gemini: Gemini) -> None:
    from relay.services.messaging.mailbox import SqliteMailbox

    mailbox = SqliteMailbox()
    try:
        mailbox.register_agent("Alice", team="default", session_id="earlier")
        mailbox.set_presence("Alice", team="default", session_id="earlier", state="offline")
        mailbox.send(team="default", sender="Bob", recipient="Alice", body="MAIL-G: ship it")
    finally:
        mailbox.close()
    gemini.install()
    run = run_gemini(
        gemini.project,
        "hi",
        ["Sure.\n@memory:save gemini said this #g"],
        home=gemini.home,
        env={"RELAY_AGENT_NAME": "Alice"},
    )
    assert run.returncode == 0, run.describe()
    assert "MAIL-G: ship it" in json.dumps(run.main_requests[0].json)
    assert len(run.main_requests) == 2, run.describe()  # the answer, then the block's turn
    last = json.dumps(run.main_requests[-1].json, ensure_ascii=False)
    assert "relay ran the directives in your last message" in last
    assert "gemini said this #g" in gemini.relay("memory", "list").stdout


def test_gemini_calls_relays_mcp_tools_that_install_registered(gemini: Gemini) -> None:
    from relay.services.messaging.mailbox import SqliteMailbox

    mailbox = SqliteMailbox()
    try:
        mailbox.register_agent("Bob", team="default", session_id="bob")
        mailbox.set_presence("Bob", team="default", session_id="bob", state="offline")
    finally:
        mailbox.close()
    assert "mcp: added" in gemini.install()
    run = run_gemini(
        gemini.project,
        "remember and tell Bob",
        [
            FunctionCall("mcp_relay_memory_save", {"content": "saved by a Gemini tool call #mcp"}),
            FunctionCall("mcp_relay_send_message", {"to": "Bob", "body": "MCP-HELLO from Alice"}),
        ],
        home=gemini.home,
        env={"RELAY_AGENT_NAME": "Alice"},
    )
    assert run.returncode == 0, run.describe()
    offered = json.dumps(run.main_requests[0].json)
    assert '"mcp_relay_memory_save"' in offered and '"mcp_relay_send_message"' in offered
    responses = run.function_responses()
    assert len(responses) == 2, run.describe()
    assert "Saved to memory" in responses[0] and "Queued for Bob" in responses[1], responses
    assert "saved by a Gemini tool call #mcp" in gemini.relay("memory", "list").stdout
    mailbox = SqliteMailbox()
    try:
        [delivery] = mailbox.inbox("Bob", team="default")
    finally:
        mailbox.close()
    assert (delivery.message.sender, delivery.message.body) == ("Alice", "MCP-HELLO from Alice")


def gemini_mcp_list(gemini: Gemini) -> str:
    """`gemini mcp list` as the user runs it in the project (no GEMINI_* from the suite)."""
    env = {key: value for key, value in gemini.env.items() if not key.startswith("GEMINI_")}
    done = subprocess.run(
        ["gemini", "mcp", "list"],
        cwd=gemini.project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


@pytest.mark.timeout(240)  # two `gemini mcp list` runs (each two node processes), two doctors
def test_doctor_says_when_gemini_does_not_trust_the_folder_and_how_to_trust_it(
    gemini: Gemini,
) -> None:
    """With folder trust on (Gemini CLI's default), an untrusted folder gets no MCP server:
    `gemini mcp list` shows relay Disabled, and doctor warns and says how to trust it;
    done as doctor says, Gemini CLI connects relay's server and doctor is content."""
    settings = gemini.home / ".gemini" / "settings.json"
    document = json.loads(settings.read_text())
    document["security"]["folderTrust"] = {"enabled": True}
    settings.write_text(json.dumps(document, indent=2))
    gemini.install("--python-client")
    gemini.env = {key: value for key, value in gemini.env.items() if not key.startswith("GEMINI_")}
    listed = gemini_mcp_list(gemini)
    assert "relay: " in listed and "Disabled" in listed

    doctor = gemini.relay("doctor", "--no-measure")
    (warning,) = [line for line in doctor.stdout.splitlines() if "does not trust" in line]
    assert "relay Disabled" in warning
    fix = warning.split("or add ", 1)[1]
    rule, file = fix.split(" to ", 1)
    assert Path(file) == gemini.home / ".gemini" / "trustedFolders.json"
    Path(file).write_text("{" + rule + "}\n")

    assert "Disabled" not in gemini_mcp_list(gemini)
    doctor = gemini.relay("doctor", "--no-measure")
    assert "does not trust" not in doctor.stdout
    assert f"Gemini CLI trusts {gemini.project}" in doctor.stdout

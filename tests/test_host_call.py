"""A host's call of `relay hooks run` (relay.hosts.call): what each host gets back, and the
boundary that never fails silently and never fails open on the user's guards (DESIGN §4, §5)."""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from relay.config.trust import TrustStore
from relay.engine.system import HookSystem
from relay.hosts.call import Caches, answer_call
from relay.server.client import Call, Reply

RECORD = """import json, os, sys
event = json.load(sys.stdin)
with open(os.environ["RECORD"], "a") as out:
    out.write(json.dumps(event) + "\\n")
"""


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return path


def script(path: Path, text: str) -> Path:
    write(path, text)
    path.chmod(0o755)
    return path


def answer(output: object, code: int = 0, stderr: str = "", **fields: Any) -> dict[str, Any]:
    """A hook that prints `output` (JSON unless a string), says `stderr`, exits `code`."""
    text = output if isinstance(output, str) else json.dumps(output)
    program = (
        "import sys; sys.stdin.read(); "
        f"sys.stdout.write({text!r}); sys.stderr.write({stderr!r}); sys.exit({code})"
    )
    return {"command": sys.executable, "args": ["-c", program], **fields}


def hooks(event: str, *entries: dict[str, Any], matcher: str | None = None) -> dict[str, Any]:
    group: dict[str, Any] = {"hooks": list(entries)}
    if matcher is not None:
        group["matcher"] = matcher
    return {event: [group]}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    return root


def call(
    project: Path,
    dialect: str,
    event: str,
    payload: dict[str, Any] | bytes | None = None,
    *,
    env: dict[str, str] | None = None,
) -> Reply:
    stdin = payload if isinstance(payload, bytes) else json.dumps(payload or {}).encode()
    argv = ["--dialect", dialect, event]
    reply = answer_call(Call(argv, str(project), {**os.environ, **(env or {})}, stdin))
    assert reply is not None
    return reply


def out(reply: Reply) -> dict[str, Any]:
    assert reply.exit_code == 0, reply
    value: dict[str, Any] = json.loads(reply.stdout)
    return value


BASH_RM = {"tool_name": "Bash", "tool_input": {"command": "rm -rf /"}}
DENY = {"decision": "deny", "reason": "no rm -rf"}


def user_guard(relay_home: Path, **fields: Any) -> None:
    write(
        relay_home / "settings.json",
        {"hooks": hooks("PreToolUse", answer(DENY, name="guard", **fields), matcher="Bash")},
    )


def trust_all(project: Path) -> None:
    system = HookSystem(cwd=project, telemetry=False)
    TrustStore().trust(
        project,
        [(hook.fingerprint, hook.name) for hook in system.registry.untrusted if hook.fingerprint],
    )


# ---- the boundary: a project file never switches off the user's guards ----------------


def test_a_broken_project_file_leaves_the_user_guard_working(
    project: Path, relay_home: Path
) -> None:
    user_guard(relay_home)
    broken = write(project / ".relay" / "settings.json", '{"hooks": {"PreToolUse": [')
    reply = call(project, "claude", "PreToolUse", BASH_RM)
    answered = out(reply)
    assert answered["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert answered["hookSpecificOutput"]["permissionDecisionReason"] == "no rm -rf"
    # The user is told, in the host's own words channel, what did not run and why.
    assert str(broken) in answered["systemMessage"]
    assert "did not run" in answered["systemMessage"]


def test_an_oversized_project_file_is_refused_unread_and_the_user_guard_works(
    project: Path, relay_home: Path
) -> None:
    """100 MB under an unknown key (it took 53 s and 12 GB on every tool call): refused
    after reading at most the cap. Sparse, so the test writes nothing."""
    user_guard(relay_home)
    huge = write(project / ".relay" / "settings.json", '{"hooks": {"PreToolUse": []}, "x": "')
    with huge.open("r+b") as stream:
        stream.truncate(100 * 1024 * 1024)
    answered = out(call(project, "claude", "PreToolUse", BASH_RM))
    assert answered["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert str(huge) in answered["systemMessage"]
    assert "settings file is larger than 4 MiB; not read" in answered["systemMessage"]


def test_a_project_file_with_too_many_hooks_is_refused(project: Path, relay_home: Path) -> None:
    user_guard(relay_home)
    many = [{"command": "true", "name": f"h{index}"} for index in range(1001)]
    crowded = write(project / ".relay" / "settings.json", {"hooks": hooks("PreToolUse", *many)})
    answered = out(call(project, "claude", "PreToolUse", BASH_RM))
    assert answered["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert str(crowded) in answered["systemMessage"]
    assert (
        "too many hooks: 1001 hook entries and patterns (the limit is 1000)"
        in (answered["systemMessage"])
    )


def test_a_broken_project_file_is_mentioned_where_it_matters(
    project: Path, relay_home: Path
) -> None:
    write(project / ".relay" / "settings.json", '{"hooks": {"PreToolUse": [')
    assert "systemMessage" in out(call(project, "claude", "SessionStart"))
    assert "systemMessage" in out(call(project, "claude", "PreToolUse", BASH_RM))
    # An event the broken file never named is not cluttered with it.
    assert out(call(project, "claude", "Notification", {"message": "hi"})) == {}


def test_an_edited_trusted_guard_is_skipped_and_the_user_is_told(
    project: Path, relay_home: Path
) -> None:
    guard = script(project / "hooks" / "guard.sh", "#!/bin/sh\necho 'no rm' >&2\nexit 2\n")
    write(
        project / ".relay" / "settings.json",
        {"hooks": hooks("PreToolUse", {"name": "guard", "command": "hooks/guard.sh"})},
    )
    trust_all(project)
    assert (
        out(call(project, "claude", "PreToolUse", BASH_RM))["hookSpecificOutput"][
            "permissionDecision"
        ]
        == "deny"
    )
    guard.write_text("#!/bin/sh\nexit 0\n")  # edited after it was trusted
    answered = out(call(project, "claude", "PreToolUse", BASH_RM))
    assert "hookSpecificOutput" not in answered
    assert "guard" in answered["systemMessage"] and "relay trust" in answered["systemMessage"]


def test_a_fail_closed_project_guard_that_may_not_run_denies(
    project: Path, relay_home: Path
) -> None:
    write(
        project / ".relay" / "settings.json",
        {"hooks": hooks("PreToolUse", {"name": "guard", "command": "true", "failClosed": True})},
    )
    answered = out(call(project, "claude", "PreToolUse", BASH_RM))
    assert answered["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "guard" in answered["hookSpecificOutput"]["permissionDecisionReason"]


def test_a_broken_user_file_declaring_fail_closed_guards_denies_their_events(
    project: Path, relay_home: Path
) -> None:
    write(
        relay_home / "settings.json",
        '{"hooks": {"Stop": [{"hooks": [{"command": "s"}]}],\n'
        '  "PreToolUse": [{"hooks": [{"command": "g", "failClosed": true}]}]',
    )
    answered = out(call(project, "claude", "PreToolUse", BASH_RM))
    assert answered["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "failClosed" in answered["hookSpecificOutput"]["permissionDecisionReason"]
    # On Stop a deny would keep the agent going: relay only tells the user there.
    stop = out(call(project, "claude", "Stop", {"stop_hook_active": False}))
    assert "decision" not in stop and "settings.json" in stop["systemMessage"]


def test_an_unreadable_event_is_a_visible_message_not_a_silent_allow(
    project: Path, relay_home: Path
) -> None:
    reply = call(project, "claude", "PreToolUse", b"{not json")
    answered = out(reply)
    assert "cannot read the event Claude Code sent" in answered["systemMessage"]
    assert "hookSpecificOutput" not in answered
    user_guard(relay_home, failClosed=True)
    answered = out(call(project, "claude", "PreToolUse", b"{not json"))
    assert answered["hookSpecificOutput"]["permissionDecision"] == "deny"
    # The relay dialect keeps its contract: exit 1 with the error.
    relay = call(project, "relay", "PreToolUse", b"{not json")
    assert relay.exit_code == 1 and b"stdin: malformed JSON" in relay.stderr


def test_an_internal_error_is_a_visible_message(
    project: Path, relay_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user_guard(relay_home)

    def explode(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(HookSystem, "run_planned", explode)
    answered = out(call(project, "claude", "PreToolUse", BASH_RM))
    assert "internal error: RuntimeError: boom" in answered["systemMessage"]
    relay = call(project, "relay", "PreToolUse", BASH_RM)
    assert relay.exit_code == 3 and b"internal error" in relay.stderr


# ---- fidelity to Claude Code ------------------------------------------------------------


def test_an_event_relay_does_not_know_passes_through(project: Path, relay_home: Path) -> None:
    specific = {"hookEventName": "BrandNewEvent", "novel": {"x": 1}}
    write(
        relay_home / "settings.json",
        {"hooks": hooks("BrandNewEvent", answer({"hookSpecificOutput": specific}))},
    )
    answered = out(call(project, "claude", "BrandNewEvent", {"anything": [1, 2]}))
    assert answered == {"hookSpecificOutput": specific}
    assert out(call(project, "claude", "OtherNewEvent", {})) == {}
    refused = call(project, "relay", "BrandNewEvent", {})
    assert refused.exit_code == 1 and b"unknown event" in refused.stderr


@pytest.mark.parametrize("event", ["MessageDisplay", "Elicitation", "ElicitationResult"])
def test_claude_events_of_2_1_pass_with_exit_0(project: Path, event: str) -> None:
    assert call(project, "claude", event, {"message": "hi"}).exit_code == 0


def test_defer_is_carried_through_and_a_deny_still_wins(project: Path, relay_home: Path) -> None:
    defer = answer({"hookSpecificOutput": {"permissionDecision": "defer"}}, name="defer")
    allow = answer({"hookSpecificOutput": {"permissionDecision": "allow"}}, name="allow")
    write(relay_home / "settings.json", {"hooks": hooks("PreToolUse", defer, allow)})
    specific = out(call(project, "claude", "PreToolUse", BASH_RM))["hookSpecificOutput"]
    assert specific["permissionDecision"] == "defer"
    deny = answer(DENY, name="deny")
    write(relay_home / "settings.json", {"hooks": hooks("PreToolUse", defer, allow, deny)})
    specific = out(call(project, "claude", "PreToolUse", BASH_RM))["hookSpecificOutput"]
    assert (specific["permissionDecision"], specific["permissionDecisionReason"]) == (
        "deny",
        "no rm -rf",
    )


@pytest.mark.parametrize("event", ["Stop", "SubagentStop", "PostToolBatch", "UserPromptExpansion"])
def test_additional_context_reaches_claude_where_it_reads_it(
    project: Path, relay_home: Path, event: str
) -> None:
    write(relay_home / "settings.json", {"hooks": hooks(event, answer({"inject": "remember X"}))})
    specific = out(call(project, "claude", event, {}))["hookSpecificOutput"]
    assert specific == {"hookEventName": event, "additionalContext": "remember X"}


def test_a_deny_on_a_block_event_is_claudes_json_block(project: Path, relay_home: Path) -> None:
    write(relay_home / "settings.json", {"hooks": hooks("Stop", answer(DENY))})
    answered = out(call(project, "claude", "Stop", {"stop_hook_active": False}))
    assert (answered["decision"], answered["reason"]) == ("block", "no rm -rf")


def test_a_permission_request_deny_is_claudes_behavior_json(
    project: Path, relay_home: Path
) -> None:
    write(relay_home / "settings.json", {"hooks": hooks("PermissionRequest", answer(DENY))})
    answered = out(call(project, "claude", "PermissionRequest", {"tool_name": "Bash"}))
    assert answered["hookSpecificOutput"] == {
        "hookEventName": "PermissionRequest",
        "decision": {"behavior": "deny", "message": "no rm -rf"},
    }


def test_hooks_see_the_hosts_event_as_sent(project: Path, relay_home: Path, tmp_path: Path) -> None:
    recorder = script(tmp_path / "record.py", RECORD)
    record = tmp_path / "record.jsonl"
    entry = {"command": sys.executable, "args": [str(recorder)], "env": {"RECORD": str(record)}}
    write(
        relay_home / "settings.json",
        {"hooks": {**hooks("Stop", entry), **hooks("AfterAgent", entry)}},
    )
    sent = {"session_id": "s1", "transcript_path": "/t.jsonl", "stop_hook_active": False}
    call(project, "claude", "Stop", sent)
    by_dialect = {
        event["hook_event_name"]: event
        for event in map(json.loads, record.read_text().splitlines())
    }
    claude = by_dialect["Stop"]
    # As Claude Code sent it, plus only relay's base fields (cwd, timestamp): no prompt,
    # prompt_response or agent_name that the host never sent.
    assert set(claude) == {*sent, "hook_event_name", "cwd", "timestamp"}
    assert claude["cwd"] == str(project)
    # A relay-dialect hook gets relay's typed event, every field present.
    relay_event = by_dialect["AfterAgent"]
    assert {"prompt", "prompt_response", "agent_name"} <= set(relay_event)


def test_a_servers_kept_registry_still_asks_trust_on_every_call(
    project: Path, relay_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `relay serve` does: one Caches for every call, so the registry built for these
    # settings is kept (files are cached at once here: no 2-second racy window).
    monkeypatch.setattr("relay.config.filecache.RACY_SECONDS", 0.0)
    caches = Caches()
    guard = script(project / "hooks" / "guard.sh", "#!/bin/sh\necho 'no rm' >&2\nexit 2\n")
    write(
        project / ".relay" / "settings.json",
        {"hooks": hooks("PreToolUse", {"name": "guard", "command": "hooks/guard.sh"})},
    )

    def decision() -> str | None:
        call = Call(
            ["--dialect", "claude", "PreToolUse"],
            str(project),
            dict(os.environ),
            json.dumps(BASH_RM).encode(),
        )
        reply = answer_call(call, caches)
        assert reply is not None
        return out(reply).get("hookSpecificOutput", {}).get("permissionDecision")

    assert decision() is None  # not trusted yet
    trust_all(project)
    assert decision() == "deny"
    with ThreadPoolExecutor(max_workers=8) as pool:  # calls on several threads share it
        assert set(pool.map(lambda _: decision(), range(16))) == {"deny"}
    guard.write_text("#!/bin/sh\nexit 0\n")  # edited after it was trusted
    assert decision() is None
    assert len(caches.registries._entries) == 1  # one registry, built once, for all of them


@pytest.mark.parametrize(
    ("event", "decision", "expected"),
    [
        ("BeforeTool", "defer", "ask"),
        ("BeforeTool", "ask", "ask"),
        ("BeforeAgent", "ask", "deny"),
        ("BeforeModel", "defer", "deny"),
    ],
)
def test_gemini_never_reads_an_ask_or_defer_as_an_allow(
    project: Path, relay_home: Path, event: str, decision: str, expected: str
) -> None:
    hook = answer({"decision": decision, "reason": "check this"})
    write(relay_home / "settings.json", {"hooks": hooks(event, hook)})
    answered = out(call(project, "gemini", event, {"tool_name": "run_shell_command"}))
    assert answered["decision"] == expected
    assert answered["reason"].startswith("check this")
    if expected == "deny":
        assert "cannot request" in answered["reason"]


# ---- a rewrite never approves (spec/hosts.md: what a rewrite costs) ------------------

REWRITE = {"hookSpecificOutput": {"tool_input": {"command": "echo safe"}}}
SAFE = {"command": "echo safe"}


def tool_answer(project: Path, dialect: str) -> dict[str, Any]:
    """What `dialect`'s host gets on its tool event for `git status`."""
    event = "BeforeTool" if dialect == "gemini" else "PreToolUse"
    sent = {"tool_name": "Bash", "tool_input": {"command": "git status"}}
    return out(call(project, dialect, event, sent))


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [
        # Claude Code applies updatedInput alone, then its own rules and prompt decide.
        ("claude", {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": SAFE}}),
        # Codex applies updatedInput only beside allow, which there grants nothing.
        (
            "codex",
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "allow",
                    "updatedInput": SAFE,
                }
            },
        ),
        ("gemini", {"hookSpecificOutput": {"hookEventName": "BeforeTool", "tool_input": SAFE}}),
    ],
)
def test_a_rewrite_alone_is_rendered_without_an_approval(
    project: Path, relay_home: Path, dialect: str, expected: dict[str, Any]
) -> None:
    write(relay_home / "settings.json", {"hooks": hooks("BeforeTool", answer(REWRITE))})
    assert tool_answer(project, dialect) == expected
    # The same in Claude Code's own words, from a hook registered under its name.
    claude_rewrite = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": SAFE}}
    write(relay_home / "settings.json", {"hooks": hooks("PreToolUse", answer(claude_rewrite))})
    assert tool_answer(project, dialect) == expected


@pytest.mark.parametrize("dialect", ["claude", "codex", "gemini"])
def test_only_a_hooks_explicit_allow_is_rendered_as_allow(
    project: Path, relay_home: Path, dialect: str
) -> None:
    allow_and_rewrite = {**REWRITE, "decision": "allow", "reason": "known safe"}
    write(relay_home / "settings.json", {"hooks": hooks("BeforeTool", answer(allow_and_rewrite))})
    answered = tool_answer(project, dialect)
    if dialect == "gemini":
        assert (answered["decision"], answered["reason"]) == ("allow", "known safe")
        assert answered["hookSpecificOutput"]["tool_input"] == SAFE
    else:
        assert answered["hookSpecificOutput"] == {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": "known safe",
            "updatedInput": SAFE,
        }


def test_a_bare_allow_is_left_out_for_codex_which_refuses_the_answer_over_it(
    project: Path, relay_home: Path
) -> None:
    """Codex reads allow only beside updatedInput and refuses the whole answer, its context
    with it, over a bare one; Claude Code reads it as an approval."""
    allow = {"decision": "allow", "inject": "CONTEXT"}
    write(relay_home / "settings.json", {"hooks": hooks("BeforeTool", answer(allow))})
    assert tool_answer(project, "codex") == {
        "hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "CONTEXT"}
    }
    assert tool_answer(project, "claude")["hookSpecificOutput"]["permissionDecision"] == "allow"


@pytest.mark.parametrize(
    ("decision", "dialect", "expected"),
    [
        ("ask", "claude", "ask"),  # Claude Code asks about the rewritten input: it is sent
        ("ask", "codex", "deny"),  # Codex hooks cannot ask
        ("defer", "claude", "defer"),  # Claude Code ignores a rewrite beside defer
        ("deny", "claude", "deny"),
        ("deny", "codex", "deny"),
    ],
)
def test_a_rewrite_beside_ask_defer_or_deny_keeps_that_decision(
    project: Path, relay_home: Path, decision: str, dialect: str, expected: str
) -> None:
    write(
        relay_home / "settings.json",
        {"hooks": hooks("BeforeTool", answer(REWRITE), answer({"decision": decision}))},
    )
    specific = tool_answer(project, dialect)["hookSpecificOutput"]
    assert specific["permissionDecision"] == expected
    assert specific.get("updatedInput") == (SAFE if expected == "ask" else None)

"""`relay hooks import`: Claude Code and Gemini CLI hooks converted into relay settings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from relay.cli.main import cli
from relay.config.importing import (
    ImportSourceError,
    convert,
    import_from,
    merge_into_text,
    settings_document,
)
from relay.config.loader import parse_settings
from relay.config.model import HookEntry, HookGroup, HooksConfig, Settings
from relay.errors import SettingsError

PY = sys.executable
GUARD = """\
import json, sys
event = json.load(sys.stdin)
command = event.get("tool_input", {}).get("command", "")
if event.get("hook_event_name") == "PreToolUse" and "rm -rf" in command:
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "deny", "permissionDecisionReason": "no rm -rf"}}))
"""
GUARD_COMMAND = f'{PY} "$CLAUDE_PROJECT_DIR"/.claude/hooks/guard.py'

CLAUDE_SETTINGS: dict[str, Any] = {
    "permissions": {"allow": ["Bash(npm test)"]},
    "model": "opus",
    "hooks": {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [
                    {"type": "command", "command": GUARD_COMMAND, "timeout": 10},
                    {"type": "prompt", "prompt": "Is this command safe to run?", "timeout": 30},
                ],
            }
        ],
        "PostToolUse": [
            {
                "matcher": "Edit|Write",
                "hooks": [
                    {
                        "type": "command",
                        "command": "npx prettier --write",
                        "async": True,
                        "statusMessage": "Formatting…",
                    }
                ],
            }
        ],
        "UserPromptSubmit": [
            {"hooks": [{"type": "command", "command": "git status --short", "timeout": 5}]}
        ],
        "Stop": [
            {"hooks": [{"type": "agent", "prompt": "Check that the tests pass", "timeout": 120}]}
        ],
    },
}

GEMINI_SETTINGS: dict[str, Any] = {
    "theme": "GitHub",
    "hooksConfig": {"enabled": True, "disabled": ["slow-audit"], "notifications": True},
    "hooks": {
        "BeforeTool": [
            {
                "matcher": "write_file|replace",
                "sequential": True,
                "hooks": [
                    {
                        "name": "secret-scan",
                        "type": "command",
                        "command": "$GEMINI_PROJECT_DIR/.gemini/hooks/scan.sh",
                        "timeout": 5000,
                        "description": "Refuse writes that contain secrets",
                    }
                ],
            }
        ],
        "AfterModel": [
            {"hooks": [{"name": "slow-audit", "command": "./audit.sh", "timeout": 1500}]}
        ],
        "SessionStart": [
            {"matcher": "startup", "hooks": [{"command": "echo hello", "retries": 2}]}
        ],
        "PreToolUse": [{"hooks": [{"command": "./claude-only.sh"}]}],
    },
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "my project"  # a space: $CLAUDE_PROJECT_DIR must survive it
    (root / ".git").mkdir(parents=True)
    return root


def write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else json.dumps(document, indent=2))
    return path


def invoke(args: list[str], stdin: str = "") -> Any:
    return CliRunner().invoke(cli, args, input=stdin)


# --- Claude Code ---------------------------------------------------------------------------


def test_a_claude_file_converts_keeping_claude_event_names(project: Path) -> None:
    source = write(project / ".claude" / "settings.json", CLAUDE_SETTINGS)
    result = import_from("claude", cwd=project)
    assert result.files == [str(source)]
    assert result.settings == Settings(
        hooks={
            "PreToolUse": [
                HookGroup(
                    matcher="Bash",
                    hooks=[HookEntry(command=GUARD_COMMAND, name="pre-tool-use-guard", timeout=10)],
                )
            ],
            "PostToolUse": [
                HookGroup(
                    matcher="Edit|Write",
                    hooks=[
                        HookEntry(command="npx prettier --write", name="post-tool-use-prettier")
                    ],
                )
            ],
            "UserPromptSubmit": [
                HookGroup(
                    hooks=[
                        HookEntry(
                            command="git status --short", name="user-prompt-submit-git", timeout=5
                        )
                    ]
                )
            ],
        }
    )
    assert result.hook_count == 3
    assert result.report == [
        f"{source}: hooks.PreToolUse[0].hooks[1] (PreToolUse[Bash]): 'prompt' hook "
        "'Is this command safe to run?' cannot be carried over (relay runs command hooks only); "
        "left out",
        f"{source}: hooks.PostToolUse[0].hooks[0].async (PostToolUse[Edit|Write]): Claude Code "
        "runs it in the background; relay runs it like any hook and waits; left out",
        f"{source}: hooks.PostToolUse[0].hooks[0].statusMessage (PostToolUse[Edit|Write]): relay "
        "shows no status message while a hook runs; left out",
        f"{source}: hooks.Stop[0].hooks[0] (Stop): 'agent' hook 'Check that the tests pass' cannot "
        "be carried over (relay runs command hooks only); left out",
        f"{source}: not hook settings, left alone: model, permissions",
        "1 hook(s) without a timeout get relay's default of 60 seconds; add a timeout if one "
        "needs longer",
    ]


def test_the_printed_settings_are_a_valid_relay_file(project: Path) -> None:
    write(project / ".claude" / "settings.json", CLAUDE_SETTINGS)
    result = invoke(["hooks", "import", "--from", "claude", "--cwd", str(project)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith('{\n  "hooks": {\n    "PreToolUse": [\n')
    assert result.stdout.endswith("}\n")
    document = json.loads(result.stdout)
    assert list(document) == ["hooks"]
    assert list(document["hooks"]) == ["PreToolUse", "PostToolUse", "UserPromptSubmit"]
    assert document["hooks"]["PreToolUse"][0]["hooks"][0] == {
        "command": GUARD_COMMAND,
        "name": "pre-tool-use-guard",
        "timeout": 10,
    }
    loaded = parse_settings(result.stdout.encode(), file="out.json", scope="project")
    assert loaded.warnings == []
    assert "'prompt' hook" in result.stderr and "Stop" in result.stderr
    assert "$CLAUDE_PROJECT_DIR" in result.stdout


def test_the_local_file_is_merged_after_the_shared_one(project: Path) -> None:
    write(project / ".claude" / "settings.json", CLAUDE_SETTINGS)
    local = write(
        project / ".claude" / "settings.local.json",
        {
            "disableAllHooks": True,
            "hooks": {
                "PreToolUse": [
                    {"matcher": "Write", "hooks": [{"type": "command", "command": "./mine.sh"}]},
                    # The same group as the shared file's, once the prompt hook is left out.
                    {
                        "matcher": "Bash",
                        "hooks": [{"type": "command", "command": GUARD_COMMAND, "timeout": 10}],
                    },
                ]
            },
        },
    )
    result = import_from("claude", cwd=project / "src")
    assert result.files[1] == str(local)
    assert [group.matcher for group in result.settings.hooks["PreToolUse"]] == ["Bash", "Write"]
    assert result.settings.hooksConfig == HooksConfig(enabled=False)
    assert any(
        "disableAllHooks: true became hooksConfig.enabled: false" in line for line in result.report
    )
    assert any("same group seen before" in line for line in result.report)


def test_odd_claude_entries_are_reported_not_fatal() -> None:
    document = {
        "hooks": {
            "PreToolUse": [
                {"matcher": "(", "hooks": [{"command": "a"}]},
                {
                    "matcher": "Bash",
                    "hooks": [{"type": "command"}, {"command": "b", "timeout": "x"}],
                },
                "not a group",
            ],
            "NotAnEvent": [{"hooks": [{"command": "c"}]}],
            "SubagentStop": [{"hooks": [{"type": "command", "command": "d", "once": True}]}],
        }
    }
    result = convert("claude", [("c.json", document)])
    assert list(result.settings.hooks) == ["PreToolUse", "SubagentStop"]
    assert result.settings.hooks["PreToolUse"] == [
        HookGroup(matcher="Bash", hooks=[HookEntry(command="b", name="pre-tool-use-b")])
    ]
    joined = "\n".join(result.report)
    assert "hooks.PreToolUse[0].matcher" not in joined  # reported on the group
    assert "c.json: hooks.PreToolUse[0] (PreToolUse[(]): invalid regular expression" in joined
    assert "hooks.PreToolUse[1].hooks[0] (PreToolUse[Bash]): no command; left out" in joined
    assert (
        "hooks.PreToolUse[1].hooks[1].timeout (PreToolUse[Bash]): 'x' is not a positive" in joined
    )
    assert "hooks.PreToolUse[2] (PreToolUse): expected an object; left out" in joined
    assert "hooks.NotAnEvent (NotAnEvent): not a Claude Code event relay knows" in joined
    assert (
        "hooks.SubagentStop[0].hooks[0].once (SubagentStop): relay has no run-once hooks" in joined
    )


def test_an_imported_claude_hook_decides_as_it_did_in_claude(project: Path) -> None:
    write(project / ".claude" / "hooks" / "guard.py", GUARD)
    write(project / ".claude" / "settings.json", CLAUDE_SETTINGS)
    imported = invoke(["hooks", "import", "--from", "claude", "--write", "--cwd", str(project)])
    assert imported.exit_code == 0, imported.output
    assert "relay trust" in imported.stderr
    run = ["hooks", "run", "--dialect", "claude", "PreToolUse", "--cwd", str(project)]
    dangerous = json.dumps({"tool_name": "Bash", "tool_input": {"command": "rm -rf /"}})
    # Not trusted yet: project hooks do not run.
    assert invoke(run, dangerous).exit_code == 0
    assert invoke(["trust", "--yes", "--cwd", str(project)]).exit_code == 0
    denied = invoke(run, dangerous)
    assert denied.exit_code == 0
    decision = json.loads(denied.stdout)["hookSpecificOutput"]
    assert (decision["permissionDecision"], decision["permissionDecisionReason"]) == (
        "deny",
        "no rm -rf",
    )
    relay_view = invoke(run[:2] + run[4:], dangerous)
    out = json.loads(relay_view.stdout)
    assert (out["decision"], out["reason"]) == ("deny", "no rm -rf")
    assert out["hooks"][0]["name"] == "pre-tool-use-guard"
    harmless = invoke(run, json.dumps({"tool_name": "Bash", "tool_input": {"command": "ls"}}))
    assert harmless.exit_code == 0


# --- Gemini CLI ----------------------------------------------------------------------------


def test_a_gemini_file_converts_milliseconds_to_seconds(project: Path) -> None:
    source = write(project / ".gemini" / "settings.json", GEMINI_SETTINGS)
    result = import_from("gemini", cwd=project)
    assert result.settings == Settings(
        hooks={
            "BeforeTool": [
                HookGroup(
                    matcher="write_file|replace",
                    sequential=True,
                    hooks=[
                        HookEntry(
                            command="$GEMINI_PROJECT_DIR/.gemini/hooks/scan.sh",
                            name="secret-scan",
                            timeout=5,
                            description="Refuse writes that contain secrets",
                        )
                    ],
                )
            ],
            "AfterModel": [
                HookGroup(hooks=[HookEntry(command="./audit.sh", name="slow-audit", timeout=1.5)])
            ],
            "SessionStart": [
                HookGroup(
                    matcher="startup",
                    hooks=[HookEntry(command="echo hello", name="session-start-echo")],
                )
            ],
        },
        hooksConfig=HooksConfig(disabled=["slow-audit"]),
    )
    assert result.report == [
        f"{source}: hooksConfig.notifications: relay has no hook notifications; left out",
        f"{source}: hooks.SessionStart[0].hooks[0].retries (SessionStart[startup]): no relay "
        "equivalent; left out",
        f"{source}: hooks.PreToolUse (PreToolUse): not a Gemini CLI event relay knows; its hooks "
        "were left out",
        f"{source}: not hook settings, left alone: theme",
        "timeouts converted from milliseconds (Gemini CLI) to seconds (relay): 5000 ms -> 5 s, "
        "1500 ms -> 1.5 s",
        "matchers 'write_file|replace': Gemini CLI searches tool names with them as regular "
        "expressions, relay reads a plain list of names as exact names; write a regular "
        "expression (such as '.*read.*') where a part of a name was meant",
    ]
    text = result.settings_text()
    assert '"timeout": 5,' in text and '"timeout": 1.5' in text


def test_the_older_gemini_layout_with_switches_inside_hooks() -> None:
    document = {
        "tools": {"enableHooks": True},
        "hooks": {
            "enabled": False,
            "disabled": ["a", 3],
            "notifications": False,
            "AfterAgent": [
                {"hooks": [{"type": "command", "command": "./after.sh", "timeout": 60000}]}
            ],
            "BeforeAgent": [{"hooks": [{"type": "plugin", "command": "x"}]}],
        },
    }
    result = convert("gemini", [("g.json", document)])
    assert result.settings == Settings(
        hooks={
            "AfterAgent": [
                HookGroup(
                    hooks=[HookEntry(command="./after.sh", name="after-agent-after", timeout=60)]
                )
            ]
        },
        hooksConfig=HooksConfig(enabled=False, disabled=["a"]),
    )
    joined = "\n".join(result.report)
    assert "g.json: hooks.enabled: false became hooksConfig.enabled: false" in joined
    assert "g.json: hooks.disabled: 3 is not a hook name; left out" in joined
    assert "'plugin' hook 'x' cannot be carried over" in joined


def test_gemini_import_through_the_command_with_an_explicit_path(
    project: Path, tmp_path: Path
) -> None:
    source = write(tmp_path / "elsewhere.json", GEMINI_SETTINGS)
    result = invoke(
        ["hooks", "import", "--from", "gemini", "--path", str(source), "--cwd", str(project)]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["hooks"]["BeforeTool"][0]["hooks"][0]["timeout"] == 5
    assert document["hooksConfig"] == {"disabled": ["slow-audit"]}
    assert "5000 ms -> 5 s" in result.stderr


# --- writing into .relay/settings.json -----------------------------------------------------


EXISTING = """{
    "hooks": {
        "PreToolUse": [
            {"matcher": "Read", "hooks": [{"command": "./read-guard.sh", "name": "reader"}]}
        ],
        "SessionStart": [
            {"hooks": [{"command": "echo start"}]}
        ]
    },
    "memory": {"injectOnStart": false}
}
"""


def test_write_merges_into_an_existing_file_and_keeps_its_hooks(project: Path) -> None:
    write(project / ".claude" / "settings.json", CLAUDE_SETTINGS)
    target = write(project / ".relay" / "settings.json", EXISTING)
    result = invoke(["hooks", "import", "--from", "claude", "--write", "--cwd", str(project)])
    assert result.exit_code == 0, result.output
    assert f"updated {target}: 3 group(s) added, 0 already there" in result.stderr
    text = target.read_text()
    # The existing text is untouched up to where the new groups go.
    assert text.startswith(EXISTING.partition('\n        ],\n        "SessionStart"')[0])
    assert text.endswith('    "memory": {"injectOnStart": false}\n}\n')
    loaded = parse_settings(text.encode(), file=str(target), scope="project")
    hooks = loaded.settings.hooks
    assert [group.matcher for group in hooks["PreToolUse"]] == ["Read", "Bash"]
    assert hooks["SessionStart"][0].hooks[0].command == "echo start"
    assert list(hooks) == ["PreToolUse", "SessionStart", "PostToolUse", "UserPromptSubmit"]
    assert loaded.settings.memory.injectOnStart is False
    # The appended group follows the file's 4-space layout.
    assert '            {\n                "matcher": "Bash",\n' in text

    again = invoke(["hooks", "import", "--from", "claude", "--write", "--cwd", str(project)])
    assert again.exit_code == 0
    assert target.read_text() == text
    assert f"unchanged: {target}: 0 group(s) added, 3 already there" in again.stderr
    assert "PreToolUse[Bash]: the same group is already in" in again.stderr


def test_write_creates_the_file_when_missing(project: Path) -> None:
    write(project / ".gemini" / "settings.json", GEMINI_SETTINGS)
    result = invoke(["hooks", "import", "--from", "gemini", "--write", "--cwd", str(project)])
    assert result.exit_code == 0, result.output
    target = project / ".relay" / "settings.json"
    assert target.read_text() == result.stdout
    assert f"created {target}: 3 group(s) added" in result.stderr


def test_merge_adds_disabled_names_and_the_off_switch_once() -> None:
    imported = Settings(
        hooks={"Stop": [HookGroup(hooks=[HookEntry(command="./s.sh")])]},
        hooksConfig=HooksConfig(enabled=False, disabled=["x"]),
    )
    before = '{\n  "hooksConfig": {\n    "enabled": true\n  }\n}\n'
    merged = merge_into_text(before, imported, file="s.json")
    assert merged.text == (
        '{\n  "hooksConfig": {\n    "enabled": false,\n    "disabled": [\n      "x"\n    ]\n  },\n'
        '  "hooks": {\n    "Stop": [\n      {\n        "hooks": [\n          {\n'
        '            "command": "./s.sh"\n          }\n        ]\n      }\n    ]\n  }\n}\n'
    )
    assert (merged.added, merged.skipped) == (1, 0)
    again = merge_into_text(merged.text, imported, file="s.json")
    assert (again.text, again.added, again.skipped) == (merged.text, 0, 1)


def test_merge_refuses_a_file_relay_cannot_read() -> None:
    imported = Settings(hooks={"Stop": [HookGroup(hooks=[HookEntry(command="./s.sh")])]})
    with pytest.raises(SettingsError) as caught:
        merge_into_text('{"hooks": {"Stop": 3}}', imported, file="s.json")
    assert caught.value.path == "hooks.Stop"


def test_settings_document_leaves_out_empty_sections() -> None:
    assert settings_document(Settings()) == {}
    assert settings_document(Settings(hooksConfig=HooksConfig(enabled=False))) == {
        "hooksConfig": {"enabled": False}
    }


# --- bad sources ---------------------------------------------------------------------------


def test_malformed_source_json_exits_1_with_line_and_column(project: Path) -> None:
    source = write(project / ".claude" / "settings.json", '{\n  "hooks": {\n    "Stop": [,]\n}')
    result = invoke(["hooks", "import", "--from", "claude", "--cwd", str(project)])
    assert result.exit_code == 1
    assert f"{source}:3:14: invalid JSON" in result.stderr
    assert result.stdout == ""


def test_missing_source_names_the_paths_tried(project: Path, tmp_path: Path) -> None:
    result = invoke(["hooks", "import", "--from", "claude", "--cwd", str(project)])
    assert result.exit_code == 1
    assert (
        f"no Claude Code settings file found; tried: {project}/.claude/settings.json, "
        f"{project}/.claude/settings.local.json" in result.stderr
    )
    with pytest.raises(ImportSourceError) as caught:
        import_from("gemini", cwd=project, paths=[tmp_path / "nope.json"])
    assert caught.value.tried == [str(tmp_path / "nope.json")]


def test_installed_command_imports(project: Path, relay_home: Path) -> None:
    relay = shutil.which("relay", path=str(Path(sys.executable).parent))
    assert relay is not None
    write(project / ".gemini" / "settings.json", GEMINI_SETTINGS)
    done = subprocess.run(
        [relay, "hooks", "import", "--from", "gemini", "--write", "--cwd", str(project)],
        capture_output=True,
        check=False,
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    written = json.loads((project / ".relay" / "settings.json").read_text())
    assert written == json.loads(done.stdout)
    assert written["hooks"]["AfterModel"][0]["hooks"][0]["timeout"] == 1.5
    assert b"relay trust" in done.stderr

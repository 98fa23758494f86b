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
    ImportResult,
    ImportSource,
    ImportSourceError,
    convert,
    generated_name,
    import_sources,
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


def import_project(agent: str, root: Path) -> ImportResult:
    """The project's host files, each bound for its relay file, as `relay hooks import` reads."""
    relay = root / ".relay"
    if agent == "gemini":
        sources = [
            ImportSource(path=root / ".gemini" / "settings.json", target=relay / "settings.json")
        ]
    else:
        sources = [
            ImportSource(path=root / ".claude" / "settings.json", target=relay / "settings.json"),
            ImportSource(
                path=root / ".claude" / "settings.local.json",
                target=relay / "settings.local.json",
            ),
        ]
    return import_sources("claude" if agent == "claude" else "gemini", sources)


# --- Claude Code ---------------------------------------------------------------------------


def test_a_claude_file_converts_keeping_claude_event_names(project: Path) -> None:
    source = write(project / ".claude" / "settings.json", CLAUDE_SETTINGS)
    result = import_project("claude", project)
    assert result.files == [str(source)]
    assert result.settings == Settings(
        hooks={
            "PreToolUse": [
                HookGroup(
                    matcher="Bash",
                    hooks=[HookEntry(command=GUARD_COMMAND, name="guard", timeout=10)],
                )
            ],
            "PostToolUse": [
                HookGroup(
                    matcher="Edit|Write",
                    hooks=[HookEntry(command="npx prettier --write", name="npx-prettier")],
                )
            ],
            "UserPromptSubmit": [
                HookGroup(hooks=[HookEntry(command="git status --short", name="git", timeout=5)])
            ],
        }
    )
    assert result.hook_count == 3
    assert result.generated == ["guard", "npx-prettier", "git"]
    assert [(part.target, part.files) for part in result.parts] == [
        (str(project / ".relay" / "settings.json"), [str(source)])
    ]
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
        "name": "guard",
        "timeout": 10,
    }
    loaded = parse_settings(result.stdout.encode(), file="out.json", scope="project")
    assert loaded.warnings == []
    assert "'prompt' hook" in result.stderr and "Stop" in result.stderr
    assert "$CLAUDE_PROJECT_DIR" in result.stdout
    assert f"for {project / '.relay' / 'settings.json'} (--write adds them there)" in result.stderr
    assert not (project / ".relay").exists()


LOCAL_SETTINGS: dict[str, Any] = {
    "disableAllHooks": True,
    "hooks": {
        "PreToolUse": [
            {"matcher": "Write", "hooks": [{"type": "command", "command": "./mine.sh"}]},
            # The same group as the shared file's, once the prompt hook is left out.
            {
                "matcher": "Bash",
                "hooks": [{"type": "command", "command": GUARD_COMMAND, "timeout": 10}],
            },
            # Another guard.py: its name must not be the shared one's.
            {"hooks": [{"type": "command", "command": "python3 ~/bin/guard.py"}]},
        ]
    },
}


def test_the_local_file_goes_to_relays_local_file(project: Path) -> None:
    shared = write(project / ".claude" / "settings.json", CLAUDE_SETTINGS)
    local = write(project / ".claude" / "settings.local.json", LOCAL_SETTINGS)
    result = import_project("claude", project)
    assert result.files == [str(shared), str(local)]
    shared_part, local_part = result.parts
    assert (shared_part.target, shared_part.files) == (
        str(project / ".relay" / "settings.json"),
        [str(shared)],
    )
    assert (local_part.target, local_part.files) == (
        str(project / ".relay" / "settings.local.json"),
        [str(local)],
    )
    # The group already in the shared file is not repeated in the personal one.
    assert local_part.settings == Settings(
        hooks={
            "PreToolUse": [
                HookGroup(matcher="Write", hooks=[HookEntry(command="./mine.sh", name="mine")]),
                HookGroup(hooks=[HookEntry(command="python3 ~/bin/guard.py", name="guard-2")]),
            ]
        },
        hooksConfig=HooksConfig(enabled=False),
    )
    assert shared_part.settings.hooksConfig == HooksConfig()
    assert shared_part.hook_names == ["guard", "npx-prettier", "git"]
    assert any(
        "disableAllHooks: true became hooksConfig.enabled: false" in line for line in result.report
    )
    assert any("same group seen before" in line for line in result.report)


def test_write_sends_each_file_to_its_own_relay_file(project: Path) -> None:
    write(project / ".claude" / "settings.json", CLAUDE_SETTINGS)
    write(project / ".claude" / "settings.local.json", LOCAL_SETTINGS)
    (project / "src").mkdir()
    args = ["hooks", "import", "--from", "claude", "--cwd", str(project / "src")]
    preview = invoke(args)
    assert preview.exit_code == 0, preview.output
    shared = project / ".relay" / "settings.json"
    local = project / ".relay" / "settings.local.json"
    # Two files' worth: each announced on stderr, neither written.
    assert f"for {shared} (--write adds them there):" in preview.stderr
    assert f"for {local} (--write adds them there):" in preview.stderr
    assert not shared.exists() and not local.exists()

    done = invoke([*args, "--write"])
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines() == [
        f"created {shared}: 3 hook(s) added (guard, npx-prettier, git), 0 already there",
        f"created {local}: 2 hook(s) added (mine, guard-2), 0 already there",
        "project hooks run only once trusted: review and trust them with `relay trust`",
        f"Claude Code still runs the original hooks in {project}/.claude/settings.json, "
        f"{project}/.claude/settings.local.json: remove them there, or run `relay install "
        "claude --project --import`, which makes relay Claude Code's hook layer and moves them "
        "out, so nothing runs twice (`relay uninstall claude --project` puts them back)",
    ]
    assert "{" not in done.stdout  # a summary, not the settings
    shared_hooks = json.loads(shared.read_text())["hooks"]
    assert [group["hooks"][0]["name"] for group in shared_hooks["PreToolUse"]] == ["guard"]
    local_document = json.loads(local.read_text())
    assert local_document["hooksConfig"] == {"enabled": False}
    assert [group["hooks"][0]["name"] for group in local_document["hooks"]["PreToolUse"]] == [
        "mine",
        "guard-2",
    ]
    # The names are what enable/disable take.
    disabled = invoke(["hooks", "disable", "npx-prettier", "--cwd", str(project)])
    assert disabled.exit_code == 0, disabled.output
    assert "disabled npx-prettier in" in disabled.stdout

    again = invoke([*args, "--write"])
    assert again.exit_code == 0, again.output
    assert again.stdout.splitlines()[:2] == [
        f"unchanged: {shared}: 0 hook(s) added, 3 already there",
        f"unchanged: {local}: 0 hook(s) added, 2 already there",
    ]


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
        HookGroup(matcher="Bash", hooks=[HookEntry(command="b", name="b")])
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
    assert "relay trust" in imported.stdout
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
    assert out["hooks"][0]["name"] == "guard"
    harmless = invoke(run, json.dumps({"tool_name": "Bash", "tool_input": {"command": "ls"}}))
    assert harmless.exit_code == 0


# --- Gemini CLI ----------------------------------------------------------------------------


def test_a_gemini_file_converts_milliseconds_to_seconds(project: Path) -> None:
    source = write(project / ".gemini" / "settings.json", GEMINI_SETTINGS)
    result = import_project("gemini", project)
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
                    hooks=[HookEntry(command="echo hello", name="echo")],
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
                HookGroup(hooks=[HookEntry(command="./after.sh", name="after", timeout=60)])
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
    assert f"updated {target}: 3 hook(s) added (guard, npx-prettier, git), 0 already there" in (
        result.stdout
    )
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
    assert f"unchanged: {target}: 0 hook(s) added, 3 already there" in again.stdout
    assert "PreToolUse[Bash]: the same group is already in" in again.stderr


def test_write_creates_the_file_when_missing(project: Path) -> None:
    write(project / ".gemini" / "settings.json", GEMINI_SETTINGS)
    args = ["hooks", "import", "--from", "gemini", "--cwd", str(project)]
    preview = invoke(args)
    result = invoke([*args, "--write"])
    assert result.exit_code == 0, result.output
    target = project / ".relay" / "settings.json"
    assert target.read_text() == preview.stdout  # what was printed is what was written
    assert f"created {target}: 3 hook(s) added (secret-scan, slow-audit, echo)" in result.stdout
    assert "Gemini CLI still runs the original hooks in" in result.stdout
    assert "`relay install gemini --project --import`" in result.stdout


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
        import_sources("gemini", [ImportSource(path=tmp_path / "nope.json")], required=True)
    assert caught.value.tried == [str(tmp_path / "nope.json")]
    given = invoke(["hooks", "import", "--from", "gemini", "--path", str(tmp_path / "nope.json")])
    assert given.exit_code == 1
    assert f"no Gemini CLI settings file found; tried: {tmp_path / 'nope.json'}" in given.stderr


def test_installed_command_imports(project: Path, relay_home: Path) -> None:
    relay = shutil.which("relay", path=str(Path(sys.executable).parent))
    assert relay is not None
    write(project / ".gemini" / "settings.json", GEMINI_SETTINGS)
    command = [relay, "hooks", "import", "--from", "gemini", "--cwd", str(project)]
    environment = {**os.environ, "RELAY_HOME": str(relay_home)}
    preview, done = (
        subprocess.run(args, capture_output=True, check=False, env=environment, timeout=30)
        for args in (command, [*command, "--write"])
    )
    assert done.returncode == 0, done.stderr
    written = json.loads((project / ".relay" / "settings.json").read_text())
    assert written == json.loads(preview.stdout)
    assert written["hooks"]["AfterModel"][0]["hooks"][0]["timeout"] == 1.5
    assert b"relay trust" in done.stdout


# --- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (".claude/hooks/guard-bash.sh", "guard-bash"),
        ("python3 $CLAUDE_PROJECT_DIR/hooks/fmt.py", "fmt"),
        ('python3 "$CLAUDE_PROJECT_DIR"/.claude/hooks/guard.py', "guard"),
        ("/usr/bin/python3.12 -u 'my hooks/Check Types.py'", "check-types"),
        ("uv run --with rich hooks/lint.py", "lint"),
        ("node --no-warnings scripts/notify.mjs", "notify"),
        ("jq -r .tool_input.command", "jq"),
        ("npx prettier --write", "npx-prettier"),
        ("npx --yes @biomejs/biome@1.9 check", "npx-biome"),
        ("python -m black .", "black"),
        ("bash -c 'jq . | tee -a log'", "jq"),
        ('cd "$CLAUDE_PROJECT_DIR" && ./scripts/test.sh', "test"),
        ("LEVEL=strict env -i ./audit.sh", "audit"),
        ("$GEMINI_PROJECT_DIR/.gemini/hooks/scan.sh", "scan"),
        ('echo "unclosed', "echo"),
        ("", "hook"),
    ],
)
def test_a_hook_without_a_name_is_named_for_its_script_or_program(command: str, name: str) -> None:
    assert generated_name(command) == name


def test_made_up_names_avoid_the_names_in_the_file_and_a_second_import_adds_nothing(
    project: Path,
) -> None:
    write(
        project / ".claude" / "settings.json",
        {
            "hooks": {
                "PreToolUse": [
                    {"matcher": "Bash", "hooks": [{"command": ".claude/hooks/guard-bash.sh"}]},
                    {"matcher": "Write", "hooks": [{"command": "python3 hooks/fmt.py"}]},
                ],
                "PostToolUse": [{"hooks": [{"command": "python3 hooks/fmt.py --check"}]}],
            }
        },
    )
    # A hook of relay's own already has the name the first import hook would get.
    target = write(
        project / ".relay" / "settings.json",
        {"hooks": {"Stop": [{"hooks": [{"command": "./other.sh", "name": "guard-bash"}]}]}},
    )
    # And the personal file has a `fmt`: the two files run together.
    write(
        project / ".relay" / "settings.local.json",
        {"hooks": {"Stop": [{"hooks": [{"command": "./fmt-mine.sh", "name": "fmt"}]}]}},
    )
    args = ["hooks", "import", "--from", "claude", "--write", "--cwd", str(project)]
    done = invoke(args)
    assert done.exit_code == 0, done.output
    assert done.stdout.splitlines()[0] == (
        f"updated {target}: 3 hook(s) added (guard-bash-2, fmt-2, fmt-3), 0 already there"
    )
    assert (
        f"names numbered on, since {target} or a file beside it has them: "
        "guard-bash -> guard-bash-2, fmt -> fmt-2, fmt-2 -> fmt-3" in done.stderr
    )
    hooks = json.loads(target.read_text())["hooks"]
    assert hooks["Stop"][0]["hooks"][0] == {"command": "./other.sh", "name": "guard-bash"}
    assert [group["hooks"][0]["name"] for group in hooks["PreToolUse"]] == [
        "guard-bash-2",
        "fmt-2",
    ]
    text = target.read_text()
    again = invoke(args)
    assert again.exit_code == 0, again.output
    assert again.stdout.splitlines()[0] == (
        f"unchanged: {target}: 0 hook(s) added, 3 already there"
    )
    assert target.read_text() == text


def test_a_name_from_an_earlier_import_does_not_make_a_duplicate() -> None:
    """Hooks imported under other names (an older relay's `pre-tool-use-guard`, or renamed
    by hand) are the same hooks: importing them again adds nothing."""
    before = json.dumps(
        {
            "hooks": {
                "PreToolUse": [
                    {
                        "matcher": "Bash",
                        "hooks": [{"command": "./guard.sh", "name": "pre-tool-use-guard"}],
                    }
                ]
            }
        }
    )
    imported = convert(
        "claude",
        [
            (
                "c.json",
                {
                    "hooks": {
                        "PreToolUse": [{"matcher": "Bash", "hooks": [{"command": "./guard.sh"}]}]
                    }
                },
            )
        ],
    )
    merged = merge_into_text(before, imported.settings, file="s.json", generated=imported.generated)
    assert (merged.text, merged.added, merged.present) == (before, 0, 1)
    # Without knowing the name was made up, it is a different hook.
    assert merge_into_text(before, imported.settings, file="s.json").added == 1


def test_a_name_the_host_gave_is_never_taken_by_a_made_up_one() -> None:
    document = {
        "hooks": {
            # Unnamed first: it must not take `scan`, which the later hook was given.
            "BeforeTool": [{"hooks": [{"command": "./hooks/scan.sh"}]}],
            "AfterTool": [{"hooks": [{"command": "./other.sh", "name": "scan"}]}],
        }
    }
    result = convert("gemini", [("g.json", document)])
    names = [
        entry.name for groups in result.settings.hooks.values() for g in groups for entry in g.hooks
    ]
    assert names == ["scan-2", "scan"]
    assert result.generated == ["scan-2"]
    # In a file that has a `scan-2`, only the made-up name moves.
    merged = merge_into_text(
        '{"hooks": {"Stop": [{"hooks": [{"command": "./x", "name": "scan-2"}]}]}}',
        result.settings,
        file="s.json",
        generated=result.generated,
    )
    assert merged.names == ["scan-3", "scan"]
    assert merged.renamed == {"scan-2": "scan-3"}


# --- --scope user --------------------------------------------------------------------------


@pytest.mark.parametrize("configured", [False, True])
def test_scope_user_imports_the_hosts_user_file_into_relays_user_file(
    project: Path,
    relay_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    configured: bool,
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    folder = tmp_path / "claude-config" if configured else home / ".claude"
    if configured:
        monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(folder))
    else:
        monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    source = write(folder / "settings.json", CLAUDE_SETTINGS)
    # The project's files are not read at user scope.
    write(
        project / ".claude" / "settings.json", {"hooks": {"Stop": [{"hooks": [{"command": "x"}]}]}}
    )
    args = ["hooks", "import", "--from", "claude", "--scope", "user", "--cwd", str(project)]
    done = invoke([*args, "--write"])
    assert done.exit_code == 0, done.output
    target = relay_home / "settings.json"
    assert done.stdout.splitlines() == [
        f"created {target}: 3 hook(s) added (guard, npx-prettier, git), 0 already there",
        f"Claude Code still runs the original hooks in {source}: remove them there, or run "
        "`relay install claude --import`, which makes relay Claude Code's hook layer and moves "
        "them out, so nothing runs twice (`relay uninstall claude` puts them back)",
    ]
    assert list(json.loads(target.read_text())["hooks"]) == [
        "PreToolUse",
        "PostToolUse",
        "UserPromptSubmit",
    ]
    assert not (project / ".relay").exists()


def test_scope_user_without_a_user_file_names_it(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    result = invoke(
        ["hooks", "import", "--from", "gemini", "--scope", "user", "--cwd", str(project)]
    )
    assert result.exit_code == 1
    assert (
        f"no Gemini CLI settings file found; tried: {tmp_path}/home/.gemini/settings.json"
        in result.stderr
    )


# --- --json --------------------------------------------------------------------------------


def test_json_says_what_would_be_written_and_what_was(project: Path) -> None:
    shared = write(project / ".claude" / "settings.json", CLAUDE_SETTINGS)
    args = ["hooks", "import", "--from", "claude", "--json", "--cwd", str(project)]
    preview = invoke(args)
    assert preview.exit_code == 0, preview.output
    document = json.loads(preview.stdout)
    target = str(project / ".relay" / "settings.json")
    assert document["written"] is False
    assert (document["from"], document["scope"], document["files"]) == (
        "claude",
        "project",
        [str(shared)],
    )
    assert document["hooks"] == 3 and len(document["report"]) == 6
    [part] = document["targets"]
    assert (part["file"], part["sources"], part["names"]) == (
        target,
        [str(shared)],
        ["guard", "npx-prettier", "git"],
    )
    assert part["settings"]["hooks"]["PreToolUse"][0]["hooks"][0]["name"] == "guard"
    assert document["originals"] == {
        "files": [str(shared)],
        "move_with": "relay install claude --project --import",
    }

    done = invoke([*args, "--write"])
    assert done.exit_code == 0, done.output
    written = json.loads(done.stdout)
    assert written["written"] is True
    assert written["targets"] == [
        {
            "file": target,
            "created": True,
            "added": ["guard", "npx-prettier", "git"],
            "present": 0,
            "renamed": {},
            "report": [],
        }
    ]
    assert done.stderr == ""


# --- bad files -----------------------------------------------------------------------------


def test_a_host_file_that_is_not_an_object_is_an_error_that_says_where(project: Path) -> None:
    source = write(project / ".claude" / "settings.json", "[1, 2]\n")
    result = invoke(["hooks", "import", "--from", "claude", "--cwd", str(project)])
    assert result.exit_code == 1
    assert f"{source}:1:1: expected a JSON object" in result.stderr


def test_a_broken_relay_file_is_left_alone_with_an_error_that_says_where(project: Path) -> None:
    write(project / ".claude" / "settings.json", CLAUDE_SETTINGS)
    target = write(project / ".relay" / "settings.json", '{\n  "hooks": {"Stop": 3}\n}\n')
    result = invoke(["hooks", "import", "--from", "claude", "--write", "--cwd", str(project)])
    assert result.exit_code == 1
    assert str(target) in result.stderr and "hooks.Stop" in result.stderr
    assert target.read_text() == '{\n  "hooks": {"Stop": 3}\n}\n'


# --- relay install --import after an import -------------------------------------------------


def test_install_import_moves_the_originals_that_were_imported_already(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no claude on PATH: its checked event table
    source = write(project / ".claude" / "settings.json", CLAUDE_SETTINGS)
    imported = invoke(["hooks", "import", "--from", "claude", "--write", "--cwd", str(project)])
    assert imported.exit_code == 0, imported.output
    target = project / ".relay" / "settings.json"
    text = target.read_text()
    installed = invoke(
        [
            "install",
            "claude",
            "--project",
            "--import",
            "--python-client",
            "--no-mcp",
            "--cwd",
            str(project),
        ]
    )
    assert installed.exit_code == 0, installed.output
    assert "0 group(s) added, 3 already there" in installed.stdout
    assert target.read_text() == text  # nothing twice in relay's file
    left = json.loads(source.read_text())["hooks"]
    # Only relay's entries and the hooks relay cannot run stay with Claude Code.
    commands = [
        hook.get("command") or hook.get("prompt")
        for groups in left.values()
        for group in groups
        for hook in group["hooks"]
    ]
    assert GUARD_COMMAND not in commands and "npx prettier --write" not in commands
    assert "Is this command safe to run?" in commands


def test_install_import_sees_a_numbered_name_as_already_there(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hooks import` numbered a made-up name (guard was taken): `install --import` still
    finds the hook there and adds no second copy."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    write(project / ".claude" / "settings.json", CLAUDE_SETTINGS)
    target = write(
        project / ".relay" / "settings.json",
        {"hooks": {"Stop": [{"hooks": [{"command": "true", "name": "guard"}]}]}},
    )
    imported = invoke(["hooks", "import", "--from", "claude", "--write", "--cwd", str(project)])
    assert imported.exit_code == 0, imported.output
    assert "guard -> guard-2" in imported.output
    text = target.read_text()
    options = ["--project", "--import", "--python-client", "--no-mcp", "--cwd", str(project)]
    installed = invoke(["install", "claude", *options])
    assert installed.exit_code == 0, installed.output
    assert "0 group(s) added" in installed.stdout
    assert target.read_text() == text


def test_an_mcp_tool_hook_is_said_to_stay_with_claude_code(project: Path) -> None:
    """Claude Code's `mcp_tool` hooks call a tool of an MCP server that Claude Code connects
    (and signs in to): relay cannot, so import leaves each one with Claude Code and says so."""
    source = write(
        project / ".claude" / "settings.json",
        {
            "hooks": {
                "PostToolUse": [
                    {
                        "matcher": "Write",
                        "hooks": [
                            {"type": "command", "command": "./fmt.sh", "timeout": 5},
                            {
                                "type": "mcp_tool",
                                "server": "linter",
                                "tool": "lint_file",
                                "input": {"path": "${tool_input.file_path}"},
                            },
                        ],
                    }
                ]
            }
        },
    )
    result = import_project("claude", project)
    assert result.hook_count == 1
    assert result.report == [
        f"{source}: hooks.PostToolUse[0].hooks[1] (PostToolUse[Write]): 'mcp_tool' hook (tool "
        "'lint_file' of MCP server 'linter') stays with Claude Code, which goes on running it: "
        "it calls a tool of an MCP server that Claude Code connects and signs in to, which "
        "relay cannot reach; left out"
    ]

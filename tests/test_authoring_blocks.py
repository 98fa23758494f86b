"""spec/authoring.md: every fenced code block that is a command, a hook, a settings file or a
synopsis is run or checked here, as the spec shows it (the machinery is tests/test_readme.py's).

In the spec, `/p` stands for the project's root and `/home/me/.config/agent-relay` for
`$RELAY_HOME`: both are put in before a block runs. BLOCKS says, by first line, how each
block runs: `Commands` (test_readme's: each `$ ` command must exit 0 and print what is
shown), `Varying` (the same, where times, durations and alignment vary: those are compared
as kinds, not values), `Wrote` (a command must write the block as a file, byte for byte),
`File` (the block is a settings file, tried with relay), `Synopsis` (every option it names
is one the command has), `Listed` (not run, and why). A block missing from BLOCKS fails.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_readme import (
    RELAY,
    ROOT,
    Block,
    Commands,
    File,
    Listed,
    Project,
    Step,
    commands_of,
    nothing,
    project,
    readme_blocks,
    run_commands,
    text_matches,
)

__all__ = ["project"]  # the fixture, shared with test_readme.py

AUTHORING = ROOT / "spec" / "authoring.md"
PROJECT_ROOT = "/p/"
USER_HOME = "/home/me/.config/agent-relay"


@dataclass(frozen=True)
class Varying:
    """Run the commands; their output is compared with times, durations, and the spaces
    that align columns, as kinds rather than values."""

    setup: Step = nothing


@dataclass(frozen=True)
class Wrote:
    """COMMAND, run in the project, must leave PATH holding exactly the block's text."""

    command: str
    path: str
    setup: Step = nothing


@dataclass(frozen=True)
class Synopsis:
    """Each `--option` the synopsis names is in its command's --help."""


Entry = Commands | Varying | Wrote | File | Synopsis | Listed


# -- set-ups and checks ---------------------------------------------------------------------


def git_project(project: Project) -> None:
    project.run(["git", "init", "-q"], where="set-up")


def user_settings(project: Project, settings: dict[str, object]) -> None:
    home = Path(project.env["RELAY_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")


def hooks_to_test(project: Project) -> None:
    """A guard and a formatter of the user's, and a context hook not registered yet."""
    git_project(project)
    guard = {"name": "guard", "command": "grep -q 'rm -rf' && { echo no >&2; exit 2; }; true"}
    formatter = {"name": "formatter", "command": "cat >/dev/null; echo formatted"}
    hooks = {
        "PreToolUse": [{"matcher": "Bash", "hooks": [guard]}],
        "PostToolUse": [{"matcher": "Write", "hooks": [formatter]}],
    }
    user_settings(project, {"hooks": hooks})
    project.write("hooks/context.sh", '#!/bin/sh\necho "Project: shop"\n', executable=True)


def hooks_to_list(project: Project) -> None:
    """The hooks the list shows: a project hook not trusted, a user guard, a disabled one."""
    git_project(project)
    check = {"name": "project-check", "command": "./check.sh"}
    project.write(
        ".relay/settings.json", json.dumps({"hooks": {"BeforeTool": [{"hooks": [check]}]}})
    )
    guard = {"name": "guard", "command": "python3 guard.py"}
    old = {"name": "old", "command": "./old.sh"}
    hooks = {
        "PreToolUse": [{"matcher": "Bash", "hooks": [guard]}],
        "BeforeTool": [{"hooks": [old]}],
    }
    user_settings(project, {"hooks": hooks, "hooksConfig": {"disabled": ["old"]}})


def user_file_without_problems(project: Project) -> None:
    git_project(project)
    user_settings(project, {})


LOGGED = [{"command": "ls"}, {"command": "rm -rf /"}]


def two_logged_events(project: Project) -> None:
    """Alice's agent fires BeforeTool twice; the second is denied by guard, and broken fails."""
    git_project(project)
    hooks = [
        {"name": "guard", "command": "echo no rm >&2; exit 2"},
        {"name": "broken", "command": "echo oops >&2; exit 1"},
    ]
    user_settings(project, {"hooks": {"BeforeTool": [{"hooks": hooks}]}})
    for tool_input in LOGGED:
        event = json.dumps({"tool_name": "Bash", "tool_input": tool_input})
        done = subprocess.run(
            [str(RELAY), "hooks", "run", "BeforeTool"],
            cwd=project.root,
            env={**project.env, "RELAY_AGENT_NAME": "Alice"},
            input=event,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr


def hooks_changed_since(project: Project) -> None:
    """The log of two_logged_events, then broken removed and guard allowing."""
    two_logged_events(project)
    user_settings(
        project, {"hooks": {"BeforeTool": [{"hooks": [{"name": "guard", "command": "true"}]}]}}
    )


def claude_hooks_half_imported(project: Project) -> None:
    """Claude Code's shared file with two hooks, and its personal one with a hook that is
    in relay's personal file already (imported before)."""
    git_project(project)
    guard = {"type": "command", "command": ".claude/hooks/guard-bash.sh"}
    prettier = {"type": "command", "command": "npx prettier --write"}
    shared = {
        "PreToolUse": [{"matcher": "Bash", "hooks": [guard]}],
        "PostToolUse": [{"matcher": "Write", "hooks": [prettier]}],
    }
    project.write(".claude/settings.json", json.dumps({"hooks": shared}))
    notify = {"type": "command", "command": "./notify.sh"}
    project.write(
        ".claude/settings.local.json", json.dumps({"hooks": {"Stop": [{"hooks": [notify]}]}})
    )
    project.relay(
        "hooks", "import", "--from", "claude", "--path", ".claude/settings.local.json", "--write"
    )


def log_settings_are_valid(project: Project) -> None:
    out = project.relay("hooks", "validate", "--settings", "log-settings.json")
    assert out.endswith("0 errors, 0 warnings\n"), out


# -- every block, by its first line ---------------------------------------------------------

BLOCKS: dict[str, Entry] = {
    "relay hooks new NAME --event EVENT [--lang sh|python|node|perl] [--matcher M]": Synopsis(),
    "$ relay hooks new guard --event PreToolUse --matcher Bash": Commands(setup=git_project),
    "relay hooks test EVENT [--tool NAME] [--input FILE|-] [--set PATH=JSON]...": Synopsis(),
    '{"event": {…the event sent, relay dialect…},': Listed(
        "the shape of --json, with placeholders: tests/test_hooks_test.py checks its keys"
    ),
    "$ relay hooks test PreToolUse --set 'tool_input.command=\"rm -rf /\"' --expect deny": Commands(
        setup=hooks_to_test
    ),
    "relay hooks list [--event EVENT] [--cwd DIR] [--settings FILE]... [--json]": Synopsis(),
    "$ relay hooks list": Commands(setup=hooks_to_list),
    "relay: error: /p/.relay/settings.json:6:50: hooks.PreToolUse[0].hooks[1].timeout: expected number, got string; hook lint does not run until this is fixed: the file's other hooks still run": Listed(
        "stderr of a broken entry: tests/test_broken_settings.py::"
        "test_hooks_list_lists_what_it_can_then_each_error_and_exits_1 checks this line"
    ),
    "relay hooks validate [FILE]... [--cwd DIR] [--settings FILE]... [--json]": Synopsis(),
    "$ cat .relay/settings.json": Commands(setup=user_file_without_problems),
    '{ "files": [': Listed(
        "the --json of the validate example above: tests/test_hooks_validate.py"
    ),
    "relay hooks disable NAME [--shared | --scope user|project|local] [--force] [--json] [--cwd DIR]": (
        Synopsis()
    ),
    '{ "hooksConfig": {': Wrote(
        "relay hooks disable guard --force", ".relay/settings.local.json", setup=git_project
    ),
    "relay hooks schema [EVENT] [--output | --result] [--dir DIR]": Synopsis(),
    "relay hooks log [--limit N] [--event EVENT] [--hook NAME] [--failed] [--agent NAME] [--all]": (
        Synopsis()
    ),
    "$ relay hooks log --limit 1": Varying(setup=two_logged_events),
    '[{"id": 2, "time": "2025-06-01T12:00:00.123Z", "session_id": "3f1c…", "event": "BeforeTool",': Listed(
        "the shape of --json, with placeholders: tests/test_hooks_log.py checks it"
    ),
    '{"log": {"maxEvents": 50000}}': File("log-settings.json", log_settings_are_valid),
    "relay hooks replay ID [--cwd DIR] [--settings FILE]... [--json]": Synopsis(),
    "$ relay hooks replay 2": Varying(setup=hooks_changed_since),
    '{"id": 2, "event": "BeforeTool", "before": {…logged result…}, "after": {…new result…},': Listed(
        "the shape of --json, with placeholders: tests/test_hooks_log.py checks it"
    ),
    "relay hooks import --from claude|gemini [--scope project|user] [--path FILE]... [--cwd DIR]": (
        Synopsis()
    ),
    "$ relay hooks import --from claude --write": Commands(setup=claude_hooks_half_imported),
    '{"from": "claude", "scope": "project", "files": ["/p/.claude/settings.json"], "hooks": 2,': Listed(
        "the shape of --json, with placeholders: tests/test_hooks_import.py checks it"
    ),
    '{"file": "/p/.relay/settings.json", "created": false, "added": ["guard-bash-2"],': Listed(
        "the shape of --json, with placeholders: tests/test_hooks_import.py checks it"
    ),
}


# -- running an entry -----------------------------------------------------------------------


def key(block: Block) -> str:
    """A block's name in BLOCKS: its first line, with the second when the first is a lone
    bracket (several JSON blocks open with `{`)."""
    lines = [line.strip() for line in block.text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0] in ("{", "["):
        return f"{lines[0]} {lines[1]}"
    return block.first_line


def spec_blocks() -> list[Block]:
    return readme_blocks(AUTHORING)


def placed(block: Block, project: Project) -> Block:
    """The block with the spec's stand-ins for the project and $RELAY_HOME put in."""
    text = block.text.replace(USER_HOME, project.env["RELAY_HOME"])
    text = text.replace(PROJECT_ROOT, f"{project.root}/")
    return Block(block.language, text, block.line, block.file)


def run_spec_block(block: Block, project: Project) -> None:
    entry = BLOCKS.get(key(block))
    assert entry is not None, (
        f"{block.file}:{block.line}: a {block.language or 'plain'} block starting "
        f"{key(block)!r} is neither run nor listed: add it to BLOCKS in {__file__}"
    )
    if isinstance(entry, Commands):
        run_commands(placed(block, project), entry, project)
    elif isinstance(entry, Varying):
        entry.setup(project)
        run_varying(placed(block, project), project)
    elif isinstance(entry, Wrote):
        entry.setup(project)
        project.run(["bash", "-c", entry.command], where=f"{block.file}:{block.line}")
        written = (project.root / entry.path).read_text(encoding="utf-8")
        assert written == block.text, f"{block.file}:{block.line}: {entry.command} wrote\n{written}"
    elif isinstance(entry, File):
        entry.setup(project)
        project.write(entry.path, block.text)
        entry.check(project)
    elif isinstance(entry, Synopsis):
        check_synopsis(block, project)
    else:
        pytest.fail(f"{block.file}:{block.line}: listed ({entry.reason}), so not run")


TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z")
DURATION = re.compile(r"\d+(?:\.\d+)? ms")
SESSION = re.compile(r"\b[0-9a-f]{32}\b")


def as_kinds(line: str) -> str:
    """A line with its times, durations and session ids as kinds, and runs of spaces as one."""
    line = SESSION.sub("<session>", DURATION.sub("<ms>", TIME.sub("<time>", line)))
    return re.sub(r" +", " ", line.strip())


def run_varying(block: Block, project: Project) -> None:
    for command in commands_of(block):
        where = f"{block.file}:{block.line}: $ {command.text}"
        done = project.run(["bash", "-c", command.text], where=where)
        lines = done.stdout.splitlines()
        assert len(lines) == len(command.output), f"{where}: printed\n{done.stdout}"
        for expected, actual in zip(command.output, lines, strict=True):
            assert text_matches(as_kinds(expected), as_kinds(actual)), (
                f"{where}: printed\n{actual}\nbut the spec shows\n{expected}"
            )


def check_synopsis(block: Block, project: Project) -> None:
    """Each synopsis line `relay hooks NAME …` (continued by indented lines): every option
    it names is in `relay hooks NAME --help`."""
    usages: list[str] = []
    for line in block.text.splitlines():
        if line.startswith("relay "):
            usages.append(line)
        elif usages and line.startswith(" "):
            usages[-1] += line
    assert usages, f"{block.file}:{block.line}: no `relay …` line in the synopsis"
    for usage in usages:
        words = usage.split()
        helped = project.relay(*words[1:3], "--help")
        for option in sorted(set(re.findall(r"--[a-z][a-z-]*", usage))):
            assert re.search(rf"(?<![\w-]){option}(?![\w-])", helped), (
                f"{block.file}:{block.line}: `{words[1]} {words[2]}` has no {option}"
            )


# -- the tests ------------------------------------------------------------------------------

RUN = [block for block in spec_blocks() if not isinstance(BLOCKS.get(key(block)), Listed)]


def test_every_block_is_run_or_listed() -> None:
    blocks = spec_blocks()
    keys = [key(block) for block in blocks]
    missing = [f"{b.file}:{b.line}: {key(b)}" for b in blocks if key(b) not in BLOCKS]
    assert not missing, f"blocks neither run nor listed in BLOCKS: {missing}"
    assert sorted(set(keys)) == sorted(keys), "two blocks share a first line"
    assert set(BLOCKS) <= set(keys), (
        f"BLOCKS names blocks the spec lacks: {set(BLOCKS) - set(keys)}"
    )


@pytest.mark.parametrize("block", RUN, ids=[f"line{block.line}-{key(block)[:30]}" for block in RUN])
def test_authoring_block(block: Block, project: Project) -> None:
    run_spec_block(block, project)


def test_kinds_compare_what_varies_and_nothing_else() -> None:
    shown = f"#2  2025-06-01T12:00:00.123Z  BeforeTool  deny  22.7 ms  agent Alice  session {'3f1c' * 8}"
    printed = (
        f"#2  2026-11-28T15:59:35.329Z  BeforeTool  deny  2.8 ms  agent Alice  session {'d8f3' * 8}"
    )
    assert text_matches(as_kinds(shown), as_kinds(printed))
    assert not text_matches(as_kinds(shown), as_kinds(printed.replace("deny", "allow")))
    assert not text_matches(as_kinds(shown), as_kinds(printed.replace("#2", "#3")))

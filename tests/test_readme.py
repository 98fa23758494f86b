"""README.md: every fenced code block that is a hook or a command runs here, as the README shows it.

BLOCKS says, for each block by its first line, how it runs:

- `Commands`: a `console` block's `$ ` lines (a line ending in `\\` joined with the next), or
  each line of an `sh` block, run by bash in a throwaway project with the installed `relay`
  first on PATH. Each must exit 0, and where the README shows output after a command, its
  stdout must match: `…` stands for elided text, and a line of JSON is compared as JSON (`…`
  in a string matches any text; `, …` closing an object stands for more keys). A `$ cat FILE`
  shows a file of the project, so the set-up writes FILE as shown. `after` runs another
  block first in the same project; `typed` answers a command's question on a terminal;
  `not_run` leaves a command out, with the reason; `check` asserts what no output shows.
- `File`: the block is a file of the project (a hook, a settings file), tried with relay.
- `Script`: a Python program, run as a script; `replace` swaps, visibly, what would start a
  real host (`claude`) for the scripted agent of tests/resources/runtime/.
- `Listed`: not run here, with the reason.

A block missing from BLOCKS fails, so a new block cannot go untested: add its first line there.
Every project gets its own RELAY_HOME (conftest.py) and HOME, and a PATH without the real hosts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from scripted_sessions import agent, reads

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
RELAY = BIN / "relay"
HOSTS = ("claude", "gemini", "codex")
ELIDED = "…"


# -- the README's blocks --------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One fenced code block of README.md (or of another document: `file`)."""

    language: str
    text: str  # its lines, without the fences
    line: int  # the README line of its opening fence
    file: str = "README.md"

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0].rstrip() if self.text.strip() else ""


def readme_blocks(document: Path = README) -> list[Block]:
    """Every fenced code block of README.md (or DOCUMENT), in order; a fence indented in a
    list item opens a block whose lines lose that indentation."""
    blocks: list[Block] = []
    opened: tuple[str, int, str] | None = None
    body: list[str] = []
    name = document.relative_to(ROOT).as_posix()
    for number, line in enumerate(document.read_text(encoding="utf-8").splitlines(), 1):
        fence = re.fullmatch(r"( *)```(\S*)\s*", line)
        if opened is None and fence:
            opened, body = (fence.group(2), number, fence.group(1)), []
        elif opened is not None and line.rstrip() == f"{opened[2]}```":
            text = "".join(f"{text.removeprefix(opened[2])}\n" for text in body)
            blocks.append(Block(opened[0], text, opened[1], name))
            opened = None
        elif opened is not None:
            body.append(line)
    assert opened is None, f"{name}:{opened[1]}: a code block is never closed"
    return blocks


@dataclass(frozen=True)
class Command:
    """A command of a block, and the output the README shows after it (if any)."""

    text: str
    output: list[str]


def commands_of(block: Block) -> list[Command]:
    """A console block's `$ ` commands with their output lines; an sh block's lines."""
    console = block.language == "console"
    lines = block.text.splitlines()
    commands: list[Command] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.strip():
            continue
        if console:
            assert line.startswith("$ "), (
                f"{block.file}:{block.line}: output before a command: {line}"
            )
        text = line[2:] if console else line
        while text.endswith("\\") and index < len(lines):
            text = f"{text[:-1]}{lines[index]}"
            index += 1
        output: list[str] = []
        while console and index < len(lines) and not lines[index].startswith("$ "):
            output.append(lines[index])
            index += 1
        while output and not output[-1].strip():
            output.pop()
        commands.append(Command(text, output))
    return commands


# -- a throwaway project --------------------------------------------------------------------


@dataclass
class Project:
    """A throwaway project, and the environment its commands run in (a set-up may change it)."""

    root: Path
    env: dict[str, str]

    def write(self, path: str, text: str, *, executable: bool = False) -> Path:
        file = self.root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text, encoding="utf-8")
        if executable:
            file.chmod(0o755)
        return file

    def run(
        self, command: list[str], *, stdin: Any = subprocess.DEVNULL, where: str
    ) -> subprocess.CompletedProcess[str]:
        """Run COMMAND in the project; it must exit 0 (WHERE names it in the failure)."""
        done = subprocess.run(
            command,
            cwd=self.root,
            env=self.env,
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, (
            f"{where}: `{' '.join(command)}` exited {done.returncode}\n"
            f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        )
        return done

    def relay(self, *args: str, stdin: str | None = None) -> str:
        """`relay ARGS` in the project (exit 0); its stdout."""
        done = subprocess.run(
            [str(RELAY), *args],
            cwd=self.root,
            env=self.env,
            input=stdin,
            stdin=subprocess.DEVNULL if stdin is None else None,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"relay {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def hooks_test(self, event: str, *options: str) -> dict[str, Any]:
        """`relay hooks test EVENT OPTIONS --json`, decoded."""
        trial: dict[str, Any] = json.loads(self.relay("hooks", "test", event, *options, "--json"))
        return trial


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "project"
    root.mkdir()
    home = tmp_path / "home"  # `relay install` writes the hosts' settings here
    home.mkdir()
    env = dict(os.environ)
    # No real host runs: a folder holding one is left off PATH (install would ask its version).
    folders = [
        folder
        for folder in env.get("PATH", "").split(os.pathsep)
        if folder and not any(os.access(Path(folder, host), os.X_OK) for host in HOSTS)
    ]
    env.update(PATH=os.pathsep.join([str(BIN), *folders]), HOME=str(home))
    return Project(root, env)


# -- how a block runs -----------------------------------------------------------------------

Step = Callable[[Project], None]


def nothing(project: Project) -> None:
    """No set-up, or nothing more to check."""


@dataclass(frozen=True)
class Commands:
    """Run the block's commands; `after`: the first line of a block run first, in the same project."""

    setup: Step = nothing
    after: str | None = None
    typed: Mapping[str, str] = field(default_factory=dict)  # a command's keyboard input
    not_run: Mapping[str, str] = field(default_factory=dict)  # a command left out, and why
    check: Step = nothing  # what the README says that no shown output covers
    teardown: Step = nothing  # stops what the block started, whether it passed or not


@dataclass(frozen=True)
class File:
    """Write the block to PATH in the project, and try it."""

    path: str
    check: Step
    executable: bool = False
    setup: Step = nothing


@dataclass(frozen=True)
class Script:
    """Run the block as a Python script, with `replace`'s swaps; its stdout if given."""

    replace: Mapping[str, Callable[[Project], str]] = field(default_factory=dict)
    stdout: str | None = None
    check: Step = nothing


@dataclass(frozen=True)
class Listed:
    """Not run here, and why."""

    reason: str


Entry = Commands | File | Script | Listed


# -- set-ups and checks of particular blocks ------------------------------------------------

TOUR = "$ relay hooks new guard --event PreToolUse --matcher Bash   # a working hook to edit"
GUARD_HOOK = "#!/bin/sh"
DEPLOY_STEPS = [{"print": "@deploy:staging release 1.4.2"}, {"read": "answer"}]
DEPLOY_ANSWER = ("answer", "deployed release 1.4.2 to staging")


def tour_project(project: Project) -> None:
    """The tour runs in a project (a git repository): `relay hooks new` writes its guard."""
    project.run(["git", "init", "-q"], where="the tour's project")


def tour_guard_is_what_hooks_new_wrote(project: Project) -> None:
    """The guard the tour made: executable, registered once, trusted, and allowing `ls`."""
    assert os.access(project.root / ".relay" / "hooks" / "guard.sh", os.X_OK)
    allowed = project.hooks_test(
        "PreToolUse", "--hook", "guard", "--set", 'tool_input.command="ls"', "--expect", "allow"
    )
    assert [hook["name"] for hook in allowed["hooks"]] == ["guard"]
    assert allowed["result"]["errors"] == [] and allowed["hooks"][0]["warnings"] == []


def hooks_to_import(project: Project) -> None:
    """A context hook not registered yet, and a Claude Code hook (the example guard) for
    `hooks import`."""
    project.write("hooks/context.sh", '#!/bin/sh\necho "Project: tour"\n', executable=True)
    guard = (ROOT / "hooks-examples" / "guard_shell.sh").read_text(encoding="utf-8")
    project.write("hooks/guard.sh", guard, executable=True)
    claude_hook = {"type": "command", "command": '"$CLAUDE_PROJECT_DIR"/hooks/guard.sh'}
    settings = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [claude_hook]}]}}
    project.write(".claude/settings.json", json.dumps(settings))


def imported_and_trusted(project: Project) -> None:
    hooks = json.loads(project.relay("hooks", "list", "--json"))
    trusted = {hook["command"]: hook["trusted"] for hook in hooks}
    assert trusted == {
        '"$RELAY_PROJECT_DIR"/.relay/hooks/guard.sh': True,  # the tour's, from hooks new
        '"$CLAUDE_PROJECT_DIR"/hooks/guard.sh': True,  # imported from .claude/settings.json
    }


def venv_in_project(project: Project) -> None:
    (project.root / ".venv").symlink_to(BIN.parent, target_is_directory=True)


def activated_relay_is_the_venvs(project: Project) -> None:
    found = project.run(
        ["bash", "-c", "source .venv/bin/activate && command -v relay"], where="activate"
    )
    assert Path(found.stdout.strip()).resolve() == RELAY.resolve()


def hosts_installed(project: Project) -> None:
    home = Path(project.env["HOME"])
    for settings in (".claude/settings.json", ".gemini/settings.json", ".codex/hooks.json"):
        assert "relay" in (home / settings).read_text(encoding="utf-8"), settings


def guard_denies_rm_rf(project: Project) -> None:
    """The README's own try: `relay hooks test PreToolUse --command ./guard.sh`."""
    denied = project.hooks_test(
        "PreToolUse", "--command", "./guard.sh", "--set", 'tool_input.command="rm -rf /"'
    )
    assert (denied["result"]["decision"], denied["result"]["reason"]) == ("deny", "no rm -rf")
    allowed = project.hooks_test("PreToolUse", "--command", "./guard.sh", "--expect", "allow")
    assert allowed["result"]["errors"] == []


def injects_where_it_is(project: Project) -> None:
    trial = project.hooks_test(
        "SessionStart", "--command", "python3 where.py", "--expect", "inject"
    )
    assert trial["event"]["cwd"] == str(project.root)
    assert trial["result"]["inject"] == f"You are working in {project.root}"


def rewrites_force_push(project: Project) -> None:
    if shutil.which("node", path=project.env["PATH"]) is None:
        pytest.skip("node is not installed")
    trial = project.hooks_test(
        "PreToolUse",
        "--command",
        "node rewrite.js",
        "--set",
        'tool_input.command="git push --force origin main"',
    )
    assert trial["result"]["errors"] == []
    assert trial["result"]["tool_input"]["command"] == "git push --force-with-lease origin main"


def guard_and_deploy_handler(project: Project) -> None:
    """The settings' hooks: the guard above, and a deploy handler answering as the Python one."""
    project.write("hooks/guard.sh", block_by_first_line(GUARD_HOOK).text, executable=True)
    handler = (
        f"#!{sys.executable}\nimport json, sys\nevent = json.load(sys.stdin)\n"
        "print(json.dumps({'inject': f\"deployed {event['message']} to {event['target']}\"}))\n"
    )
    project.write("hooks/deploy.sh", handler, executable=True)


def settings_run_guard_and_deploy(project: Project) -> None:
    assert "0 errors, 0 warnings" in project.relay("hooks", "validate")
    project.relay("trust", "--yes")
    event = {"tool_name": "Bash", "tool_input": {"command": "rm -rf /"}}
    answer = project.relay(
        "hooks", "run", "--dialect", "claude", "PreToolUse", stdin=json.dumps(event)
    )
    assert json.loads(answer)["hookSpecificOutput"]["permissionDecisionReason"] == "no rm -rf"
    record = project.root / "agent.jsonl"
    project.relay("run", "--", *agent(DEPLOY_STEPS, record))
    assert reads(record) == [DEPLOY_ANSWER]


def deploy_agent(project: Project) -> str:
    """`relay.wrap([...])` on the scripted agent that prints @deploy:staging and reads the answer."""
    return f"relay.wrap({agent(DEPLOY_STEPS, project.root / 'agent.jsonl')!r})"


def agent_read_the_deploy_answer(project: Project) -> None:
    assert reads(project.root / "agent.jsonl") == [DEPLOY_ANSWER]


# -- every block, by its first line ---------------------------------------------------------

# A team of agents: the README's team file names real hosts; the console block runs the
# same commands on a team of two scripted agents (tests/resources/fleet/agent.py).
TEAM_FILE = (
    "[[agent]]                              # the team is the repository's, as for relay send"
)
TEAM_TOUR = (
    "$ relay up                    # each agent under relay run, in a tmux window of its own"
)
FLEET_AGENT = ROOT / "tests" / "resources" / "fleet" / "agent.py"


def team_file_is_read_as_shown(project: Project) -> None:
    from relay.fleet.teamfile import load_team

    team = load_team(project.root / "relay.team.toml", check_programs=False)
    assert team.name == ""  # relay up uses the repository's team
    assert [(a.name, a.command, a.worktree) for a in team.agents] == [
        ("alice", ["claude", "--permission-mode", "acceptEdits"], True),
        ("bob", ["gemini"], True),
    ]
    assert team.agents[0].task == "Write the tests for the login page, then tell bob."
    assert (team.agents[1].restart.backoff, team.agents[1].restart.limit) == (2.0, 5)


def scripted_team(project: Project) -> None:
    """alice and bob as scripted agents, and a tmux server of the test's own."""
    import tempfile

    agents = "".join(
        f'[[agent]]\nname = "{name}"\ncommand = {json.dumps([sys.executable, str(FLEET_AGENT)])}\n'
        f"env = {{ AGENT_RECORD = {json.dumps(str(project.root / (name + '.jsonl')))} }}\n\n"
        for name in ("alice", "bob")
    )
    project.write("relay.team.toml", agents)
    project.env["TMUX_TMPDIR"] = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    project.env.pop("TMUX", None)


def team_stopped(project: Project) -> None:
    rows = json.loads(project.relay("ps", "--json"))
    assert [(row["name"], row["state"]) for row in rows] == [
        ("alice", "stopped"),
        ("bob", "stopped"),
    ]
    assert "rebase on main before you push" in project.relay("messages")


def stop_team(project: Project) -> None:
    subprocess.run(
        [str(RELAY), "down"],
        cwd=project.root,
        env=project.env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    subprocess.run(
        ["tmux", "kill-server"], env=project.env, capture_output=True, timeout=30, check=False
    )
    shutil.rmtree(project.env.get("TMUX_TMPDIR", "/nonexistent"), ignore_errors=True)


BLOCKS: dict[str, Entry] = {
    "$ relay dashboard             # serves on 127.0.0.1, prints its URL with a token, opens it": Listed(
        "serves until Ctrl-C and opens a browser: tests/test_dashboard.py runs it against "
        "the distribution's Chromium"
    ),
    TEAM_FILE: File("relay.team.toml", team_file_is_read_as_shown),
    TEAM_TOUR: Commands(
        setup=scripted_team,
        typed={
            "relay up                    # each agent under relay run, in a tmux window of its own": "y\n"
        },
        not_run={
            "relay attach alice          # alice's terminal; tmux's Ctrl-b d leaves her running": (
                "takes over the terminal: tests/test_fleet_up.py attaches and detaches on a real PTY"
            )
        },
        check=team_stopped,
        teardown=stop_team,
    ),
    "make demo   # creates .venv, installs relay, runs a scripted agent under `relay run` (no network)": Listed(
        "run by CI itself (make test; make demo is also "
        "tests/test_examples.py::test_demo_runs_a_whole_session)"
    ),
    "source .venv/bin/activate        # this shell only; `deactivate` to leave": Commands(
        setup=venv_in_project,
        not_run={
            "pipx install '.[meaning]'        # or: a user-wide `relay`, in an environment of its own": (
                "installs for the user, from the network"
            )
        },
        check=activated_relay_is_the_venvs,
    ),
    GUARD_HOOK: File("guard.sh", guard_denies_rm_rf, executable=True),
    "import json, sys                            # tell the agent where it is": File(
        "where.py", injects_where_it_is
    ),
    'const event = JSON.parse(require("fs").readFileSync(0, "utf8"));   // rewrite a command': File(
        "rewrite.js", rewrites_force_push
    ),
    '{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"name": "guard", "command": "./hooks/guard.sh"}]}]},': File(
        ".relay/settings.json", settings_run_guard_and_deploy, setup=guard_and_deploy_handler
    ),
    # In a throwaway HOME, with no host on PATH (the fixture's): nothing real is touched.
    "relay install claude            # Claude Code: ~/.claude/settings.json (--project: .claude/)": Commands(
        check=hosts_installed
    ),
    TOUR: Commands(setup=tour_project, check=tour_guard_is_what_hooks_new_wrote),
    "$ relay hooks test PreToolUse --set 'tool_input.command=\"rm -rf /\"' --expect deny": Commands(
        after=TOUR,
        setup=hooks_to_import,
        typed={"relay hooks import --from claude --write && relay trust": "y\n"},
        check=imported_and_trusted,
    ),
    "from relay import Relay": Script(
        replace={'relay.wrap(["claude"])': deploy_agent}, check=agent_read_the_deploy_answer
    ),
    "from relay import HookSystem": Script(stdout="allow checked\n"),
    '$ relay run --task "Fix the login bug" --settings hooks-examples/trajectory/settings.json -- claude': Listed(
        "starts Claude Code and needs the real `trail` from npm: tests/test_trajectory.py runs "
        "this session on the scripted agent with the real trail"
    ),
    "relay/protocol/   typed events and answers, dialects, schemas (no I/O)": Listed(
        "the repository's layout, not a command: test_the_layout_names_folders_that_exist"
    ),
}


# -- running an entry -----------------------------------------------------------------------


def block_by_first_line(first_line: str) -> Block:
    return next(block for block in readme_blocks() if block.first_line == first_line)


def run_block(block: Block, project: Project) -> None:
    """Run BLOCK as its BLOCKS entry says, asserting what the README shows."""
    entry = BLOCKS.get(block.first_line)
    assert entry is not None, (
        f"README.md:{block.line}: a {block.language or 'plain'} block starting "
        f"{block.first_line!r} is neither run nor listed: add it to BLOCKS in {__file__}"
    )
    if isinstance(entry, Commands):
        run_commands(block, entry, project)
    elif isinstance(entry, File):
        entry.setup(project)
        project.write(entry.path, block.text, executable=entry.executable)
        entry.check(project)
    elif isinstance(entry, Script):
        run_script(block, entry, project)
    else:
        pytest.fail(f"README.md:{block.line}: listed ({entry.reason}), so not run")


def run_commands(block: Block, entry: Commands, project: Project) -> None:
    try:
        _run_commands(block, entry, project)
    finally:
        entry.teardown(project)


def _run_commands(block: Block, entry: Commands, project: Project) -> None:
    if entry.after is not None:
        run_block(block_by_first_line(entry.after), project)
    entry.setup(project)
    commands = commands_of(block)
    for command in commands:  # `$ cat FILE` shows a file of the project
        shown = re.fullmatch(r"cat (\S+)", command.text.strip())
        if shown and command.output:
            project.write(shown.group(1), "".join(f"{line}\n" for line in command.output))
    unknown = (set(entry.typed) | set(entry.not_run)) - {command.text for command in commands}
    assert not unknown, f"{block.file}:{block.line}: BLOCKS names commands it lacks: {unknown}"
    for command in commands:
        if command.text in entry.not_run:
            continue
        where = f"{block.file}:{block.line}: $ {command.text}"
        typed = entry.typed.get(command.text)
        if typed is None:
            done = project.run(["bash", "-c", command.text], where=where)
        else:  # a question on the terminal: the command reads the answer from one
            controller, terminal = os.openpty()
            try:
                os.write(controller, typed.encode())
                done = project.run(["bash", "-c", command.text], stdin=terminal, where=where)
            finally:
                os.close(terminal)
                os.close(controller)
        if command.output:
            assert_output(command.output, done.stdout, where)
    entry.check(project)


def run_script(block: Block, entry: Script, project: Project) -> None:
    source = block.text
    for text, replacement in entry.replace.items():
        assert text in source, f"README.md:{block.line}: no {text!r} to replace"
        source = source.replace(text, replacement(project))
    script = project.write("readme_block.py", source)
    done = project.run([sys.executable, str(script)], where=f"README.md:{block.line}")
    if entry.stdout is not None:
        assert done.stdout == entry.stdout
    entry.check(project)


# -- comparing output -----------------------------------------------------------------------


def assert_output(shown: list[str], stdout: str, where: str) -> None:
    """stdout must be what the README shows, line by line (`…` elides; JSON as JSON)."""
    lines = stdout.splitlines()
    assert len(lines) == len(shown), f"{where}: printed\n{stdout}\nbut the README shows\n" + (
        "\n".join(shown)
    )
    for expected, actual in zip(shown, lines, strict=True):
        pattern = shown_json(expected)
        if pattern is None:
            same = text_matches(expected, actual)
        else:
            try:
                same = json_matches(pattern, json.loads(actual))
            except ValueError:
                same = False
        assert same, f"{where}: printed\n{actual}\nbut the README shows\n{expected}"


def shown_json(line: str) -> Any:
    """The JSON a README output line shows (`, …}` as a key "…": more keys), or None."""
    if not line.lstrip().startswith(("{", "[")):
        return None
    text = line.replace(f", {ELIDED}}}", f', "{ELIDED}": "{ELIDED}"}}')
    text = text.replace(f", {ELIDED}]", f', "{ELIDED}"]')
    try:
        return json.loads(text)
    except ValueError:
        return None  # a JSON text over several lines: compared as text


def text_matches(expected: str, actual: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in expected.split(ELIDED))
    return re.fullmatch(pattern, actual, re.DOTALL) is not None


def json_matches(expected: Any, actual: Any) -> bool:
    if isinstance(expected, str) and ELIDED in expected:
        return isinstance(actual, str) and text_matches(expected, actual)
    if isinstance(expected, dict):
        more = expected.get(ELIDED) == ELIDED
        keys = {key for key in expected if not (more and key == ELIDED)}
        if not isinstance(actual, dict) or not (
            keys <= set(actual) if more else keys == set(actual)
        ):
            return False
        return all(json_matches(expected[key], actual[key]) for key in keys)
    if isinstance(expected, list):
        more = bool(expected) and expected[-1] == ELIDED
        items = expected[:-1] if more else expected
        if not isinstance(actual, list) or len(actual) < len(items):
            return False
        if not more and len(actual) != len(items):
            return False
        return all(json_matches(e, a) for e, a in zip(items, actual, strict=False))
    return bool(expected == actual)


# -- the tests ------------------------------------------------------------------------------

RUN = [block for block in readme_blocks() if not isinstance(BLOCKS.get(block.first_line), Listed)]


def test_every_block_is_run_or_listed() -> None:
    blocks = readme_blocks()
    first_lines = [block.first_line for block in blocks]
    missing = [f"README.md:{b.line}: {b.first_line}" for b in blocks if b.first_line not in BLOCKS]
    assert not missing, f"blocks neither run nor listed in BLOCKS: {missing}"
    assert sorted(set(first_lines)) == sorted(first_lines), "two blocks share a first line"
    assert set(BLOCKS) <= set(first_lines), (
        f"BLOCKS names blocks the README lacks: {set(BLOCKS) - set(first_lines)}"
    )


@pytest.mark.parametrize(
    "block", RUN, ids=[f"line{block.line}-{block.first_line[:30]}" for block in RUN]
)
def test_readme_block(block: Block, project: Project) -> None:
    run_block(block, project)


# relay's packages the Layout leaves out, and why.
NOT_IN_LAYOUT: dict[str, str] = {}


def test_the_layout_names_folders_that_exist() -> None:
    layout = block_by_first_line(
        "relay/protocol/   typed events and answers, dialects, schemas (no I/O)"
    )
    folders = [line.split()[0] for line in layout.text.splitlines() if not line.startswith(" ")]
    assert folders and all(folder.endswith("/") for folder in folders)
    assert [folder for folder in folders if not (ROOT / folder).is_dir()] == []
    packages = {f"relay/{init.parent.name}/" for init in (ROOT / "relay").glob("*/__init__.py")}
    assert packages - set(folders) == set(NOT_IN_LAYOUT)


def test_console_output_is_compared_as_the_readme_shows_it() -> None:
    """The comparison itself: `…` elides text and keys, and a difference is found."""
    shown = ['{"decision":"deny","reason":"Refusing \'rm -rf /\': …", …}']
    assert_output(shown, '{"decision":"deny","reason":"Refusing \'rm -rf /\': no","x":1}\n', "t")
    for wrong in ['{"decision":"allow","reason":"Refusing \'rm -rf /\'"}', '{"reason":"Refusing"}']:
        with pytest.raises(AssertionError):
            assert_output(shown, wrong, "t")
    with pytest.raises(AssertionError):
        assert_output(['{"a":1}'], '{"a":1,"b":2}', "t")  # no `…`: no more keys
    with pytest.raises(AssertionError):
        assert_output(["ok"], "ok\nmore\n", "t")
    with pytest.raises(AssertionError):
        assert_output(['{"a": "…"}'], "not json\n", "t")
    assert commands_of(Block("console", "$ echo a \\\n  | cat\na\n\n$ true\n", 1)) == [
        Command("echo a   | cat", ["a"]),
        Command("true", []),
    ]

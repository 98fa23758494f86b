"""hooks-examples/: every example hook driven through `relay hooks test --json`, and `make demo`.

Each test runs the installed `relay` console script on a throwaway project that holds the
example hooks (a link to hooks-examples/), so nothing depends on this repository's git
state or writes into it. The hooks get the project's Python first on PATH, as they would
from an activated venv.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from processes import alive

from relay.engine.system import HookSystem

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "hooks-examples"
SETTINGS = EXAMPLES / "settings.json"
BIN = Path(sys.executable).parent
RELAY = shutil.which("relay", path=str(BIN))
HOOK_VARIABLES = (
    "RELAY_NOTIFICATION_LOG",
    "RELAY_TEST_COMMAND",
    "RELAY_TEST_TIMEOUT",
    "RELAY_FORMAT_TIMEOUT",
    "XDG_STATE_HOME",
)

needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
needs_perl = pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not installed")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project root whose hooks-examples/ is this repository's."""
    root = tmp_path / "project"
    (root / ".relay").mkdir(parents=True)
    (root / "hooks-examples").symlink_to(EXAMPLES, target_is_directory=True)
    return root


def hooks_test(
    project: Path,
    event: str,
    *options: str,
    payload: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    exit_code: int = 0,
) -> dict[str, Any]:
    """Run `relay hooks test EVENT --json` with the example settings; its decoded output."""
    assert RELAY is not None, f"no relay console script in {BIN}: pip install -e ."
    command = [RELAY, "hooks", "test", event, "--json", "--settings", str(SETTINGS)]
    command += ["--cwd", str(project), *options]
    if payload is not None:
        command += ["--input", "-"]
    environment = {k: v for k, v in os.environ.items() if k not in HOOK_VARIABLES}
    environment["PATH"] = f"{BIN}{os.pathsep}{environment.get('PATH', '')}"
    environment.update(env or {})
    done = subprocess.run(
        command,
        input=json.dumps(payload) if payload is not None else None,
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
        check=False,
    )
    assert done.returncode == exit_code, done.stdout + done.stderr
    trial: dict[str, Any] = json.loads(done.stdout)
    return trial


def hooks_test_many(
    project: Path, event: str, hook: str, payloads: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """hooks_test for several payloads: `relay hooks test` run here (click's runner), one
    payload after another, with the environment hooks_test gives it. The hook runs in a
    process of its own each time, as there; what is saved is a Python that starts relay
    per payload (hooks_test, one payload, runs the console script as a user does)."""
    from click.testing import CliRunner

    from relay.cli.main import cli

    environment: dict[str, str | None] = dict.fromkeys(HOOK_VARIABLES)
    environment["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    command = ["hooks", "test", event, "--json", "--settings", str(SETTINGS)]
    command += ["--cwd", str(project), "--hook", hook, "--input", "-"]
    trials = []
    for payload in payloads:
        done = CliRunner(env=environment).invoke(cli, command, input=json.dumps(payload))
        assert done.exit_code == 0, (done.output, done.exception)
        trials.append(json.loads(done.stdout))
    return trials


def only_hook(trial: dict[str, Any], name: str) -> dict[str, Any]:
    """The single hook entry of a `--hook NAME` trial, after checking it ran cleanly."""
    assert [hook["name"] for hook in trial["hooks"]] == [name]
    hook: dict[str, Any] = trial["hooks"][0]
    assert (hook["error"], hook["timed_out"], hook["signal"]) == (None, False, None)
    assert trial["result"]["errors"] == []
    return hook


def bash(command: str) -> dict[str, Any]:
    return {"tool_name": "Bash", "tool_input": {"command": command}}


def git(cwd: Path, *args: str) -> None:
    isolated = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", *identity, "-C", str(cwd), *args], check=True, env=isolated)


# -- guard-shell (bash) -----------------------------------------------------------------

RM_REASON = "it deletes far more than a task needs. Remove only the paths you created, by name."
GIT_REASON = "it throws away uncommitted work. Commit or stash first, or ask the user."
DISK_REASON = "it overwrites a disk. Ask the user to do this themselves if it is really needed."


def test_guard_shell_denies_with_exit_2_and_a_reason(project: Path) -> None:
    command = "rm -rf / --no-preserve-root"
    trial = hooks_test(
        project, "PreToolUse", "--hook", "guard-shell", "--expect", "deny", payload=bash(command)
    )
    hook = only_hook(trial, "guard-shell")
    assert (hook["exit_code"], hook["stdout"], hook["output"]) == (2, "", None)
    assert hook["stderr"] == f"Refusing '{command}': {RM_REASON}\n"
    assert json.loads(hook["stdin"])["tool_input"] == {"command": command}
    result = trial["result"]
    assert (result["decision"], result["reason"]) == ("deny", f"Refusing '{command}': {RM_REASON}")
    assert result["tool_input"] == {"command": command}


def test_guard_shell_is_not_fooled_by_quoting(project: Path) -> None:
    expected = {
        'rm -rf "/"': RM_REASON,
        "r''m -r -f '/'": RM_REASON,
        "\\rm -fr ~/": RM_REASON,
        "/bin/rm --recursive --force -- /": RM_REASON,
        "sudo rm -rf /*": RM_REASON,
        'rm -rf "$HOME"': RM_REASON,
        'rm -rf "$BUILD_DIR/"': RM_REASON,
        "rm -rf /{usr,etc}": RM_REASON,
        'echo "done" && rm -rf ~': RM_REASON,
        "ls\nrm -rf /": RM_REASON,
        "rm -rf \\\n  /": RM_REASON,
        'bash -c "rm -rf /"': RM_REASON,
        "echo $(rm -rf /)": RM_REASON,
        "find / -delete": RM_REASON,
        "git -C repo reset --hard HEAD~3": GIT_REASON,
        "git clean -fdx": GIT_REASON,
        "git checkout -- .": GIT_REASON,
        "mkfs.ext4 /dev/sdb1": DISK_REASON,
        "dd if=/dev/zero of=/dev/sda bs=1M": DISK_REASON,
        "cat image > /dev/nvme0n1": DISK_REASON,
        ":(){ :|:& };:": "it is a fork bomb.",
    }
    trials = hooks_test_many(project, "BeforeTool", "guard-shell", [bash(c) for c in expected])
    reasons = {
        command: trial["result"]["reason"] for command, trial in zip(expected, trials, strict=True)
    }
    assert reasons == {command: f"Refusing '{command}': {why}" for command, why in expected.items()}


def test_guard_shell_reads_the_command_as_json_not_as_text(project: Path) -> None:
    # A regex over the raw event would take the "command" inside the description.
    decoys = [
        {"description": '"command": "ls"', "command": "rm -rf /"},
        {"command": "rm -rf /", "description": 'x", "command": "ls'},
        {"command": 'echo "a\\" b"; rm -rf /'},
    ]
    payloads = [{"tool_name": "run_shell_command", "tool_input": decoy} for decoy in decoys]
    trials = hooks_test_many(project, "BeforeTool", "guard-shell", payloads)
    assert [trial["result"]["decision"] for trial in trials] == ["deny"] * 3
    assert [trial["hooks"][0]["exit_code"] for trial in trials] == [2] * 3


def test_guard_shell_allows_everyday_commands(project: Path) -> None:
    commands = [
        "ls -la",
        "rm -rf build/ dist",
        "rm -rf ./node_modules",
        'rm -rf "${BUILD_DIR:?}/"',
        "find . -name '*.pyc' -delete",
        "git reset --soft HEAD~1",
        "git restore --staged .",
        "git clean -n",
        'git commit -m "do not reset --hard"',
        "dd if=/dev/zero of=/dev/null count=1",
        "chmod 644 README.md",
    ]
    trials = hooks_test_many(project, "BeforeTool", "guard-shell", [bash(c) for c in commands])
    outcomes = {
        command: (trial["result"]["decision"], trial["hooks"][0]["exit_code"])
        for command, trial in zip(commands, trials, strict=True)
    }
    assert outcomes == dict.fromkeys(commands, ("allow", 0))


def test_guard_shell_fails_closed_when_it_cannot_read_the_event(
    project: Path, tmp_path: Path
) -> None:
    # bash alone on PATH: neither python3 nor jq to parse the event with.
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    bash_path = shutil.which("bash")
    assert bash_path is not None
    (bare / "bash").symlink_to(bash_path)
    trial = hooks_test(
        project,
        "BeforeTool",
        "--hook",
        "guard-shell",
        payload=bash("ls"),
        env={"PATH": str(bare)},
        exit_code=1,
    )
    message = "hook exited with code 1: guard_shell.sh: needs python3 or jq to read the event"
    assert trial["result"]["errors"] == [{"hook": "guard-shell", "message": message}]
    assert (trial["result"]["decision"], trial["result"]["reason"]) == (
        "deny",
        f"hook guard-shell failed and is failClosed: {message}",
    )


# -- protect-secrets (Perl) -------------------------------------------------------------


@needs_perl
def test_protect_secrets_denies_writing_dotenv(project: Path) -> None:
    payload = {"tool_name": "Write", "tool_input": {"file_path": ".env", "content": "KEY=1"}}
    trial = hooks_test(project, "PreToolUse", "--hook", "protect-secrets", payload=payload)
    hook = only_hook(trial, "protect-secrets")
    reason = (
        "Refusing to write '.env': it looks like a .env file with environment secrets, which "
        "the agent must not change. Put placeholders in a template such as .env.example "
        "instead, or ask the user to make this change."
    )
    assert (hook["exit_code"], hook["stderr"]) == (0, "")
    assert json.loads(hook["stdout"]) == {"decision": "deny", "reason": reason}
    result = trial["result"]
    assert (result["decision"], result["reason"]) == ("deny", reason)
    assert result["tool_input"] == payload["tool_input"]


@needs_perl
def test_protect_secrets_covers_claude_and_gemini_tools(project: Path) -> None:
    cases = {
        ("Edit", "file_path", "config/.env.production"): "a .env file with environment secrets",
        ("MultiEdit", "file_path", "/srv/app/.ENV"): "a .env file with environment secrets",
        ("write_file", "file_path", "certs/server.pem"): "a private key or certificate store",
        ("replace", "file_path", "deploy/id_ed25519"): "an SSH private key",
        ("write_file", "path", "/home/ana/.ssh/authorized_keys"): "a file in .ssh/",
        ("Write", "file_path", ".aws/credentials"): "a credentials file",
        ("Edit", "file_path", "secrets.yaml"): "a credentials file",
        ("Write", "file_path", "ünïcode/.netrc"): "a credentials file",
    }
    payloads = [{"tool_name": tool, "tool_input": {field: path}} for tool, field, path in cases]
    trials = hooks_test_many(project, "BeforeTool", "protect-secrets", payloads)
    reasons = {case: trial["result"]["reason"] for case, trial in zip(cases, trials, strict=True)}
    assert reasons == {
        case: f"Refusing to write '{case[2]}': it looks like {kind}, which the agent must not "
        "change. Put placeholders in a template such as .env.example instead, or ask the user "
        "to make this change."
        for case, kind in cases.items()
    }


@needs_perl
def test_protect_secrets_allows_ordinary_files(project: Path) -> None:
    paths = [".env.example", "src/app.py", "id_rsa.pub", "docs/environment.md", "README.md"]
    payloads = [{"tool_name": "Write", "tool_input": {"file_path": path}} for path in paths]
    trials = hooks_test_many(project, "BeforeTool", "protect-secrets", payloads)
    outcomes = {
        path: (trial["result"]["decision"], trial["hooks"][0]["stdout"])
        for path, trial in zip(paths, trials, strict=True)
    }
    assert outcomes == dict.fromkeys(paths, ("allow", ""))


@needs_perl
def test_protect_secrets_follows_symbolic_links(project: Path) -> None:
    (project / ".env").write_text("KEY=1\n")
    (project / "notes.txt").symlink_to(".env")
    payload = {"tool_name": "Edit", "tool_input": {"file_path": "notes.txt"}}
    trial = hooks_test(project, "PreToolUse", "--hook", "protect-secrets", payload=payload)
    assert trial["result"]["decision"] == "deny"
    assert trial["result"]["reason"].startswith(
        "Refusing to write 'notes.txt': it looks like a .env file with environment secrets "
        f"(it links to {(project / '.env').resolve()})"
    )


@needs_perl
def test_protect_secrets_is_not_asked_about_reads(project: Path) -> None:
    payload = {"tool_name": "Read", "tool_input": {"file_path": ".env"}}
    trial = hooks_test(project, "PreToolUse", "--hook", "protect-secrets", payload=payload)
    assert (trial["hooks"], trial["result"]["decision"]) == ([], "allow")


# -- force-with-lease (Node) ------------------------------------------------------------


@needs_node
def test_force_with_lease_rewrites_tool_input(project: Path) -> None:
    payload = {
        "tool_name": "run_shell_command",
        "tool_input": {"command": "git push --force origin main", "description": "publish"},
    }
    trial = hooks_test(project, "BeforeTool", "--hook", "force-with-lease", payload=payload)
    hook = only_hook(trial, "force-with-lease")
    rewritten = "git push --force-with-lease origin main"
    assert hook["output"]["hookSpecificOutput"] == {"tool_input": {"command": rewritten}}
    result = trial["result"]
    assert result["tool_input"] == {"command": rewritten, "description": "publish"}
    assert (
        result["systemMessage"] == f'relay: rewrote "git push --force origin main" to "{rewritten}"'
    )
    assert result["decision"] == "allow"


@needs_node
def test_force_with_lease_changes_only_force_options_of_git_push(project: Path) -> None:
    expected = {
        "git push -f": "git push --force-with-lease",
        "git push -fu origin main": "git push --force-with-lease -u origin main",
        "git -C repo push --force": "git -C repo push --force-with-lease",
        "git pull && git push -f backup": "git pull && git push --force-with-lease backup",
        "git push --force-with-lease": "git push --force-with-lease",
        "git push origin feature-f": "git push origin feature-f",
        "ls -f": "ls -f",
    }
    trials = hooks_test_many(project, "BeforeTool", "force-with-lease", [bash(c) for c in expected])
    commands = {
        before: t["result"]["tool_input"]["command"]
        for before, t in zip(expected, trials, strict=True)
    }
    assert commands == expected


# -- session-context (Python) -----------------------------------------------------------


def test_session_context_reports_branch_and_commits(project: Path, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "feature/x")
    git(repo, "commit", "-q", "--allow-empty", "-m", "first step")
    (repo / "new.txt").write_text("x")
    trial = hooks_test(
        project,
        "SessionStart",
        "--hook",
        "session-context",
        "--expect",
        "inject",
        "--set",
        f"cwd={json.dumps(str(repo))}",
    )
    hook = only_hook(trial, "session-context")
    assert (hook["exit_code"], hook["output"]) == (0, None)  # plain text: inject
    lines = trial["result"]["inject"].splitlines()
    assert lines[:2] == ["Git branch: feature/x", "Recent commits:"]
    assert re.fullmatch(r"  [0-9a-f]{7,} first step", lines[2])
    assert lines[3:] == ["Uncommitted changes in 1 file(s)."]


def test_session_context_before_the_first_commit_and_detached(
    project: Path, tmp_path: Path
) -> None:
    fresh, detached = tmp_path / "fresh", tmp_path / "detached"
    for repo in (fresh, detached):
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
    git(detached, "commit", "-q", "--allow-empty", "-m", "only")
    git(detached, "checkout", "-q", "--detach")
    trials = [
        hooks_test(
            project,
            "SessionStart",
            "--hook",
            "session-context",
            "--set",
            f"cwd={json.dumps(str(repo))}",
        )
        for repo in (fresh, detached)
    ]
    assert trials[0]["result"]["inject"] == "Git branch: main"
    assert re.fullmatch(
        r"Git branch: \(detached HEAD at [0-9a-f]+\)\nRecent commits:\n  [0-9a-f]+ only",
        trials[1]["result"]["inject"],
    )


def test_session_context_is_silent_outside_git(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    trial = hooks_test(
        project,
        "SessionStart",
        "--hook",
        "session-context",
        "--set",
        f"cwd={json.dumps(str(elsewhere))}",
    )
    hook = only_hook(trial, "session-context")
    assert (hook["exit_code"], hook["stdout"], trial["result"]["inject"]) == (0, "", None)


# -- format-on-write (Python) -----------------------------------------------------------


def write_python(project: Path, name: str, text: str) -> Path:
    (project / "pyproject.toml").write_text('[tool.ruff.lint]\nselect = ["F"]\n')
    path = project / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def written(tool: str, path: str) -> tuple[str, ...]:
    return ("--tool", tool, "--set", f"tool_input.file_path={json.dumps(path)}")


@pytest.fixture
def ruff() -> str:
    found = shutil.which("ruff", path=str(BIN)) or shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    return found


def test_format_on_write_formats_and_reports_lint_problems(project: Path, ruff: str) -> None:
    path = write_python(project, "src/app.py", "import os\nx=1\n")
    trial = hooks_test(
        project, "PostToolUse", "--hook", "format-on-write", *written("Write", "src/app.py")
    )
    only_hook(trial, "format-on-write")
    assert path.read_text() == "import os\n\nx = 1\n"
    result = trial["result"]
    assert result["systemMessage"] == (
        "format-on-write: ruff format reformatted src/app.py; "
        "ruff check found problems in src/app.py"
    )
    head, lint = result["inject"].split("\n\n")
    assert head == (
        "ruff format reformatted src/app.py after your edit; read it again before editing it further."
    )
    assert lint.startswith(
        "ruff check reports problems in src/app.py; fix them:\nsrc/app.py:1:8: F401"
    )
    assert (result["decision"], result["hookSpecificOutput"]) == ("allow", None)


def test_format_on_write_reports_what_it_cannot_format(project: Path, ruff: str) -> None:
    write_python(project, "broken.py", "def f(:\n")
    trial = hooks_test(
        project, "AfterTool", "--hook", "format-on-write", *written("write_file", "broken.py")
    )
    result = trial["result"]
    assert result["systemMessage"] == (
        "format-on-write: ruff format failed on broken.py; ruff check found problems in broken.py"
    )
    assert result["inject"].startswith("ruff format could not format broken.py (exit 2):\n")


def test_format_on_write_is_silent_when_all_is_clean(project: Path, ruff: str) -> None:
    path = write_python(project, "clean.py", "x = 1\n")
    trial = hooks_test(
        project, "AfterTool", "--hook", "format-on-write", *written("replace", str(path))
    )
    hook = only_hook(trial, "format-on-write")
    assert (hook["stdout"], trial["result"]["inject"], trial["result"]["systemMessage"]) == (
        "",
        None,
        None,
    )


def test_format_on_write_is_a_no_op_without_a_tool(project: Path, tmp_path: Path) -> None:
    # Only python3 on PATH: no ruff, no black, no prettier.
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    (bare / "python3").symlink_to(sys.executable)
    messy = write_python(project, "app.py", "x=1\n")
    notes = project / "notes.txt"
    notes.write_text("x=1\n")
    outside = tmp_path / "outside.py"
    outside.write_text("x=1\n")
    for name in ("app.py", "notes.txt", str(outside)):
        trial = hooks_test(
            project,
            "AfterTool",
            "--hook",
            "format-on-write",
            *written("Write", name),
            env={"PATH": str(bare)},
        )
        hook = only_hook(trial, "format-on-write")
        assert (hook["exit_code"], hook["stdout"], trial["result"]["systemMessage"]) == (
            0,
            "",
            None,
        )
    assert messy.read_text() == notes.read_text() == outside.read_text() == "x=1\n"


def test_format_on_write_never_hangs(project: Path, tmp_path: Path) -> None:
    # A project-local "ruff" that hangs, with a child that holds its output pipe.
    pids = tmp_path / "pids"
    local = project / ".venv" / "bin"
    local.mkdir(parents=True)
    (local / "ruff").write_text(
        f"#!/bin/sh\necho $$ >> '{pids}'\nsleep 30 &\necho $! >> '{pids}'\nwait\n"
    )
    (local / "ruff").chmod(0o755)
    write_python(project, "app.py", "x=1\n")
    started = time.monotonic()
    trial = hooks_test(
        project,
        "AfterTool",
        "--hook",
        "format-on-write",
        *written("Edit", "app.py"),
        env={"RELAY_FORMAT_TIMEOUT": "0.3"},
    )
    assert time.monotonic() - started < 10
    only_hook(trial, "format-on-write")
    assert trial["result"]["systemMessage"] == (
        "format-on-write: ruff format timed out after 0.3s on app.py; "
        "ruff check timed out after 0.3s on app.py"
    )
    assert trial["result"]["inject"] is None
    left = [pid for pid in pids.read_text().split() if alive(int(pid))]
    assert left == [], "the hook left processes behind"


# -- tests-before-stop (Python) ---------------------------------------------------------


def test_tests_before_stop_blocks_while_tests_fail(project: Path) -> None:
    command = "pwd; for i in $(seq 1 40); do echo line $i; done; exit 3"
    trial = hooks_test(
        project,
        "AfterAgent",
        "--hook",
        "tests-before-stop",
        "--expect",
        "deny",
        env={"RELAY_TEST_COMMAND": command},
    )
    hook = only_hook(trial, "tests-before-stop")
    assert hook["output"]["decision"] == "block"
    last_lines = "\n".join(f"line {i}" for i in range(11, 41))
    reason = (
        f"Tests are failing: `{command}` exited with code 3. Fix them and run the tests again "
        "before you finish, or tell the user why they cannot pass. Last lines of its output:\n"
        f"{last_lines}"
    )
    assert (trial["result"]["decision"], trial["result"]["reason"]) == ("deny", reason)


def test_tests_before_stop_runs_in_the_project(project: Path) -> None:
    trial = hooks_test(
        project, "Stop", "--hook", "tests-before-stop", env={"RELAY_TEST_COMMAND": "pwd; false"}
    )
    assert trial["result"]["reason"].endswith(f"output:\n{project}")


def test_tests_before_stop_lets_the_agent_stop_when_stop_hook_active(project: Path) -> None:
    marker = project / "tests-ran"
    trial = hooks_test(
        project,
        "AfterAgent",
        "--hook",
        "tests-before-stop",
        "--set",
        "stop_hook_active=true",
        "--expect",
        "allow",
        env={"RELAY_TEST_COMMAND": f"touch '{marker}'; exit 1"},
    )
    hook = only_hook(trial, "tests-before-stop")
    assert json.loads(hook["stdin"])["stop_hook_active"] is True
    assert (hook["exit_code"], hook["stdout"], trial["result"]["reason"]) == (0, "", None)
    assert not marker.exists(), "the tests ran although stop_hook_active was true"


@pytest.mark.parametrize(
    "setting",
    [{}, {"RELAY_TEST_COMMAND": "  "}, {"RELAY_TEST_COMMAND": "true"}],
    ids=["unset", "blank", "passing"],
)
def test_tests_before_stop_has_no_opinion_otherwise(project: Path, setting: dict[str, str]) -> None:
    trial = hooks_test(
        project, "AfterAgent", "--hook", "tests-before-stop", "--expect", "allow", env=setting
    )
    hook = only_hook(trial, "tests-before-stop")
    assert (hook["exit_code"], hook["stdout"], trial["result"]["systemMessage"]) == (0, "", None)


def test_tests_before_stop_tells_the_user_when_the_command_is_missing(project: Path) -> None:
    trial = hooks_test(
        project,
        "AfterAgent",
        "--hook",
        "tests-before-stop",
        "--expect",
        "allow",
        env={"RELAY_TEST_COMMAND": "no-such-test-runner -q"},
    )
    only_hook(trial, "tests-before-stop")
    assert trial["result"]["systemMessage"].startswith(
        "tests-before-stop: `no-such-test-runner -q` could not run (exit 127): "
    )


def test_tests_before_stop_blocks_on_tests_that_hang(project: Path) -> None:
    started = time.monotonic()
    trial = hooks_test(
        project,
        "AfterAgent",
        "--hook",
        "tests-before-stop",
        env={"RELAY_TEST_COMMAND": "echo collecting; sleep 30", "RELAY_TEST_TIMEOUT": "0.3"},
    )
    assert time.monotonic() - started < 10
    assert trial["result"]["reason"] == (
        "Tests did not finish: `echo collecting; sleep 30` ran past 0.3s. Look for a test the "
        "last change made hang, fix it, and run the tests again before you finish. "
        "Last lines of its output:\ncollecting"
    )


# -- notification-log (Node) ------------------------------------------------------------


@needs_node
def test_notification_log_appends_one_json_line_each(project: Path, tmp_path: Path) -> None:
    log = tmp_path / "logs" / "deep" / "notifications.jsonl"
    events = []
    for kind, message in [("permission_prompt", "Needs Bash"), ("idle_prompt", "Waiting")]:
        trial = hooks_test(
            project,
            "Notification",
            "--hook",
            "notification-log",
            "--set",
            f"notification_type={json.dumps(kind)}",
            "--set",
            f"message={json.dumps(message)}",
            env={"RELAY_NOTIFICATION_LOG": str(log)},
        )
        hook = only_hook(trial, "notification-log")
        assert (hook["exit_code"], hook["stdout"], hook["stderr"]) == (0, "", "")
        result = trial["result"]
        assert (result["decision"], result["systemMessage"], result["inject"]) == (
            "allow",
            None,
            None,
        )
        events.append(trial["event"])
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        {
            "time": event["timestamp"],
            "type": event["notification_type"],
            "message": event["message"],
            "session_id": event["session_id"],
            "details": {},
        }
        for event in events
    ]


@needs_node
def test_notification_log_defaults_to_the_project_and_keeps_one_line(project: Path) -> None:
    message = 'two\nlines, a "quote", ünïcödé and a line separator \u2028 here'
    payload = {
        "notification_type": "permission_prompt",
        "message": message,
        "details": None,
        "title": "Claude",
    }
    trial = hooks_test(project, "Notification", "--hook", "notification-log", payload=payload)
    only_hook(trial, "notification-log")
    lines = (project / ".relay" / "notifications.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert (record["message"], record["title"], "details" in record) == (message, "Claude", False)


@needs_node
def test_notification_log_failure_never_blocks(project: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    trial = hooks_test(
        project,
        "Notification",
        "--hook",
        "notification-log",
        exit_code=1,
        env={"RELAY_NOTIFICATION_LOG": str(blocker / "sub" / "log.jsonl")},
    )
    [error] = trial["result"]["errors"]
    assert error["hook"] == "notification-log"
    assert error["message"].startswith("hook exited with code 1: notification_log.js: ENOTDIR")
    assert trial["result"]["decision"] == "allow"


# -- settings, README and the demo ------------------------------------------------------


def test_every_hook_is_registered_and_documented(tmp_path: Path) -> None:
    system = HookSystem(cwd=tmp_path, settings=[SETTINGS], telemetry=False)
    system.initialize()
    assert system.warnings() == []
    system.close()
    settings = json.loads(SETTINGS.read_text())
    hooks = {
        hook["name"]: re.fullmatch(
            r'\S+ "\$RELAY_PROJECT_DIR/hooks-examples/([^"]+)"', hook["command"]
        )
        for groups in settings["hooks"].values()
        for group in groups
        for hook in group["hooks"]
    }
    scripts = {name: match.group(1) for name, match in hooks.items() if match}
    assert len(scripts) == len(hooks) >= 7, "every command runs a script in hooks-examples/"
    helpers = {
        "demo.sh",
        "tour.sh",
        "show_result.py",
        "settings.json",
        "README.md",
        "memory_store.py",
    }
    assert set(scripts.values()) == {p.name for p in EXAMPLES.iterdir() if p.is_file()} - helpers
    readme = (EXAMPLES / "README.md").read_text()
    tries = [line.split() for line in readme.splitlines() if "relay hooks test" in line]
    for name, script in scripts.items():
        assert f"| `{script}` |" in readme, f"no line for {script} in the table"
        assert any(
            ["--hook", name] == words[i : i + 2] for words in tries for i in range(len(words))
        ), f"no `relay hooks test` command for {name}"


@needs_node
@needs_perl
def test_demo_runs_a_whole_session(relay_home: Path) -> None:
    """`make demo`: relay run on the scripted agent shows each step of a session."""
    done = subprocess.run(
        ["bash", str(EXAMPLES / "demo.sh"), str(BIN / "relay")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    expected_in_order = [
        "agent: got start-up context from relay: Project: relay demo. Run the tests before you finish.",
        "  ✓ allowed; output: total 3  README.md  src/  tests/",
        "  ✗ blocked by a hook: Refusing 'rm -rf / --no-preserve-root': it deletes far more than a task needs. Remove only the paths you created, by name.",
        "@deploy:staging release 1.4.2",
        "agent: the deploy handler answered: deploy: dry run of 'release 1.4.2' to staging passed (3 services, 0 migrations)",
        "agent: relay nudged me after a quiet spell: Still there? Wrap up and summarise what you did.",
        "agent: done, exiting",
        "The session ended cleanly (the agent exited 0; SessionEnd fired).",
    ]
    positions = [lines.index(line) for line in expected_in_order]
    assert positions == sorted(positions)
    assert "\x1b" not in done.stdout, "no escape codes into a pipe"


def run_on_a_terminal(script: str, env: Mapping[str, str], until: bytes | None = None) -> str:
    """What `script` prints with its stdout on a pseudo-terminal (stdin and stderr not);
    with `until`, what it printed up to those bytes (then it is ended, with what it started)."""
    import pty
    import signal

    parent, child = pty.openpty()
    try:
        process = subprocess.Popen(
            ["bash", str(EXAMPLES / script), str(BIN / "relay")],
            stdin=subprocess.DEVNULL,
            stdout=child,
            stderr=subprocess.PIPE,
            env=dict(env),
            start_new_session=True,
        )
        os.close(child)
        child = -1
        output = bytearray()
        while until is None or until not in output:
            try:
                chunk = os.read(parent, 65536)
            except OSError:  # EIO: every holder of the terminal has closed it
                break
            if not chunk:
                break
            output += chunk
        if until is not None and until in output:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
            assert process.stderr is not None
            process.stderr.close()
            return output.decode("utf-8", "replace")
        assert process.wait(timeout=60) == 0
        assert process.stderr is not None
        process.stderr.close()
        return output.decode("utf-8", "replace")
    finally:
        os.close(parent)
        if child >= 0:
            os.close(child)


@pytest.mark.parametrize("script", ["tour.sh", "demo.sh"])
def test_the_scripts_are_bold_on_a_terminal_only_and_never_with_no_color(script: str) -> None:
    if script == "demo.sh" and (shutil.which("node") is None or shutil.which("perl") is None):
        pytest.skip("the demo's hooks need node and perl")
    environ = {key: value for key, value in os.environ.items() if key != "NO_COLOR"}
    # Bold from its first heading on (the run ends there: the whole script runs below).
    assert "\x1b[1m" in run_on_a_terminal(script, environ, until=b"\x1b[1m")
    assert "\x1b" not in run_on_a_terminal(script, {**environ, "NO_COLOR": "1"})


def test_tour_script_runs(relay_home: Path) -> None:
    done = subprocess.run(
        ["bash", str(EXAMPLES / "tour.sh"), str(BIN / "relay")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "decision: deny  (reason: Refusing 'rm -rf / --no-preserve-root'" in done.stdout
    assert (
        'tool_input: {"command": "git push --force-with-lease origin main", "description": "publish"}'
        in done.stdout
    )
    assert "decision: deny  (reason: Refusing to write '.env'" in done.stdout
    assert "decision: deny  (reason: Tests are failing: " in done.stdout
    assert 'logged: {"time":' in done.stdout
    # The README's way into Claude Code, not a hand-written entry of `relay hooks run`.
    assert "\n  relay install claude " in done.stdout
    assert "relay hooks run --dialect" not in done.stdout
    assert "\x1b" not in done.stdout, "no escape codes into a pipe"


# -- message-guard (Python) -------------------------------------------------------------


def message(sender: str, body: str) -> dict[str, Any]:
    return {"message_id": "01JXAMPLE0000000000000000", "sender": sender, "body": body}


def test_message_guard_refuses_muted_senders(project: Path) -> None:
    trial = hooks_test(
        project,
        "MessageReceived",
        "--hook",
        "message-guard",
        payload=message("Mallory", "hi"),
        env={"RELAY_MUTED_SENDERS": "Mallory, Eve"},
    )
    only_hook(trial, "message-guard")
    result = trial["result"]
    assert (result["decision"], result["reason"]) == ("deny", "Mallory is muted in this session")


def test_message_guard_redacts_secrets_and_passes_the_rest(project: Path) -> None:
    body = "use AKIAABCDEFGHIJKLMNOP and password=hunter2 for staging"
    redacting, clean = hooks_test_many(
        project,
        "MessageReceived",
        "message-guard",
        [message("Bob", body), message("Bob", "the build is green")],
    )
    only_hook(redacting, "message-guard")
    result = redacting["result"]
    assert result["decision"] == "allow"
    assert result["hookSpecificOutput"] == {"body": "use [redacted] and [redacted] for staging"}
    assert result["systemMessage"] == "message-guard: redacted 2 secret(s) from Bob's message"
    assert only_hook(clean, "message-guard")["stdout"] == ""
    assert (clean["result"]["hookSpecificOutput"], clean["result"]["inject"]) == (None, None)

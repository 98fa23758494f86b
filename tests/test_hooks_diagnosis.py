"""What `relay hooks test` and `relay hooks validate` say about a hook's output and its script:
one answer about stdout that agrees with the result, and the script mistakes that make a hook
fail in ways its author cannot see (a comment on the #! line, no #! line, a missing
interpreter, no execute bit), each with its fix. Every hook here is a real process."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from relay.cli.main import cli


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)
    return root


def script(project: Path, name: str, text: str, *, mode: int = 0o755) -> Path:
    path = project / name
    path.write_text(text)
    path.chmod(mode)
    return path


def tried(project: Path, event: str, command: str, *options: str) -> dict[str, Any]:
    done = CliRunner().invoke(
        cli,
        ["hooks", "test", event, "--cwd", str(project), "--command", command, *options, "--json"],
    )
    trial: dict[str, Any] = json.loads(done.stdout)
    return trial


def validated(project: Path, command: str) -> list[str]:
    settings = project / ".relay" / "settings.json"
    settings.parent.mkdir(exist_ok=True)
    group = {"matcher": "Bash", "hooks": [{"name": "hook", "command": command}]}
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [group]}}, indent=2))
    done = CliRunner().invoke(cli, ["hooks", "validate", "--cwd", str(project), "--json"])
    files = json.loads(done.stdout)["files"]
    return [w["message"] for f in files for w in f["warnings"]]


# -- one answer about stdout ------------------------------------------------------------------

PRINTS_PYTHON_DICT = f'#!{sys.executable}\nprint({{"decision": "deny", "reason": "no"}})\n'


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        (
            '#!/bin/sh\necho \'{"decision":"deny",}\'\n',
            "JSON allows no comma after the last member: remove it",
        ),
        (PRINTS_PYTHON_DICT, "print(json.dumps(answer)) writes JSON"),
    ],
    ids=["trailing-comma", "python-print-dict"],
)
def test_unreadable_json_is_one_error_with_its_cause_and_what_relay_did(
    project: Path, text: str, cause: str
) -> None:
    script(project, "hook", text)
    trial = tried(project, "PreToolUse", "./hook")
    hook, result = trial["hooks"][0], trial["result"]
    # What the engine did: an error, the answer ignored, fail-open: the deny became allow.
    assert result["decision"] == "allow" and result["systemMessage"] is None
    assert hook["error"].startswith("protocol error: unreadable JSON: JSON is malformed:")
    assert cause in hook["error"] and cause in result["errors"][0]["message"]
    # Said once, and nothing that contradicts it (no "read it as plain text").
    assert [w for w in hook["warnings"] if "stdout" in w] == [
        "relay could not read stdout as an answer: the hook counts as failed and fails open: "
        "its answer is ignored and the action goes ahead (a failClosed hook would deny)"
    ]
    assert not any("plain text" in w for w in hook["warnings"])


def test_a_fail_closed_hook_with_unreadable_json_is_said_to_deny(project: Path) -> None:
    script(project, "hook", '#!/bin/sh\necho \'{"decision":"allow",}\'\n')
    settings = project / ".relay" / "settings.json"
    settings.parent.mkdir()
    entry = {"name": "strict", "command": "./hook", "failClosed": True}
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [{"hooks": [entry]}]}}))
    assert CliRunner().invoke(cli, ["trust", "--yes", "--cwd", str(project)]).exit_code == 0
    done = CliRunner().invoke(
        cli, ["hooks", "test", "PreToolUse", "--cwd", str(project), "--hook", "strict", "--json"]
    )
    trial = json.loads(done.stdout)
    assert trial["result"]["decision"] == "deny"
    assert (
        "relay could not read stdout as an answer: this hook is failClosed, so the event is denied"
        in trial["hooks"][0]["warnings"]
    )


def test_plain_text_stdout_is_still_said_to_be_read_as_plain_text(project: Path) -> None:
    trial = tried(project, "SessionStart", "echo hello")
    assert trial["result"]["inject"] == "hello"
    assert (
        "stdout is not JSON: relay read it as plain text, as `inject`"
        in (trial["hooks"][0]["warnings"])
    )


def test_json_on_stderr_says_to_print_it_on_stdout(project: Path) -> None:
    script(
        project,
        "hook.py",
        f"#!{sys.executable}\nimport json, sys\n"
        "print(json.dumps({'decision': 'deny'}), file=sys.stderr)\n",
    )
    trial = tried(project, "PreToolUse", "./hook.py")
    assert trial["result"]["decision"] == "allow"
    assert (
        "a JSON object was printed on stderr, where relay ignores it: print it on stdout "
        "(in Python: print(json.dumps(answer)), without file=sys.stderr)"
    ) in trial["hooks"][0]["warnings"]


# -- the script a hook runs -------------------------------------------------------------------


def test_a_comment_on_the_shebang_line_is_named_with_its_fix(project: Path) -> None:
    hook = script(project, "guard.sh", "#!/bin/sh   # deny rm -rf\necho '{}'\n")
    trial = tried(project, "PreToolUse", "./guard.sh")
    # What really happens: sh opens "# deny rm -rf" as its script, and exit 2 is a deny.
    assert trial["result"]["decision"] == "deny"
    expected = (
        f"{hook}: its #! line `#!/bin/sh   # deny rm -rf` has text after the interpreter: "
        "the kernel hands '# deny rm -rf' to /bin/sh as one argument, so /bin/sh tries to open "
        "'# deny rm -rf' as the script and fails (sh: `cannot open # deny rm -rf`); put the "
        "comment on a line of its own: `#!/bin/sh`"
    )
    assert expected in trial["hooks"][0]["warnings"]
    assert expected in validated(project, "./guard.sh")


def test_a_python_script_without_a_shebang_is_named_with_its_fix(project: Path) -> None:
    hook = script(
        project,
        "where.py",
        "import json, sys\nevent = json.load(sys.stdin)\nprint(json.dumps({'inject': 'x'}))\n",
    )
    trial = tried(project, "SessionStart", "./where.py")
    assert "import: not found" in trial["hooks"][0]["stderr"]
    expected = (
        f"{hook} has no #! line, so it runs under /bin/sh, but it looks like Python: sh fails "
        "on its first line (such as `import: not found`); to fix: make its first line "
        "`#!/usr/bin/env python3`, or register the command as `python3 where.py`"
    )
    assert expected in trial["hooks"][0]["warnings"]
    assert expected in validated(project, "./where.py")


def test_a_shell_script_without_a_shebang_is_fine(project: Path) -> None:
    script(project, "hook.sh", "echo '{}'\n")
    trial = tried(project, "PreToolUse", "./hook.sh")
    assert trial["hooks"][0]["warnings"] == []
    assert validated(project, "./hook.sh") == []


def test_a_missing_interpreter_is_named_with_its_fix(project: Path) -> None:
    hook = script(project, "hook.py", "#!/usr/bin/pyhton3\nprint('{}')\n")
    trial = tried(project, "PreToolUse", "./hook.py")
    assert trial["hooks"][0]["error"] is not None
    found = [w for w in trial["hooks"][0]["warnings"] if "#! line names" in w]
    assert found == [
        f"{hook}: its #! line names /usr/bin/pyhton3, which does not exist, so every run fails "
        '("command not found" for the script itself); to fix: make its first line '
        "`#!/usr/bin/env pyhton3`"
    ]
    assert found[0] in validated(project, "./hook.py")


def test_an_interpreter_env_cannot_find_is_named(project: Path) -> None:
    hook = script(project, "hook.js", "#!/usr/bin/env nodejs-not-here\nconsole.log('{}')\n")
    trial = tried(project, "PreToolUse", "./hook.js")
    expected = (
        f"{hook}: its #! line runs `env nodejs-not-here`, and nodejs-not-here is not on PATH, "
        "so every run fails (exit 127); install it, or name the interpreter by its path"
    )
    assert expected in trial["hooks"][0]["warnings"]
    assert expected in validated(project, "./hook.js")


def test_an_interpreter_that_is_not_executable_is_named(project: Path) -> None:
    interpreter = script(project, "fake-sh", "not a program\n", mode=0o644)
    hook = script(project, "hook", f"#!{interpreter}\necho '{{}}'\n")
    trial = tried(project, "PreToolUse", "./hook")
    expected = (
        f"{hook}: its #! interpreter {interpreter} is not an executable file, so every run "
        "fails with permission denied; name the interpreter's real path (`command -v` prints it)"
    )
    assert expected in trial["hooks"][0]["warnings"]
    assert expected in validated(project, "./hook")


def test_a_script_without_its_execute_bit_is_named_once(project: Path) -> None:
    hook = script(project, "hook.sh", "#!/bin/sh\necho '{}'\n", mode=0o644)
    expected = (
        f"{hook} is not executable; every run would fail with permission denied "
        f"(to fix: chmod +x {hook})"
    )
    assert expected in validated(project, "./hook.sh")
    # Run directly, the run's error names the fix, and the warning does not say it again.
    direct = tried(project, "PreToolUse", "./hook.sh")
    assert "chmod +x" in direct["hooks"][0]["error"]
    assert not any("chmod +x" in w for w in direct["hooks"][0]["warnings"])
    # Run by sh, the error is sh's own: the warning names the cause.
    shell = tried(project, "PreToolUse", "./hook.sh && true")
    assert "chmod +x" not in (shell["hooks"][0]["error"] or "")
    assert expected in shell["hooks"][0]["warnings"]

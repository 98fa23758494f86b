"""Trust covers every project file a hook can reach, however the command reaches it.

Each walk-around test trusts a hook, changes the code it reaches, fires an event through
`relay hooks run` (real processes), and checks that the changed code does not run and the
hook is reported untrusted; after `relay trust` again, it runs.
"""

from __future__ import annotations

import json
import os
import py_compile
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner

from relay.cli.main import cli
from relay.config import reach as reach_module
from relay.config import trust as trust_module
from relay.config.filecache import identity_of
from relay.config.model import HookEntry
from relay.config.reach import reach
from relay.config.review import visible
from relay.config.trust import TrustStore, assess, hook_key

PY = shlex.quote(sys.executable)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / ".git").mkdir(parents=True)  # a project root; not a git work tree
    return root


def invoke(args: list[str], stdin: str = "") -> Any:
    return CliRunner().invoke(cli, args, input=stdin)


def settings(project: Path, *hooks: dict[str, Any]) -> None:
    path = project / ".relay" / "settings.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hooks": {"SessionStart": [{"hooks": list(hooks)}]}}))


def write(path: Path, text: str, *, executable: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if executable:
        path.chmod(0o755)
    return path


def shell_script(says: str, marker: Path | None = None) -> str:
    """A script that prints `says` (the event's inject) and, if given, touches `marker`."""
    touch = f"touch {shlex.quote(str(marker))}\n" if marker else ""
    return f"#!/bin/sh\n{touch}echo {says}\n"


def fire(project: Path) -> dict[str, Any]:
    """SessionStart through `relay hooks run`: the merged result, and stderr."""
    result = invoke(["hooks", "run", "SessionStart", "--cwd", str(project)], "{}")
    assert result.exit_code == 0, result.output
    return {**json.loads(result.stdout), "stderr": result.stderr}


def trust(project: Path, *more: str) -> Any:
    result = invoke(["trust", "--yes", "--cwd", str(project), *more])
    assert result.exit_code == 0, result.output
    return result


def assert_skipped(project: Path, name: str, marker: Path) -> None:
    result = fire(project)
    assert result["inject"] is None
    assert result["untrusted"] == [name]
    assert f"untrusted project hook(s): {name}" in result["stderr"]
    assert not marker.exists(), "the changed code ran without trust"


def check_walk_around(project: Path, name: str, reached: Path, changed_code: str) -> None:
    """Trust, see the hook run, change `reached`, see it skipped, trust again, see it run."""
    trust(project)
    assert fire(project)["inject"] == "original"
    write(reached, changed_code, executable=True)
    assert_skipped(project, name, project.parent / "changed-ran")
    listed = trust(project)
    assert "changed  " in listed.stdout
    result = fire(project)
    assert (result["inject"], result["untrusted"]) == ("changed", [])
    assert (project.parent / "changed-ran").exists()


def check_refused(project: Path, name: str, *reasons: str) -> None:
    """`relay trust` will not trust the hook: it shows it as CANNOT TRUST with each reason
    (what it would run by path, and how to make it pinnable); the hook never runs."""
    refused = invoke(["trust", "--yes", "--cwd", str(project)])
    assert refused.exit_code == 1, refused.output
    assert f"CANNOT TRUST SessionStart  {name}" in refused.stdout, refused.stdout
    shown = " ".join(refused.stdout.split())
    for reason in (*reasons, "to pin it:"):
        assert reason in shown, shown
    assert f"cannot be trusted (see why above): {name}" in refused.stderr
    result = fire(project)
    assert (result["inject"], result["untrusted"]) == (None, [name])


# --- every way around the old fingerprint -----------------------------------------------


def test_a_glob(project: Path) -> None:
    script = write(project / "hooks" / "x1.sh", shell_script("original"))
    settings(project, {"name": "glob", "command": "sh hooks/x*.sh"})
    check_walk_around(
        project, "glob", script, shell_script("changed", project.parent / "changed-ran")
    )


def test_a_new_file_that_a_glob_matches(project: Path) -> None:
    write(project / "hooks" / "x1.sh", "#!/bin/sh\necho original\n")
    settings(project, {"name": "glob", "command": "for f in hooks/x*.sh; do sh $f; done"})
    # `$f` is a variable relay cannot resolve: the whole tree is fingerprinted; and relay
    # cannot pin what a `for` runs, so it is not trusted at all (issue 29, point 5).
    check_refused(project, "glob", "the compound command 'for'", "move the command into a script")


def test_a_nested_shell_string(project: Path) -> None:
    script = write(project / "hooks" / "x.sh", shell_script("original"))
    settings(project, {"name": "nested", "command": 'sh -c "sh hooks/x.sh"'})
    check_walk_around(
        project, "nested", script, shell_script("changed", project.parent / "changed-ran")
    )


def test_a_nested_string_in_exec_form(project: Path) -> None:
    script = write(project / "hooks" / "x.sh", shell_script("original"))
    settings(project, {"name": "exec", "command": "bash", "args": ["-lc", "sh hooks/x.sh"]})
    check_walk_around(
        project, "exec", script, shell_script("changed", project.parent / "changed-ran")
    )


def test_pwd(project: Path) -> None:
    script = write(project / "hooks" / "x.sh", shell_script("original"))
    settings(project, {"name": "pwd", "command": "sh $PWD/hooks/x.sh"})
    check_walk_around(
        project, "pwd", script, shell_script("changed", project.parent / "changed-ran")
    )


def test_an_expansion_relay_cannot_resolve(project: Path) -> None:
    script = write(project / "hooks" / "x.sh", shell_script("original"))
    settings(project, {"name": "default", "command": "sh ${X:-hooks}/x.sh"})
    check_walk_around(
        project, "default", script, shell_script("changed", project.parent / "changed-ran")
    )


def repository_ignoring_build(folder: Path) -> Path:
    """A git repository at `folder` whose .gitignore leaves out `build/`."""
    folder.mkdir()
    subprocess.run(["git", "init", "-q", str(folder)], check=True)
    write(folder / ".gitignore", "build/\n")
    return folder


def expanding_hook(project: Path, *, built: str) -> Path:
    """A hook `sub` whose command expands (so it reaches the whole project), its script,
    and a file `build/out.bin` holding `built`; the script's path. Its `reach` names
    hooks/: an expansion may name a git-ignored file, and the user pins where it runs
    code from."""
    script = write(project / "hooks" / "x.sh", shell_script("original"))
    write(project / "build" / "out.bin", built)
    command = {"name": "sub", "command": "sh $(echo hooks)/x.sh", "reach": ["hooks"]}
    settings(project, command)
    return script


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_repository_in_a_shared_temporary_folder_does_not_decide_what_is_fingerprinted(
    tmp_path: Path,
) -> None:
    # A repository anyone could have made in /tmp: its ignore rules must not hide a file of
    # a project below it (one with `.relay/` only) from the trust fingerprint.
    shared = repository_ignoring_build(tmp_path / "shared")
    shared.chmod(0o1777)
    project = shared / "project"
    expanding_hook(project, built="built")
    listed = trust(project).stdout
    assert "build/out.bin" in listed and "hooks/x.sh" in listed
    assert fire(project)["inject"] == "original"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_an_expansion_in_a_git_work_tree_lists_tracked_and_untracked_files(
    tmp_path: Path,
) -> None:
    project = repository_ignoring_build(tmp_path / "repo")
    script = expanding_hook(project, built="ignored")
    listed = trust(project).stdout
    assert "reaches the whole project (fingerprints every file) through: $(echo hooks)" in listed
    assert "hooks/x.sh" in listed and ".gitignore" in listed and "build/out.bin" not in listed
    assert fire(project)["inject"] == "original"
    write(project / "build" / "out.bin", "rebuilt")  # ignored: still trusted
    assert fire(project)["inject"] == "original"
    write(script, shell_script("changed", tmp_path / "changed-ran"))
    assert_skipped(project, "sub", tmp_path / "changed-ran")


def test_python_dash_m(project: Path) -> None:
    write(project / "hooks" / "__init__.py", "")
    module = write(project / "hooks" / "x.py", "print('original')\n")
    settings(project, {"name": "module", "command": f"{PY} -m hooks.x"})
    marker = project.parent / "changed-ran"
    check_walk_around(
        project, "module", module, f"open({str(marker)!r}, 'w').close()\nprint('changed')\n"
    )


def test_python_dash_m_of_a_package(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)  # hooks inherit relay's env
    write(project / "tool" / "__main__.py", "from tool import helper\nhelper.run()\n")
    helper = write(project / "tool" / "helper.py", "def run():\n    print('original')\n")
    settings(project, {"name": "package", "command": f"{PY} -m tool"})
    trust(project)
    assert fire(project)["inject"] == "original"
    # A pinned run compiles the checked copies and writes no cache; a run by path (or
    # another tool) writes tool/__pycache__: that alone does not untrust the hook.
    py_compile.compile(str(helper))
    assert any((project / "tool" / "__pycache__").iterdir())
    assert fire(project)["inject"] == "original"
    marker = project.parent / "changed-ran"
    write(helper, f"def run():\n    open({str(marker)!r}, 'w').close()\n    print('changed')\n")
    assert_skipped(project, "package", marker)


def test_an_unchecked_bytecode_file_is_code_to_review(project: Path) -> None:
    write(project / "tool" / "__main__.py", "from tool import helper\nhelper.run()\n")
    helper = write(project / "tool" / "helper.py", "def run():\n    print('original')\n")
    settings(project, {"name": "package", "command": f"{PY} -m tool"})
    trust(project)
    assert fire(project)["inject"] == "original"
    # A .pyc that Python runs without checking its source: the source stays as reviewed.
    marker = project.parent / "changed-ran"
    evil = write(project.parent / "evil.py", f"def run():\n    open({str(marker)!r}, 'w')\n")
    cache = project / "tool" / "__pycache__"
    tag = sys.implementation.cache_tag
    py_compile.compile(
        str(evil),
        cfile=str(cache / f"helper.{tag}.pyc"),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    assert helper.read_text() == "def run():\n    print('original')\n"
    assert_skipped(project, "package", marker)


def test_path_in_the_hook_env(project: Path) -> None:
    script = write(project / "bin" / "check", shell_script("original"), executable=True)
    settings(
        project,
        {"name": "path", "command": "check", "env": {"PATH": f"bin:{os.environ['PATH']}"}},
    )
    assert script.exists()
    check_refused(project, "path", "PATH in env: programs found on the PATH it sets")


def test_a_new_program_on_a_path_folder(project: Path) -> None:
    write(project / "bin" / "other", "#!/bin/sh\n", executable=True)
    settings(
        project,
        {"name": "path", "command": "check", "env": {"PATH": f"bin:{os.environ['PATH']}"}},
    )
    check_refused(project, "path", "keep the project off PATH")


def test_a_named_folder(project: Path) -> None:
    write(project / "hooks" / "lib.sh", "say() { echo original; }\n")
    settings(project, {"name": "folder", "command": "cd hooks && . ./lib.sh && say"})
    check_refused(project, "folder", ". ./lib.sh: a file the command sources is read by path")


# --- what relay trust shows --------------------------------------------------------------


def test_trust_lists_the_fingerprinted_files(project: Path) -> None:
    write(project / "hooks" / "x1.sh", "echo 1\n")
    write(project / "hooks" / "x2.sh", "echo 2\n")
    write(project / "hooks" / "y.sh", "echo y\n")
    settings(project, {"name": "glob", "command": "sh hooks/x*.sh"})
    listed = trust(project).stdout.splitlines()
    start = listed.index(" " * 13 + "fingerprints 2 file(s):")
    assert listed[start + 1 : start + 3] == [" " * 15 + "hooks/x1.sh", " " * 15 + "hooks/x2.sh"]
    assert "y.sh" not in "\n".join(listed)
    # Trusted now: listed again, with its files, and nothing to trust.
    again = trust(project).stdout
    assert again.startswith("trusted      SessionStart  glob")
    assert "hooks/x2.sh" in again and "all project hooks are trusted" in again


def test_a_long_list_is_cut_unless_all_files(project: Path) -> None:
    for number in range(25):
        write(project / "hooks" / f"h{number:02}.sh", "true\n")
    settings(project, {"name": "many", "command": "sh hooks/h*.sh"})
    result = invoke(["trust", "--cwd", str(project)])  # no terminal, no --yes: lists, refuses
    assert result.exit_code == 1
    assert "fingerprints 25 file(s)" in result.stdout
    assert "hooks/h19.sh" in result.stdout and "hooks/h20.sh" not in result.stdout
    assert "… and 5 more (--all-files lists them)" in result.stdout
    everything = invoke(["trust", "--all-files", "--cwd", str(project)])
    assert "hooks/h24.sh" in everything.stdout


def test_re_trust_shows_what_changed(project: Path) -> None:
    write(project / "hooks" / "a.sh", "echo one\necho two\necho three\n")
    write(project / "hooks" / "gone.sh", "echo gone\n")
    write(project / "hooks" / "blob.bin", "\0\1\2")
    settings(project, {"name": "folder", "command": "sh hooks/a.sh hooks"})
    trust(project)
    write(project / "hooks" / "a.sh", "echo one\necho TWO\necho three\n")
    (project / "hooks" / "gone.sh").unlink()
    write(project / "hooks" / "new.sh", "echo new\n")
    write(project / "hooks" / "blob.bin", "\0\1\2\3")
    shown = trust(project).stdout
    expected = [
        "changed since trusted at ",
        "  changed  hooks/a.sh",
        "    --- hooks/a.sh (trusted)",
        "    +++ hooks/a.sh (now)",
        "    @@ -1,3 +1,3 @@",
        "     echo one",
        "    -echo two",
        "    +echo TWO",
        "     echo three",
        "  changed  hooks/blob.bin",
        "    (binary or over the copy limit: 3 bytes -> 4 bytes)",
        "  removed  hooks/gone.sh",
        "  added    hooks/new.sh",
    ]
    lines = [line[13:] for line in shown.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith(expected[0]))
    assert lines[start + 1 : start + len(expected)] == expected[1:]


def test_a_changed_command_is_shown_against_the_previous_trust(project: Path) -> None:
    write(project / "hooks" / "a.sh", "echo a\n")
    settings(project, {"name": "guard", "command": "sh hooks/a.sh"})
    trust(project)
    settings(project, {"name": "guard", "command": "sh hooks/a.sh --loud"})
    shown = trust(project).stdout
    assert "command was: sh hooks/a.sh\n" in shown


def test_the_diff_makes_terminal_controls_visible(project: Path) -> None:
    write(project / "hooks" / "a.sh", "echo a\n")
    settings(project, {"name": "guard", "command": "sh hooks/a.sh"})
    trust(project)
    write(project / "hooks" / "a.sh", "echo a\x1b[2K\x1b[1A\n# \u202eevil\n")
    shown = trust(project).stdout
    assert "\x1b" not in shown and "\u202e" not in shown
    assert "+echo a^[[2K^[[1A" in shown and "<U+202E>evil" in shown
    assert visible("tab\tok") == "tab\tok"


def test_copies_and_manifests_are_private_and_do_not_pile_up(
    project: Path, relay_home: Path
) -> None:
    script = write(project / "hooks" / "a.sh", "echo 0\n")
    settings(project, {"name": "guard", "command": "sh hooks/a.sh"})
    for number in range(4):
        write(script, f"echo {number}\n")
        trust(project)
    (files,) = (relay_home / "state" / "trust").iterdir()
    assert oct(files.stat().st_mode & 0o777) == "0o700"
    manifests = list((files / "manifests").iterdir())
    copies = list((files / "copies").iterdir())
    assert len(manifests) == 1 and len(copies) == 1
    assert copies[0].read_text() == "echo 3\n"
    assert all(path.stat().st_mode & 0o777 == 0o600 for path in [*manifests, *copies])
    assert len(TrustStore().trusted(project)) == 1  # the latest trust replaced the others
    invoke(["trust", "--revoke", "--cwd", str(project)])
    assert not files.exists()  # nothing of the project's trust is left


def test_a_hook_that_reaches_too_much_is_refused(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reach_module, "MAX_FILES", 5)
    for number in range(6):
        write(project / "vendor" / f"f{number}.sh", "true\n")
    write(project / "hooks" / "ok.sh", "echo fine\n")
    settings(
        project,
        {"name": "greedy", "command": "sh vendor/f0.sh vendor"},
        {"name": "fine", "command": "sh hooks/ok.sh"},
    )
    result = invoke(["trust", "--yes", "--cwd", str(project)])
    assert result.exit_code == 1
    assert "CANNOT TRUST SessionStart  greedy" in result.stdout
    assert "why: it can reach more than 5 files (the folder vendor)" in result.stdout
    assert "trusted 1 hook(s)" in result.stdout
    assert "1 hook(s) cannot be trusted (see why above): greedy" in result.stderr
    fired = fire(project)
    assert (fired["inject"], fired["untrusted"]) == ("fine", ["greedy"])


# --- what a command reaches --------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "files", "tree"),
    [
        ("bash -lc \"bash -c 'sh hooks/x.sh'\"", ["hooks/x.sh"], []),
        ("eval 'sh hooks/x.sh'", ["hooks/x.sh"], []),
        ("sh -c 'sh hooks/x.sh' ignored", ["hooks/x.sh"], []),
        ("""echo '{"a":1,"b":2}' && sh hooks/x.sh > hooks/y.sh""", ["hooks/x.sh"], []),
        ('X=1 sh "$RELAY_PROJECT_DIR"/hooks/x.sh', ["hooks/x.sh"], []),
        ("sh ~/../../x.sh '$NOT_EXPANDED'", [], []),
        ("echo $HOME", ["hooks/x.sh", "hooks/y.sh"], ["$HOME"]),
        ("echo `date` {a,b}", ["hooks/x.sh", "hooks/y.sh"], ["`date`", "{a,b}"]),
        ("sh hooks/x.sh .", ["hooks/x.sh", "hooks/y.sh"], ["., the project folder"]),
    ],
)
def test_what_commands_reach(
    project: Path, command: str, files: list[str], tree: list[str]
) -> None:
    write(project / "hooks" / "x.sh", "echo x\n")
    write(project / "hooks" / "y.sh", "echo y\n")
    found = reach(HookEntry(command=command), project)
    assert [name for name in found.files if name.startswith("hooks/")] == files
    assert list(found.tree) == tree


def test_a_glob_outside_the_project_is_not_listed(project: Path) -> None:
    plan = reach_module.plan_reach(HookEntry(command="ls /usr/lib/*/* hooks/*.sh"), project)
    assert plan.globs == [("hooks/*.sh", str(project))]


def test_two_checkouts_keep_their_own_manifests(tmp_path: Path, relay_home: Path) -> None:
    """The same hooks in two checkouts share a fingerprint, not their files' stat identities."""
    checkouts = [tmp_path / "one", tmp_path / "two"]
    for root in checkouts:
        (root / ".git").mkdir(parents=True)
        write(root / "hooks" / "x.sh", "echo same\n")
        settings(root, {"name": "x", "command": "sh hooks/x.sh"})
        trust(root)
    store = TrustStore()
    assert store.trusted(checkouts[0]).keys() == store.trusted(checkouts[1]).keys()
    folders = relay_home / "state" / "trust"
    assert [len(list((f / "manifests").iterdir())) for f in folders.iterdir()] == [1, 1]
    invoke(["trust", "--revoke", "--cwd", str(checkouts[0])])
    assert len(list(folders.iterdir())) == 1
    assert store.known_files(
        checkouts[1], hook_key("SessionStart", None, HookEntry(command="sh hooks/x.sh"))
    )


def test_known_env_values_resolve(project: Path) -> None:
    write(project / "lib" / "x.sh", "echo x\n")
    entry = HookEntry(command="sh $DIR/x.sh", env={"DIR": "lib"})
    assert reach(entry, project).files == ("lib/x.sh",)


def test_modules_from_pythonpath_and_extension_modules(project: Path) -> None:
    write(project / "src" / "pkg" / "__init__.py", "")
    write(project / "src" / "pkg" / "fast.cpython-311-x86_64-linux-gnu.so", "binary")
    write(project / "src" / "pkg" / "fast.py", "")
    entry = HookEntry(command="python3", args=["-m", "pkg.fast"], env={"PYTHONPATH": "src"})
    assert set(reach(entry, project).files) == {
        "src/pkg/__init__.py",
        "src/pkg/fast.cpython-311-x86_64-linux-gnu.so",
        "src/pkg/fast.py",
    }


def test_odd_files_are_fingerprinted_without_hanging_or_crashing(project: Path) -> None:
    folder = project / "hooks"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "pipe")
    (folder / "loop").symlink_to(folder / "loop")
    (folder / "dangling").symlink_to(project / "nowhere")
    (folder / "up").symlink_to(project)  # a folder link: not followed, no cycle
    write(folder / "secret.sh", "echo s\n").chmod(0)
    assessed = assess("Stop", None, HookEntry(command="sh hooks/secret.sh hooks"), project)
    notes = {name: state.note for name, state in assessed.files.items()}
    assert notes["hooks/pipe"] == "not a regular file"
    assert notes["hooks/loop"].startswith("unreadable: ")
    assert notes["hooks/dangling"] == f"symbolic link to {project / 'nowhere'} (nothing there)"
    assert notes["hooks/up"] == f"symbolic link to {project}"
    if os.geteuid() != 0:  # root reads any file
        assert notes["hooks/secret.sh"].startswith("unreadable: ")
    assert assessed.digest is not None


def test_a_check_reads_only_the_files_changed_since_trust(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checks reuse the trusted hashes while a file's stat identity stays the same."""
    for number in range(3):
        write(project / "lib" / f"m{number}.sh", "true\n")
    entry = HookEntry(command="sh lib/m0.sh lib")
    first = assess("Stop", None, entry, project)
    # Files written just now are "racy" (no identity kept): as if they had settled.
    known = {
        name: msgspec.structs.replace(state, identity=identity_of((project / name).stat()))
        for name, state in first.files.items()
    }
    reads: list[str] = []
    read_state = trust_module._read_state
    monkeypatch.setattr(
        trust_module,
        "_read_state",
        lambda path, *rest: reads.append(path) or read_state(path, *rest),
    )
    assert assess("Stop", None, entry, project, known=known).digest == first.digest
    assert reads == []
    write(project / "lib" / "m1.sh", "false\n")
    assert assess("Stop", None, entry, project, known=known).digest != first.digest
    assert reads == [str(project / "lib" / "m1.sh")]


def test_first_trust_shows_what_the_hook_would_run(project: Path) -> None:
    write(project / "hooks" / "a.sh", "echo one\nprintf '\\033]52;c;x\\007'\n")
    write(project / "hooks" / "long.sh", "".join(f"echo {n}\n" for n in range(50)))
    settings(
        project,
        {"name": "a", "command": "sh hooks/a.sh"},
        {"name": "long", "command": "sh hooks/long.sh"},
    )
    shown = trust(project).stdout
    assert "--- hooks/a.sh (2 line(s)):" in shown
    assert "  echo one" in shown and "\x1b" not in shown  # shown, controls made visible
    assert "--- hooks/long.sh (50 line(s)):" in shown
    assert "echo 39" in shown and "echo 40" not in shown
    assert "… 10 more line(s) (--all-files shows them all)" in shown
    again = trust(project).stdout  # trusted now: nothing to read again
    assert "--- hooks/a.sh" not in again


def test_revoke_counts_this_projects_current_hooks(project: Path) -> None:
    write(project / "hooks" / "a.sh", "echo one\n")
    settings(project, {"name": "a", "command": "sh hooks/a.sh"})
    trust(project)
    write(project / "hooks" / "a.sh", "echo two\n")
    trust(project)  # the earlier trust is replaced, not kept
    settings(project, {"name": "a", "command": "sh hooks/a.sh"}, {"name": "b", "command": "true"})
    result = invoke(["trust", "--revoke", "--cwd", str(project)])
    assert result.exit_code == 0
    assert result.stdout == f"revoked trust in 1 hook(s) of {project}\n"


def test_revoke_names_the_records_of_hooks_no_longer_there(project: Path) -> None:
    settings(project, {"name": "a", "command": "true"}, {"name": "b", "command": "false"})
    trust(project)
    settings(project, {"name": "a", "command": "true"})
    result = invoke(["trust", "--revoke", "--cwd", str(project)])
    assert result.stdout == (
        f"revoked trust in 1 hook(s) of {project}"
        " (and 1 older record(s) of hooks since changed or removed)\n"
    )


def test_trust_in_json_reviews_and_trusts_only_with_yes(project: Path) -> None:
    write(project / "hooks" / "a.sh", "echo one\n")
    settings(project, {"name": "a", "command": "sh hooks/a.sh"})
    listed = invoke(["trust", "--json", "--cwd", str(project)])
    assert listed.exit_code == 0, listed.output
    review = json.loads(listed.stdout)
    assert review["trusted_now"] == 0
    (hook,) = review["hooks"]
    assert (hook["name"], hook["state"], hook["files"]) == ("a", "not-trusted", ["hooks/a.sh"])
    granted = json.loads(invoke(["trust", "--json", "--yes", "--cwd", str(project)]).stdout)
    assert granted["trusted_now"] == 1
    write(project / "hooks" / "a.sh", "echo two\n")
    changed = json.loads(invoke(["trust", "--json", "--cwd", str(project)]).stdout)
    assert changed["hooks"][0]["changed"]["lines"][0] == "changed  hooks/a.sh"
    revoked = json.loads(invoke(["trust", "--revoke", "--json", "--cwd", str(project)]).stdout)
    assert revoked == {"root": str(project), "revoked": 0, "older": 1}


# --- what interpreters and tools load by themselves (issue 29, point 4) -----------------

MARKER_PY = "open({marker!r}, 'w').close()\nprint('changed')\n"
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="needs node")


def python_changed(project: Path) -> str:
    return MARKER_PY.format(marker=str(project.parent / "changed-ran"))


def node_changed(project: Path) -> str:
    marker = json.dumps(str(project.parent / "changed-ran"))
    return f"require('fs').writeFileSync({marker}, '');\nconsole.log('changed');\n"


def test_a_python_c_string_imports_a_module(project: Path) -> None:
    write(project / "helper.py", "print('original')\n")
    settings(project, {"name": "c", "command": f'{PY} -c "import helper"'})
    check_refused(project, "c", "-c import helper: the interpreter loads the project files")


def test_a_python_import_beside_the_script(project: Path) -> None:
    write(project / "hooks" / "x.py", "import helper\nhelper.run()\n")
    helper = write(project / "hooks" / "helper.py", "def run():\n    print('original')\n")
    settings(project, {"name": "import", "command": f"{PY} hooks/x.py"})
    changed = "def run():\n    " + python_changed(project).replace("\n", "\n    ")
    check_walk_around(project, "import", helper, changed)


def test_a_python_import_through_a_package_and_sys_path(project: Path) -> None:
    write(
        project / "hooks" / "x.py",
        "import os, sys\n"
        "sys.path.insert(0, os.path.join(os.path.dirname(__file__), 'lib'))\n"
        "from pkg import run\nrun()\n",
    )
    write(project / "hooks" / "lib" / "pkg" / "__init__.py", "from deep import run\n")
    deep = write(project / "hooks" / "lib" / "deep.py", "def run():\n    print('original')\n")
    settings(project, {"name": "path", "command": f"{PY} hooks/x.py"})
    changed = "def run():\n    " + python_changed(project).replace("\n", "\n    ")
    check_walk_around(project, "path", deep, changed)


def test_a_module_that_appears_beside_the_script(project: Path) -> None:
    write(
        project / "hooks" / "x.py",
        "try:\n    import plugin\nexcept ImportError:\n    print('original')\n",
    )
    settings(project, {"name": "plugin", "command": f"{PY} hooks/x.py"})
    trust(project)
    assert fire(project)["inject"] == "original"
    marker = project.parent / "changed-ran"
    write(project / "hooks" / "plugin.py", python_changed(project))
    assert_skipped(project, "plugin", marker)


@needs_node
def test_a_node_e_string_requires_a_file(project: Path) -> None:
    write(project / "lib" / "x.js", "console.log('original');\n")
    settings(project, {"name": "e", "command": """node -e "require('./lib/x')" """})
    check_refused(project, "e", "put the code in a script the hook runs")


@needs_node
def test_a_node_require_beside_the_script(project: Path) -> None:
    write(project / "hooks" / "x.js", "require('./lib');\n")
    lib = write(project / "hooks" / "lib.js", "console.log('original');\n")
    settings(project, {"name": "require", "command": "node hooks/x.js"})
    check_walk_around(project, "require", lib, node_changed(project))


@needs_node
def test_node_options_in_the_hook_env(project: Path) -> None:
    write(project / "hooks" / "x.js", "")
    write(project / "hooks" / "pre.js", "console.log('original');\n")
    settings(
        project,
        {
            "name": "options",
            "command": "node hooks/x.js",
            "env": {"NODE_OPTIONS": "--require ./hooks/pre.js"},
        },
    )
    check_refused(project, "options", "NODE_OPTIONS makes the program load it by path")


def test_bash_env_in_the_hook_env(project: Path) -> None:
    write(project / "hooks" / "x.sh", "true\n")
    write(project / "hooks" / "env.sh", "echo original\n")
    settings(
        project,
        {"name": "bash-env", "command": "bash hooks/x.sh", "env": {"BASH_ENV": "hooks/env.sh"}},
    )
    check_refused(project, "bash-env", "BASH_ENV in env: BASH_ENV=hooks/env.sh")


def test_a_file_a_script_sources(project: Path) -> None:
    write(project / "hooks" / "x.sh", '. "$(dirname "$0")/lib.sh"\nsay\n')
    write(project / "hooks" / "lib.sh", "say() { echo original; }\n")
    settings(project, {"name": "source", "command": "sh hooks/x.sh"})
    check_refused(
        project, "source", "hooks/x.sh: loads hooks/lib.sh: the shell reads a file it sources"
    )


def test_a_computed_source_is_refused_even_when_reach_names_its_folder(project: Path) -> None:
    """`reach` pins what relay cannot name, for the fingerprint; the shell still reads the
    file by path when it gets there, so the hook cannot be trusted."""
    write(project / "hooks" / "x.sh", '. "$LIB/x.sh"\nsay\n')
    write(project / "lib" / "x.sh", "say() { echo original; }\n")
    settings(project, {"name": "source", "command": "sh hooks/x.sh", "reach": ["lib"]})
    check_refused(project, "source", 'hooks/x.sh:1: . "$LIB/x.sh"', "the shell reads a file it")


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_make_target_and_its_makefile(project: Path) -> None:
    write(project / "hooks" / "x.sh", "echo original\n")
    write(project / "Makefile", "hook: prepare\n\t@sh hooks/x.sh\nprepare:\n\t@true\n")
    settings(project, {"name": "make", "command": "make -s hook"})
    check_refused(project, "make", "make -s hook: make reads its Makefile")


@pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm")
def test_an_npm_script_and_its_package_json(project: Path) -> None:
    write(project / "hooks" / "x.sh", "echo original\n")
    write(project / "package.json", json.dumps({"scripts": {"hook": "sh hooks/x.sh"}}))
    settings(project, {"name": "npm", "command": "npm run --silent hook"})
    check_refused(project, "npm", "npm run --silent: the package tool reads package.json")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_an_expansion_that_may_name_a_git_ignored_file_is_pinned_by_reach(
    tmp_path: Path,
) -> None:
    project = repository_ignoring_build(tmp_path / "repo")
    write(project / "build" / "hook.sh", "echo original\n")
    write(project / "hooks" / "which", "build/hook.sh\n")
    hook: dict[str, Any] = {"name": "cat", "command": "sh $(cat hooks/which)"}
    settings(project, hook)
    refused = invoke(["trust", "--yes", "--cwd", str(project)])
    assert refused.exit_code == 1
    assert "CANNOT TRUST SessionStart  cat" in refused.stdout
    assert "may name a git-ignored file, which the project's tree leaves out (build/)" in (
        refused.stdout
    )
    assert 'to pin it: name the folders it loads code from in the hook\'s "reach" field' in (
        refused.stdout
    )
    assert '"reach": ["build"]' in refused.stdout
    settings(project, {**hook, "reach": ["build"]})
    listed = trust(project).stdout
    assert 'pinned by its "reach" (build)' in listed and "build/hook.sh" in listed
    assert fire(project)["inject"] == "original"
    marker = tmp_path / "changed-ran"
    write(project / "build" / "hook.sh", shell_script("changed", marker))
    assert_skipped(project, "cat", marker)


def test_a_dynamic_import_is_unpinned_until_reach_names_its_folder(project: Path) -> None:
    write(
        project / "hooks" / "x.py",
        "import importlib, sys\nsys.path.insert(0, 'plugins')\n"
        "importlib.import_module(sys.argv[1]).run()\n",
    )
    plugin = write(project / "plugins" / "plugin.py", "def run():\n    print('original')\n")
    hook: dict[str, Any] = {"name": "dyn", "command": f"{PY} hooks/x.py plugin"}
    settings(project, hook)
    refused = invoke(["trust", "--yes", "--cwd", str(project)])
    assert refused.exit_code == 1
    lines = [line.strip() for line in refused.stdout.splitlines()]
    assert "why: relay cannot pin what it loads:" in lines
    assert (
        "hooks/x.py:3: importlib.import_module(sys.argv[1]): a module name relay "
        "cannot compute" in lines
    )
    assert any('"reach": ["hooks"]' in line for line in lines)
    assert fire(project)["untrusted"] == ["dyn"]
    review = json.loads(invoke(["trust", "--json", "--cwd", str(project)]).stdout)
    assert review["hooks"][0]["state"] == "cannot-trust"
    assert review["hooks"][0]["unpinned"][0]["place"] == "hooks/x.py:3"
    settings(project, {**hook, "reach": ["plugins"]})
    changed = "def run():\n    " + python_changed(project).replace("\n", "\n    ")
    check_walk_around(project, "dyn", plugin, changed)


PKG = ["pkg/__init__.py", "pkg/__main__.py", "pkg/mod.py"]


@pytest.mark.parametrize(
    ("command", "env", "files", "unpinned"),
    [
        ("python3 -c 'import a'", {}, ["a.py"], []),
        ("python3 -m pkg", {}, PKG, []),
        ("python3 -W ignore -c 'exec(\"import a\")'", {}, ["a.py"], []),
        ("python3 -Bc 'import a'", {}, ["a.py"], []),
        ("uv run --with x python -c 'import a'", {}, ["a.py"], []),
        ("python3 -c 'import b' ", {"PYTHONPATH": "lib"}, ["lib/b.py", "lib/c.py", "lib/x.so"], []),
        ("python3 -c '__import__(x)'", {}, [], ["the command:1"]),
        ('python3 -c \'__import__("a" + "")\'', {}, ["a.py"], []),
        ("python3 s/paths.py", {"LIB": "lib"}, ["lib/b.py", "lib/c.py", "s/paths.py"], []),
        ("python3 s/paths.py", {}, ["s/paths.py"], ["s/paths.py:2"]),
        ("node js/dirname.js", {}, ["js/a.js", "js/dirname.js"], []),
        ("python3 broken.py", {}, ["broken.py"], ["broken.py:1"]),
        ("node -p 'require(`./${a}`)'", {}, [], ["the command:1"]),
        ("node -p 'require(x)'", {}, [], ["the command:1"]),
        ("node -p 'require(`./a`)'", {}, ["a.py"], []),
        (
            "node -e 'require(\"./js/\" + name)'",
            {},
            ["js/a.js", "js/b.mjs", "js/c.cjs", "js/dirname.js"],
            [],
        ),
        ("python3 -c 'import importlib as i; i.import_module(f\"pkg.{x}\")'", {}, PKG, []),
        ("python3 -c 'runpy.run_path(\"lib/\" + x)'", {}, ["lib/b.py", "lib/c.py", "lib/x.so"], []),
        (
            "sh s/plugins.sh",
            {},
            ["s/helper.py", "s/lib.sh", "s/paths.py", "s/plugins.sh", "s/run.sh", "s/tool"],
            ["s/run.sh:2"],
        ),
        ("node -r ./js/a js/b.mjs", {}, ["js/a.js", "js/b.mjs", "js/c.cjs"], []),
        ("true", {"LD_PRELOAD": "lib/x.so", "PYTHONSTARTUP": "a.py"}, ["a.py", "lib/x.so"], []),
        ("env PERL5OPT=-Ilib perl -e 1", {}, ["lib/b.py", "lib/c.py", "lib/x.so"], []),
        ("timeout 5 bash -o pipefail s/run.sh", {}, ["s/lib.sh", "s/run.sh"], ["s/run.sh:2"]),
        ("./s/tool", {}, ["s/helper.py", "s/tool"], []),
    ],
)
def test_what_programs_load(
    project: Path, command: str, env: dict[str, str], files: list[str], unpinned: list[str]
) -> None:
    write(project / "a.py", "x = 1\n")
    write(project / "broken.py", "import (\n")
    write(project / "pkg" / "__init__.py", "")
    write(project / "pkg" / "__main__.py", "from pkg import mod\n")
    write(project / "pkg" / "mod.py", "")
    write(project / "lib" / "b.py", "import c\n")
    write(project / "lib" / "c.py", "")
    write(project / "lib" / "x.so", "\0binary")
    write(project / "js" / "a.js", "")
    write(project / "js" / "b.mjs", "import c from './c.cjs';\n")
    write(project / "js" / "c.cjs", "")
    write(project / "s" / "run.sh", "source s/lib.sh\n. $UNKNOWN/x.sh\n")
    write(project / "s" / "lib.sh", "")
    write(project / "s" / "tool", "#!/usr/bin/env python3\nimport helper\n")
    write(project / "s" / "helper.py", "")
    write(
        project / "s" / "paths.py",
        "import os, sys\nsys.path.insert(0, os.path.join(os.environ['RELAY_PROJECT_DIR'],"
        " os.getenv('LIB')))\nimport b\n",
    )
    write(project / "js" / "dirname.js", "require(path.join(__dirname, 'a'))\n")
    write(project / "s" / "plugins.sh", 'for p in x; do . "$(dirname "$0")/$p"; done\n')
    found = reach(HookEntry(command=command, env=env), project)
    assert [name for name in found.files if not name.startswith(".")] == files
    assert [item.place for item in found.unpinned] == unpinned
    assert (found.refusal is None) == (not unpinned and not found.by_path)


def test_hostile_sources_neither_crash_nor_hang(project: Path) -> None:
    write(project / "deep.py", "import sys\nsys.path.insert(0, " + "'a'/" * 5000 + "'b')\n")
    write(project / "nested.py", "import os\nx = " + "(" * 300 + ")" * 300 + "\n")
    os.mkfifo(project / "fifo.py")
    write(project / "bad.sh", ". '\n\0\xff")
    write(project / "Makefile", "a: a\n\t$(A)\nA = $(B)\nB = $(A)\n")
    entry = HookEntry(command=f"{PY} deep.py nested.py fifo.py && sh bad.sh && make a")
    found = reach(entry, project)
    assert "deep.py" in found.files and "Makefile" in found.files
    assert {item.place for item in found.unpinned} >= {"deep.py", "nested.py:2"}


def test_make_includes_and_recursive_make(project: Path) -> None:
    write(project / "Makefile", "include mk/common.mk\nall:\n\t$(MAKE) go\n")
    write(project / "mk" / "common.mk", "go: $(DEP)\n\tsh run.sh\nother:\n\tsh never.sh\nDEP = d\n")
    for name in ("run.sh", "never.sh", "d"):
        write(project / name, "")
    found = reach(HookEntry(command="make"), project)
    assert found.files == ("Makefile", "d", "mk/common.mk", "run.sh")
    write(project / "Makefile", "export V != sh gen.sh\nW := $(shell sh w.sh)\nall:\n")
    write(project / "gen.sh", "")
    write(project / "w.sh", "")
    found = reach(HookEntry(command="make"), project)
    assert [name for name in found.files if name.endswith(".sh")] == ["gen.sh", "w.sh"]
    write(project / "Makefile", "all:\n\t@echo $$HOME\n")
    assert reach(HookEntry(command="make"), project).tree == ("$HOME",)  # $$ is the shell's
    write(project / "sub" / "Makefile", "all:\n\tsh ../never.sh\n")  # make runs in sub/
    found = reach(HookEntry(command="cd sub && make"), project)
    assert found.files == ("Makefile", "never.sh", "sub/Makefile")
    write(project / "Makefile", "include mk/$(NAME).mk\nall:\n")
    (item,) = reach(HookEntry(command="make"), project).unpinned
    assert (item.place, item.what) == (
        "Makefile",
        "include mk/$(NAME).mk: a file relay cannot name",
    )


def test_npm_reads_the_files_that_make_it_load_code(project: Path) -> None:
    write(project / "package.json", json.dumps({"scripts": {"t": "node js/t.js"}}))
    write(project / ".npmrc", "node-options=--require ./js/pre.js\n")
    write(project / "js" / "pre.js", "require('./more')\n")
    write(project / "js" / "more.js", "")
    write(project / "js" / "t.js", "")
    write(project / "node_modules" / ".bin" / "tool", "#!/usr/bin/env node\nrequire('lodash')\n")
    write(project / "node_modules" / "lodash" / "index.js", "")
    found = reach(HookEntry(command="npm run t"), project).files
    assert found == (".npmrc", "js/more.js", "js/pre.js", "js/t.js", "package.json")
    found = reach(HookEntry(command="npx tool"), project).files
    assert "node_modules/.bin/tool" in found and "node_modules/lodash/index.js" in found


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_ignored_bytecode_caches_do_not_unpin_an_expansion(tmp_path: Path) -> None:
    project = repository_ignoring_build(tmp_path / "repo")
    write(project / ".gitignore", "__pycache__/\n")
    write(project / "hooks" / "x.sh", shell_script("original"))
    write(project / "tool" / "m.py", "")
    py_compile.compile(
        str(project / "tool" / "m.py"), cfile=str(project / "tool" / "__pycache__" / "m.pyc")
    )
    settings(project, {"name": "sub", "command": "sh $(echo hooks)/x.sh"})
    trust(project)
    assert fire(project)["inject"] == "original"
    # An unchecked .pyc runs whatever it holds: an ignored file the expansion may name.
    py_compile.compile(
        str(project / "tool" / "m.py"),
        cfile=str(project / "tool" / "__pycache__" / "m.pyc"),
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    refused = invoke(["trust", "--yes", "--cwd", str(project)])
    assert refused.exit_code == 1 and "(tool/__pycache__/)" in refused.stdout


def test_long_hostile_lines_cost_one_pass(project: Path) -> None:
    """Readers are linear in what they read: a long line without the token a pattern waits
    for does not make relay backtrack over it (a Makefile line of 400,000 spaces took
    minutes with a lazy pattern)."""
    write(project / "Makefile", "a" + " " * 400_000 + "b\nall:\n\tsh x.sh\n")
    write(project / "x.sh", ". " + "$" * 400_000 + "\n")
    write(project / "x.js", "require(" * 60_000)
    entry = HookEntry(command="make && node x.js")
    found = reach(entry, project)
    assert "x.sh" in found.files and "x.js" in found.files
    assert [item.place for item in found.unpinned] == ["x.sh:1"]

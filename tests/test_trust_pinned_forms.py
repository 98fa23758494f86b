"""Every form a trusted hook's code reaches is pinned or refused (issue 29, points 4 and 5).

For each form that relay used to run by its path once trusted (make, npm, npx, uv run, a
sourced file, a command relay cannot read, zsh/ksh strings, a PATH into the project; and
the modules a script imports beside it), a real process renames an untrusted version
over the file in a loop while SessionStart fires as `relay hooks run` fires it: the
untrusted text never runs. A form relay pins still runs as trusted and answers as when
run by its path; a form it refuses is shown by `relay trust` with the reason and the way
to make it pinnable, and never runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner
from test_trust_pinned import _runs, fire, fire_until, race, register, swapping, trust_all, write

from relay.cli.main import cli
from relay.engine.system import HookSystem

NODE = shutil.which("node")
NPM = shutil.which("npm")
MAKE = shutil.which("make")
UV = shutil.which("uv")
ZSH = shutil.which("zsh")
KSH = shutil.which("ksh") or shutil.which("mksh")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / "hooks").mkdir()
    return root


@dataclass
class Form:
    """A hook whose command reaches `target`, and the two versions swapped over it: the
    trusted one makes the hook print `trusted`; the untrusted one appends to {marker}."""

    command: str
    target: str
    trusted: str
    untrusted: str
    files: dict[str, str] = field(default_factory=dict)
    """Other project files, as written."""
    env: dict[str, str] = field(default_factory=dict)
    executable: bool = False
    calls: int = 200
    """Calls while the swap runs, for a pinned form (each starts the hook's process)."""


def sh_text(says: str, marker: str | None = None) -> str:
    append = f"echo untrusted >> '{marker}'\n" if marker else ""
    return f"#!/bin/sh\n{append}echo {says}\n"


def make_form() -> Form:
    return Form(
        command="make -s hook",
        target="Makefile",
        trusted="hook:\n\t@echo trusted\n",
        untrusted="hook:\n\t@echo untrusted >> '{marker}'; echo untrusted\n",
    )


def make_script_form() -> Form:
    """A make target whose recipe runs a project script: make runs it by path."""
    return Form(
        command="make -s hook",
        target="hooks/guard.sh",
        trusted=sh_text("trusted"),
        untrusted=sh_text("untrusted", "{marker}"),
        files={"Makefile": "hook:\n\t@sh hooks/guard.sh\n"},
    )


def make_recursive_form() -> Form:
    """A recipe that runs make again: that make reads the Makefile by path."""
    return Form(
        command="make -s hook",
        target="Makefile",
        trusted="hook:\n\t@$(MAKE) -s inner\ninner:\n\t@echo trusted\n",
        untrusted="hook:\n\t@$(MAKE) -s inner\ninner:\n\t@echo untrusted >> '{marker}'\n",
    )


def npm_form() -> Form:
    return Form(
        command="npm run --silent hook",
        target="package.json",
        trusted=json.dumps({"scripts": {"hook": "echo trusted"}}),
        untrusted=json.dumps({"scripts": {"hook": "echo untrusted >> '{marker}'; echo untrusted"}}),
        calls=40,
    )


def npx_form() -> Form:
    return Form(
        command="npx --no-install tool",
        target="node_modules/.bin/tool",
        trusted=sh_text("trusted"),
        untrusted=sh_text("untrusted", "{marker}"),
        files={"package.json": "{}"},
        executable=True,
        calls=40,
    )


def uv_form() -> Form:
    return Form(
        command="uv run --no-project --offline hooks/guard.py",
        target="hooks/guard.py",
        trusted="print('trusted')\n",
        untrusted="open({marker!r}, 'a').write('untrusted'); print('untrusted')\n",
        env={"UV_CACHE_DIR": "{cache}"},
        calls=60,
    )


REFUSED_FORMS = [
    pytest.param(
        make_script_form(),
        "make -s hook: make reads its Makefile, and its recipes run scripts, by path",
        id="make-recipe-runs-a-script",
        marks=pytest.mark.skipif(MAKE is None, reason="needs make"),
    ),
    pytest.param(
        make_recursive_form(),
        "make -s hook: make reads its Makefile",
        id="make-runs-make",
        marks=pytest.mark.skipif(MAKE is None, reason="needs make"),
    ),
    pytest.param(
        npm_form(),
        "npm run --silent: the package tool reads package.json",
        id="npm-run",
        marks=pytest.mark.skipif(NPM is None, reason="needs npm"),
    ),
    pytest.param(
        npx_form(),
        "npx --no-install tool: the package tool runs node_modules programs by path",
        id="npx",
        marks=pytest.mark.skipif(NPM is None, reason="needs npm"),
    ),
    pytest.param(
        uv_form(),
        "uv run --no-project: the runner opens the script by path",
        id="uv-run",
        marks=pytest.mark.skipif(UV is None, reason="needs uv"),
    ),
    pytest.param(
        Form(
            command='. ./hooks/env.sh && echo "$SAID"',
            target="hooks/env.sh",
            trusted="SAID=trusted\n",
            untrusted="echo untrusted >> '{marker}'\nSAID=untrusted\n",
        ),
        ". ./hooks/env.sh: a file the command sources is read by path",
        id="command-sources",
    ),
    pytest.param(
        Form(
            command="sh hooks/guard.sh",
            target="hooks/lib.sh",
            trusted="say() { echo trusted; }\n",
            untrusted="say() { echo untrusted >> '{marker}'; echo untrusted; }\n",
            files={"hooks/guard.sh": '. "$(dirname "$0")/lib.sh"\nsay\n'},
        ),
        "hooks/guard.sh: loads hooks/lib.sh: the shell reads a file it sources by path",
        id="script-sources",
    ),
    pytest.param(
        Form(
            command="if true; then ./hooks/guard.sh; fi",
            target="hooks/guard.sh",
            trusted=sh_text("trusted"),
            untrusted=sh_text("untrusted", "{marker}"),
            executable=True,
        ),
        "relay cannot rewrite this command soundly (the compound command 'if')",
        id="unreadable-command",
    ),
    pytest.param(
        Form(
            command="zsh -c './hooks/guard.sh'",
            target="hooks/guard.sh",
            trusted=sh_text("trusted"),
            untrusted=sh_text("untrusted", "{marker}"),
            executable=True,
        ),
        "the scripts a zsh -c string runs are run by path",
        id="zsh-c",
        marks=pytest.mark.skipif(ZSH is None, reason="needs zsh"),
    ),
    pytest.param(
        Form(
            command=f"{os.path.basename(KSH or 'ksh')} -c './hooks/guard.sh'",
            target="hooks/guard.sh",
            trusted=sh_text("trusted"),
            untrusted=sh_text("untrusted", "{marker}"),
            executable=True,
        ),
        "-c string runs are run by path",
        id="ksh-c",
        marks=pytest.mark.skipif(KSH is None, reason="needs ksh"),
    ),
    pytest.param(
        Form(
            command="guard",
            target="hooks/bin/guard",
            trusted=sh_text("trusted"),
            untrusted=sh_text("untrusted", "{marker}"),
            env={"PATH": f"hooks/bin:{os.environ['PATH']}"},
            executable=True,
        ),
        "PATH in env: programs found on the PATH it sets are run by path",
        id="path-into-the-project",
    ),
    pytest.param(
        Form(
            command=f"{sys.executable} -c 'import helper; helper.say()'",
            target="helper.py",
            trusted="def say():\n    print('trusted')\n",
            untrusted=(
                "def say():\n    open({marker!r}, 'a').write('untrusted'); print('untrusted')\n"
            ),
        ),
        "the interpreter loads the project files its code string imports by path",
        id="python-c-imports",
    ),
]


def set_up(project: Path, tmp_path: Path, form: Form) -> tuple[Path, Path, Path]:
    """The project with the trusted version in place: (trusted, untrusted, target)."""
    marker = str(tmp_path / "marker")

    def fill(text: str) -> str:
        text = text.replace("{marker!r}", repr(marker)).replace("{marker}", marker)
        return text.replace("{cache}", str(tmp_path / "cache"))

    for name, text in form.files.items():
        write(project / name, text, executable=True)
    trusted = write(tmp_path / "versions" / "trusted", form.trusted, executable=form.executable)
    untrusted = write(
        tmp_path / "versions" / "untrusted", fill(form.untrusted), executable=form.executable
    )
    target = project / form.target
    put(trusted, target)
    env = {name: fill(value) for name, value in form.env.items()}
    register(project, {"name": "guard", "command": form.command, "env": env})
    return trusted, untrusted, target


def put(version: Path, target: Path) -> None:
    """A copy of `version` at `target` (not a link to it: the swap loop links)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    shutil.copy2(version, target)


def trust_as_before(project: Path) -> None:
    """Record each project hook's fingerprint as relay recorded it before it refused what
    runs by path: the files it reaches, whatever opens them."""
    from relay.config.reach import plan_reach
    from relay.config.trust import TrustStore, assess
    from relay.engine.system import HookSystem

    system = HookSystem(cwd=project, telemetry=False)
    fingerprints = []
    for hook in system.registry.untrusted:
        assert hook.entry is not None
        plan = plan_reach(hook.entry, project)
        if hasattr(plan, "by_path"):
            plan.by_path.clear()  # what this change refuses
        assessed = assess(hook.event, hook.matcher.text, hook.entry, project, plan=plan)
        assert assessed.digest is not None, assessed.refusal
        fingerprints.append((assessed.digest, hook.name))
    system.close()
    assert fingerprints
    TrustStore().trust(project, fingerprints)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("form", "why"), REFUSED_FORMS)
def test_a_form_relay_cannot_pin_never_runs_a_swapped_file(
    project: Path, tmp_path: Path, form: Form, why: str
) -> None:
    trusted, untrusted, target = set_up(project, tmp_path, form)
    # Trusted as the fingerprint alone let an older relay trust it: it ran by path.
    trust_as_before(project)
    marker = tmp_path / "marker"
    results: list[str | None] = []

    def call() -> str | None:
        """A SessionStart call as `fire` makes it; "refused" when relay refused the hook
        as written, not as changed since trusted (its check read the trusted version):
        a call that ran the file by its path before relay refused these forms."""
        system = HookSystem(cwd=project, telemetry=False)
        try:
            results.append(system.run("SessionStart", {}).inject)
            return "refused" if "guard" in system.registry.refused_names() else None
        finally:
            system.close()

    with swapping(trusted, untrusted, target, tmp_path / "stop"):
        # Refused, a call starts no process: the outcome is decided before anything could
        # be read by path, so up to 300 calls (about a third of a second, with a busy
        # swapper beside them on a shared machine) show it as well as more would, fewer
        # once 20 were refused as written and one was not (its check read the swapped-in
        # version: the swap went on during the calls).
        race(call, "refused", 300, most=1)
    assert not marker.exists(), _runs(results, marker)
    assert set(results) == {None}, set(results)
    # relay trust says why it cannot trust it, and how to make it pinnable.
    put(trusted, target)
    shown = CliRunner().invoke(cli, ["trust", "--yes", "--cwd", str(project)])
    assert shown.exit_code == 1, shown.output
    text = " ".join(shown.stdout.split())
    assert "CANNOT TRUST SessionStart guard" in text, text
    assert why in text and "to pin it:" in text, text
    assert "cannot be trusted (see why above): guard" in shown.stderr


# ---- forms relay pins: the imports of a trusted script ----------------------------------

PYTHON_GUARD = """\
import helper
print(helper.said(), helper.__file__ == __import__("os").path.join(
    __import__("os").path.dirname(__file__), "helper.py"))
"""

PINNED_FORMS = [
    pytest.param(
        make_form(),
        "trusted",
        id="make-from-its-checked-makefile",
        marks=pytest.mark.skipif(MAKE is None, reason="needs make"),
    ),
    pytest.param(
        Form(
            command=f"{sys.executable} hooks/guard.py",
            target="hooks/helper.py",
            trusted="def said():\n    return 'trusted'\n",
            untrusted=(
                "def said():\n    open({marker!r}, 'a').write('untrusted'); return 'untrusted'\n"
            ),
            files={"hooks/guard.py": PYTHON_GUARD},
        ),
        "trusted True",
        id="python-import-beside",
    ),
    pytest.param(
        Form(
            command=f"{sys.executable} hooks/guard.py | cat",
            target="hooks/helper.py",
            trusted="def said():\n    return 'trusted'\n",
            untrusted=(
                "def said():\n    open({marker!r}, 'a').write('untrusted'); return 'untrusted'\n"
            ),
            files={"hooks/guard.py": PYTHON_GUARD},
        ),
        "trusted True",
        id="python-import-in-a-shell-command",
    ),
    pytest.param(
        Form(
            command=f"{sys.executable} hooks/guard.py",
            target="hooks/lib/pkg/deep.py",
            trusted="def said():\n    return 'trusted'\n",
            untrusted=(
                "def said():\n    open({marker!r}, 'a').write('untrusted'); return 'untrusted'\n"
            ),
            files={
                "hooks/guard.py": (
                    "import os, sys\n"
                    "sys.path.insert(0, os.path.join(os.path.dirname(__file__), 'lib'))\n"
                    "from pkg import deep\nprint(deep.said(), deep.__name__)\n"
                ),
                "hooks/lib/pkg/__init__.py": "",
            },
        ),
        "trusted pkg.deep",
        id="python-sys-path-package",
    ),
    pytest.param(
        Form(
            command=f"{sys.executable} -m hooks.guard",
            target="hooks/guard.py",
            trusted="import sys\nprint('trusted', sys.argv[0].endswith('guard.py'))\n",
            untrusted="open({marker!r}, 'a').write('untrusted'); print('untrusted')\n",
            files={"hooks/__init__.py": ""},
        ),
        "trusted True",
        id="python-dash-m",
    ),
    pytest.param(
        Form(
            command="node hooks/guard.js",
            target="hooks/lib.js",
            trusted="exports.said = () => 'trusted';\n",
            untrusted=(
                "require('fs').appendFileSync({marker!r}, 'untrusted');\n"
                "exports.said = () => 'untrusted';\n"
            ),
            files={
                "hooks/guard.js": (
                    "const lib = require('./lib');\n"
                    "console.log(lib.said(), require.resolve('./lib') === __dirname + '/lib.js');\n"
                )
            },
            calls=80,
        ),
        "trusted true",
        id="node-require-beside",
        marks=pytest.mark.skipif(NODE is None, reason="needs node"),
    ),
    pytest.param(
        Form(
            command="node hooks/guard.mjs",
            target="hooks/helper.mjs",
            trusted="export const said = () => 'trusted';\n",
            untrusted=(
                "import { appendFileSync } from 'node:fs';\n"
                "appendFileSync({marker!r}, 'untrusted');\n"
                "export const said = () => 'untrusted';\n"
            ),
            files={
                "hooks/guard.mjs": (
                    "import { said } from './helper.mjs';\n"
                    "console.log(said(), import.meta.url.endsWith('/hooks/guard.mjs'));\n"
                )
            },
            calls=60,
        ),
        "trusted true",
        id="node-import-beside",
        marks=pytest.mark.skipif(NODE is None, reason="needs node"),
    ),
    pytest.param(
        Form(
            command="node hooks/guard.mjs",
            target="hooks/said.cjs",
            trusted="module.exports = 'trusted';\n",
            untrusted=(
                "require('fs').appendFileSync({marker!r}, 'untrusted');\n"
                "module.exports = 'untrusted';\n"
            ),
            files={
                "hooks/guard.mjs": (
                    "import said from './said.cjs';\n"
                    "import { createRequire } from 'node:module';\n"
                    "const path = createRequire(import.meta.url).resolve('./said.cjs');\n"
                    "console.log(said, path.endsWith('/hooks/said.cjs'));\n"
                )
            },
            calls=60,
        ),
        "trusted true",
        id="node-module-imports-commonjs",
        marks=pytest.mark.skipif(NODE is None, reason="needs node"),
    ),
]


def by_path(project: Path, command: str) -> str:
    """What the command prints run by its path, from the project root (the hook's cwd)."""
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=project,
        input=b"{}",
        capture_output=True,
        check=True,
        timeout=60,
    )
    return done.stdout.decode().strip()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("form", "output"), PINNED_FORMS)
def test_a_pinned_form_runs_the_checked_modules_only(
    project: Path, tmp_path: Path, form: Form, output: str
) -> None:
    trusted, untrusted, target = set_up(project, tmp_path, form)
    assert by_path(project, form.command) == output
    shown = CliRunner().invoke(cli, ["trust", "--yes", "--cwd", str(project)])
    assert shown.exit_code == 0, shown.output
    # It still runs, and answers as run by its path.
    inject, traces = fire(project)
    assert inject == output, traces
    marker = tmp_path / "marker"
    with swapping(trusted, untrusted, target, tmp_path / "stop"):
        results = fire_until(project, output, form.calls, errors=True)
    assert not marker.exists(), _runs(results, marker, output)
    assert set(results) <= {output, None}, results
    assert output in results, _runs(results, marker, output)
    assert [trace.mode for trace in traces] == ["pinned"]


def test_a_module_that_appears_after_the_check_is_not_imported(project: Path) -> None:
    """A module put beside a pinned script after its check (shadowing the standard
    library's) is not imported: the script gets the module it got when checked."""
    write(project / "hooks" / "guard.py", "import json\nprint(json.__name__, 'trusted')\n")
    register(project, {"name": "guard", "command": f"{sys.executable} hooks/guard.py"})
    trust_all(project)
    from relay.engine.system import HookSystem

    system = HookSystem(cwd=project, telemetry=False)
    try:
        # The check happens at planning; the module appears before the process starts.
        assert system.registry.for_event("SessionStart")
        write(project / "hooks" / "json.py", "raise SystemExit('the planted module ran')\n")
        result = system.run("SessionStart", {})
    finally:
        system.close()
    assert result.inject == "json trusted", result


def test_a_project_module_not_among_the_checked_files_is_refused_on_import(
    project: Path,
) -> None:
    """One found beside the script now but not checked is not imported (not the project's
    copy, and not another of that name further along the path)."""
    write(
        project / "hooks" / "guard.py",
        "try:\n    import plugin\nexcept ModuleNotFoundError as exc:\n    print(exc)\n",
    )
    register(project, {"name": "guard", "command": f"{sys.executable} hooks/guard.py"})
    trust_all(project)
    from relay.engine.system import HookSystem

    system = HookSystem(cwd=project, telemetry=False)
    try:
        assert system.registry.for_event("SessionStart")
        write(project / "hooks" / "plugin.py", "raise SystemExit('the planted module ran')\n")
        result = system.run("SessionStart", {})
    finally:
        system.close()
    assert result.inject == "No module named 'plugin' among the files relay trust checked"


def test_modules_that_cannot_be_copied_skip_the_hook_with_the_reason(
    project: Path, relay_home: Path
) -> None:
    """A state folder where the snapshot cannot be made: the hook is skipped with why,
    never run with its modules by path; relay and the other hooks keep working."""
    write(project / "hooks" / "guard.py", "import helper\nprint(helper.SAID)\n")
    write(project / "hooks" / "helper.py", "SAID = 'trusted'\n")
    register(
        project,
        {"name": "guard", "command": f"{sys.executable} hooks/guard.py"},
        {"name": "plain", "command": "./hooks/plain.sh"},
    )
    write(project / "hooks" / "plain.sh", "#!/bin/sh\necho plain\n", executable=True)
    trust_all(project)
    pinned = relay_home / "state" / "pinned"
    shutil.rmtree(pinned, ignore_errors=True)
    pinned.parent.mkdir(parents=True, exist_ok=True)
    pinned.write_text("not a folder\n")  # mkdir fails here even for root
    done = subprocess.run(
        [sys.executable, "-m", "relay", "hooks", "run", "SessionStart", "--cwd", str(project)],
        input=b"{}",
        capture_output=True,
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["inject"] == "plain"
    assert [hook["name"] for hook in answer["hooks"]] == ["plain"]
    assert "project hook guard cannot be trusted: its modules cannot be copied as checked" in (
        done.stderr.decode()
    )


def test_a_built_in_module_is_not_shadowed_by_a_checked_file_beside_the_script(
    project: Path,
) -> None:
    """Run by path, Python finds a built-in module (`faulthandler`) before any folder; a pinned
    run finds it first too, though a checked hooks/faulthandler.py is in the snapshot."""
    write(
        project / "hooks" / "guard.py",
        "import faulthandler\nprint(faulthandler.__name__, 'built in')\n",
    )
    write(
        project / "hooks" / "faulthandler.py",
        "raise SystemExit('the file beside the script ran')\n",
    )
    command = f"{sys.executable} hooks/guard.py"
    assert by_path(project, command) == "faulthandler built in"
    register(project, {"name": "guard", "command": command})
    trust_all(project)
    assert fire(project)[0] == "faulthandler built in"


def test_snapshots_are_bounded_and_half_built_ones_go(
    project: Path, relay_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    from relay.config import snapshot

    monkeypatch.setattr(snapshot, "MAX_SNAPSHOTS", 2)
    top = relay_home / "state" / "pinned"
    top.mkdir(parents=True)
    half_built = top / ".abc.left-by-a-dead-process"
    half_built.mkdir()
    os.utime(half_built, (1, 1))
    made = []
    for version in range(3):
        text = f"VERSION = {version}\n"
        write(project / "hooks" / "helper.py", text)
        digest = hashlib.sha256(text.encode()).hexdigest()
        folder = Path(snapshot.snapshot_of(project, {"hooks/helper.py": digest}))
        assert (folder / "hooks" / "helper.py").read_text() == text
        os.utime(folder, (version + 10, version + 10))  # made in this order
        made.append(folder)
    assert sorted(top.iterdir()) == sorted(made[1:])
    # A file changed since it was hashed is not copied: nothing is left of the attempt.
    write(project / "hooks" / "helper.py", "VERSION = 'changed'\n")
    with pytest.raises(snapshot.SnapshotError, match="changed while it was checked"):
        snapshot.snapshot_of(project, {"hooks/helper.py": "0" * 64})
    assert sorted(top.iterdir()) == sorted(made[1:])


def test_a_hook_relay_cannot_trust_is_named_as_such_not_sent_to_relay_trust(
    project: Path, tmp_path: Path
) -> None:
    """A form relay refuses to trust (here `npm run`) is skipped with words that say so:
    `relay trust` would refuse it too, so telling the user to run it is no help."""
    set_up(project, tmp_path, npm_form())
    trust_as_before(project)
    event = json.dumps({"session_id": "s", "cwd": str(project), "hook_event_name": "SessionStart"})
    ran = subprocess.run(
        [sys.executable, "-m", "relay", "hooks", "run", "--dialect", "claude", "SessionStart"],
        cwd=project,
        input=event,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    stderr = " ".join(ran.stderr.split())
    assert "relay cannot trust as written: guard" in stderr, stderr
    assert "says why and how to pin them" in stderr, stderr
    assert "Review them, then run `relay trust`" not in stderr, stderr

    tried = CliRunner().invoke(cli, ["hooks", "test", "SessionStart", "--cwd", str(project)])
    text = " ".join(tried.output.split())
    assert "not run: cannot be trusted as written: relay cannot run it as checked" in text, text
    assert "review it and run `relay trust`" not in text, text

"""A trusted project hook runs the script bytes its trust check read (DESIGN §7: no gap
between check and exec), and the script still sees itself as when run by its path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from relay.config.trust import TrustStore, fingerprint
from relay.engine.system import HookSystem
from relay.engine.trace import HookTrace
from relay.hosts.call import Caches, answer_call
from relay.server.client import Call

NODE = shutil.which("node")
RELAY = shutil.which("relay", path=str(Path(sys.executable).parent))

# Renames the untrusted, then the trusted version over the hook's script, until told to stop:
# a swap every 0.2 ms or so, several within the few milliseconds between a check and an exec
# (a launch that checked the file, then ran it by its path, ran the untrusted text after 83 of
# 115 trusted checks measured so), at about a tenth of a core where a loop without a pause took
# a whole one.
SWAP_LOOP = """
import os, sys, time
trusted, untrusted, target, stop = sys.argv[1:5]
swap = target + ".swap"
print("swapping", flush=True)
while not os.path.exists(stop):
    for version in (untrusted, trusted):
        os.link(version, swap)
        os.replace(swap, target)
        time.sleep(0.0002)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / "hooks").mkdir()
    return root


def write(path: Path, text: str, *, executable: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if executable:
        path.chmod(0o755)
    return path


def register(project: Path, *entries: dict[str, Any]) -> None:
    settings = {"hooks": {"SessionStart": [{"hooks": list(entries)}]}}
    write(project / ".relay" / "settings.json", json.dumps(settings))


def trust_all(project: Path) -> None:
    system = HookSystem(cwd=project, telemetry=False)
    untrusted = system.registry.untrusted
    assert untrusted
    # As `relay trust` does: a hook that reaches the tree is fingerprinted only here.
    fingerprints = [
        (
            hook.fingerprint
            or fingerprint(
                hook.event, hook.matcher.text, hook.entry, project, sequential=hook.sequential
            ),
            hook.name,
        )
        for hook in untrusted
        if hook.entry is not None
    ]
    TrustStore().trust(project, fingerprints)


def fire(project: Path, *, errors: bool = False) -> tuple[str | None, list[HookTrace]]:
    """SessionStart through a fresh HookSystem, as one `relay hooks run` does."""
    traces: list[HookTrace] = []
    system = HookSystem(cwd=project, telemetry=False)
    try:
        result = system.run("SessionStart", {}, trace=traces)
    finally:
        system.close()
    assert errors or not result.errors, result.errors
    return result.inject, traces


# ---- the rename-swap race (issue 29, point 5) ------------------------------------------


@contextmanager
def swapping(trusted: Path, untrusted: Path, target: Path, stop: Path) -> Iterator[None]:
    """A real process renaming the two versions over `target` while the block runs."""
    argv = [sys.executable, "-c", SWAP_LOOP, str(trusted), str(untrusted), str(target), str(stop)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE) as loop:
        try:
            assert loop.stdout is not None and loop.stdout.readline() == b"swapping\n"
            yield
        finally:
            stop.touch()
            loop.wait(timeout=30)


@pytest.fixture
def swapped_guard(project: Path, tmp_path: Path) -> Iterator[Path]:
    """hooks/guard.sh trusted, then a real process renaming an untrusted version (it
    writes a marker file) and the trusted one over it in a loop: the marker's path."""
    marker = tmp_path / "marker"
    versions = tmp_path / "versions"
    trusted = write(versions / "trusted", "#!/bin/sh\necho trusted\n", executable=True)
    untrusted = write(
        versions / "untrusted",
        f"#!/bin/sh\necho untrusted >> '{marker}'\necho untrusted\n",
        executable=True,
    )
    guard = project / "hooks" / "guard.sh"
    shutil.copy2(trusted, guard)
    register(project, {"name": "guard", "command": "./hooks/guard.sh"})
    trust_all(project)
    assert fire(project)[0] == "trusted"
    with swapping(trusted, untrusted, guard, tmp_path / "stop"):
        yield marker


TRUSTED_RUNS = 20
"""Calls that ran the checked text while the swap went on, enough to end a race early: each
is a chance for the race (before each fix, the untrusted text ran in 38 to 62 % of such
calls, a few runs on a loaded machine none in 12: in 20, by chance none about once in
10,000 runs at 38 %)."""


def race(
    call: Callable[[], str | None],
    output: str,
    calls: int,
    *,
    most: int = 10,
    enough: int = TRUSTED_RUNS,
) -> list[str | None]:
    """The answers of `call` while a swap runs: up to `calls` of them, fewer once `enough`
    have answered `output` (ran the checked text) and one was refused (its check read the
    swapped-in version: the swap went on during the calls), and more (up to `most` times as
    many) until one has answered `output`: on a loaded machine relay may refuse every call
    of a short run (the file was renamed over while relay checked it), and a run with no
    trusted answer proves nothing of the race."""
    results: list[str | None] = []
    while len(results) < calls * most:
        if output in results and len(results) >= calls:
            break
        if results.count(output) >= enough and None in results:
            break
        results.append(call())
    return results


def fire_until(
    project: Path, output: str, calls: int, *, errors: bool = False, most: int = 10
) -> list[str | None]:
    """`race` of SessionStart calls as `fire` makes them."""
    return race(lambda: fire(project, errors=errors)[0], output, calls, most=most)


def serve(project: Path, caches: Caches) -> Callable[[], str | None]:
    """A SessionStart call as `relay serve` answers it, with one set of caches (registry
    views, script digests) across calls."""

    def call() -> str | None:
        reply = answer_call(Call(["SessionStart"], str(project), dict(os.environ), b"{}"), caches)
        assert reply is not None and reply.exit_code == 0, reply
        inject: str | None = json.loads(reply.stdout)["inject"]
        return inject

    return call


def _runs(results: list[str | None], marker: Path, trusted: str = "trusted") -> str:
    seen = marker.read_text().count("untrusted") if marker.exists() else 0
    return (
        f"untrusted text ran {seen} time(s); trusted ran {results.count(trusted)} "
        f"of {len(results)} calls"
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_script_renamed_over_a_trusted_one_never_runs_as_trusted(
    project: Path, swapped_guard: Path
) -> None:
    marker = swapped_guard
    # In process, as `relay hooks run` runs an event: up to 1,000 calls, fewer once 50 ran.
    results = race(lambda: fire(project)[0], "trusted", 1000, most=1, enough=50)
    assert not marker.exists(), _runs(results, marker)
    # The check saw the trusted version often enough to run it: the race was real.
    assert results.count("trusted") >= 50, _runs(results, marker)
    assert set(results) <= {"trusted", None}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_servers_cached_path_and_the_cli_never_run_it_either(
    project: Path, swapped_guard: Path, relay_home: Path
) -> None:
    marker = swapped_guard
    # As `relay serve` answers: one set of caches (registry views, script digests).
    served = race(serve(project, Caches()), "trusted", 300, most=1, enough=15)
    assert not marker.exists(), _runs(served, marker)
    assert served.count("trusted") >= 15, _runs(served, marker)
    # The installed command, as a host runs it.
    assert RELAY is not None

    def run() -> str | None:
        done = subprocess.run(
            [RELAY, "hooks", "run", "SessionStart", "--cwd", str(project)],
            input=b"{}",
            capture_output=True,
            env={**os.environ, "RELAY_HOME": str(relay_home)},
            timeout=60,
            check=True,
        )
        inject: str | None = json.loads(done.stdout)["inject"]
        return inject

    ran = race(run, "trusted", 25, most=1)
    assert not marker.exists(), _runs(ran, marker)
    assert "trusted" in ran, _runs(ran, marker)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "case",
    [
        (
            "guard.py",
            f"{sys.executable} hooks/guard.py",
            "print('trusted')\n",
            "open({marker!r}, 'a').write('untrusted'); print('untrusted')\n",
        ),
        pytest.param(
            (
                "guard.mjs",
                f"{NODE} hooks/guard.mjs",  # an ES module: a load hook answers with the text
                "console.log('trusted');\n",
                "import {{ appendFileSync }} from 'node:fs';\n"
                "appendFileSync({marker!r}, 'untrusted'); console.log('untrusted');\n",
            ),
            marks=pytest.mark.skipif(NODE is None, reason="node is not installed"),
        ),
        (
            "guard.awk",
            "./hooks/guard.awk",  # no rule for awk: run from a sealed copy
            '#!/usr/bin/awk -f\nBEGIN { print "trusted" }\n',
            '#!/usr/bin/awk -f\nBEGIN {{ print "untrusted" >> "{marker}"; print "untrusted" }}\n',
        ),
    ],
)
def test_every_way_of_feeding_the_checked_text_closes_the_gap(
    project: Path, tmp_path: Path, case: tuple[str, str, str, str]
) -> None:
    name, command, trusted_text, untrusted_text = case
    marker = tmp_path / "marker"
    trusted = write(tmp_path / "versions" / "trusted", trusted_text, executable=True)
    untrusted = write(
        tmp_path / "versions" / "untrusted",
        untrusted_text.format(marker=str(marker)),
        executable=True,
    )
    target = project / "hooks" / name
    shutil.copy2(trusted, target)
    register(project, {"name": "guard", "command": command})
    trust_all(project)
    assert fire(project)[0] == "trusted"
    with swapping(trusted, untrusted, target, tmp_path / "stop"):
        # Node starts slowly: fewer calls, as many chances for the race each.
        results = fire_until(project, "trusted", 60 if name.endswith(".mjs") else 200)
    assert not marker.exists(), _runs(results, marker)
    assert "trusted" in results, _runs(results, marker)


SHELL_GUARD = (
    "#!/bin/sh\necho trusted\n",
    "#!/bin/sh\necho untrusted >> '{marker}'\necho untrusted\n",
)
PYTHON_GUARD = (
    "print('trusted')\n",
    "open({marker!r}, 'a').write('untrusted'); print('untrusted')\n",
)
NODE_GUARD = (
    "console.log('trusted');\n",
    "require('fs').appendFileSync({marker!r}, 'untrusted'); console.log('untrusted');\n",
)
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")
# (script, command, its two versions, what the command prints when the trusted one runs)
SHELL_COMMAND_FORMS = [
    pytest.param(
        ("guard.py", f"{sys.executable} hooks/guard.py | cat", PYTHON_GUARD, "trusted"),
        id="python-pipe",
    ),
    pytest.param(
        ("guard.sh", "sh hooks/guard.sh && echo done", SHELL_GUARD, "trusted\ndone"),
        id="sh-and",
    ),
    pytest.param(
        ("guard.sh", "FOO=1 ./hooks/guard.sh 2>&1", SHELL_GUARD, "trusted"),
        id="assignment-redirection",
    ),
    pytest.param(
        ("guard.sh", 'cd "$RELAY_PROJECT_DIR" && true; ./hooks/guard.sh', SHELL_GUARD, "trusted"),
        id="list",
    ),
    pytest.param(
        ("guard.sh", 'echo "$(./hooks/guard.sh)"', SHELL_GUARD, "trusted"),
        id="substitution",
    ),
    pytest.param(
        ("guard.js", f"{NODE} hooks/guard.js | cat", NODE_GUARD, "trusted"),
        id="node-pipe",
        marks=needs_node,
    ),
    pytest.param(
        ("guard.sh", "bash -c './hooks/guard.sh | cat'", SHELL_GUARD, "trusted"),
        id="bash-c-string",
    ),
]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("case", SHELL_COMMAND_FORMS)
def test_a_script_a_shell_command_runs_is_pinned_too(
    project: Path, tmp_path: Path, case: tuple[str, str, tuple[str, str], str]
) -> None:
    name, command, (trusted_text, untrusted_text), output = case
    marker = tmp_path / "marker"
    trusted = write(tmp_path / "versions" / "trusted", trusted_text, executable=True)
    untrusted = write(
        tmp_path / "versions" / "untrusted",
        untrusted_text.format(marker=str(marker)),
        executable=True,
    )
    target = project / "hooks" / name
    shutil.copy2(trusted, target)
    register(project, {"name": "guard", "command": command})
    trust_all(project)
    assert fire(project)[0] == output
    with swapping(trusted, untrusted, target, tmp_path / "stop"):
        results = fire_until(project, output, 100 if name.endswith(".js") else 300)
    assert not marker.exists(), _runs(results, marker, output)
    assert set(results) <= {output, None}, results
    assert output in results, _runs(results, marker, output)


# ---- what the script sees of itself --------------------------------------------------


def by_path(project: Path, argv: list[str]) -> str:
    """What the script prints run by its path, from the project root (the hook's cwd)."""
    done = subprocess.run(
        argv, cwd=project, input=b"{}", capture_output=True, check=True, timeout=60
    )
    return done.stdout.decode()


def through_relay(project: Path, command: str) -> str:
    """What the same script prints run as a trusted project hook (pinned)."""
    register(project, {"name": "show", "command": command})
    trust_all(project)
    _, traces = fire(project)
    (trace,) = traces
    assert trace.mode == "pinned", trace
    assert trace.report.exit_code == 0, trace.stderr
    return trace.stdout


SH_SHOW = """\
#!/bin/sh
echo "0=$0 args=$*"
cd "$(dirname "$0")" && echo "dir=$(pwd)"
LIB=$(cat ./lib.txt)
echo "lib=$LIB"
"""

BASH_SHOW = """\
#!/usr/bin/env bash
set -eu
echo "0=$0 args=$*"
here="$(cd "$(dirname "$0")" && pwd)"
LIB=$(cat "$here/lib.txt")
echo "dir=$here lib=$LIB"
"""

PYTHON_SHOW = """\
#!/usr/bin/env python3
'''The module docstring.'''
import os
import sys
import sibling
print("argv", sys.argv, sys.orig_argv)
print("descriptors", sorted(os.listdir("/proc/self/fd")))  # the sealed copy's is closed
print(__file__, __name__, __doc__, __package__, __spec__, __cached__)
print(type(__loader__).__name__, __loader__.name, __loader__.path)
print(sys.path[0], sibling.VALUE, sibling.__file__)
print(sorted(name for name in globals() if name.startswith("__")))
print(sys._getframe().f_code.co_filename, __import__("__main__").__file__)
"""

NODE_SHOW = """\
#!/usr/bin/env node
const lib = require("./lib");
console.log("argv", JSON.stringify(process.argv.slice(1)));
console.log(__filename, __dirname, lib, require.main === module, module.id);
console.log(module.filename, module.paths[0], require.resolve("./lib"), process.execArgv);
console.log("descriptors", require("fs").readdirSync("/proc/self/fd").length);
"""


@pytest.mark.parametrize(
    "argv",
    [["./hooks/show.sh", "one", "two words"], ["sh", "hooks/show.sh", "one"]],
    ids=["direct", "sh"],
)
def test_a_shell_script_sees_its_path(project: Path, argv: list[str]) -> None:
    write(project / "hooks" / "show.sh", SH_SHOW, executable=True)
    write(project / "hooks" / "lib.txt", "beside-the-script\n")
    expected = by_path(project, argv)
    assert f"0={argv[-2] if argv[0] == 'sh' else argv[0]}" in expected
    assert "lib=beside-the-script" in expected
    command = " ".join(f"'{word}'" for word in argv)
    assert through_relay(project, command) == expected


@pytest.mark.parametrize(
    "argv",
    [["./hooks/show.bash", "one"], ["bash", "hooks/show.bash", "one"]],
    ids=["direct", "bash"],
)
def test_a_bash_script_sees_its_path_as_dollar_zero(project: Path, argv: list[str]) -> None:
    write(project / "hooks" / "show.bash", BASH_SHOW, executable=True)
    write(project / "hooks" / "lib.txt", "beside-the-script\n")
    expected = by_path(project, argv)
    assert "lib=beside-the-script" in expected
    assert through_relay(project, " ".join(argv)) == expected


def test_bash_source_in_a_pinned_bash_script_is_as_run_by_path(project: Path) -> None:
    """bash names ${BASH_SOURCE[0]} only for a file it opened by name itself (the gap
    pinning closes); the script's own references read as $0, which is that name."""
    show = (
        "#!/bin/bash\n"
        'echo "source=[${BASH_SOURCE[0]}] [${BASH_SOURCE[0]:-$0}] [$BASH_SOURCE]"\n'
        'echo "dir=[$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)] [${BASH_SOURCE%/*}]"\n'
        'f() { echo "in f=[${BASH_SOURCE[0]}]"; }\nf\n'
    )
    write(project / "hooks" / "source.bash", show, executable=True)
    expected = by_path(project, ["./hooks/source.bash"])
    assert "source=[./hooks/source.bash] [./hooks/source.bash] [./hooks/source.bash]" in expected
    assert f"dir=[{project / 'hooks'}] [./hooks]" in expected
    assert through_relay(project, "./hooks/source.bash") == expected


@pytest.mark.parametrize(
    "argv",
    [
        ["./hooks/show.py", "one"],
        [sys.executable, "hooks/show.py", "one", "--two"],
        [sys.executable, "-B", "hooks/show.py"],
    ],
    ids=["direct", "python", "with-options"],
)
def test_a_python_script_sees_its_file_argv_and_siblings(project: Path, argv: list[str]) -> None:
    write(project / "hooks" / "show.py", PYTHON_SHOW, executable=True)
    write(project / "hooks" / "sibling.py", "VALUE = 'imported beside the script'\n")
    expected = by_path(project, argv)
    assert "hooks/show.py __main__ The module docstring." in expected
    assert "imported beside the script" in expected
    assert through_relay(project, " ".join(argv)) == expected


def test_a_python_script_longer_than_an_argument_runs_whole(project: Path) -> None:
    padding = "# padding\n" * 20_000  # 200 KB: more than one argv word can carry
    write(project / "hooks" / "big.py", padding + PYTHON_SHOW, executable=True)
    write(project / "hooks" / "sibling.py", "VALUE = 'imported beside the script'\n")
    expected = by_path(project, [sys.executable, "hooks/big.py"])
    assert "imported beside the script" in expected
    assert through_relay(project, f"{sys.executable} hooks/big.py") == expected


@pytest.mark.skipif(NODE is None, reason="node is not installed")
@pytest.mark.parametrize(
    "argv",
    [["./hooks/show.js", "one"], ["node", "hooks/show.js", "one", "--two"]],
    ids=["direct", "node"],
)
def test_a_node_script_sees_its_filename_and_requires_beside_it(
    project: Path, argv: list[str]
) -> None:
    write(project / "hooks" / "show.js", NODE_SHOW, executable=True)
    write(project / "hooks" / "lib.js", "module.exports = 'required beside the script';\n")
    expected = by_path(project, argv)
    assert f"{project}/hooks/show.js {project}/hooks required beside the script true ." in expected
    assert through_relay(project, " ".join(argv)) == expected


NODE_MODULE_SHOW = """\
#!/usr/bin/env node
import { value } from "./lib.mjs";
console.log("argv", JSON.stringify(process.argv.slice(1)));
console.log(import.meta.url, value, process.execArgv);
"""


@pytest.mark.skipif(NODE is None, reason="node is not installed")
@pytest.mark.parametrize(
    ("name", "package"),
    [("show.mjs", None), ("show.js", '{"type": "module"}')],
    ids=["mjs", "type-module"],
)
def test_a_node_es_module_sees_its_url_and_imports_beside_it(
    project: Path, name: str, package: str | None
) -> None:
    write(project / "hooks" / name, NODE_MODULE_SHOW, executable=True)
    write(project / "hooks" / "lib.mjs", "export const value = 'imported beside the module';\n")
    if package is not None:
        write(project / "hooks" / "package.json", package)
    argv = [f"./hooks/{name}", "one"]
    expected = by_path(project, argv)
    assert f"file://{project}/hooks/{name} imported beside the module" in expected
    assert through_relay(project, " ".join(argv)) == expected


def test_a_script_with_no_rule_runs_from_a_sealed_copy(project: Path) -> None:
    write(
        project / "hooks" / "show.awk",
        '#!/usr/bin/awk -f\nBEGIN { print "awk ran" }\n',
        executable=True,
    )
    assert through_relay(project, "./hooks/show.awk") == "awk ran\n"


@pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not installed")
def test_an_interpreter_with_no_rule_reads_the_sealed_copy(project: Path) -> None:
    write(project / "hooks" / "show.pl", 'print "perl ran as $0 with @ARGV\\n";\n')
    shown = through_relay(project, "perl hooks/show.pl one")
    assert shown.startswith("perl ran as /dev/fd/") and shown.endswith(" with one\n")


def test_user_hooks_keep_the_direct_launch(project: Path, relay_home: Path) -> None:
    # Only project hooks are trust-checked, so only they are pinned: a user's own hook
    # runs as it always did.
    write(project / "hooks" / "show.sh", SH_SHOW, executable=True)
    write(project / "hooks" / "lib.sh", "LIB=x\n")
    user = {"hooks": {"SessionStart": [{"hooks": [{"command": f"{project}/hooks/show.sh"}]}]}}
    write(relay_home / "settings.json", json.dumps(user))
    _, traces = fire(project)
    (trace,) = traces
    assert (trace.mode, trace.argv) == ("direct", [f"{project}/hooks/show.sh"])


def test_a_trusted_hook_whose_script_went_away_is_not_run(project: Path) -> None:
    write(project / "hooks" / "guard.sh", "#!/bin/sh\necho trusted\n", executable=True)
    register(project, {"name": "guard", "command": "./hooks/guard.sh"})
    trust_all(project)
    (project / "hooks" / "guard.sh").unlink()
    system = HookSystem(cwd=project, telemetry=False)
    result = system.run("SessionStart", {})
    system.close()
    assert result.hooks == [] and result.untrusted == ["guard"]


def test_hooks_test_shows_a_pinned_launch_without_the_script_text(project: Path) -> None:
    from click.testing import CliRunner

    from relay.cli.main import cli

    write(project / "hooks" / "guard.sh", "#!/bin/sh\necho checked-text\n", executable=True)
    register(project, {"name": "guard", "command": "./hooks/guard.sh one"})
    trust_all(project)
    shown = CliRunner().invoke(cli, ["hooks", "test", "SessionStart", "--cwd", str(project)], "{}")
    assert shown.exit_code == 0, shown.output
    started = [line for line in shown.stdout.splitlines() if "started:" in line]
    assert started == [
        f"  started: pinned: /bin/sh -c <28 bytes> ./hooks/guard.sh one   [cwd {project}]"
    ]


# ---- scripts a shell command runs: each pinned, each as when run by path ---------------

SHOW_SH = """\
#!/bin/sh
echo "sh 0=$0 args=$*"
echo "stdin=$(wc -c)"
cd "$(dirname "$0")" && echo "data=$(cat data.txt)"
exit 3
"""

SHOW_BASH = """\
#!/usr/bin/env bash
echo "bash 0=$0 source=${BASH_SOURCE[0]} args=$*"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
echo "data=$(cat "$here/data.txt") stdin=$(wc -c)"
exit 4
"""

SHOW_PY = """\
import sys, pathlib
print("py", __file__, sys.argv, len(sys.stdin.read()))
print("data", (pathlib.Path(__file__).parent / "data.txt").read_text().strip())
sys.exit(5)
"""

SHOW_JS = """\
const fs = require("fs"), path = require("path");
console.log("js", __filename, JSON.stringify(process.argv.slice(1)), fs.readFileSync(0).length);
console.log("data", fs.readFileSync(path.join(__dirname, "data.txt"), "utf8").trim());
process.exit(6);
"""

SHOW_MJS = """\
import { readFileSync } from "node:fs";
const data = readFileSync(new URL("./data.txt", import.meta.url), "utf8").trim();
console.log("mjs", import.meta.url, JSON.stringify(process.argv.slice(2)), data);
"""

SHELL_COMMANDS = [
    pytest.param("FOO=1 ./hooks/show.sh one 'two words' 2>&1", id="assignment-redirection"),
    pytest.param("sh hooks/show.sh a && echo after", id="sh-and"),
    pytest.param("./hooks/show.sh a | cat; echo next", id="pipe-list"),
    pytest.param('cd "$RELAY_PROJECT_DIR" && bash hooks/show.bash one | cat', id="cd-root-bash"),
    pytest.param("cd ./hooks && ./show.sh from-hooks", id="cd-subfolder"),
    pytest.param(f'echo "[$({sys.executable} hooks/show.py sub)]"', id="substitution"),
    pytest.param(f"exec timeout 30 {sys.executable} -u hooks/show.py x >&2", id="wrappers"),
    pytest.param("true # a comment\n./hooks/show.bash x", id="newline"),
    pytest.param(
        f"{NODE} hooks/show.js x | cat && {NODE} hooks/show.mjs y 2>&1",
        id="node",
        marks=needs_node,
    ),
    pytest.param("./hooks/plain x | cat", id="no-shebang"),
    pytest.param(
        f"bash -c \"{sys.executable} hooks/show.py 'x y' | cat; exit 7\" name arg", id="bash-c"
    ),
    pytest.param(
        "sh -ec './hooks/show.sh a || sh -c \"./hooks/show.sh b\" it' && echo no", id="sh-c-nested"
    ),
    # No shell syntax: executed directly, the script found after the wrappers.
    pytest.param("env FOO=1 timeout 30 ./hooks/show.sh direct", id="direct-wrappers"),
    pytest.param(f"nice -n 1 {sys.executable} hooks/show.py direct", id="direct-interpreter"),
]


@pytest.mark.parametrize("command", SHELL_COMMANDS)
def test_a_pinned_shell_command_runs_as_by_path(project: Path, command: str) -> None:
    write(project / "hooks" / "show.sh", SHOW_SH, executable=True)
    write(project / "hooks" / "show.bash", SHOW_BASH, executable=True)
    write(project / "hooks" / "show.py", SHOW_PY)
    write(project / "hooks" / "show.js", SHOW_JS)
    write(project / "hooks" / "show.mjs", SHOW_MJS)
    write(project / "hooks" / "plain", 'echo "plain 0=$0 $*"\n', executable=True)
    write(project / "hooks" / "data.txt", "beside the script\n")
    register(project, {"name": "show", "command": command})
    trust_all(project)
    _, traces = fire(project, errors=True)
    (trace,) = traces
    assert trace.mode == "pinned", trace
    # Fed by relay: a shell's -c or a bootstrap's copy, in argv or in the command's text.
    fed = [word for word in trace.argv if "/dev/fd/SEALED" in word or "-c" in word.split(" ")]
    assert fed, trace.argv
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        check=False,
        cwd=project,
        input=trace.stdin.encode(),
        capture_output=True,
        env={**os.environ, "RELAY_PROJECT_DIR": str(project)},
        timeout=60,
    )
    assert "beside the script" in done.stdout.decode() + done.stderr.decode() or "plain" in command
    assert (trace.stdout, trace.stderr, trace.report.exit_code) == (
        done.stdout.decode(),
        done.stderr.decode(),
        done.returncode,
    )


def test_a_script_named_with_quotes_and_spaces_is_fed_its_text_quoted(project: Path) -> None:
    text = "#!/bin/sh\necho \"it's $0: $*\" '\\\\' \"$(printf '%s' \"a'b\")\"\n"
    write(project / "hooks" / "it's here.sh", text, executable=True)
    command = "sh \"hooks/it's here.sh\" 'x y' | cat && './hooks/it'\\''s here.sh' z"
    register(project, {"name": "show", "command": command})
    trust_all(project)
    _, traces = fire(project)
    (trace,) = traces
    assert trace.mode == "pinned"
    done = subprocess.run(
        ["/bin/sh", "-c", command], cwd=project, capture_output=True, check=True, timeout=60
    )
    assert "it's hooks/it's here.sh: x y" in done.stdout.decode()
    assert trace.stdout == done.stdout.decode()


def test_the_commands_own_descriptors_cannot_reach_the_copies(
    project: Path, relay_home: Path
) -> None:
    # The copies are at 10 and up: a command that closes 3-9 still runs its scripts. A
    # binary is run from its copy, so it sees its name, /dev/fd/N. Through the CLI: a
    # fresh process, whose next free descriptors are low.
    dash = shutil.which("dash") or os.path.realpath("/bin/sh")
    shutil.copy(dash, project / "hooks" / "binary-sh")
    write(project / "hooks" / "show.py", SHOW_PY)
    write(project / "hooks" / "data.txt", "beside the script\n")
    closes = " ".join(f"{number}<&-" for number in range(3, 10))
    command = (
        f"{sys.executable} hooks/show.py x {closes} | cat; "
        f"./hooks/binary-sh -c 'echo \"binary=$0\"' {closes}"
    )
    register(project, {"name": "show", "command": command})
    trust_all(project)
    assert RELAY is not None
    done = subprocess.run(
        [RELAY, "hooks", "run", "SessionStart", "--cwd", str(project)],
        input=b"{}",
        capture_output=True,
        env={**os.environ, "RELAY_HOME": str(relay_home)},
        timeout=60,
        check=True,
    )
    shown = json.loads(done.stdout)["inject"]
    assert "data beside the script" in shown, done.stderr
    (name,) = [line for line in shown.splitlines() if line.startswith("binary=")]
    assert name.startswith("binary=/dev/fd/") and int(name.rpartition("/")[2]) >= 10, name


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("if true; then ./hooks/show.sh x; fi", "the compound command 'if'"),
        ("./hooks/show.sh `echo x`", "a backquoted command"),
        ("(./hooks/show.sh x)", "a subshell or function"),
        ("cat <<EOF\nx\nEOF\n./hooks/show.sh", "a here-document"),
        ("./hooks/show.sh x 12>&1", "it redirects descriptor 12"),
    ],
    ids=["if", "backquotes", "subshell", "here-document", "descriptor-12"],
)
def test_a_command_relay_cannot_read_exactly_is_not_trusted_and_trust_says_why(
    project: Path, command: str, why: str
) -> None:
    from click.testing import CliRunner

    from relay.cli.main import cli

    write(project / "hooks" / "show.sh", SHOW_SH, executable=True)
    write(project / "hooks" / "data.txt", "beside the script\n")
    register(project, {"name": "show", "command": command})
    # Trusted as an older relay trusted it: it must not run by path now (issue 29, point 5).
    trust_all(project)
    inject, traces = fire(project)
    assert (inject, traces) == (None, [])
    shown = CliRunner().invoke(cli, ["trust", "--json", "--cwd", str(project)])
    assert shown.exit_code == 1, shown.output
    (hook,) = json.loads(shown.stdout)["hooks"]
    assert hook["state"] == "cannot-trust"
    ((what, said),) = [(item["what"], item["why"]) for item in hook["runs_by_path"]]
    assert what == "the command" and why in said and "to pin it: move the command into" in said
    text = CliRunner().invoke(cli, ["trust", "--yes", "--cwd", str(project)]).stdout
    assert (
        "CANNOT TRUST" in text and "it runs or loads project files by path" in text and why in text
    )


def test_trust_names_what_a_pinned_command_still_runs_by_path(project: Path) -> None:
    from click.testing import CliRunner

    from relay.cli.main import cli

    write(project / "hooks" / "show.sh", SHOW_SH, executable=True)
    write(project / "Makefile", "all:\n\t@echo made\n")
    command = "make all && ./hooks/show.sh; ./hooks/show.sh && . ./hooks/show.sh"
    register(project, {"name": "show", "command": command})
    shown = CliRunner().invoke(cli, ["trust", "--json", "--cwd", str(project)])
    (hook,) = json.loads(shown.stdout)["hooks"]
    assert [item["what"] for item in hook["runs_by_path"]] == ["make all", ". ./hooks/show.sh"]
    # The two ./hooks/show.sh are pinned: trust lists nothing else as run by path.
    assert shell_plan_of(project, command) == 2


def shell_plan_of(project: Path, command: str) -> int:
    from relay.config.model import HookEntry
    from relay.engine.interpreters import shell_plan

    plan = shell_plan(HookEntry(command=command), project)
    assert plan is not None
    return len(plan.scripts)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_servers_cached_path_pins_a_shell_commands_script(
    project: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    trusted_text, untrusted_text = SHELL_GUARD
    trusted = write(tmp_path / "versions" / "trusted", trusted_text, executable=True)
    untrusted = write(
        tmp_path / "versions" / "untrusted",
        untrusted_text.format(marker=str(marker)),
        executable=True,
    )
    guard = project / "hooks" / "guard.sh"
    shutil.copy2(trusted, guard)
    register(project, {"name": "guard", "command": "./hooks/guard.sh 2>&1 | cat"})
    trust_all(project)
    with swapping(trusted, untrusted, guard, tmp_path / "stop"):
        served = race(serve(project, Caches()), "trusted", 200, most=1)
    assert not marker.exists(), _runs(served, marker)
    assert "trusted" in served, _runs(served, marker)


# ---- the exact shell reader -----------------------------------------------------------

TRICKY_WORDS = [
    "plain",
    "'single quoted; | &&'",
    '"double \\" \\\\ \\$ \\` \\a"',
    "back\\ slash\\;",
    "mixed'a b'\"c d\"e",
    "a#b",
    "'it'\\''s'",
    '"line\none"',
    "lone$",
    "-c",
    "x=y",
]


def test_the_shell_reader_removes_quotes_as_sh_does() -> None:
    from relay.engine import shellwords

    command = "printf '[%s]\\n' " + " ".join(TRICKY_WORDS)
    (simple,) = shellwords.read(command)
    read = [word.value for word in simple.words[2:]]
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, check=True)
    printed = done.stdout.decode()
    assert printed == "".join(f"[{value}]\n" for value in read), (printed, read)
    assert None not in read


@pytest.mark.parametrize(
    ("text", "commands"),
    [
        ("a b | c && d; e & f || g", [["a", "b"], ["c"], ["d"], ["e"], ["f"], ["g"]]),
        ("X=1 Y=$(z) a 2>&1 >out <in b", [["a", "b"]]),
        ('a "$(b \'c)\' ")")" d', [["a", None, "d"]]),
        (
            "a $HOME ${X} ${X:-y} $1 ~/x *.py {a,b}",
            [["a", None, None, None, None, None, None, None]],
        ),
        ("a # b; c\nd", [["a"], ["d"]]),
    ],
)
def test_the_shell_reader_splits_commands_and_marks_expansions(
    text: str, commands: list[list[str | None]]
) -> None:
    from relay.engine import shellwords

    read = shellwords.read(text)
    assert [[word.value for word in simple.words] for simple in read] == commands


@pytest.mark.parametrize(
    "text",
    [
        "if a; then b; fi",
        "for x in a; do b; done",
        "{ a; }",
        "(a)",
        "f() { a; }",
        "a `b`",
        "a <<EOF\nb\nEOF",
        "a $'b'",
        'a $"b"',
        "a $((1+2))",
        "a &> b",
        "a |& b",
        "a <(b)",
        "a ${X:-'b'}",
        "a 'b",
        'a "b',
        "a $(b",
        "a && && b",
        "; a",
        "a |",
        "a \\",
        "! a",
        "case x in x) a;; esac",
        "a $\\\n$",  # sh reads $$ there
        "a \\\n&& b",
    ],
)
def test_the_shell_reader_refuses_what_it_cannot_read_exactly(text: str) -> None:
    from relay.engine import shellwords

    with pytest.raises(shellwords.UnreadableCommand):
        shellwords.read(text)


def test_a_pinned_shell_command_with_a_cwd_runs_there(project: Path) -> None:
    write(project / "hooks" / "show.sh", SHOW_SH, executable=True)
    write(project / "hooks" / "data.txt", "beside the script\n")
    register(project, {"name": "show", "command": "./show.sh x | cat", "cwd": "hooks/../hooks"})
    trust_all(project)
    _, traces = fire(project, errors=True)
    (trace,) = traces
    assert trace.mode == "pinned" and trace.report.exit_code == 0, trace
    assert "sh 0=./show.sh args=x" in trace.stdout and "data=beside the script" in trace.stdout


def test_a_script_that_does_not_exist_when_checked_is_not_trusted(
    project: Path,
) -> None:
    """A file created there after the check would run by its path: not trusted."""
    write(project / "hooks" / "show.sh", SHOW_SH, executable=True)
    write(project / "hooks" / "data.txt", "beside the script\n")
    command = "test -x hooks/custom.sh && ./hooks/custom.sh; ./hooks/show.sh x"
    register(project, {"name": "show", "command": command})
    trust_all(project)
    assert fire(project, errors=True) == (None, [])
    from relay.config.model import HookEntry
    from relay.engine.interpreters import runs_by_path

    entry = HookEntry(command=command, env={"PATH": f"hooks:{os.environ['PATH']}"})
    assert [what for what, _ in runs_by_path(entry, project)] == [
        "PATH in env",
        "./hooks/custom.sh",
    ]
    why = dict(runs_by_path(entry, project))["./hooks/custom.sh"]
    assert why.startswith("it does not exist when checked (to pin it: create it")


def test_hostile_shell_commands_cost_relay_little(project: Path) -> None:
    from relay.engine import shellwords
    from relay.engine.interpreters import plan_shell_command

    deep = "echo " + "$(" * 100_000 + ")" * 100_000
    with pytest.raises(shellwords.UnreadableCommand, match="nested more than 16"):
        shellwords.read(deep)
    (plan_by_path,) = plan_shell_command(deep, str(project), str(project)).by_path
    assert plan_by_path[0] == "the command"
    # One copy per file, however often the command names it.
    write(project / "hooks" / "show.sh", '#!/bin/sh\necho "$0"\n\0', executable=True)
    command = " && ".join(["./hooks/show.sh"] * 500)
    register(project, {"name": "show", "command": command})
    trust_all(project)
    _, traces = fire(project)
    (trace,) = traces
    assert trace.mode == "pinned" and trace.report.exit_code == 0, trace.stderr
    assert trace.stdout.count("/dev/fd/") == 500 and len(set(trace.stdout.splitlines())) == 1


def test_a_shell_commands_script_without_its_execute_permission_is_not_started(
    project: Path,
) -> None:
    write(project / "hooks" / "show.sh", SHOW_SH)  # not executable
    register(project, {"name": "show", "command": "./hooks/show.sh x || true"})
    trust_all(project)
    system = HookSystem(cwd=project, telemetry=False)
    result = system.run("SessionStart", {})
    system.close()
    (error,) = result.errors
    assert "permission denied: ./hooks/show.sh is not executable (to fix: chmod +x" in error.message


@pytest.mark.parametrize("shell", ["/bin/sh", "bash"])
def test_the_shell_readers_literal_words_are_what_sh_passes(shell: str) -> None:
    """Random words of quotes, escapes and expansions: wherever the reader calls a word
    literal, sh (and bash, which /bin/sh is on some systems) passes exactly that value."""
    import random

    from relay.engine import shellwords

    pieces = [*"ab .'\"\\$#\t-=:%,@^*?[]{}~!", "\\\n", "\\'", '\\"', "''", '""', "$x", "\n"]
    pieces += [";", "&&", "|", "${x}", "$(echo q)", "\\$", '"\\\\"', "'\\'", "!x", "{a,b}"]
    chooser = random.Random(29)
    checked = 0
    while checked < 150:
        words = [
            "".join(chooser.choice(pieces) for _ in range(chooser.randint(1, 6)))
            for _ in range(chooser.randint(1, 4))
        ]
        text = "printf '[%s]\\n' " + " ".join(words)
        try:
            commands = shellwords.read(text)
        except shellwords.UnreadableCommand:
            continue
        if len(commands) != 1 or commands[0].redirections or len(commands[0].words) < 3:
            continue
        values = [word.value for word in commands[0].words[2:]]
        if None in values:
            continue
        checked += 1
        done = subprocess.run([shell, "-c", text], capture_output=True, check=False, timeout=30)
        assert done.stdout.decode() == "".join(f"[{value}]\n" for value in values), text


def random_commands(count: int, seed: int) -> list[str]:
    """Shell command lines built from scripts run in every pinned way, arguments,
    redirections, operators, substitutions and sh -c strings."""
    import random
    import shlex

    chooser = random.Random(seed)
    runs = [
        "./hooks/show.sh",
        "'./hooks/show.sh'",
        "sh hooks/show.sh",
        'sh "hooks/show.sh"',
        "bash hooks/show.bash",
        "./hooks/show.bash",
        f"{sys.executable} hooks/show.py",
        f"{sys.executable} -u hooks/show.py",
        "env A=1 ./hooks/show.sh",
        "timeout 20 ./hooks/show.sh",
        "A=1 ./hooks/show.sh",
    ]
    arguments = ["", " x", " 'a b'", ' "$HOME"', " $(echo sub)", ' "it\'s"']
    redirections = ["", " 2>&1", " </dev/null", " >&2", " | cat", " 2>&1 | cat"]
    # No script on the right of a pipe: two scripts running at once would interleave their
    # output differently from run to run, pinned or not.
    joiners = [" && ", " ; ", " || ", "\n"]
    commands = []
    for _ in range(count):
        parts = []
        for position in range(chooser.randint(1, 3)):
            if position:
                parts.append(chooser.choice(joiners))
            single = chooser.choice(runs) + chooser.choice(arguments) + chooser.choice(redirections)
            wrap = chooser.randint(0, 5)
            if wrap == 0:
                single = f'echo "[$({single})]"'
            elif wrap == 1:
                single = f"sh -c {shlex.quote(single)}"
            parts.append(single)
        commands.append("".join(parts))
    return commands


@pytest.mark.parametrize("command", random_commands(40, seed=3))
def test_random_pinned_shell_commands_run_as_by_path(project: Path, command: str) -> None:
    write(project / "hooks" / "show.sh", SHOW_SH, executable=True)
    write(project / "hooks" / "show.bash", SHOW_BASH, executable=True)
    write(project / "hooks" / "show.py", SHOW_PY)
    write(project / "hooks" / "data.txt", "beside the script\n")
    register(project, {"name": "show", "command": command})
    trust_all(project)
    # Every script the command names is pinned.
    from relay.config.model import HookEntry
    from relay.engine.interpreters import entry_script, shell_plan

    plan = shell_plan(HookEntry(command=command), project)
    if plan is None:  # no shell syntax: executed directly, its one script the entry script
        assert entry_script(HookEntry(command=command), project) is not None
    else:
        assert len(plan.paths()) == command.count("hooks/show"), plan
    _, traces = fire(project, errors=True)
    (trace,) = traces
    assert trace.mode == "pinned", trace
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        cwd=project,
        input=trace.stdin.encode(),
        capture_output=True,
        env={**os.environ, "RELAY_PROJECT_DIR": str(project)},
        timeout=60,
        check=False,
    )
    assert (trace.stdout, trace.stderr, trace.report.exit_code) == (
        done.stdout.decode(),
        done.stderr.decode(),
        done.returncode,
    )

"""What a trust check looks at (relay.config.looks): every look reach, trust and the
engine's launch readers make at the filesystem is recorded with its answer, so that relay
serve uses a kept check only while each gives the same answer again. Tested on real files:
each kind of look, once changed, says the check no longer stands; and the modules make no
look that escapes the recorder (a forgotten one fails the source scan below)."""

from __future__ import annotations

import ast
import os
import time
from pathlib import Path

import pytest

from relay.config import looks, reach, trust
from relay.config.filecache import RACY_SECONDS
from relay.config.model import HookEntry
from relay.engine import interpreters


def aged(*paths: Path) -> None:
    """Wait until `paths` are past the racy window (a check that read them is keepable)."""
    newest = max((max(path.lstat().st_mtime, path.lstat().st_ctime) for path in paths), default=0)
    delay = newest + RACY_SECONDS + 0.05 - time.time()
    if delay > 0:
        time.sleep(delay)


def checked(command: str, root: Path, **fields: object) -> looks.Looks:
    """The looks one reach of a hook makes (what `relay trust` and a check collect)."""
    with looks.recording() as seen:
        reach.plan_reach(HookEntry(command=command, **fields), root).collect()  # type: ignore[arg-type]
    return seen


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    script = folder / "check.sh"
    script.write_text("#!/bin/sh\ncat >/dev/null\n")
    script.chmod(0o755)
    return folder


def test_nothing_recorded_outside_a_recording(root: Path) -> None:
    reach.plan_reach(HookEntry(command="./check.sh"), root).collect()
    with looks.recording() as seen:
        pass
    assert len(seen) == 0 and seen.same()


def test_an_absent_file_that_appears(root: Path) -> None:
    aged(root / "check.sh")
    seen = checked("./check.sh extra.conf", root)
    assert seen.unkeepable is None and seen.same()
    (root / "extra.conf").write_text("x")
    assert not seen.same()


def test_a_folders_listing(root: Path) -> None:
    (root / "conf").mkdir()
    (root / "conf" / "a.txt").write_text("a")
    aged(root / "check.sh", root / "conf" / "a.txt")
    seen = checked("./check.sh conf", root)
    assert seen.unkeepable is None and seen.same()
    (root / "conf" / "b").mkdir()  # an empty folder: no file, the listing changed
    assert not seen.same()


def test_a_glob(root: Path) -> None:
    aged(root / "check.sh")
    seen = checked("./check.sh *.conf", root)
    assert seen.unkeepable is None and seen.same()
    (root / "new.conf").write_text("x")
    assert not seen.same()


def test_a_python_module_looked_up_beside_its_script(root: Path) -> None:
    (root / "check.py").write_text("try:\n    import helper\nexcept ImportError:\n    pass\n")
    aged(root / "check.py")
    seen = checked("python3 check.py", root)
    assert seen.unkeepable is None and seen.same()
    (root / "helper").mkdir()  # a package folder: no file read, the lookup's listing changed
    assert not seen.same()


def test_a_symbolic_link_retargeted(root: Path) -> None:
    (root / "other.sh").write_text("#!/bin/sh\ncat >/dev/null\n")  # the same bytes
    (root / "link.sh").symlink_to("check.sh")
    aged(root / "check.sh", root / "other.sh", root / "link.sh")
    seen = checked("./link.sh", root)
    assert seen.unkeepable is None and seen.same()
    (root / "link.sh").unlink()
    (root / "link.sh").symlink_to("other.sh")
    assert not seen.same()


def test_a_script_read_edited_or_renamed_over(root: Path) -> None:
    aged(root / "check.sh")
    seen = checked("./check.sh", root)
    assert seen.unkeepable is None and seen.same()
    os.utime(root / "check.sh", ns=(1, 1))  # its identity: the same bytes, another mtime
    assert not seen.same()
    aged(root / "check.sh")
    seen = checked("./check.sh", root)
    (root / "new.sh").write_text((root / "check.sh").read_text())
    os.replace(root / "new.sh", root / "check.sh")
    assert not seen.same()


def test_a_file_read_within_the_racy_window_is_not_kept(root: Path) -> None:
    (root / "check.sh").write_text("#!/bin/sh\ncat >/dev/null\n")
    seen = checked("./check.sh", root)
    assert seen.unkeepable is not None and not seen.same()


def test_a_tree_listed_by_git_is_not_kept(root: Path) -> None:
    (root / ".git").mkdir()
    aged(root / "check.sh")
    seen = checked('./check.sh "$(cat x)"', root)  # an expansion: the project's whole tree
    assert seen.unkeepable == "it lists files with git"


def test_the_trust_store_files_a_check_reads(root: Path, tmp_path: Path) -> None:
    """A check of a trusted hook records the store's key files (present or absent) and
    the fingerprinted files: revoking, trusting without a key and an old trust.json each
    change an answer."""
    entry = HookEntry(command="./check.sh")
    store = trust.TrustStore(tmp_path / "state" / "trust.json")
    assessed = trust.assess("PreToolUse", None, entry, root)
    grant = trust.TrustGrant(assessed=assessed, description="check", command="", slot="s")
    store.grant(root, [grant])
    aged(root / "check.sh", *store.folder.rglob("*"))

    def check() -> tuple[trust.TrustVerdict, looks.Looks]:
        with looks.recording() as seen:
            verdict = trust.check_trust("PreToolUse", None, entry, root, store=store)
        return verdict, seen

    verdict, seen = check()
    assert verdict.trusted and seen.unkeepable is None and seen.same()
    assert verdict.fingerprint is not None
    store.revoke(root)
    assert not seen.same()
    aged(*store.folder.rglob("*"))
    verdict, seen = check()
    assert not verdict.trusted and seen.unkeepable is None and seen.same()
    store.trust(root, [(verdict.fingerprint, "check")])  # keys/_.json, absent until now
    assert not seen.same()
    aged(*store.folder.rglob("*"))
    verdict, seen = check()
    assert verdict.trusted and seen.same()
    store.path.write_text("{}")  # an older relay's trust.json, moved in on the next check
    assert not seen.same()


# ---- no look escapes the recorder ----------------------------------------------------------

_LOOKING = frozenset(
    {
        "os.scandir",
        "os.listdir",
        "os.stat",
        "os.lstat",
        "os.open",
        "os.readlink",
        "os.access",
        "os.path.exists",
        "os.path.lexists",
        "os.path.isdir",
        "os.path.isfile",
        "os.path.islink",
        "os.path.realpath",
        "os.path.getmtime",
        "os.path.expanduser",
        "glob.glob",
        "glob.iglob",
        "subprocess.run",
        "open",
        "shared_temporary",
    }
)
_LOOKING_METHODS = frozenset(
    {"resolve", "is_dir", "is_file", "exists", "stat", "lstat", "iterdir", "glob", "rglob"}
    | {"read_text", "read_bytes", "open", "readlink", "is_symlink", "samefile"}
)
"""What looks at the filesystem when called (a Path's methods by name)."""


def _looks_made(module: object, functions: set[str] | None, allowed: dict[str, str]) -> list[str]:
    """The calls that look at the filesystem in a module's functions (all of them, or
    `functions` by qualified name) other than in `allowed` (name -> why it may)."""
    path = Path(module.__file__)  # type: ignore[attr-defined]
    tree = ast.parse(path.read_text())
    found: list[str] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.ClassDef):
                visit(child, f"{scope}.{child.name}" if scope else child.name)
                continue
            if isinstance(child, ast.Call) and scope:
                name = ast.unparse(child.func)
                method = child.func.attr if isinstance(child.func, ast.Attribute) else None
                base = name.split(".")[0]
                if name in _LOOKING or (
                    method in _LOOKING_METHODS and base not in ("looks", "os", "self", "re")
                ):
                    wanted = functions is None or scope in functions
                    if wanted and scope not in allowed:
                        found.append(f"{path.name}:{child.lineno} {scope}: {name}")
            visit(child, scope)

    visit(tree, "")
    return found


def test_reach_makes_every_look_through_the_recorder() -> None:
    allowed = {
        "_source_text": "opens the file and records its fstat (looks.noted)",
        "_glob_matches": "a look itself (called through looks.look)",
        "_unchecked_code_cache": "a look itself",
        "_git_files": "marks the check unkeepable (looks.unkeepable) before listing",
    }
    assert _looks_made(reach, None, allowed) == []


def test_the_engines_launch_readers_make_every_look_through_the_recorder() -> None:
    """What a trust check asks of relay.engine.interpreters (how a launch runs its
    scripts, what it runs by path); pinning at launch time runs per call, unrecorded."""
    functions = {
        "entry_script",
        "_working_directory",
        "script_of",
        "shell_plan",
        "plan_shell_command",
        "module_run",
        "_module_run",
        "_runs_project_module",
        "make_run",
        "_make_run",
        "_pinnable_make",
        "runs_by_path",
        "_ShellPlanner.read",
        "_ShellPlanner.simple",
        "_ShellPlanner.shell_string",
    }
    allowed = {"_reads_no_makefile_again": "a look itself"}
    assert _looks_made(interpreters, functions, allowed) == []


def test_a_trust_check_makes_every_look_through_the_recorder() -> None:
    """check_trust's path through relay.config.trust (writing the store, and reading the
    scripts a trusted hook runs, per call, are not part of a kept check)."""
    functions = {
        "check_trust",
        "assess",
        "_file_state",
        "_link_target",
        "TrustStore.is_trusted",
        "TrustStore.may_have_trusted",
        "TrustStore.known_files",
        "TrustStore._project",
        "TrustStore._records",
        "TrustStore._by_key",
        "TrustStore._all_records",
        "TrustStore._latest",
        "TrustStore._read_manifest",
        "TrustStore._migrate",
        "_project_key",
    }
    allowed = {
        "_file_state": "records the stat it takes (looks.noted) before the file is hashed",
        "TrustStore._records": "records the fstat of the key file it reads (looks.noted)",
        "TrustStore._read_manifest": "records the fstat of the manifest it reads",
        "TrustStore._by_key": "lists the folder again only to say why it cannot be listed",
        "TrustStore._migrate": "moves a trust.json whose presence it looked at (looks.look)",
        "_project_key": "resolves again only to raise what the look could not resolve",
    }
    assert _looks_made(trust, functions, allowed) == []


def test_where_a_path_leads_is_what_python_says(tmp_path: Path) -> None:
    """The looks that resolve a path ask the kernel (one open) and answer as Path.resolve and
    os.path.realpath do: links, relative links, `..` after a link, dangling links, loops,
    missing paths."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f").write_text("")
    (tmp_path / "l").symlink_to("a/b")
    (tmp_path / "a" / "b" / "rel").symlink_to("../b/f")
    (tmp_path / "dangling").symlink_to("nowhere")
    (tmp_path / "loop").symlink_to("loop")
    cases = ["l", "l/f", "l/../a", "a/b/rel", "l/rel", "dangling", "loop", "missing/x", "a/./b//f"]
    for case in [str(tmp_path / name) for name in cases] + ["/", "relative/x"]:
        try:
            expected: str | None = str(Path(case).resolve())
        except (OSError, RuntimeError):
            expected = None
        assert looks.resolved(case) == expected, case
        assert looks.real_path(case) == os.path.realpath(case), case


def test_a_look_that_fails_makes_the_check_stand_for_nothing(root: Path) -> None:
    def failing(path: str) -> bool:
        raise OSError(path)

    with looks.recording() as seen:
        looks.noted(failing, ("x",), True)
    assert not seen.same()

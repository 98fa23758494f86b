"""Trust: hook fingerprints (with their scripts' content) and the shared trust store."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest

from relay.config import trust as trust_module
from relay.config.loader import parse_settings
from relay.config.model import HookEntry
from relay.config.trust import (
    TrustGrant,
    TrustManifest,
    TrustStore,
    TrustStoreError,
    assess,
    check_trust,
    describe_hook,
    fingerprint,
    hook_key,
    hook_slot,
    project_hooks,
    project_scripts,
)
from relay.errors import RelayError


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / ".relay" / "hooks").mkdir(parents=True)
    (project / ".git").mkdir()
    return project


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def script(path: Path, text: str = "#!/bin/sh\necho hi\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- fingerprints --------------------------------------------------------------------------


def test_the_same_hook_has_the_same_fingerprint(root: Path) -> None:
    entry = HookEntry(command="./a.sh", env={"A": "1", "B": "2"})
    same = HookEntry(command="./a.sh", env={"B": "2", "A": "1"})
    assert fingerprint("BeforeTool", "Bash", entry, root) == fingerprint(
        "BeforeTool", "Bash", same, root
    )
    assert len(fingerprint("BeforeTool", "Bash", entry, root)) == 64


@pytest.mark.parametrize(
    ("event", "matcher", "changed"),
    [
        ("AfterTool", "Bash", HookEntry(command="./a.sh")),
        ("BeforeTool", "Edit", HookEntry(command="./a.sh")),
        ("BeforeTool", None, HookEntry(command="./a.sh")),
        ("BeforeTool", "Bash", HookEntry(command="./b.sh")),
        ("BeforeTool", "Bash", HookEntry(command="./a.sh", args=["--fast"])),
        ("BeforeTool", "Bash", HookEntry(command="./a.sh", args=[])),
        ("BeforeTool", "Bash", HookEntry(command="./a.sh", env={"LEVEL": "lax"})),
        ("BeforeTool", "Bash", HookEntry(command="./a.sh", cwd="sub")),
        # How it runs counts too: a shorter timeout can make a guard time out and fail open.
        ("BeforeTool", "Bash", HookEntry(command="./a.sh", timeout=0.05)),
        ("BeforeTool", "Bash", HookEntry(command="./a.sh", failClosed=True)),
        ("BeforeTool", "Bash", HookEntry(command="./a.sh", signal="SIGKILL")),
        ("BeforeTool", "Bash", HookEntry(command="./a.sh", reach=["hooks"])),
    ],
)
def test_what_a_hook_runs_changes_its_fingerprint(
    root: Path, event: str, matcher: str | None, changed: HookEntry
) -> None:
    original = fingerprint("BeforeTool", "Bash", HookEntry(command="./a.sh"), root)
    assert fingerprint(event, matcher, changed, root) != original


def test_a_sequential_group_changes_the_fingerprint(root: Path) -> None:
    entry = HookEntry(command="./a.sh")
    assert fingerprint("BeforeTool", None, entry, root, sequential=True) != fingerprint(
        "BeforeTool", None, entry, root
    )


def test_a_timeout_back_at_its_default_changes_the_fingerprint_again(root: Path) -> None:
    trusted = fingerprint("BeforeTool", None, HookEntry(command="./a.sh", timeout=5), root)
    assert fingerprint("BeforeTool", None, HookEntry(command="./a.sh"), root) != trusted


def test_presentation_fields_do_not_change_the_fingerprint(root: Path) -> None:
    original = fingerprint("BeforeTool", None, HookEntry(command="./a.sh"), root)
    renamed = HookEntry(command="./a.sh", name="guard", description="checks", enabled=False)
    assert fingerprint("BeforeTool", None, renamed, root) == original


def test_a_changed_script_inside_the_project_changes_the_fingerprint(root: Path) -> None:
    guard = script(root / ".relay" / "hooks" / "guard.py", "print('ok')\n")
    entry = HookEntry(command="python3 .relay/hooks/guard.py --strict")
    before = fingerprint("BeforeTool", None, entry, root)
    assert project_scripts(entry, root) == {".relay/hooks/guard.py": _sha256(guard)}
    guard.write_text("print('pwned')\n")  # same length: content, not size, matters
    assert fingerprint("BeforeTool", None, entry, root) != before
    guard.write_text("print('ok')\n")
    assert fingerprint("BeforeTool", None, entry, root) == before


def test_a_changed_file_outside_the_project_does_not(root: Path, tmp_path: Path) -> None:
    outside = script(tmp_path / "elsewhere" / "tool.sh")
    entry = HookEntry(command=f"sh {outside} && sh ../elsewhere/tool.sh")
    before = fingerprint("BeforeTool", None, entry, root)
    assert project_scripts(entry, root) == {}
    outside.write_text("#!/bin/sh\necho changed\n")
    assert fingerprint("BeforeTool", None, entry, root) == before


@pytest.mark.parametrize(
    "command",
    [
        '"$CLAUDE_PROJECT_DIR"/.relay/hooks/x.sh',
        "$RELAY_PROJECT_DIR/.relay/hooks/x.sh --flag",
        "bash ${GEMINI_PROJECT_DIR}/.relay/hooks/x.sh",
        "cd sub; ./.relay/hooks/x.sh | cat",
        "python3 -m tool --config=.relay/hooks/x.sh",
        "'.relay/hooks/x.sh'",
    ],
)
def test_scripts_named_in_many_ways_are_hashed(root: Path, command: str) -> None:
    target = script(root / ".relay" / "hooks" / "x.sh")
    entry = HookEntry(command=command)
    assert project_scripts(entry, root) == {".relay/hooks/x.sh": _sha256(target)}
    before = fingerprint("SessionStart", None, entry, root)
    target.write_text("#!/bin/sh\necho other\n")
    assert fingerprint("SessionStart", None, entry, root) != before


def test_a_project_dir_with_spaces(tmp_path: Path) -> None:
    root = tmp_path / "my project"
    target = script(root / "hooks" / "x.sh")
    for command in ['"$CLAUDE_PROJECT_DIR/hooks/x.sh"', '"${RELAY_PROJECT_DIR}"/hooks/x.sh']:
        entry = HookEntry(command=command)
        assert project_scripts(entry, root) == {"hooks/x.sh": _sha256(target)}


def test_exec_form_arguments_are_hashed(root: Path) -> None:
    target = script(root / "tools" / "check.py", "print(1)\n")
    entry = HookEntry(command="python3", args=["tools/check.py", "--x"])
    assert project_scripts(entry, root) == {"tools/check.py": _sha256(target)}


def test_scripts_are_found_relative_to_the_hook_cwd(root: Path) -> None:
    target = script(root / "sub" / "run.sh")
    entry = HookEntry(command="./run.sh", cwd="sub")
    assert project_scripts(entry, root) == {"sub/run.sh": _sha256(target)}
    entry = HookEntry(command="./run.sh", cwd="$CLAUDE_PROJECT_DIR/sub")
    assert project_scripts(entry, root) == {"sub/run.sh": _sha256(target)}


def test_a_symlink_inside_the_project_is_hashed_by_content(root: Path, tmp_path: Path) -> None:
    real = script(tmp_path / "shared" / "hook.sh")
    (root / "hook.sh").symlink_to(real)
    entry = HookEntry(command="./hook.sh")
    before = fingerprint("Stop", None, entry, root)
    real.write_text("#!/bin/sh\necho swapped\n")
    assert fingerprint("Stop", None, entry, root) != before


def test_bare_program_names_are_not_scripts_and_a_folder_is_its_files(root: Path) -> None:
    entry = HookEntry(command="python3 .relay/hooks 'unbalanced")
    assert project_scripts(entry, root) == {}
    inside = script(root / ".relay" / "hooks" / "lib" / "a.sh")
    assert project_scripts(entry, root) == {".relay/hooks/lib/a.sh": _sha256(inside)}


def test_describe_hook() -> None:
    guard = HookEntry(command="python3 g.py", name="guard")
    assert describe_hook("BeforeTool", "Bash", guard) == "BeforeTool[Bash]: guard: python3 g.py"
    assert describe_hook("Stop", "*", HookEntry(command="x", args=["a b"])) == "Stop: x a b"


def test_project_hooks_lists_hooks_and_patterns_in_file_order() -> None:
    document = {
        "hooks": {
            "BeforeTool": [{"matcher": "Bash", "hooks": [{"command": "a"}, {"command": "b"}]}],
            "Stop": [{"hooks": [{"command": "c"}]}],
        },
        "patterns": {"deploy": {"command": "d"}, "memory": "builtin"},
    }
    loaded = parse_settings(json.dumps(document).encode(), file="s.json", scope="project")
    found = [(event, matcher, entry.command) for event, matcher, entry in project_hooks(loaded)]
    assert found == [
        ("BeforeTool", "Bash", "a"),
        ("BeforeTool", "Bash", "b"),
        ("Stop", None, "c"),
        ("PatternMatch", "deploy", "d"),
    ]


# --- the store -----------------------------------------------------------------------------


def test_trust_then_revoke(root: Path, tmp_path: Path) -> None:
    store = TrustStore(tmp_path / "trust.json")
    assert not store.is_trusted(root, "f1")
    assert store.trusted(root) == {}
    store.trust(root, [("f1", "BeforeTool: a"), ("f2", "Stop: b"), ("f3", "Stop: c")])
    assert store.is_trusted(root, "f1")
    assert store.trusted(root) == {"f1": "BeforeTool: a", "f2": "Stop: b", "f3": "Stop: c"}
    assert store.revoke(root, ["f1", "f1", "unknown"]) == 1
    assert not store.is_trusted(root, "f1")
    assert store.is_trusted(root, "f2")
    assert store.revoke(root) == 2
    assert store.trusted(root) == {}
    assert store.revoke(root) == 0


def test_projects_are_kept_apart(tmp_path: Path) -> None:
    store = TrustStore(tmp_path / "trust.json")
    one, two = tmp_path / "one", tmp_path / "two"
    store.trust(one, [("f", "hook")])
    assert store.is_trusted(one, "f")
    assert not store.is_trusted(two, "f")
    assert store.revoke(two) == 0
    assert store.is_trusted(one, "f")


def test_the_store_persists_and_is_shared(root: Path, relay_home: Path) -> None:
    first, second = TrustStore(), TrustStore()
    assert first.path == relay_home / "state" / "trust.json"
    assert first.folder == relay_home / "state" / "trust"
    assert not first.is_trusted(root, "f")  # caches the empty state
    second.trust(root, [("f", "hook")])
    assert first.is_trusted(root, "f")  # sees the other store's write
    second.revoke(root, ["f"])
    assert not first.is_trusted(root, "f")
    assert list(first.folder.iterdir()) == []  # a project with no trust left has no folder


def test_no_temporary_files_are_left_behind(tmp_path: Path, root: Path) -> None:
    store = TrustStore(tmp_path / "state" / "trust.json")
    for number in range(5):
        store.trust(root, [(f"f{number}", "hook")])
    assert {path.name for path in (tmp_path / "state").iterdir()} == {"trust", "trust.json.lock"}
    (project,) = store.folder.iterdir()
    names = {str(path.relative_to(project)) for path in project.rglob("*")}
    assert names == {"root", "keys", "keys/_.json"}
    assert (project / "root").read_text() == f"{root.resolve()}\n"
    assert all(path.stat().st_mode & 0o777 in (0o600, 0o700) for path in project.rglob("*"))


def test_a_relative_root_and_its_absolute_form_are_the_same_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TrustStore(tmp_path / "trust.json")
    (tmp_path / "p").mkdir()
    monkeypatch.chdir(tmp_path)
    store.trust(Path("p"), [("f", "hook")])
    assert store.is_trusted(tmp_path / "p", "f")


def test_fingerprints_from_settings_round_trip(root: Path, tmp_path: Path) -> None:
    guard = script(root / ".relay" / "hooks" / "guard.sh")
    entry = HookEntry(command="$CLAUDE_PROJECT_DIR/.relay/hooks/guard.sh")
    store = TrustStore(tmp_path / "trust.json")
    fp = fingerprint("PreToolUse", "Bash", entry, root)
    store.trust(root, [(fp, describe_hook("PreToolUse", "Bash", entry))])
    assert store.is_trusted(root, fingerprint("PreToolUse", "Bash", entry, root))
    guard.write_text("#!/bin/sh\nrm -rf /\n")
    assert not store.is_trusted(root, fingerprint("PreToolUse", "Bash", entry, root))


@pytest.mark.parametrize(
    "content",
    [b"{not json", b'{"projects": []}', b'{"projects": {"/p": {"f": 3}}}', b"[]"],
)
def test_a_corrupt_store_is_an_error_naming_the_file(
    root: Path, tmp_path: Path, content: bytes
) -> None:
    path = tmp_path / "trust.json"
    path.write_bytes(content)
    store = TrustStore(path)
    for action in (
        lambda: store.is_trusted(root, "f"),
        lambda: store.trusted(root),
        lambda: store.trust(root, [("f", "hook")]),
        lambda: store.revoke(root),
    ):
        with pytest.raises(TrustStoreError) as caught:
            action()
        assert caught.value.file == str(path)
        assert isinstance(caught.value, RelayError)
        assert "corrupt trust store" in caught.value.message
        assert str(caught.value).startswith(f"{path}: ")
    assert path.read_bytes() == content  # never overwritten


def test_an_unreadable_store_is_an_error_naming_the_file(root: Path, tmp_path: Path) -> None:
    path = tmp_path / "trust.json"
    path.mkdir()
    with pytest.raises(TrustStoreError) as caught:
        TrustStore(path).is_trusted(root, "f")
    assert caught.value.file == str(path)
    assert "cannot read" in caught.value.message


def test_an_empty_store_file_is_an_empty_store(root: Path, tmp_path: Path) -> None:
    path = tmp_path / "trust.json"
    path.write_bytes(b"")
    assert TrustStore(path).trusted(root) == {}


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from relay.config.trust import TrustStore

    store = TrustStore(Path(sys.argv[1]))
    root, prefix = Path(sys.argv[2]), sys.argv[3]
    for number in range(int(sys.argv[4])):
        store.trust(root, [(f"{prefix}{number}", f"hook {prefix}{number}")])
    """
)


def test_concurrent_writers_lose_nothing(root: Path, tmp_path: Path) -> None:
    path = tmp_path / "state" / "trust.json"
    count = 40
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(root), prefix, str(count)],
            stderr=subprocess.PIPE,
        )
        for prefix in ("a", "b", "c")
    ]
    for writer in writers:
        _, stderr = writer.communicate(timeout=60)
        assert writer.returncode == 0, stderr.decode()
    trusted = TrustStore(path).trusted(root)
    assert len(trusted) == 3 * count
    assert trusted["b7"] == "hook b7"


def test_the_store_files_are_plain_sorted_json(root: Path, tmp_path: Path) -> None:
    store = TrustStore(tmp_path / "trust.json")
    store.trust(root, [("f", "hook")])
    (project,) = store.folder.iterdir()
    saved = msgspec.json.decode((project / "keys" / "_.json").read_bytes())
    assert saved["f"]["description"] == "hook"


def test_a_check_reads_only_the_hooks_key_file(root: Path, tmp_path: Path) -> None:
    """However many hooks and projects are trusted, a check reads one small file."""
    store = TrustStore(tmp_path / "trust.json")
    entries = [HookEntry(command=f"guard {n}") for n in range(3)]
    grants = [
        TrustGrant(
            assessed=assess("Stop", None, entry, root),
            description=f"Stop: {entry.command}",
            command=entry.command,
            slot=hook_slot("s.json", "Stop", None, entry.command, 0),
        )
        for entry in entries
    ]
    store.grant(root, grants)
    for other in range(20):
        store.trust(tmp_path / f"other-{other}", [("f", "hook")])
    (project,) = [
        p for p in store.folder.iterdir() if (p / "root").read_text().strip() == str(root.resolve())
    ]
    assert len(list((project / "keys").iterdir())) == 3
    key = hook_key("Stop", None, entries[1])
    digest = grants[1].assessed.digest
    assert digest is not None
    # Another key's file, corrupt: the check of this hook does not even open it.
    (project / "keys" / f"{hook_key('Stop', None, entries[0])}.json").write_bytes(b"{not json")
    fresh = TrustStore(tmp_path / "trust.json")
    assert fresh.is_trusted(root, digest, key)
    assert fresh.may_have_trusted(root, key)
    with pytest.raises(TrustStoreError) as caught:
        fresh.trusted(root)
    assert caught.value.file.endswith(".json") and "corrupt trust store" in caught.value.message
    verdict = check_trust("Stop", None, entries[1], root, store=fresh)
    assert verdict.trusted and verdict.fingerprint == digest


def test_an_older_relays_trust_json_is_moved_into_the_folders(root: Path, relay_home: Path) -> None:
    guard = script(root / ".relay" / "hooks" / "guard.sh")
    entry = HookEntry(command="sh .relay/hooks/guard.sh")
    assessed = assess("Stop", None, entry, root, keep_contents=True)
    assert assessed.digest is not None
    state = relay_home / "state"
    (state / "trust-files" / "manifests").mkdir(parents=True)
    (state / "trust-files" / "copies").mkdir()
    project = str(root.resolve())
    manifest = TrustManifest(
        fingerprint=assessed.digest, command=entry.command, trusted_at="t", files=assessed.files
    )
    name = trust_module._manifest_name(project, assessed.digest)
    (state / "trust-files" / "manifests" / f"{name}.json").write_bytes(
        msgspec.json.encode(manifest)
    )
    sha = assessed.files[".relay/hooks/guard.sh"].sha256
    (state / "trust-files" / "copies" / sha).write_bytes(guard.read_bytes())
    record = {"description": "Stop: guard", "key": assessed.key, "slots": ["s"]}
    legacy = {
        "version": 1,
        "projects": {project: {assessed.digest: record, "old": {"description": "x"}}},
    }
    (state / "trust.json").write_bytes(msgspec.json.encode(legacy))

    store = TrustStore()
    assert store.is_trusted(root, assessed.digest, assessed.key)
    assert store.trusted(root) == {assessed.digest: "Stop: guard", "old": "x"}
    assert store.known_files(root, assessed.key) == assessed.files
    assert store.copy_of(root, sha) == guard.read_bytes()
    assert not (state / "trust.json").exists() and (state / "trust.json.migrated").exists()
    assert not (state / "trust-files").exists()
    assert check_trust("Stop", None, entry, root, store=TrustStore()).trusted

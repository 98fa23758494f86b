"""CommandMemory: the example backend hooks-examples/memory_store.py driven for real, and
backends that fail in every way a process can (spec/memory-backend.md)."""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from pathlib import Path

import pytest

from relay.services.memory.command import CommandMemory
from relay.services.memory.model import ImportCounts, Memory, MemoryService, MemoryStoreError

ROOT = Path(__file__).resolve().parent.parent
STORE_SCRIPT = ROOT / "hooks-examples" / "memory_store.py"
DATE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    return tmp_path / "store" / "memories.jsonl"


@pytest.fixture
def memory(store_file: Path) -> CommandMemory:
    return CommandMemory(
        [sys.executable, str(STORE_SCRIPT)], env={"MEMORY_STORE_FILE": str(store_file)}
    )


def python_backend(code: str, **options: float) -> CommandMemory:
    """A backend that is a few lines of Python."""
    return CommandMemory([sys.executable, "-c", code], **options)


def test_is_a_memory_service(memory: CommandMemory) -> None:
    service: MemoryService = memory
    assert service.list() == []


def test_add_get_delete(memory: CommandMemory, store_file: Path) -> None:
    added = memory.add("Use uv, not pip", tags=["tooling", "python"], agent="claude", project="/p")
    assert re.fullmatch(r"[0-9a-f]{8}", added.id)
    assert DATE.match(added.created_at)
    assert added == Memory(
        id=added.id,
        content="Use uv, not pip",
        tags=["tooling", "python"],
        agent="claude",
        project="/p",
        created_at=added.created_at,
    )
    assert memory.get(added.id) == added
    assert memory.get("00000000") is None
    lines = store_file.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [added.id]

    assert memory.delete(added.id) is True
    assert memory.delete(added.id) is False
    assert memory.get(added.id) is None


def test_search_scores_word_overlap_and_scopes_by_project(memory: CommandMemory) -> None:
    tooling = memory.add("Use uv, not pip", tags=["tooling"])
    tests = memory.add("Run the TESTS with pytest -q", project="/a")
    memory.add("pytest lives in the venv", project="/b")

    hits = memory.search("pytest tests", project="/a")
    assert [(hit.memory, hit.score) for hit in hits] == [(tests, 1.0)]
    assert [hit.memory for hit in memory.search("tooling", project="/a")] == [tooling]
    assert memory.search("tests") == []  # project None: global memories only
    assert memory.search("") == []
    assert memory.search('"unbalanced AND (') == []
    assert len(memory.search("pytest", project="/b", limit=0)) == 0


def test_list_newest_first_with_limit(memory: CommandMemory) -> None:
    first = memory.add("one")
    second = memory.add("two", project="/a")
    third = memory.add("three")
    assert memory.list(project="/a") == [third, second, first]
    assert memory.list() == [third, first]
    assert memory.list(project="/a", limit=2) == [third, second]


def test_export_import_round_trip_keeps_ids_tags_dates(
    memory: CommandMemory, tmp_path: Path
) -> None:
    originals = [
        memory.add("one", tags=["a", "b"], agent="gemini"),
        memory.add("two", project="/p"),
    ]
    exported = list(memory.export())
    assert exported == originals

    other = CommandMemory(
        [sys.executable, str(STORE_SCRIPT)],
        env={"MEMORY_STORE_FILE": str(tmp_path / "other.jsonl")},
    )
    assert other.import_memories(iter(exported)) == ImportCounts(added=2)
    assert list(other.export()) == originals
    assert other.get(originals[0].id) == originals[0]

    # An existing id is replaced, not duplicated.
    changed = Memory(
        id=originals[0].id, content="one, revised", tags=[], created_at=originals[0].created_at
    )
    assert other.import_memories([changed]) == ImportCounts(updated=1)
    assert list(other.export()) == [changed, originals[1]]


def test_string_command_as_in_settings(store_file: Path) -> None:
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(STORE_SCRIPT))}"
    memory = CommandMemory(command, env={"MEMORY_STORE_FILE": str(store_file)})
    added = memory.add("from a command string")
    assert memory.get(added.id) == added


def test_backend_error_response(memory: CommandMemory, store_file: Path) -> None:
    store_file.parent.mkdir(parents=True)
    store_file.write_text("not json\n")
    with pytest.raises(MemoryStoreError) as caught:
        memory.list()
    assert caught.value.store == shlex.join([sys.executable, str(STORE_SCRIPT)])
    assert caught.value.message.startswith("list: backend error: ")
    assert f"{store_file}:1: not a memory" in caught.value.message


def test_garbage_on_stdout() -> None:
    backend = python_backend("print('hello, I am not JSON')")
    with pytest.raises(MemoryStoreError) as caught:
        backend.get("12345678")
    assert caught.value.message.startswith("get: invalid response: ")
    assert "-c" in str(caught.value)  # the command is named


@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ({"ok": True}, "Object missing required field `memory`"),
        ({"ok": True, "memory": None}, "Expected `object`, got `null` - at `$.memory`"),
        ({"ok": True, "memory": {"id": 1}}, "Expected `str`, got `int` - at `$.memory.id`"),
        ({"status": "fine"}, "Object missing required field `ok`"),
    ],
)
def test_malformed_response(response: object, expected: str) -> None:
    backend = python_backend(f"import json; print(json.dumps({response!r}))")
    with pytest.raises(MemoryStoreError) as caught:
        backend.add("x")
    assert caught.value.message == f"add: invalid response: {expected}"


def test_empty_stdout() -> None:
    with pytest.raises(MemoryStoreError) as caught:
        python_backend("pass").list()
    assert caught.value.message == "list: printed nothing on stdout"


def test_non_zero_exit_quotes_stderr() -> None:
    code = (
        "import sys\n"
        "for n in range(8): print(f'line {n}', file=sys.stderr)\n"
        'print(\'{"ok": true, "memories": []}\')\n'
        "sys.exit(3)\n"
    )
    with pytest.raises(MemoryStoreError) as caught:
        python_backend(code).list()
    message = caught.value.message
    assert message.startswith("list: exited with code 3\nstderr:\n  line 0\n  line 1\n")
    assert "line 4" in message
    assert "line 5" not in message
    assert message.endswith("… (3 more lines)")


def test_non_zero_exit_with_error_on_stdout_only() -> None:
    code = 'import sys; print(\'{"ok": false, "error": "disk full"}\'); sys.exit(1)'
    with pytest.raises(MemoryStoreError) as caught:
        python_backend(code).delete("x")
    assert caught.value.message == "delete: exited with code 1: disk full"


def test_timeout_kills_the_backend() -> None:
    code = "import sys, time; print('waiting', file=sys.stderr, flush=True); time.sleep(30)"
    started = time.monotonic()
    with pytest.raises(MemoryStoreError) as caught:
        python_backend(code, timeout=0.5).search("x")
    assert time.monotonic() - started < 20  # far under the backend's 30 s
    assert caught.value.message == "search: timed out after 0.5 s\nstderr:\n  waiting"


def test_timeout_also_kills_children_holding_the_pipes() -> None:
    # A shell script whose child keeps stdout open: the whole group must go.
    backend = CommandMemory("sleep 30 & sleep 30", timeout=0.5)
    started = time.monotonic()
    with pytest.raises(MemoryStoreError, match=r"timed out after 0\.5 s"):
        backend.export()
    assert time.monotonic() - started < 20  # far under the backend's 30 s


def test_killed_by_signal() -> None:
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    with pytest.raises(MemoryStoreError) as caught:
        python_backend(code).list()
    assert caught.value.message == "list: killed by signal SIGKILL"


def test_missing_executable(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-backend")
    with pytest.raises(MemoryStoreError) as caught:
        CommandMemory([missing]).list()
    assert caught.value.store == missing
    assert caught.value.message == f"list: cannot run {missing!r}: No such file or directory"


def test_missing_executable_in_a_shell_command(tmp_path: Path) -> None:
    with pytest.raises(MemoryStoreError) as caught:
        CommandMemory(f"{tmp_path}/no-such-backend --flag || exit 127").list()
    assert caught.value.message.startswith("list: exited with code 127\nstderr:\n")
    assert "no-such-backend" in caught.value.message


@pytest.mark.parametrize("command", [[], "", "  "])
def test_empty_command(command: str | list[str]) -> None:
    with pytest.raises(MemoryStoreError, match="the command is empty"):
        CommandMemory(command)


def test_a_backend_may_answer_that_a_save_was_already_there() -> None:
    reply = {
        "ok": True,
        "existing": True,
        "memory": {"id": "3f9a1c07", "content": "x", "created_at": "2025-06-01T12:34:56.789Z"},
    }
    saved = python_backend(f"import json; print(json.dumps({reply!r}))").save("x")
    assert saved.existing is True and saved.memory.id == "3f9a1c07"


def test_a_backend_that_does_not_say_makes_a_new_memory_each_save(memory: CommandMemory) -> None:
    # The example backend does not deduplicate: relay does not do it behind its back.
    first = memory.save("Use uv, not pip")
    again = memory.save("Use uv, not pip")
    assert (first.existing, again.existing) == (False, False)
    assert first.memory.id != again.memory.id


def test_import_counts_by_id_when_the_backend_says_only_count(
    memory: CommandMemory, tmp_path: Path
) -> None:
    originals = [memory.add("one", tags=["a"]), memory.add("two", project="/p")]
    other = CommandMemory(
        [sys.executable, str(STORE_SCRIPT)],
        env={"MEMORY_STORE_FILE": str(tmp_path / "other.jsonl")},
    )
    assert other.import_memories(originals) == ImportCounts(added=2)
    assert other.import_memories(originals) == ImportCounts(present=2)
    changed = Memory(id=originals[1].id, content="two, revised", created_at=now())
    assert other.import_memories([changed, originals[0]]) == ImportCounts(present=1, updated=1)
    assert other.import_memories([]) == ImportCounts()


def test_import_counts_from_a_backend_that_gives_them() -> None:
    reply = {"ok": True, "count": 3, "added": 1, "present": 2, "updated": 0}
    code = (
        "import json, sys\n"
        "request = json.load(sys.stdin)\n"
        "if request['op'] == 'export': print(json.dumps({'ok': True, 'memories': []}))\n"
        f"else: print(json.dumps({reply!r}))\n"
    )
    given = [Memory(id=f"0000000{n}", content=str(n), created_at=now()) for n in range(3)]
    assert python_backend(code).import_memories(given) == ImportCounts(added=1, present=2)


def now() -> str:
    return "2025-06-01T12:34:56.789Z"

"""The SQLite memory store on real database files, and the JSON Lines helpers."""

from __future__ import annotations

import io
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from relay.config.paths import state_dir
from relay.services.memory.jsonl import MemoryFileError, read_jsonl, write_jsonl
from relay.services.memory.model import (
    ImportCounts,
    Memory,
    MemoryService,
    MemoryStoreError,
    SavedMemory,
)
from relay.services.memory.sqlite import (
    RESTING,
    SCHEMA_VERSION,
    SEARCH_CANDIDATES,
    SqliteMemory,
    build_match,
    default_store,
    now_iso,
)

FTS_SYNTAX = ['"unbalanced', "AND", "NEAR(a b)", "foo*", "col:val", "(a", "a)", "-x", "***", ""]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteMemory]:
    with SqliteMemory(tmp_path / "memory.db") as memory:
        yield memory


def test_is_a_memory_service(store: SqliteMemory) -> None:
    service: MemoryService = store
    assert service is store


def test_default_store_lives_in_the_state_folder_created_on_first_write() -> None:
    with default_store() as memory:
        assert memory.path == state_dir() / "memory.db"
        assert not state_dir().exists()  # opening lazily: nothing is created until used
        memory.add("hello")
        assert memory.path.is_file()


def test_add_get_list_delete(store: SqliteMemory) -> None:
    first = store.add("use uv for installs", tags=["python", "tooling"], agent="claude")
    second = store.add("tests live in tests/")
    assert re.fullmatch(r"[0-9a-f]{8}", first.id)
    assert first.id != second.id
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first.created_at)
    assert store.get(first.id) == first
    assert store.get("00000000") is None
    assert store.list() == [second, first]
    assert store.list(limit=1) == [second]
    assert store.delete(first.id) is True
    assert store.delete(first.id) is False
    assert store.get(first.id) is None
    assert store.list() == [second]
    assert store.search("uv installs") == []  # the index forgot it too


def test_porter_stemming_finds_other_forms(store: SqliteMemory) -> None:
    deploy = store.add("how to deploy the staging server")
    store.add("unrelated note about cats")
    assert [hit.memory for hit in store.search("deploying")] == [deploy]
    deploying = store.add("deploying needs the VPN")
    assert {hit.memory.id for hit in store.search("deploy")} == {deploy.id, deploying.id}


def test_tags_are_searchable(store: SqliteMemory) -> None:
    tagged = store.add("run make check before pushing", tags=["workflow"])
    assert [hit.memory for hit in store.search("workflow")] == [tagged]


def test_project_and_global_visibility(store: SqliteMemory) -> None:
    mine = store.add("alpha build uses bazel", project="/src/alpha")
    theirs = store.add("beta build uses make", project="/src/beta")
    everywhere = store.add("every build needs a clean tree")
    found = {hit.memory.id for hit in store.search("build", project="/src/alpha")}
    assert found == {mine.id, everywhere.id}
    assert {hit.memory.id for hit in store.search("build")} == {everywhere.id}
    assert store.list(project="/src/beta") == [everywhere, theirs]
    assert store.list() == [everywhere]


def test_project_names_with_any_characters(store: SqliteMemory) -> None:
    odd = store.add("alpha note", project="/src/ünï 日本/with space & 'quote\"")
    plain = store.add("alpha note", project="/src/ünï")
    assert [hit.memory for hit in store.search("alpha", project=odd.project)] == [odd]
    assert [hit.memory for hit in store.search("alpha", project=plain.project)] == [plain]
    assert store.search("alpha", project="/src") == []


def test_recent_memory_wins_between_equally_relevant_ones(store: SqliteMemory) -> None:
    new = Memory(id="0000000b", content="restart the worker after deploy", created_at=now_iso())
    old = Memory(
        id="0000000a",
        content="restart the worker after deploy",
        created_at="2020-01-01T00:00:00.000Z",
    )
    store.import_memories([new, old])  # the newer one first: insertion order cannot decide
    hits = store.search("restart worker")
    assert [hit.memory.id for hit in hits] == ["0000000b", "0000000a"]
    assert hits[0].score > hits[1].score > 0


def test_relevance_outweighs_mild_recency(store: SqliteMemory) -> None:
    old = Memory(
        id="0000000a",
        content="postgres postgres postgres migration notes",
        created_at="2024-01-01T00:00:00.000Z",
    )
    store.import_memories([old])
    store.add("a long note that mentions postgres once among many other words about lunch")
    # By words: BM25 against the recency lift (by meaning, MiniLM finds both alike).
    with SqliteMemory(store.path, semantic=False) as words:
        assert words.search("postgres")[0].memory.id == "0000000a"


def test_only_the_newest_candidates_are_ranked(
    store: SqliteMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("relay.services.memory.sqlite.SEARCH_CANDIDATES", 2)
    store.add("zebra zebra zebra")  # the best match, but stored first
    newer = [store.add("zebra among many other words here"), store.add("zebra and friends")]
    hits = store.search("zebra", limit=2)
    assert {hit.memory.id for hit in hits} == {memory.id for memory in newer}


@pytest.mark.parametrize("query", ["zebra", "zebra stripes"])
def test_the_best_candidates_by_bm25_are_ranked_not_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, query: str
) -> None:
    """Of the candidates, the RANKED best by BM25 get the recency lift: an older, much
    better match beats newer weak ones even when only two are ranked."""
    monkeypatch.setattr("relay.services.memory.sqlite.RANKED", 2)
    with SqliteMemory(tmp_path / "memory.db", semantic=False) as store:
        best = store.add("zebra stripes", tags=["zebra"])
        for number in range(6):
            store.add(f"zebra stripes seen once among many other unrelated words, note {number}")
        assert store.search(query, limit=1)[0].memory == best


def test_search_reads_the_same_without_the_materialized_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite before 3.35 has no MATERIALIZED hint: the statement without it ranks alike."""
    with SqliteMemory(tmp_path / "memory.db", semantic=False) as store:
        for number in range(40):
            store.add(f"deploy step {number} uses make release" + " again" * (number % 5))
        store.add("the release notes live in docs", project="/p")
        queries = ["deploy release", "release", "deploy docs nothing", "make"]
        hinted = [[hit.memory.id for hit in store.search(q, project="/p")] for q in queries]
        monkeypatch.setattr("relay.services.memory.sqlite._MATERIALIZE", False)
        plain = [[hit.memory.id for hit in store.search(q, project="/p")] for q in queries]
    assert plain == hinted and all(hinted)


def test_all_words_first_then_any_word(store: SqliteMemory) -> None:
    both = store.add("redis cache eviction policy")
    one = store.add("redis connection pool")
    store.add("memcached eviction")
    # Those with every word first; then, up to the limit, those with any.
    assert [hit.memory for hit in store.search("redis eviction")][:1] == [both]
    assert len(store.search("redis eviction")) == 3
    assert [hit.memory for hit in store.search("redis eviction", limit=1)] == [both]
    assert {hit.memory.id for hit in store.search("redis nonexistentword")} == {both.id, one.id}


@pytest.mark.parametrize("query", FTS_SYNTAX)
def test_fts_syntax_in_a_query_never_raises(store: SqliteMemory, query: str) -> None:
    store.add('notes: foo AND bar, NEAR(a b) "quoted" (a) -x col:val ***')
    hits = store.search(query)
    assert isinstance(hits, list)


def test_fts_syntax_is_taken_literally(store: SqliteMemory) -> None:
    literal = store.add("the AND gate and the NEAR field")
    store.add("something else")
    assert [hit.memory for hit in store.search("NEAR")] == [literal]
    assert store.search("") == []
    assert store.search("*** ( ) : -") == []
    assert build_match('say "hi" AND (x') == '"say" AND "hi" AND "x"'  # "and": a stop word
    assert build_match("the AND NEAR") == '"near"'
    assert build_match("the and") == '"the" AND "and"'  # nothing else to look for


def test_stop_words_do_not_decide_a_search(store: SqliteMemory) -> None:
    wanted = store.add("run the test suite with make test")
    for number in range(5):
        store.add(f"how do we do what is the thing number {number} for you")
    assert [hit.memory for hit in store.search("how do I run the tests")][:1] == [wanted]


def test_any_word_finds_an_old_memory_with_a_rare_word(store: SqliteMemory) -> None:
    """No memory has every word: the one with the rare word comes first, however many
    newer memories have the common one (each word brings its own newest candidates)."""
    rare = store.add("the zanzibar cluster needs a manual failover")
    store.import_memories(
        Memory(
            id=f"{number:08x}",
            content=f"deploy note {number}",
            created_at=now_iso(),
        )
        for number in range(SEARCH_CANDIDATES + 200)
    )
    hits = store.search("zanzibar deploy")
    assert hits[0].memory.id == rare.id


def test_content_is_stored_exactly(store: SqliteMemory) -> None:
    texts = [
        "naïve café — 日本語 — emoji 🚀 — RTL עברית",
        "line one\nline two\r\n\ttabbed\n\n",
        "x" * 100_000 + "\n" + "ünïcode " * 1000,
        "  leading and trailing spaces  ",
        "quote ' double \" backslash \\ nul-free",
    ]
    saved = [store.add(text, tags=["ünï", "with space"]) for text in texts]
    store.close()  # read back through a new connection, from the file
    for memory, text in zip(saved, texts, strict=True):
        got = store.get(memory.id)
        assert got is not None
        assert got.content == text
        assert got.tags == ["ünï", "with space"]
    assert [hit.memory.id for hit in store.search("日本語")] == [saved[0].id]


def test_export_import_keeps_everything(store: SqliteMemory, tmp_path: Path) -> None:
    store.import_memories(
        [Memory(id="abcdef01", content="oldest", tags=["a"], created_at="2021-05-06T07:08:09.123Z")]
    )
    store.add("global note", tags=["x", "y"], agent="codex")
    store.add("project note", project="/src/p", agent="claude")
    exported = list(store.export())
    assert [memory.content for memory in exported] == ["oldest", "global note", "project note"]

    stream = io.StringIO()
    assert write_jsonl(exported, stream) == 3
    stream.seek(0)
    with SqliteMemory(tmp_path / "fresh" / "memory.db") as fresh:
        assert fresh.import_memories(read_jsonl(stream)) == ImportCounts(added=3)
        assert list(fresh.export()) == exported
        assert [hit.memory.id for hit in fresh.search("oldest")] == ["abcdef01"]


def test_import_replaces_an_existing_id_and_its_index_entry(store: SqliteMemory) -> None:
    original = store.add("kiwi fruit", tags=["food"])
    replacement = Memory(
        id=original.id, content="mango fruit", tags=["new"], created_at="2022-02-02T02:02:02.000Z"
    )
    assert store.import_memories([replacement]) == ImportCounts(updated=1)
    assert store.get(original.id) == replacement
    # The old content's index entry is gone (by words: by meaning, kiwi is near mango).
    with SqliteMemory(store.path, semantic=False) as words:
        assert words.search("kiwi") == []
    assert [hit.memory for hit in store.search("mango")] == [replacement]
    assert len(list(store.export())) == 1


def test_export_pages_through_many_memories(store: SqliteMemory) -> None:
    memories = [
        Memory(id=f"{index:08x}", content=f"note {index}", created_at="2023-01-01T00:00:00.000Z")
        for index in range(2500)
    ]
    store.import_memories(memories)
    assert [memory.id for memory in store.export()] == [memory.id for memory in memories]


def test_jsonl_bad_line_names_the_line() -> None:
    good = Memory(id="00000001", content="fine", created_at="2024-01-01T00:00:00.000Z")
    stream = io.StringIO()
    write_jsonl([good], stream)
    lines = stream.getvalue() + "\n" + '{"id": 1, "content": "x", "created_at": "y"}\n'
    with pytest.raises(MemoryFileError) as caught:
        list(read_jsonl(io.StringIO(lines), source="memories.jsonl"))
    assert caught.value.line == 3
    assert caught.value.source == "memories.jsonl"
    assert str(caught.value).startswith("memories.jsonl:3: ")
    assert "$.id" in str(caught.value)

    with pytest.raises(MemoryFileError) as caught:
        list(read_jsonl(io.StringIO(stream.getvalue() + "{not json\n"), source="m.jsonl"))
    assert caught.value.line == 2


def test_threads_share_one_store(store: SqliteMemory) -> None:
    def save(worker: int) -> None:
        for index in range(25):
            store.add(f"thread {worker} note {index}")

    threads = [threading.Thread(target=save, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(list(store.export())) == 100


def test_eight_processes_saving_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared" / "memory.db"
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from relay.services.memory.sqlite import SqliteMemory
        with SqliteMemory(Path(sys.argv[1]), busy_timeout=30) as store:
            for index in range(50):
                store.add(f"process {sys.argv[2]} memory {index}", tags=["stress"])
        """
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", script, str(path), str(worker)])
        for worker in range(8)
    ]
    assert [process.wait(timeout=60) for process in processes] == [0] * 8
    with SqliteMemory(path) as store:
        memories = list(store.export())
        assert len(memories) == 400
        assert len({memory.id for memory in memories}) == 400
        assert len(store.search("stress", limit=1000)) == 400


def test_corrupt_file_raises_memory_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    path.write_bytes(b"this is not a SQLite database at all\n" * 200)
    with SqliteMemory(path) as store, pytest.raises(MemoryStoreError) as caught:
        store.list()
    assert caught.value.store == str(path)
    assert str(path) in str(caught.value)
    assert "corrupt" in caught.value.message


def test_folder_that_cannot_be_created_raises_memory_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    path = blocker / "state" / "memory.db"
    with SqliteMemory(path) as store, pytest.raises(MemoryStoreError) as caught:
        store.add("x")
    assert caught.value.store == str(path)
    assert "cannot create the folder" in caught.value.message


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="root ignores file modes, so chmod cannot make the database read-only",
)
def test_read_only_database_raises_memory_error(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    path = folder / "memory.db"
    with SqliteMemory(path) as store:
        store.add("saved before it became read-only")
    path.chmod(0o444)
    folder.chmod(0o555)
    try:
        with SqliteMemory(path) as store, pytest.raises(MemoryStoreError) as caught:
            store.add("x")
        assert caught.value.store == str(path)
    finally:
        folder.chmod(0o755)
        path.chmod(0o644)


def test_read_only_connection_raises_memory_error_saying_so(tmp_path: Path) -> None:
    # Runs as root too (where chmod cannot make a file read-only): query_only makes SQLite
    # refuse writes with the same SQLITE_READONLY a read-only file gives.
    path = tmp_path / "memory.db"
    with SqliteMemory(path) as store:
        store.add("exists")
        store._connect().execute("PRAGMA query_only = 1")
        with pytest.raises(MemoryStoreError) as caught:
            store.add("refused")
        assert caught.value.store == str(path)
        assert "read-only" in caught.value.message
        assert [memory.content for memory in store.list()] == ["exists"]


def test_locked_database_raises_memory_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with SqliteMemory(path) as store:
        store.add("exists")
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with SqliteMemory(path, busy_timeout=0.1) as store:
            with pytest.raises(MemoryStoreError) as caught:
                store.add("blocked")
            assert caught.value.store == str(path)
            assert "locked" in caught.value.message
            assert [memory.content for memory in store.list()] == ["exists"]  # WAL: reads go on
        holder.execute("ROLLBACK")
    finally:
        holder.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA user_version = 99")
    connection.close()
    with SqliteMemory(path) as store, pytest.raises(MemoryStoreError, match="newer relay"):
        store.list()


def test_a_small_project_finds_its_memories_under_many_newer_ones_elsewhere(
    store: SqliteMemory,
) -> None:
    mine = store.add("deploy with the blue-green script", project="/small")
    store.import_memories(
        Memory(
            id=f"{number:08x}",
            content=f"deploy note {number}",
            project="/big",
            created_at=now_iso(),
        )
        for number in range(SEARCH_CANDIDATES + 200)
    )
    assert [hit.memory.id for hit in store.search("deploy", project="/small")] == [mine.id]
    assert [hit.memory.id for hit in store.search("deploy script", project="/small")] == [mine.id]
    assert len(store.search("deploy", project="/big")) == 10


# -- the same content saved twice -------------------------------------------------------------


def test_the_same_content_saved_twice_is_one_memory(store: SqliteMemory) -> None:
    first = store.save("use uv, not pip", tags=["tooling"], project="/p")
    assert first.existing is False
    again = store.save("use uv, not pip", tags=["tooling"], agent="other", project="/p")
    assert again == SavedMemory(memory=first.memory, existing=True)  # agent and date kept
    assert store.add("  use uv, not pip\n", project="/p").id == first.memory.id
    assert store.list(project="/p") == [first.memory]
    # Case and inner whitespace count; another project's memory is never found.
    assert store.save("Use uv, not pip", project="/p").existing is False
    assert store.save("use uv,  not pip", project="/p").existing is False
    other = store.save("use uv, not pip", project="/q")
    assert other.existing is False and other.memory.project == "/q"
    assert len(store.list(project="/p")) == 3


def test_a_project_save_finds_a_global_memory_but_not_the_other_way(store: SqliteMemory) -> None:
    shared = store.save("always sign commits")
    found = store.save("always sign commits", project="/p")
    assert found == SavedMemory(memory=shared.memory, existing=True)
    mine = store.save("run make check", project="/p")
    wider = store.save("run make check")  # a global save is wider than the project's
    assert wider.existing is False and wider.memory.project is None
    # The project's own copy is preferred to the global one when both exist.
    assert store.save("run make check", project="/p").memory.id == mine.memory.id


def test_a_second_save_adds_its_tags_after_the_memorys_own(store: SqliteMemory) -> None:
    first = store.add("deploys go through make release", tags=["deploy", "make"])
    again = store.save("deploys go through make release", tags=["make", "release"])
    assert again.existing and again.memory.tags == ["deploy", "make", "release"]
    assert store.get(first.id) == again.memory
    assert [hit.memory.id for hit in store.search("release")] == [first.id]
    assert store.search("deploys") != []  # the index was updated, not duplicated
    assert len(store.search("deploy", limit=100)) == 1


def test_eight_processes_saving_the_same_line_make_one_memory(tmp_path: Path) -> None:
    path = tmp_path / "shared" / "memory.db"
    script = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from relay.services.memory.sqlite import SqliteMemory
        with SqliteMemory(Path(sys.argv[1]), busy_timeout=30) as store:
            ids = {store.add(f"the shared fact {index % 5}", project="/p").id for index in range(40)}
            print(" ".join(sorted(ids)))
        """
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(path)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(8)
    ]
    outputs = [process.communicate(timeout=60)[0] for process in processes]
    assert [process.returncode for process in processes] == [0] * 8
    assert len(set(outputs)) == 1  # every process got the same five ids
    with SqliteMemory(path) as store:
        assert len(list(store.export())) == 5


_SCHEMA_1 = """
CREATE TABLE memories (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    content TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    agent TEXT,
    project TEXT,
    created_at TEXT NOT NULL,
    scope TEXT GENERATED ALWAYS AS (
        CASE WHEN project IS NULL THEN 'global' ELSE 'p' || hex(project) END
    ) VIRTUAL
);
CREATE INDEX memories_created ON memories(created_at);
CREATE VIRTUAL TABLE memories_fts USING fts5(
    content, tags, scope,
    content='memories', content_rowid='seq', tokenize='porter unicode61'
);
CREATE TRIGGER memories_after_insert AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, content, tags, scope)
    VALUES (new.seq, new.content, new.tags, new.scope);
END;
CREATE TRIGGER memories_after_delete AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content, tags, scope)
    VALUES ('delete', old.seq, old.content, old.tags, old.scope);
END;
CREATE TRIGGER memories_after_update AFTER UPDATE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, content, tags, scope)
    VALUES ('delete', old.seq, old.content, old.tags, old.scope);
    INSERT INTO memories_fts(rowid, content, tags, scope)
    VALUES (new.seq, new.content, new.tags, new.scope);
END;
PRAGMA user_version = 1;
"""


def test_a_schema_1_store_with_copies_is_upgraded_and_keeps_them(tmp_path: Path) -> None:
    """A store written before saves were deduplicated (schema 1, as relay wrote it) that
    already holds copies: opening it upgrades it without failing, keeps every memory,
    and later saves of that content find the oldest copy."""
    path = tmp_path / "memory.db"
    old = sqlite3.connect(path)
    old.executescript(_SCHEMA_1)
    rows = [
        ("0000000a", "use uv, not pip", '["tooling"]', None, "/p", "2025-01-01T00:00:00.000Z"),
        ("0000000b", "use uv, not pip", '["tooling"]', None, "/p", "2025-01-02T00:00:00.000Z"),
        ("0000000c", "sign commits ", "[]", "claude", None, "2025-01-03T00:00:00.000Z"),
    ]
    old.executemany(
        "INSERT INTO memories (id, content, tags, agent, project, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )
    old.commit()
    old.close()
    with SqliteMemory(path) as store:
        assert [memory.id for memory in store.list(project="/p")] == [
            "0000000c",
            "0000000b",
            "0000000a",
        ]
        assert store.save("use uv, not pip", project="/p").memory.id == "0000000a"
        assert store.save("sign commits", project="/p").memory.id == "0000000c"
        assert {hit.memory.id for hit in store.search("uv", project="/p")} == {
            "0000000a",
            "0000000b",
        }
        assert store.save("a new fact", project="/p").existing is False
        # The index still holds each memory once (checked in full below).
        assert len(store.search("pip", project="/p", limit=100)) == 2
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert check.execute("SELECT count(*) FROM memories WHERE digest IS NULL").fetchone() == (
            0,
        )
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        check.execute("INSERT INTO memories_fts(memories_fts) VALUES ('integrity-check')")
        check.execute("INSERT INTO memories_recent(memories_recent) VALUES ('integrity-check')")
        assert check.execute("SELECT floor FROM memory_recent").fetchone() == (RESTING,)
    finally:
        check.close()


# -- import counts ---------------------------------------------------------------------------


def test_import_counts_added_present_and_updated(store: SqliteMemory) -> None:
    memories = [
        Memory(id="0000000a", content="one", project="/p", created_at="2025-01-01T00:00:00.000Z"),
        Memory(id="0000000b", content="two", created_at="2025-01-02T00:00:00.000Z"),
    ]
    store.add("already here")
    assert store.import_memories(memories) == ImportCounts(added=2)
    assert store.import_memories(memories) == ImportCounts(present=2)
    edited = msgspec.structs.replace(memories[0], tags=["new"])
    assert store.import_memories([edited, memories[1]]) == ImportCounts(present=1, updated=1)
    assert store.get("0000000a") == edited
    # A new id with content already stored (in its project or globally) is not added.
    copies = [
        Memory(id="0000000c", content="two ", project="/p", created_at=now_iso()),
        Memory(id="0000000d", content="one", project="/q", created_at=now_iso()),
        Memory(id="0000000e", content="already here", created_at=now_iso()),
    ]
    assert store.import_memories(copies) == ImportCounts(added=1, present=2)
    assert store.get("0000000c") is None and store.get("0000000d") is not None
    assert store.import_memories([]) == ImportCounts()


def test_an_export_with_copies_comes_back_whole_into_an_empty_store(
    store: SqliteMemory, tmp_path: Path
) -> None:
    copies = [
        Memory(id=f"0000000{n}", content="the same", created_at=f"2025-01-0{n}T00:00:00.000Z")
        for n in (1, 2)
    ]
    with SqliteMemory(tmp_path / "fresh.db") as fresh:
        assert fresh.import_memories(copies) == ImportCounts(added=2)
        assert list(fresh.export()) == copies
        assert fresh.import_memories([copies[0], copies[0]]) == ImportCounts(present=2)
    # Into a store that is not empty, the file's memories are not compared with each other.
    store.add("something else")
    assert store.import_memories(copies) == ImportCounts(added=2)

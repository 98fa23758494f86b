"""The recent index of the SQLite memory store (schema 4): which memories it holds
through saves, updates, deletes, imports and upgrades, and what a search finds with it.

A window of 32 memories stands for RECENT_MEMORIES (65,536), so a few hundred memories
cover every case."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from sqlite_steps import vm_steps

import relay.services.memory.sqlite as sqlite_module
from relay.services.memory.model import Memory
from relay.services.memory.sqlite import RESTING, SqliteMemory, now_iso

WINDOW = 32


@pytest.fixture
def small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("relay.services.memory.sqlite.RECENT_MEMORIES", WINDOW)


@pytest.fixture
def store(tmp_path: Path, small_window: None) -> Iterator[SqliteMemory]:
    with SqliteMemory(tmp_path / "memory.db", semantic=False) as memory:
        yield memory


def _indexed(path: Path) -> tuple[int, set[int], set[int]]:
    """(the floor, the seqs of every memory, the seqs the recent index holds). Each
    memory the recent index holds must be indexed there exactly as in the whole store's
    index: the same words at the same places, none left from an earlier version."""
    connection = sqlite3.connect(path)
    try:
        (floor,) = connection.execute("SELECT floor FROM memory_recent").fetchone()
        every = {seq for (seq,) in connection.execute("SELECT seq FROM memories")}
        for name, index in (("recent_words", "memories_recent"), ("all_words", "memories_fts")):
            connection.execute(
                f"CREATE VIRTUAL TABLE temp.{name} USING fts5vocab(main, {index}, instance)"
            )
        recent = set(connection.execute("SELECT term, doc, col, offset FROM temp.recent_words"))
        held = {doc for _, doc, _, _ in recent}
        whole = connection.execute("SELECT term, doc, col, offset FROM temp.all_words")
        assert recent == {entry for entry in whole if entry[1] in held}
        for index in ("memories_fts", "memories_recent"):
            connection.execute(f"INSERT INTO {index}({index}) VALUES ('integrity-check')")
        return floor, every, held
    finally:
        connection.close()


def _assert_in_step(path: Path) -> None:
    """The recent index holds exactly the memories above the floor, and the floor is at
    least WINDOW and at most WINDOW + WINDOW // 16 below the newest seq (deletes make
    the index hold fewer; the floor stays); or it rests, empty, in a store whose newest
    seq is at most twice WINDOW."""
    floor, every, held = _indexed(path)
    assert held == {seq for seq in every if seq > floor}
    newest = max(every)
    if floor == RESTING:
        assert newest <= 2 * WINDOW and held == set()
    else:
        assert WINDOW <= newest - floor <= WINDOW + WINDOW // 16


def _marker(number: int) -> str:
    return f"marker{number:04d}x"


def test_the_recent_index_follows_saves_updates_and_deletes(
    store: SqliteMemory, tmp_path: Path
) -> None:
    saved = [store.add(f"{_marker(number)} alpha note") for number in range(200)]
    _assert_in_step(tmp_path / "memory.db")
    # Deleting memories above the floor and below it.
    for memory in saved[5:15] + saved[-10:-5]:
        assert store.delete(memory.id)
    _assert_in_step(tmp_path / "memory.db")
    # Changing one above the floor and one below (an import with the same id updates).
    for memory in (saved[-1], saved[20]):
        marker = memory.content.split()[0]
        changed = msgspec.structs.replace(memory, content=f"{marker} beta changed", tags=["t"])
        assert store.import_memories([changed]).updated == 1
    _assert_in_step(tmp_path / "memory.db")
    assert [hit.memory.id for hit in store.search("beta")] == [saved[-1].id, saved[20].id]
    # More saves move the floor on again.
    for number in range(200, 260):
        store.add(f"{_marker(number)} alpha note")
    _assert_in_step(tmp_path / "memory.db")


def test_the_recent_index_rests_until_the_store_is_twice_its_size(
    store: SqliteMemory, tmp_path: Path
) -> None:
    path = tmp_path / "memory.db"
    for number in range(2 * WINDOW):
        store.add(f"{_marker(number)} alpha note")
    assert _indexed(path)[0] == RESTING and _indexed(path)[2] == set()
    # The save that takes the store past twice the window starts it, itself included.
    store.add(f"{_marker(2 * WINDOW)} alpha note")
    floor, every, held = _indexed(path)
    assert (floor, held) == (WINDOW + 1, {seq for seq in every if seq > WINDOW + 1})
    assert len(held) == WINDOW
    _assert_in_step(path)


def test_a_bulk_load_fills_the_recent_index_once(tmp_path: Path, small_window: None) -> None:
    memories = [
        Memory(id=f"{number:08x}", content=f"{_marker(number)} alpha", created_at=now_iso())
        for number in range(300)
    ]
    with SqliteMemory(tmp_path / "memory.db", semantic=False) as store:
        assert store.import_memories(memories).added == 300
        _assert_in_step(tmp_path / "memory.db")
        floor, _, held = _indexed(tmp_path / "memory.db")
        assert (floor, len(held)) == (300 - WINDOW, WINDOW)
        # An import into a store that is not empty goes row by row, through the triggers.
        more = [
            Memory(id=f"{number:08x}", content=f"{_marker(number)} alpha", created_at=now_iso())
            for number in range(300, 340)
        ]
        assert store.import_memories(more).added == 40
        _assert_in_step(tmp_path / "memory.db")
    # A bulk load too small for the recent index leaves it resting.
    with SqliteMemory(tmp_path / "small.db", semantic=False) as store:
        assert store.import_memories(memories[: 2 * WINDOW]).added == 2 * WINDOW
        assert _indexed(tmp_path / "small.db")[::2] == (RESTING, set())


@pytest.fixture
def ranked_in(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """The indexes of each ranking statement a search runs (one per FTS5 query)."""
    seen: list[tuple[str, ...]] = []
    ranked_sql = sqlite_module._ranked_sql

    def spy(indexes: tuple[str, ...], materialize: bool) -> str:
        seen.append(indexes)
        return ranked_sql(indexes, materialize)

    monkeypatch.setattr(sqlite_module, "_ranked_sql", spy)
    return seen


def test_a_common_word_ranks_the_same_as_over_the_whole_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ranked_in: list[tuple[str, ...]]
) -> None:
    """Memories alike but for their length: ranked in the recent index, as the whole
    store ranks them (a window of 1,000 rests: the whole store's index). 20 candidates
    and 10 ranked, so that the newest hold all of them and no search in scope follows."""
    monkeypatch.setattr(sqlite_module, "SEARCH_CANDIDATES", 20)
    monkeypatch.setattr(sqlite_module, "RANKED", 10)
    texts = [f"{_marker(number)} deploy the api" + " now" * (number % 7) for number in range(300)]
    found = {}
    for window in (WINDOW, 1000):
        monkeypatch.setattr(sqlite_module, "RECENT_MEMORIES", window)
        with SqliteMemory(tmp_path / f"{window}.db", semantic=False) as store:
            for text in texts:
                store.add(text)
            ranked_in.clear()
            found[window] = [hit.memory.content for hit in store.search("deploy", limit=10)]
            index = "memories_recent" if window == WINDOW else "memories_fts"
            assert ranked_in == [(index,)]
    assert found[WINDOW] == found[1000]
    assert len(found[WINDOW]) == 10


def test_a_word_found_only_below_the_floor_is_searched_in_the_whole_store(
    store: SqliteMemory, monkeypatch: pytest.MonkeyPatch, ranked_in: list[tuple[str, ...]]
) -> None:
    monkeypatch.setattr(sqlite_module, "SEARCH_CANDIDATES", 20)
    rare = store.add(f"{_marker(0)} zeppelin hangar notes")
    both = store.add(f"{_marker(1)} zeppelin deploy checklist")
    for number in range(2, 200):
        store.add(f"{_marker(number)} deploy checklist")
    assert [hit.memory for hit in store.search("zeppelin")] == [both, rare]
    assert ranked_in == [("memories_fts",)]
    # One word common among the newest, the other only below the floor: the memories
    # with any of them are ranked in one statement, "checklist" in the recent index and
    # "zeppelin" in the whole store.
    ranked_in.clear()
    hits = store.search("zeppelin checklist", limit=50)
    assert hits[0].memory == both and rare in [hit.memory for hit in hits]
    assert ("memories_fts", "memories_recent") in ranked_in
    # A project's memories below the floor and older than the candidates of other
    # projects, which fill the recent index: the search in scope finds them.
    mine = store.add(f"{_marker(500)} rollout plan for mine", project="/mine")
    for number in range(501, 600):
        store.add(f"{_marker(number)} rollout plan", project="/other")
    assert [hit.memory for hit in store.search("rollout", project="/mine")] == [mine]


def test_an_older_store_gets_its_recent_index_on_opening(
    tmp_path: Path, small_window: None
) -> None:
    path = tmp_path / "memory.db"
    with SqliteMemory(path, semantic=False) as store:
        for number in range(100):
            store.add(f"{_marker(number)} gamma")
    # As schema 3 left it: no recent index.
    connection = sqlite3.connect(path)
    connection.executescript(
        """
        DROP TABLE memories_recent;
        DROP TABLE memory_recent;
        PRAGMA user_version = 3;
        """
    )
    connection.close()
    with SqliteMemory(path, semantic=False) as store:
        assert len(store.search("gamma", limit=100)) == 100
    _assert_in_step(path)
    floor, _, held = _indexed(path)
    assert (floor, len(held)) == (100 - WINDOW, WINDOW)


def _steps_of_a_save(path: Path, memories: int) -> int:
    """SQLite VM steps of one save into a store of `memories` memories (bulk-loaded)."""
    with SqliteMemory(path, semantic=False) as store:
        store.import_memories(
            Memory(id=f"{number:08x}", content=f"{_marker(number)} alpha", created_at=now_iso())
            for number in range(memories)
        )
        return vm_steps(store._connect(), lambda: store.add(f"{_marker(memories)} one more"))


def test_a_save_reads_no_more_in_a_larger_store(tmp_path: Path, small_window: None) -> None:
    """The trigger's statements go from the one-row table to a range of seq: a save into
    a store of 5,000 memories takes about the steps of one into 200 (SQLite could
    otherwise walk every memory on each save)."""
    small = _steps_of_a_save(tmp_path / "small.db", 200)
    large = _steps_of_a_save(tmp_path / "large.db", 5000)
    assert large < small * 1.5, (small, large)


def test_a_store_without_its_recent_row_still_saves_and_searches(
    store: SqliteMemory, tmp_path: Path
) -> None:
    """A file edited by hand (the recent index's row deleted): every query is ranked in
    the whole store, and saves go on."""
    for number in range(100):
        store.add(f"{_marker(number)} delta")
    connection = sqlite3.connect(tmp_path / "memory.db")
    with connection:
        connection.execute("DELETE FROM memory_recent")
    connection.close()
    newest = store.add(f"{_marker(100)} delta")
    assert store.search("delta", limit=1)[0].memory == newest
    assert len(store.search("delta", limit=200)) == 101


def test_a_search_counts_and_ranks_in_one_snapshot(
    store: SqliteMemory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process forgets a memory between the count in the recent index and the
    ranking: the ranking still sees what the count saw (one read transaction), so the
    query ranked in the recent index brings all its candidates."""
    monkeypatch.setattr("relay.services.memory.sqlite.SEARCH_CANDIDATES", 20)
    for number in range(150):
        store.add(f"{_marker(number)} alpha old")
    newest = [
        store.add(f"{_marker(number)} {'alpha' if number >= 170 else 'other'} new")
        for number in range(150, 190)
    ][-1]
    other = SqliteMemory(tmp_path / "memory.db", semantic=False)
    ranked_sql = sqlite_module._ranked_sql
    forgotten: list[str] = []

    def forget_in_between(indexes: tuple[str, ...], materialize: bool) -> str:
        if not forgotten:
            assert indexes == ("memories_recent",)
            forgotten.append(newest.id)
            assert other.delete(newest.id)
        return ranked_sql(indexes, materialize)

    monkeypatch.setattr(sqlite_module, "_ranked_sql", forget_in_between)
    # Ranked in the recent index as counted, its 20 candidates brought (fewer than
    # RANKED: the search goes on in the project's scope, in the whole store, as always).
    # Counted and ranked in two snapshots, it brought 19 and stopped there.
    assert len(store.search("alpha", limit=20)) == 20 and forgotten
    other.close()

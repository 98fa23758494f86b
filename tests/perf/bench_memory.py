"""Memory store speed figures. Run: .venv/bin/python tests/perf/bench_memory.py

Not a pytest module. Measures saves per second (one `add` at a time, each its own
transaction, as agents save them) and search latency over a store of 100,000 memories
bulk-loaded with import_memories. The text is synthetic but shaped like what agents
save: build and deploy notes, file paths, commands, error messages, preferences, with a
Zipf-like word frequency so some words are common and most are rare. Queries mix single
words, two- and three-word questions, phrases with FTS syntax in them, and misses.

Then the same search over 1,000,000 memories (the store is built once per run; the
time it took is printed), and the relevance set of tests/memory_relevance.py (recall@3
and MRR), so that speed is never bought with worse answers. Beyond 131,072 memories a
search ranks a query with a common word in the store's recent index (spec/memory.md):
there the bench also ranks AGREEMENT_QUERIES in 11 scopes by words in the whole store
(the recent index widened to hold every memory) and prints how many of the results
agree: the same first memory, the same first three, the same ten in order.

Every figure for hybrid search (words and meaning, the default when an extra is
installed) and for search by words alone (`memory.semantic: false`, or without the
extras), on the same store; hybrid twice: with the bench's queries, whose embeddings a
process keeps after the first (semantic.embed_query), and with each query embedded
anew, with the time of each stage of those (the query's embedding, the sign-code scan,
FTS5, the re-rank, the fusion). The backfill's rate and its CPU a memory (the model's
process counted) are printed too. `--no-relevance` and `--no-saves` measure speed only.

Targets: by words (DESIGN §10) p50 < 5 ms and p99 < 15 ms at 100,000, p50 < 15 ms at
1,000,000; hybrid p50 < 10 ms and p99 < 30 ms at 100,000, p50 < 50 ms at 1,000,000;
hybrid recall@3 on the paraphrase questions at least 20 points above words alone, and
no worse on the keyword questions; saves counting their embedding at least half as
many per second as saves alone measured in the same run (a save itself does what it
did before embeddings, plus listing the memory as pending: the same rate, measured
against the commit before them in the closing note of 2026-11-27). Exits 1 when one
is missed.
Issue 34 added: hybrid recall@3 at least 0.6 on the paraphrase questions of
tests/memory_relevance.py and on the larger set of tests/memory_paraphrases.py (102
questions, printed as "larger paraphrase"), keyword recall@3 at least 0.902, and the
backfill of 100,000 memories (their embedding, `catch_up`) under 60 s. With MiniLM (the
`meaning` extra) the embeddings cost far more than wordllama's: the backfill and the
saves counted with their embedding are measured (the backfill by relay's engine with
AMX: 58 to 91 s on the shared machine at load average 1.7 to 6.9, 55 to 69 s
before the model's threads stopped waiting for each other; spec/memory.md).
`--memories N` measures one size only.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from relay.services.memory import semantic
from relay.services.memory.model import Memory
from relay.services.memory.sqlite import RESTING, SqliteMemory

TARGET_SEARCH_P50_MS = 5.0
TARGET_SEARCH_P99_MS = 15.0
TARGET_MILLION_P50_MS = 15.0
TARGET_HYBRID_P50_MS = 10.0
TARGET_HYBRID_P99_MS = 30.0
TARGET_HYBRID_MILLION_P50_MS = 50.0
TARGET_PARAPHRASE_GAIN = 0.20
TARGET_PARAPHRASE_RECALL = 0.6
"""Issue 34: hybrid recall@3 on both paraphrase sets, with keyword recall@3 no worse than
KEYWORD_RECALL_BEFORE (0.902, by wordllama before it), and a backfill of 100,000
memories in under TARGET_BACKFILL_S."""
KEYWORD_RECALL_BEFORE = 0.902
TARGET_BACKFILL_S = 60.0
SAVES = 5_000
MEMORIES = 100_000
MILLION = 1_000_000
SEARCHES = 2_000


def _words(text: str) -> list[str]:
    return text.split()


PROJECTS = [f"/home/dev/src/project-{index}" for index in range(20)]

_SUBJECTS = _words(
    "deploy build test lint release migration database cache queue worker server client "
    "router handler schema config settings token session auth login logout payment invoice "
    "user account profile upload download image thumbnail search index query report export "
    "import backup restore cluster node pod container volume network proxy certificate "
    "logging metrics tracing alert dashboard pipeline runner artifact package dependency "
    "lockfile fixture mock snapshot benchmark profiler memory leak timeout retry webhook"
)
_VERBS = _words(
    "use prefer avoid run check restart rebuild update pin bump skip mock retry deploy "
    "configure install remove rename split merge document"
)
_TOOLS = _words(
    "uv pip poetry npm pnpm yarn cargo go make bazel docker kubectl helm terraform ansible "
    "pytest jest vitest mypy ruff eslint prettier black isort postgres redis kafka nginx "
    "sqlite git gh curl jq"
)
_FILLER = _words(
    "the a an of to in for on with before after when because so and or but not always "
    "never usually only first then also instead"
)
_TEMPLATES = (
    "{verb} {tool} for the {subject} step; {filler} {filler} {subject2} breaks otherwise",
    "the {subject} lives in src/{subject2}/{subject}.py and is tested by tests/test_{subject}.py",
    "to {verb} the {subject}: `{tool} {subject2} --{subject}` {filler} {filler} {verb2} {subject2}",
    "{subject} error {code}: {tool} says '{subject2} {filler} found'; fix: {verb} the {subject2}",
    "user prefers {tool} over {tool2} for {subject}; never {verb} {subject2} without asking",
    "{tool} {subject} is flaky on CI {filler} {filler} the {subject2}; {verb} it with a {subject3}",
    "remember: {subject} and {subject2} share the {subject3} {filler} {verb} {tool} first",
)
_QUERIES = (
    "deploy",
    "deploying the worker",
    "redis cache",
    "how do I run the tests",
    "postgres migration error",
    "kubectl restart pod",
    "user prefers",
    "flaky CI",
    '"unbalanced quote AND (paren',
    "NEAR(token session)",
    "webhook retry timeout",
    "thumbnail",
    "xyzzy nothing matches this",
    "schema lockfile dependency",
)


AGREEMENT_QUERIES = (
    *_QUERIES,
    "redis",
    "pytest fixture",
    "docker container volume",
    "terraform",
    "gh pr",
    "login token session",
    "backup restore",
    "cargo",
    "invoice payment",
    "helm chart",
)


def _zipf(rng: random.Random, words: list[str]) -> str:
    # Early words far more often than late ones, as in real text.
    return words[min(int(rng.paretovariate(1.0)) - 1, len(words) - 1)]


def generate(count: int, seed: int = 7) -> list[Memory]:
    """`count` varied memories with dates over the last two years, oldest first."""
    rng = random.Random(seed)
    subjects = _SUBJECTS[:]
    rng.shuffle(subjects)
    start = datetime.now(UTC) - timedelta(days=730)
    step = timedelta(days=730) / count
    memories: list[Memory] = []
    for index in range(count):
        text = rng.choice(_TEMPLATES).format(
            verb=rng.choice(_VERBS),
            verb2=rng.choice(_VERBS),
            tool=_zipf(rng, _TOOLS),
            tool2=rng.choice(_TOOLS),
            subject=_zipf(rng, subjects),
            subject2=rng.choice(subjects),
            subject3=rng.choice(subjects),
            filler=rng.choice(_FILLER),
            code=f"E{rng.randrange(1000, 9999)}",
        )
        created = start + step * index
        memories.append(
            Memory(
                id=f"{index:08x}",
                content=text,
                tags=rng.sample(_SUBJECTS, rng.randrange(0, 3)),
                agent=rng.choice(("claude", "codex", "gemini", None)),
                project=rng.choice((*PROJECTS, None, None)),
                created_at=created.strftime("%Y-%m-%dT%H:%M:%S.")
                + f"{created.microsecond // 1000:03d}Z",
            )
        )
    return memories


def bench_saves(folder: Path, saves: int) -> tuple[float, float]:
    """(saves per second, one add() (one transaction) each; the same counting the time
    to embed them, which the next search does)."""
    texts = [memory.content for memory in generate(saves, seed=11)]
    with SqliteMemory(folder / "saves.db") as store:
        store.add("warm up")  # opening and creating the schema is not a save
        store.catch_up()  # nor is loading the model
        started = time.perf_counter()
        for text in texts:
            store.add(text, tags=["bench"], project=PROJECTS[0])
        saved = time.perf_counter() - started
        store.catch_up()
        embedded = time.perf_counter() - started
    return saves / saved, saves / embedded


KINDS = ("words", "hybrid", "hybrid, query new")
"""By words; hybrid (the bench's queries come again and again: their embeddings are kept
after the first, semantic.embed_query); hybrid with the query embedded every time."""


class SearchFigures:
    def __init__(self) -> None:
        self.load = self.embed = 0.0
        self.embed_cpu: float | None = None
        """CPU seconds of the backfill, the model's process included (None: unknown)."""
        self.embed_load = (0.0, 0.0)
        """The machine's load average (1 minute) as the backfill started and ended: on a
        shared machine, the backfill has the cores the others leave it."""
        self.timings: dict[str, list[float]] = {kind: [] for kind in KINDS}
        self.stages: dict[str, list[float]] = {}
        """Milliseconds in each stage of each hybrid search whose query is new."""
        self.agreement: tuple[int, int, int, int] | None = None

    def p50(self, kind: str) -> float:
        return statistics.median(self.timings[kind])

    def p99(self, kind: str) -> float:
        timings = sorted(self.timings[kind])
        return timings[min(len(timings) - 1, int(len(timings) * 0.99))]


def bench_search(folder: Path, memories: int, searches: int) -> SearchFigures:
    """Load and embedding seconds, and search timings (hybrid and by words, interleaved)
    over `memories` memories."""
    data = generate(memories)
    rng = random.Random(3)
    folder.mkdir(parents=True, exist_ok=True)
    figures = SearchFigures()
    with (
        SqliteMemory(folder / "search.db") as hybrid,
        SqliteMemory(folder / "search.db", semantic=False) as words,
    ):
        started = time.perf_counter()
        hybrid.import_memories(data)
        figures.load = time.perf_counter() - started
        del data
        semantic.load_embedder().embed(["warm up"])  # the backfill is the embedding alone
        model = _process_cpu(semantic.load_embedder())
        started, cpu, load = time.perf_counter(), time.process_time(), os.getloadavg()[0]
        hybrid.catch_up()  # the backfill: what the first search would do
        figures.embed = time.perf_counter() - started
        figures.embed_load = (load, os.getloadavg()[0])
        if model is not None:
            after = _process_cpu(semantic.load_embedder())
            if after is not None:
                figures.embed_cpu = after - model + time.process_time() - cpu
        stores = {"words": words, "hybrid": hybrid, "hybrid, query new": hybrid}
        for query in _QUERIES:  # warm the page cache, as a long-lived store would be
            for store in stores.values():
                store.search(query, project=PROJECTS[0])
        for _ in range(searches):
            query = rng.choice(_QUERIES)
            project = rng.choice(PROJECTS)
            for kind, store in stores.items():
                if kind == "hybrid, query new":
                    semantic.forget_queries(query)
                    _STAGES.clear()
                started = time.perf_counter()
                store.search(query, project=project, limit=10)
                figures.timings[kind].append((time.perf_counter() - started) * 1000)
                if kind == "hybrid, query new":
                    for stage, took in _STAGES.items():
                        figures.stages.setdefault(stage, []).append(took)
        figures.agreement = bench_agreement(words, folder / "search.db")
    return figures


def _process_cpu(embedder: object) -> float | None:
    """CPU seconds the model's process has used (MiniLM's child), None when the model runs
    in this one or is not known."""
    pid = getattr(embedder, "pid", None)
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_STAGES: dict[str, float] = {}
"""Milliseconds in each stage of the search being measured (see _time_stages)."""


def _time_stages() -> None:
    """Time the stages of a hybrid search (into _STAGES): the query's embedding (the
    round trip to the model's process), the scan of the sign codes, the search by words
    (FTS5), the exact re-rank of the nearest, and the fusion."""
    import functools

    from relay.services.memory import sqlite

    def timed(name: str, function: Any) -> Any:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                took = (time.perf_counter() - started) * 1000
                _STAGES[name] = _STAGES.get(name, 0.0) + took

        return wrapper

    sqlite.embed_query = timed("query embedding", sqlite.embed_query)
    semantic.VectorIndex.nearest = timed("sign-code scan", semantic.VectorIndex.nearest)
    stages = (
        ("_ranked", "by words (FTS5)"),
        ("_finish_nearest", "waiting for meaning, exact re-rank"),
        ("_similarities", "similarity of word matches"),
        ("_fused", "fusion"),
    )
    for method, name in stages:
        setattr(sqlite.SqliteMemory, method, timed(name, getattr(sqlite.SqliteMemory, method)))


def bench_agreement(store: SqliteMemory, path: Path) -> tuple[int, int, int, int] | None:
    """(searches with results, how many of them have the same first memory, the same
    first three, the same ten in the same order) when ranked over the recent index and
    over the whole store; None while the recent index rests (every query is ranked in
    the whole store). Leaves the store's recent index widened to every memory."""
    scopes = [*PROJECTS[:10], None]

    def results() -> list[list[str]]:
        return [
            [hit.memory.id for hit in store.search(query, project=project, limit=10)]
            for query in AGREEMENT_QUERIES
            for project in scopes
        ]

    connection = sqlite3.connect(path)
    try:
        (floor,) = connection.execute("SELECT floor FROM memory_recent").fetchone()
        if floor >= RESTING:
            return None
        recent = results()
        with connection:
            connection.execute("UPDATE memory_recent SET size = 1 << 40")
            connection.execute("INSERT INTO memories_recent(memories_recent) VALUES ('delete-all')")
            connection.execute("UPDATE memory_recent SET floor = 0")
            connection.execute(
                "INSERT INTO memories_recent(rowid, content, tags, scope)"
                " SELECT seq, content, tags, scope FROM memories ORDER BY seq"
            )
        whole = results()
    finally:
        connection.close()
    pairs = [(mine, exact) for mine, exact in zip(recent, whole, strict=True) if exact]
    return (
        len(pairs),
        sum(mine[:1] == exact[:1] for mine, exact in pairs),
        sum(set(mine[:3]) == set(exact[:3]) for mine, exact in pairs),
        sum(mine == exact for mine, exact in pairs),
    )


def bench_relevance() -> dict[tuple[str, str], tuple[float, float]]:
    """recall@3 and MRR over the relevance set, by (search, questions): search "hybrid"
    or "words", questions "keyword" or "paraphrase"."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import memory_relevance as relevance

    figures: dict[tuple[str, str], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="relay-bench-relevance-") as folder:
        path = Path(folder) / "relevance.db"
        for kind, semantic in (("hybrid", True), ("words", False)):
            with SqliteMemory(path, semantic=semantic) as store:
                if kind == "hybrid":
                    store.import_memories(relevance.memories())

                def search(query: str, store: SqliteMemory = store) -> list[str]:
                    hits = store.search(query, project=relevance.PROJECT)
                    return [hit.memory.id for hit in hits]

                figures[kind, "keyword"] = relevance.evaluate(search)
                figures[kind, "paraphrase"] = relevance.evaluate(search, relevance.PARAPHRASES)
        # The larger set (tests/memory_paraphrases.py) among the same memories.
        import memory_paraphrases as paraphrases

        for kind, semantic in (("hybrid", True), ("words", False)):
            with SqliteMemory(path, semantic=semantic) as store:
                if kind == "hybrid":
                    store.import_memories(paraphrases.memories())

                def search_more(query: str, store: SqliteMemory = store) -> list[str]:
                    hits = store.search(query, project=relevance.PROJECT)
                    return [hit.memory.id for hit in hits]

                figures[kind, "larger paraphrase"] = relevance.evaluate(
                    search_more, paraphrases.QUESTIONS
                )
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--saves", type=int, default=SAVES)
    parser.add_argument("--memories", type=int, default=None, help="One size only.")
    parser.add_argument("--searches", type=int, default=SEARCHES)
    parser.add_argument(
        "--no-relevance", action="store_true", help="Skip the relevance sets (speed only)."
    )
    parser.add_argument("--no-saves", action="store_true", help="Skip the saves figure.")
    arguments = parser.parse_args()
    _time_stages()
    try:
        model = semantic.load_embedder()
        print(f"model: {model.name} ({getattr(model, 'engine', '') or 'in this process'})")
    except semantic.SemanticUnavailable as exc:
        print(f"model: none ({exc})")
    sizes = [arguments.memories] if arguments.memories else [MEMORIES, MILLION]
    missed: list[str] = []
    if not arguments.no_relevance:
        relevance = bench_relevance()
        for (kind, questions), (recall_at_3, mrr) in relevance.items():
            print(
                f"relevance, {kind}, {questions} questions: recall@3 {recall_at_3:.3f}, MRR {mrr:.3f}"
            )
        gain = relevance["hybrid", "paraphrase"][0] - relevance["words", "paraphrase"][0]
        if gain < TARGET_PARAPHRASE_GAIN:
            missed.append(f"paraphrase recall@3 gain {gain:+.3f} < {TARGET_PARAPHRASE_GAIN:+.2f}")
        for place, name in enumerate(("recall@3", "MRR")):
            if relevance["hybrid", "keyword"][place] < relevance["words", "keyword"][place]:
                missed.append(f"hybrid {name} on keyword questions is below words alone")
        for questions in ("paraphrase", "larger paraphrase"):
            if relevance["hybrid", questions][0] < TARGET_PARAPHRASE_RECALL:
                missed.append(
                    f"hybrid recall@3 on {questions} questions < {TARGET_PARAPHRASE_RECALL}"
                )
        if relevance["hybrid", "keyword"][0] < KEYWORD_RECALL_BEFORE:
            missed.append(f"hybrid recall@3 on keyword questions < {KEYWORD_RECALL_BEFORE}")
    with tempfile.TemporaryDirectory(prefix="relay-bench-memory-") as folder:
        if not arguments.no_saves:
            saves_per_second, embedded_per_second = bench_saves(Path(folder), arguments.saves)
            print(
                f"saves: {saves_per_second:,.0f}/s ({arguments.saves:,} adds, one transaction each);"
                f" {embedded_per_second:,.0f}/s counting their embedding"
                f" ({embedded_per_second / saves_per_second:.2f}x)"
            )
            if embedded_per_second < saves_per_second / 2:
                missed.append(
                    f"saves with embedding {embedded_per_second:,.0f}/s"
                    f" < half of {saves_per_second:,.0f}/s"
                )
        for size in sizes:
            started = time.perf_counter()
            figures = bench_search(Path(folder) / str(size), size, arguments.searches)
            built = time.perf_counter() - started
            print(
                f"over {size:,} memories (store built in {built:.0f} s: import_memories"
                f" {figures.load:.0f} s, embedding {figures.embed:.0f} s;"
                f" {arguments.searches:,} searches of each kind, interleaved):"
            )
            if figures.embed_cpu is not None:
                cores = len(os.sched_getaffinity(0))
                print(
                    f"  backfill: {size / figures.embed:,.0f} memories a second,"
                    f" {figures.embed_cpu / size * 1000:.2f} ms of CPU a memory"
                    " (the model's process and this one), so at least"
                    f" {figures.embed_cpu / cores:.0f} s on {cores} idle cores;"
                    f" load average {figures.embed_load[0]:.1f} at its start,"
                    f" {figures.embed_load[1]:.1f} at its end"
                )
            for kind in KINDS:
                p50, p99 = figures.p50(kind), figures.p99(kind)
                print(f"  search by {kind}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
            slowest = sorted(
                range(len(figures.timings["hybrid, query new"])),
                key=figures.timings["hybrid, query new"].__getitem__,
            )[-max(1, len(figures.timings["hybrid, query new"]) // 100) :]
            for stage, took in figures.stages.items():
                ordered = sorted(took)
                tail = statistics.mean(took[place] for place in slowest if place < len(took))
                print(
                    f"    {stage}: p50 {statistics.median(ordered):.2f} ms,"
                    f" p99 {ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]:.2f} ms,"
                    f" {tail:.2f} ms in the slowest 1%"
                )
            if figures.agreement is not None:
                searches, first, three, ten = figures.agreement
                print(
                    f"  by words, recent index against the whole store, {searches} searches:"
                    f" same first {first}, same first three {three}, same ten in order {ten}"
                )
            if size == MEMORIES and figures.embed >= TARGET_BACKFILL_S:
                missed.append(
                    f"backfill of {size:,} memories {figures.embed:.0f} s >= {TARGET_BACKFILL_S:g} s"
                )
            targets = {
                ("words", MEMORIES): (TARGET_SEARCH_P50_MS, TARGET_SEARCH_P99_MS),
                ("words", MILLION): (TARGET_MILLION_P50_MS, None),
                ("hybrid", MEMORIES): (TARGET_HYBRID_P50_MS, TARGET_HYBRID_P99_MS),
                ("hybrid", MILLION): (TARGET_HYBRID_MILLION_P50_MS, None),
                ("hybrid, query new", MEMORIES): (TARGET_HYBRID_P50_MS, TARGET_HYBRID_P99_MS),
                ("hybrid, query new", MILLION): (TARGET_HYBRID_MILLION_P50_MS, None),
            }
            for kind in KINDS:
                p50_target, p99_target = targets.get((kind, size), (None, None))
                if p50_target is not None and figures.p50(kind) >= p50_target:
                    missed.append(
                        f"{kind} p50 {figures.p50(kind):.2f} ms >= {p50_target:g} ms at {size:,}"
                    )
                if p99_target is not None and figures.p99(kind) >= p99_target:
                    missed.append(
                        f"{kind} p99 {figures.p99(kind):.2f} ms >= {p99_target:g} ms at {size:,}"
                    )
    for miss in missed:
        print(f"MISSED: {miss}")
    if not missed:
        print("all targets met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Memory store speed figures. Run: .venv/bin/python tests/perf/bench_memory.py

Not a pytest module. Measures saves per second (one `add` at a time, each its own
transaction, as agents save them) and search latency over a store of 100,000 memories
bulk-loaded with import_memories. The text is synthetic but shaped like what agents
save: build and deploy notes, file paths, commands, error messages, preferences, with a
Zipf-like word frequency so some words are common and most are rare. Queries mix single
words, two- and three-word questions, phrases with FTS syntax in them, and misses.

Then the same search over 1,000,000 memories (the store is built once per run; the
time it took is printed), and the relevance set of tests/memory_relevance.py (recall@3
and MRR), so that speed is never bought with worse answers.

Targets (DESIGN §10): p50 < 5 ms and p99 < 15 ms at 100,000; p50 < 15 ms at 1,000,000.
Exits 1 when one is missed. `--memories N` measures one size only.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from relay.services.memory.model import Memory
from relay.services.memory.sqlite import SqliteMemory

TARGET_SEARCH_P50_MS = 5.0
TARGET_SEARCH_P99_MS = 15.0
TARGET_MILLION_P50_MS = 15.0
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


def bench_saves(folder: Path, saves: int) -> float:
    """Saves per second, one add() (one transaction) each."""
    texts = [memory.content for memory in generate(saves, seed=11)]
    with SqliteMemory(folder / "saves.db") as store:
        store.add("warm up")  # opening and creating the schema is not a save
        started = time.perf_counter()
        for text in texts:
            store.add(text, tags=["bench"], project=PROJECTS[0])
        elapsed = time.perf_counter() - started
    return saves / elapsed


def bench_search(folder: Path, memories: int, searches: int) -> tuple[float, float, float]:
    """(load seconds, search p50 ms, search p99 ms) over `memories` memories."""
    data = generate(memories)
    rng = random.Random(3)
    folder.mkdir(parents=True, exist_ok=True)
    with SqliteMemory(folder / "search.db") as store:
        started = time.perf_counter()
        store.import_memories(data)
        load = time.perf_counter() - started
        for query in _QUERIES:  # warm the page cache, as a long-lived store would be
            store.search(query, project=PROJECTS[0])
        timings: list[float] = []
        for _ in range(searches):
            query = rng.choice(_QUERIES)
            project = rng.choice(PROJECTS)
            started = time.perf_counter()
            store.search(query, project=project, limit=10)
            timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    p50 = statistics.median(timings)
    p99 = timings[min(len(timings) - 1, int(len(timings) * 0.99))]
    return load, p50, p99


def bench_relevance() -> tuple[float, float]:
    """recall@3 and MRR of search over the relevance set."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import memory_relevance as relevance

    with (
        tempfile.TemporaryDirectory(prefix="relay-bench-relevance-") as folder,
        SqliteMemory(Path(folder) / "relevance.db") as store,
    ):
        store.import_memories(relevance.memories())

        def search(query: str) -> list[str]:
            return [hit.memory.id for hit in store.search(query, project=relevance.PROJECT)]

        return relevance.evaluate(search)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--saves", type=int, default=SAVES)
    parser.add_argument("--memories", type=int, default=None, help="One size only.")
    parser.add_argument("--searches", type=int, default=SEARCHES)
    arguments = parser.parse_args()
    sizes = [arguments.memories] if arguments.memories else [MEMORIES, MILLION]
    missed: list[str] = []
    recall_at_3, mrr = bench_relevance()
    print(f"relevance: recall@3 {recall_at_3:.3f}, MRR {mrr:.3f} (tests/memory_relevance.py)")
    with tempfile.TemporaryDirectory(prefix="relay-bench-memory-") as folder:
        saves_per_second = bench_saves(Path(folder), arguments.saves)
        print(f"saves: {saves_per_second:,.0f}/s ({arguments.saves:,} adds, one transaction each)")
        for size in sizes:
            started = time.perf_counter()
            load, p50, p99 = bench_search(Path(folder) / str(size), size, arguments.searches)
            built = time.perf_counter() - started
            print(
                f"search over {size:,}: p50 {p50:.2f} ms, p99 {p99:.2f} ms"
                f" ({arguments.searches:,} searches; store built in {built:.0f} s,"
                f" {load:.0f} s of it import_memories)"
            )
            if size == MEMORIES and p50 >= TARGET_SEARCH_P50_MS:
                missed.append(f"p50 {p50:.2f} ms >= {TARGET_SEARCH_P50_MS:g} ms at {size:,}")
            if size == MEMORIES and p99 >= TARGET_SEARCH_P99_MS:
                missed.append(f"p99 {p99:.2f} ms >= {TARGET_SEARCH_P99_MS:g} ms at {size:,}")
            if size == MILLION and p50 >= TARGET_MILLION_P50_MS:
                missed.append(f"p50 {p50:.2f} ms >= {TARGET_MILLION_P50_MS:g} ms at {size:,}")
    for miss in missed:
        print(f"MISSED: search {miss}")
    if not missed:
        print("all targets met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Memory store speed figures. Run: .venv/bin/python tests/perf/bench_memory.py

Not a pytest module. Measures saves per second (one `add` at a time, each its own
transaction, as agents save them) and search latency over a store of 100,000 memories
bulk-loaded with import_memories. The text is synthetic but shaped like what agents
save: build and deploy notes, file paths, commands, error messages, preferences, with a
Zipf-like word frequency so some words are common and most are rare. Queries mix single
words, two- and three-word questions, phrases with FTS syntax in them, and misses.

Exits 1 when search p50 misses its target.
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
SAVES = 5_000
MEMORIES = 100_000
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--saves", type=int, default=SAVES)
    parser.add_argument("--memories", type=int, default=MEMORIES)
    parser.add_argument("--searches", type=int, default=SEARCHES)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="relay-bench-memory-") as folder:
        saves_per_second = bench_saves(Path(folder), arguments.saves)
        print(f"saves: {saves_per_second:,.0f}/s ({arguments.saves:,} adds, one transaction each)")
        load, p50, p99 = bench_search(Path(folder), arguments.memories, arguments.searches)
        print(f"bulk load: {arguments.memories:,} memories in {load:.1f}s (import_memories)")
        print(
            f"search over {arguments.memories:,}: p50 {p50:.2f} ms, p99 {p99:.2f} ms"
            f" ({arguments.searches:,} searches; target p50 < {TARGET_SEARCH_P50_MS:g} ms)"
        )
    if p50 >= TARGET_SEARCH_P50_MS:
        print(f"MISSED: search p50 {p50:.2f} ms >= {TARGET_SEARCH_P50_MS:g} ms")
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())

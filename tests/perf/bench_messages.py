"""`relay messages --grep` over 100,000 messages (issue 30). Run:
.venv/bin/python tests/perf/bench_messages.py [--messages N] [--runs N] [--cli-runs N]

Not a pytest module. It fills a mailbox (a real SQLite file in a temporary RELAY_HOME)
with N messages of 8 to 24 words drawn from a 5,000-word vocabulary with a Zipf-like
skew (so some words are in a third of the messages, others in a handful), then prints:

- the query: `SqliteMailbox.search` with a search text (the FTS5 match, the join to the
  messages and the newest 50 of them, decoded), median and p95 over --runs runs per
  search text. The target (p50 < 20 ms) is this figure: the search itself;
- the whole command: `relay messages --grep WORDS` as a new process (Python's start-up,
  relay's imports, the settings, the query and the printing), median over --cli-runs,
  and the same process with nothing to search (`--thread none`), which is nearly all of it.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from relay.services.messaging.history import HistoryQuery
from relay.services.messaging.mailbox import SqliteMailbox
from relay.services.messaging.ulid import new_ulid

TEAM = "bench"
TARGET_QUERY_MS = 20.0
RELAY = str(Path(sys.executable).parent / "relay")
AGENTS = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi"]


def vocabulary(size: int, rng: random.Random) -> list[str]:
    """`size` distinct lowercase words of 3 to 10 letters."""
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 10))))
    return sorted(words)


def fill(mailbox: SqliteMailbox, count: int, words: list[str], rng: random.Random) -> None:
    """`count` messages, inserted in batches (the index kept by the mailbox's triggers)."""
    weights = [1.0 / (rank + 1) for rank in range(len(words))]
    start = time.time() - count  # one a second, up to now
    batch = 5_000
    for first in range(0, count, batch):
        rows = []
        for number in range(first, min(first + batch, count)):
            sender, recipient = rng.sample(AGENTS, 2)
            body = " ".join(rng.choices(words, weights, k=rng.randint(8, 24)))
            moment = time.gmtime(start + number)
            created = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", moment)
            rows.append((new_ulid(), TEAM, sender, recipient, body, created))
        mailbox._write(
            lambda db, rows=rows: db.executemany(
                "INSERT INTO messages (id, team, sender, recipient, body, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            ),
            durable=False,
        )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def bench_query(mailbox: SqliteMailbox, query: HistoryQuery, runs: int) -> tuple[float, float, int]:
    """Median and p95 ms of one search, and how many messages it returned."""
    found = mailbox.search(TEAM, query, limit=50)  # warm: pages in the cache
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        mailbox.search(TEAM, query, limit=50)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), percentile(times, 0.95), len(found)


def matches(mailbox: SqliteMailbox, text: str) -> int:
    """How many messages hold every word of `text` (for the report)."""
    from relay.services.messaging.history import match_expression

    return int(
        mailbox._read(
            lambda db: db.execute(
                "SELECT count(*) FROM messages_text WHERE messages_text MATCH ?",
                (match_expression(text),),
            ).fetchone()[0]
        )
    )


def bench_cli(home: Path, runs: int, *args: str) -> float:
    """Median ms of `relay messages ARGS` as a new process."""
    env = {**os.environ, "RELAY_HOME": str(home), "USER": "bench"}
    command = [RELAY, "messages", "--team", TEAM, *args]
    times = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        subprocess.run(command, env=env, cwd=home, check=True, capture_output=True)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--cli-runs", type=int, default=15)
    args = parser.parse_args()
    rng = random.Random(30)
    words = vocabulary(5_000, rng)
    with tempfile.TemporaryDirectory(prefix="relay-bench-messages-") as folder:
        home = Path(folder)
        path = home / "state" / "messages.db"
        mailbox = SqliteMailbox(path)
        started = time.perf_counter()
        fill(mailbox, args.messages, words, rng)
        filled = time.perf_counter() - started
        size = path.stat().st_size + Path(f"{path}-wal").stat().st_size
        print(
            f"{args.messages:,} messages stored and indexed in {filled:.1f} s"
            f" ({size / 1e6:.0f} MB with the WAL)"
        )
        texts = {
            "a common word": words[0],
            "a mid word": words[99],
            "a rare word": words[4_000],
            "two words": f"{words[2]} {words[40]}",
            "no match": "zzzzzzzzzzzz",
        }
        print(f"\nthe query (SqliteMailbox.search, newest 50), {args.runs} runs each:")
        medians = []
        for label, text in texts.items():
            median, p95, shown = bench_query(mailbox, HistoryQuery(text=text), args.runs)
            medians.append(median)
            print(
                f"  {label:14} {text!r:24} in {matches(mailbox, text):>6,} messages:"
                f" p50 {median:6.2f} ms  p95 {p95:6.2f} ms  ({shown} shown)"
            )
        worst = max(medians)
        verdict = "meets" if worst < TARGET_QUERY_MS else "MISSES"
        print(f"  worst p50 {worst:.2f} ms: {verdict} the target (p50 < {TARGET_QUERY_MS:.0f} ms)")
        # The slow shape: every match of a common word read, none passing the other filter.
        lone = HistoryQuery(text=words[0], thread="nobody-uses-it")
        median, p95, _ = bench_query(mailbox, lone, max(10, args.runs // 10))
        print(
            f"  a common word in a thread that has no messages (every match read):"
            f" p50 {median:.1f} ms  p95 {p95:.1f} ms"
        )
        mailbox.close()
        print(f"\nthe whole command (relay messages --grep, a new process), {args.cli_runs} runs:")
        for label in ("a common word", "a rare word"):
            median = bench_cli(home, args.cli_runs, "--grep", texts[label])
            print(f"  {label:14} p50 {median:7.1f} ms")
        median = bench_cli(home, args.cli_runs, "--thread", "none")
        print(f"  {'no search':14} p50 {median:7.1f} ms  (the process without a search to do)")


if __name__ == "__main__":
    main()

"""Session speed figures (DESIGN §10). Run: .venv/bin/python tests/perf/bench_session.py

Not a pytest module. Each bench_* function measures one thing and prints one figure;
main() runs them all and exits 1 when a target is missed. The stream is synthetic but
shaped like an agent's terminal: compiler and test output, ANSI colours, progress
redraws, prompts and bullets, e-mail addresses, decorators and `npm … @scope/pkg`,
code fences, and a directive every few thousand lines.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from collections.abc import Callable

from relay.session.directives import DirectiveScanner

TARGET_SCAN_MB_S = 500.0
STREAM_BYTES = 50_000_000
CHUNK_BYTES = 64 * 1024
RUNS = 5

GREEN, RED, BOLD, DIM, RESET = "\x1b[32m", "\x1b[31m", "\x1b[1m", "\x1b[2m", "\x1b[0m"
WORDS = [
    "the",
    "build",
    "test",
    "module",
    "value",
    "error",
    "warning",
    "return",
    "function",
    "config",
    "cache",
    "request",
    "response",
    "session",
    "parser",
    "token",
    "index",
    "import",
    "export",
    "handler",
    "client",
    "server",
    "update",
]
DIRECTIVES = [
    "⏺ @relay:Bob can you review the parser change?",
    "@memory:save the API uses OAuth #auth",
    "✦ @deploy:staging release 1.4.2",
    "@memory:list",
]


def _words(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def _ordinary_line(rng: random.Random) -> str:
    """One line of everyday terminal output (no directive)."""
    kind = rng.random()
    if kind < 0.25:
        path = f"src/{rng.choice(WORDS)}/{rng.choice(WORDS)}.c"
        return f"{BOLD}{path}:{rng.randint(1, 999)}:{rng.randint(1, 80)}:{RESET} {RED}warning:{RESET} {_words(rng, 3, 8)} [-Wunused]"
    if kind < 0.45:
        status = f"{GREEN}PASSED{RESET}" if rng.random() < 0.9 else f"{RED}FAILED{RESET}"
        return f"tests/test_{rng.choice(WORDS)}.py::test_{rng.choice(WORDS)}_{rng.choice(WORDS)} {status} [{rng.randint(0, 100):3d}%]"
    if kind < 0.55:
        return f"{rng.choice(['⏺', '✦', '•'])} {_words(rng, 6, 16)}."
    if kind < 0.62:
        return f"│ {_words(rng, 4, 10):<60} │"
    if kind < 0.68:
        return f"  {_words(rng, 4, 12)} `{rng.choice(WORDS)}()` {_words(rng, 2, 6)}"
    if kind < 0.72:
        percent = rng.randint(0, 100)
        return f"Downloading {rng.choice(WORDS)} {percent}%\r\x1b[2KDownloading {rng.choice(WORDS)} {min(percent + 7, 100)}%"
    if kind < 0.735:
        return f"Author: {rng.choice(WORDS).title()} <{rng.choice(WORDS)}@example.com>"
    if kind < 0.745:
        return f"    @{rng.choice(['property', 'staticmethod', 'pytest.fixture', 'dataclass'])}"
    if kind < 0.75:
        return f"npm notice @scope/{rng.choice(WORDS)}@1.{rng.randint(0, 9)}.{rng.randint(0, 9)}"
    if kind < 0.85:
        return f"    {rng.choice(WORDS)} = {rng.choice(WORDS)}({rng.choice(WORDS)}, {rng.randint(0, 999)})"
    if kind < 0.9:
        return f"{DIM}{_words(rng, 5, 12)}{RESET}"
    return _words(rng, 4, 14)


def make_stream(size: int = STREAM_BYTES, seed: int = 7) -> tuple[bytes, int]:
    """A synthetic terminal stream of about `size` bytes, and how many directives it holds."""
    rng = random.Random(seed)
    lines: list[str] = []
    total = directives = 0
    next_directive = rng.randint(2000, 4000)
    while total < size:
        if next_directive == 0:
            lines.append(rng.choice(DIRECTIVES))
            directives += 1
            next_directive = rng.randint(2000, 4000)
        elif rng.random() < 0.002:
            fence = ["```python", "@dataclass", "def f(x):", "@relay:Bob inside a fence", "```"]
            lines.extend(fence)
        else:
            lines.append(_ordinary_line(rng))
        next_directive -= 1
        total += len(lines[-1]) + 2
    data = "\r\n".join(lines).encode() + b"\r\n"
    return data, directives


def _chunks(data: bytes) -> list[bytes]:
    return [data[start : start + CHUNK_BYTES] for start in range(0, len(data), CHUNK_BYTES)]


def _median_mb_s(data: bytes, run: Callable[[], int], expected: int | None) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        found = run()
        times.append(time.perf_counter() - start)
        if expected is not None and found != expected:
            raise SystemExit(f"found {found} directives, expected {expected}")
    return len(data) / statistics.median(times) / 1e6


def bench_scanner(data: bytes, expected: int) -> float:
    """DirectiveScanner over the stream in 64 KiB chunks: median MB/s."""
    chunks = _chunks(data)

    def run() -> int:
        scanner = DirectiveScanner()
        found = 0
        for chunk in chunks:
            found += len(scanner.feed(chunk))
        return found + len(scanner.close())

    rate = _median_mb_s(data, run, expected)
    verdict = "ok" if rate > TARGET_SCAN_MB_S else "MISSED"
    print(f"directive scan          {rate:7.0f} MB/s  (target > {TARGET_SCAN_MB_S:.0f})  {verdict}")
    return rate


_NAIVE = re.compile(
    rb"^[ \t]*(?:(?:[>$%#*-]|\xe2\x80\xa2|\xe2\x97\x8f|\xe2\x8f\xba|\xe2\x9c\xa6|\xe2\x94\x82)[ \t]*)*"
    rb"@([a-z][a-z0-9_-]*):(\S*)(?:[ \t]+(.*))?$"
)


def bench_naive_per_line(data: bytes) -> float:
    """For reference: split every line, strip colours, match the grammar (no fence rule)."""
    chunks = _chunks(data)
    escape = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]")

    def run() -> int:
        found = 0
        pending = b""
        for chunk in chunks:
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            for line in lines:
                if _NAIVE.match(escape.sub(b"", line).rstrip(b"\r")):
                    found += 1
        return found

    rate = _median_mb_s(data, run, None)  # it also counts the decoys inside fences
    print(f"naive per-line regex    {rate:7.0f} MB/s  (reference)")
    return rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=STREAM_BYTES / 1e6)
    args = parser.parse_args()
    data, expected = make_stream(int(args.megabytes * 1e6))
    lines = data.count(b"\n")
    print(f"stream: {len(data) / 1e6:.0f} MB, {lines} lines, {expected} directives")
    rate = bench_scanner(data, expected)
    bench_naive_per_line(data)
    return 0 if rate > TARGET_SCAN_MB_S else 1


if __name__ == "__main__":
    sys.exit(main())

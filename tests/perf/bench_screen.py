"""Screen-model figures (relay.session.screen). Run: .venv/bin/python tests/perf/bench_screen.py

Not a pytest module. Replays the recorded Claude Code and Gemini CLI streams
(tests/fixtures/tui) into a ScreenReader frame by frame, reading the screen after every
frame (the worst case: a pause after each), and prints per stream the bytes per second
of screen modelling, the median cost of one frame, and what a whole answer costs. The
line scanner (the path for agents that print lines) on the same bytes is the baseline.
There is no target: the hosts draw a few hundred kilobytes per answer, and the model runs
after each chunk has been passed to the user (it delays reading the next chunk, never the
user's bytes).
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import time
from pathlib import Path

from relay.session.directives import DirectiveScanner
from relay.session.screen import ScreenReader
from relay.session.voices import CLAUDE, GEMINI

FIXTURES = Path(__file__).parents[1] / "fixtures" / "tui"
RUNS = 5

_spec = importlib.util.spec_from_file_location(
    "replay_agent", Path(__file__).parents[1] / "resources" / "tui" / "replay_agent.py"
)
assert _spec is not None and _spec.loader is not None
replay_agent = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(replay_agent)


def replay(stream: str) -> tuple[float, float, int, int]:
    """One replay: seconds in total, median seconds per frame, frames, bytes."""
    meta = json.loads((FIXTURES / f"{stream}.json").read_text())
    data = (FIXTURES / f"{stream}.bin").read_bytes()
    voice = CLAUDE if meta["host"] == "claude" else GEMINI
    reader = ScreenReader(voice, DirectiveScanner(voice=voice), meta["rows"], meta["cols"])
    frames = replay_agent.frames(data, meta["host"])
    costs = []
    for frame in frames:
        start = time.perf_counter()
        reader.feed(frame)
        reader.settle()
        costs.append(time.perf_counter() - start)
    reader.settle(final=True)
    return sum(costs), statistics.median(costs), len(frames), len(data)


def lines(stream: str) -> float:
    data = (FIXTURES / f"{stream}.bin").read_bytes()
    scanner = DirectiveScanner(voice=CLAUDE)
    start = time.perf_counter()
    scanner.feed(data)
    scanner.close()
    return time.perf_counter() - start


def main() -> None:
    print(
        f"{'stream':48} {'bytes':>8} {'frames':>6} {'MB/s':>7} {'frame ms':>9} {'total ms':>9} {'lines MB/s':>10}"
    )
    for path in sorted(FIXTURES.glob("*.bin")):
        stream = path.stem
        runs = [replay(stream) for _ in range(RUNS)]
        total = statistics.median(run[0] for run in runs)
        frame = statistics.median(run[1] for run in runs)
        _, _, count, size = runs[0]
        baseline = statistics.median(lines(stream) for _ in range(RUNS))
        print(
            f"{stream:48} {size:8d} {count:6d} {size / total / 1e6:7.2f} "
            f"{frame * 1e3:9.3f} {total * 1e3:9.1f} {size / baseline / 1e6:10.1f}"
        )


if __name__ == "__main__":
    main()

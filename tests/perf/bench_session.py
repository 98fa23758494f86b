"""Session speed figures (DESIGN §10). Run: .venv/bin/python tests/perf/bench_session.py

Not a pytest module. Each bench_* function measures one thing and prints one figure;
main() runs them all and exits 1 when a target is missed. The stream is synthetic but
shaped like an agent's terminal: compiler and test output, ANSI colours, progress
redraws, prompts and bullets, e-mail addresses, decorators and `npm … @scope/pkg`,
code fences, and a directive every few thousand lines.

The passthrough figures run the installed `relay run` console script in TTY mode (its
stdin and stdout a PTY this script allocates and drains), the same program directly on
such a PTY, and under `script -q -c CMD /dev/null` (util-linux: the floor for a program
that relays a PTY), interleaved in one run; where the install built the native output
copier, `relay run` with its Python copier (RELAY_COPIER=python) too, as `relay-py`. Targets (DESIGN §10): throughput at least
0.67x direct, keystroke round trip p50 at most 1.5x `script`'s.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import math
import os
import random
import re
import select
import shlex
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from relay.session.copier import native_copier
from relay.session.directives import DirectiveScanner
from relay.session.voices import CLAUDE

TARGET_SCAN_MB_S = 500.0
STREAM_BYTES = 200_000_000
TARGET_PASSTHROUGH = 0.67  # relay's throughput against direct
TARGET_ROUND_TRIP = 1.5  # relay's keystroke p50 against script's
CHUNK_BYTES = 64 * 1024
RUNS = 5
PTY_RUNS = 5
ROUND_TRIPS = 500
WARM_UP_TRIPS = 20
SECTION_SECONDS = 400.0  # each PTY section gives up (and says so) after this long
RELAY = Path(sys.executable).parent / "relay"

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

    def run_claude() -> int:
        # Claude Code's style also reads every line that opens or ends the assistant's
        # text (a marker line: 1 in 30 lines of this stream, far more than a real session).
        scanner = DirectiveScanner(voice=CLAUDE)
        return sum(len(scanner.feed(chunk)) for chunk in chunks) + len(scanner.close())

    claude = _median_mb_s(data, run_claude, None)
    print(f"  in claude style       {claude:7.0f} MB/s  (reference)")
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


# ---- TTY passthrough: `relay run` against the program run directly

# Writes the file named by argv[1] to stdout in 64 KiB writes, as fast as it can.
_WRITER = """
import os, sys
view = memoryview(open(sys.argv[1], "rb").read())
while view:
    view = view[os.write(1, view[:65536]) :]
"""
# Answers each line it reads with `pong <line>` at once.
_PING_PONG = r"""
import os, sys
os.write(1, b"ready\n")
for line in sys.stdin.buffer:
    os.write(1, b"pong " + line.rstrip() + b"\n")
"""


class _Section:
    """The deadline of one bench section, shared by its runs."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("section over its time limit")
        return left


@contextlib.contextmanager
def _on_pty(argv: Sequence[str], env: dict[str, str], cwd: str) -> Iterator[int]:
    """Run `argv` with a new 30x100 PTY as stdin, stdout and stderr; the master fd."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    process = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd, start_new_session=True
    )
    os.close(slave)  # the child holds it now: its exit brings EIO on the master
    try:
        yield master
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: only what it started
        process.wait()
        os.close(master)


def _read(master: int, section: _Section) -> bytes:
    """The next bytes from the master; b"" once every slave fd is closed."""
    ready, _, _ = select.select([master], [], [], section.left())
    if not ready:
        raise TimeoutError("no output")
    try:
        return os.read(master, 1 << 16)
    except OSError:  # EIO: the child side is closed
        return b""


def _drain_timed(master: int, section: _Section) -> tuple[int, float]:
    """Read to EOF; the line feeds read and the seconds from the first byte to the last."""
    lines = 0
    first = last = 0.0
    while data := _read(master, section):
        last = time.perf_counter()
        if not first:
            first = last
        lines += data.count(b"\n")  # lines, not bytes: the terminal adds a CR to each (ONLCR)
    return lines, last - first


def _relay_argv(program: Sequence[str], cwd: str, name: str = "bench") -> list[str]:
    return [str(RELAY), "run", "--name", name, "--cwd", cwd, "--", *program]


def _relay_env(home: str) -> dict[str, str]:
    """The environment for `relay run`: a throwaway RELAY_HOME, no system or extra settings."""
    env = {**os.environ, "RELAY_HOME": home}
    env["RELAY_SYSTEM_SETTINGS"] = os.path.join(home, "no-system-settings.json")
    env.pop("RELAY_SETTINGS", None)
    env.pop("RELAY_DEBUG", None)
    return env


def _runs(program: Sequence[str], home: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """What each figure runs, and with which environment: the program directly, through
    relay, through relay with its Python copier (where a native one was built, so that
    the two compare in one run), and under `script` where it is installed."""
    env = _relay_env(home)
    runs = {"direct": (list(program), env), "relay": (_relay_argv(program, home), env)}
    if native_copier() is not None:  # a name of its own: the round trip runs both at once
        python = {**env, "RELAY_COPIER": "python"}
        runs["relay-py"] = (_relay_argv(program, home, "bench-py"), python)
    if (script := _script_argv(program)) is not None:
        runs["script"] = (script, env)
    return runs


def _script_argv(program: Sequence[str]) -> list[str] | None:
    """`program` under util-linux `script`, or None when it is not installed."""
    if shutil.which("script") is None:
        return None
    return ["script", "-q", "-e", "-c", shlex.join(program), "/dev/null"]


def bench_passthrough(data: bytes) -> float:
    """`relay run` (TTY passthrough) vs the writer directly on a PTY and under `script`:
    median MB/s, first byte to last; returns relay's ratio to direct."""
    with tempfile.TemporaryDirectory() as home:
        stream = os.path.join(home, "stream.bin")
        Path(stream).write_bytes(data)
        runs = _runs([sys.executable, "-c", _WRITER, stream], home)
        rates: dict[str, list[float]] = {name: [] for name in runs}
        expected_lines = data.count(b"\n")
        section = _Section(SECTION_SECONDS)
        try:
            for _ in range(PTY_RUNS):
                for name, (argv, env) in runs.items():
                    with _on_pty(argv, env, home) as master:
                        lines, seconds = _drain_timed(master, section)
                    # relay may add a line or two of its own (a namespace nothing handles).
                    extra = 3 if name.startswith("relay") else 0
                    if not expected_lines <= lines <= expected_lines + extra:
                        raise SystemExit(f"{name}: read {lines} lines of {expected_lines}")
                    rates[name].append(len(data) / seconds / 1e6)
        except TimeoutError:
            print(f"passthrough             gave up after {SECTION_SECONDS:.0f} s")
            return 0.0
    median = {name: statistics.median(found) for name, found in rates.items()}
    # The ratios are taken per round (the runs of a round follow each other) and their
    # median reported: the machine's speed drifts between rounds more than within one.
    ratio = {
        name: statistics.median(a / b for a, b in zip(found, rates["direct"], strict=True))
        for name, found in rates.items()
    }
    direct, relay = median["direct"], median["relay"]
    notes = "".join(
        f"  {name} {median[name]:5.0f} MB/s ({ratio[name]:.2f}x)"
        for name in ("relay-py", "script")
        if name in median
    )
    print(
        f"passthrough             direct {direct:5.0f} MB/s  relay {relay:5.0f} MB/s"
        f" ({ratio['relay']:.2f}x, target >= {TARGET_PASSTHROUGH}x){notes}"
        f"  [{len(data) / 1e6:.0f} MB, medians of {PTY_RUNS} rounds; ratios per round]"
    )
    return ratio["relay"]


def _wait_ready(master: int, section: _Section) -> None:
    buffer = b""
    while b"ready" not in buffer:
        buffer += _read(master, section) or b"EOF"
        if buffer.endswith(b"EOF"):
            raise SystemExit(f"ended before it was ready: {buffer!r}")


def _round_trip(master: int, trip: int, section: _Section) -> float:
    """Milliseconds from typing `trip` + Enter to reading `pong trip`."""
    answer = b"pong %d\r\n" % trip
    buffer = b""
    start = time.perf_counter()
    os.write(master, b"%d\r" % trip)
    while answer not in buffer:
        data = _read(master, section)
        if not data:
            raise SystemExit(f"EOF waiting for {answer!r}")
        buffer += data
    return (time.perf_counter() - start) * 1000


def _finish(master: int, section: _Section) -> None:
    os.write(master, b"\x04")  # Ctrl-D: end of input, the program exits (and relay with it)
    while _read(master, section):
        pass


def _p99(times: list[float]) -> float:
    return statistics.quantiles(times, n=100)[98]


def bench_round_trip() -> float:
    """Keystroke to answer through `relay run`, directly and under `script` (all
    running at once, one trip each in turn): median and p99 ms; returns relay's p50
    against script's (against direct without `script`)."""
    with tempfile.TemporaryDirectory() as home:
        runs = _runs([sys.executable, "-c", _PING_PONG], home)
        section = _Section(SECTION_SECONDS)
        times: dict[str, list[float]] = {name: [] for name in runs}
        try:
            with contextlib.ExitStack() as stack:
                # All at once, trips taking turns: noise on the machine hits each alike.
                masters = {
                    name: stack.enter_context(_on_pty(argv, env, home))
                    for name, (argv, env) in runs.items()
                }
                for master in masters.values():
                    _wait_ready(master, section)
                for trip in range(WARM_UP_TRIPS + ROUND_TRIPS):
                    for name, master in masters.items():
                        took = _round_trip(master, trip, section)
                        if trip >= WARM_UP_TRIPS:
                            times[name].append(took)
                for master in masters.values():
                    _finish(master, section)
        except TimeoutError:
            print(f"round trip              gave up after {SECTION_SECONDS:.0f} s")
            return math.inf
    p50 = {name: statistics.median(found) for name, found in times.items()}
    shown = "  ".join(
        f"{name} {p50[name]:.3f} ms (p99 {_p99(found):.3f})" for name, found in times.items()
    )
    floor = p50.get("script", p50["direct"])
    ratio = p50["relay"] / floor
    against = "script" if "script" in p50 else "direct"
    print(
        f"round trip              {shown}"
        f"  relay/{against} {ratio:.2f}x (target <= {TARGET_ROUND_TRIP}x; {ROUND_TRIPS} trips)"
    )
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=STREAM_BYTES / 1e6)
    parser.add_argument(
        "--pty-only", action="store_true", help="Only the passthrough and round-trip figures."
    )
    args = parser.parse_args()
    data, expected = make_stream(int(args.megabytes * 1e6))
    lines = data.count(b"\n")
    print(f"stream: {len(data) / 1e6:.0f} MB, {lines} lines, {expected} directives")
    rate = TARGET_SCAN_MB_S + 1 if args.pty_only else bench_scanner(data, expected)
    if not args.pty_only:
        bench_naive_per_line(data)
    throughput = bench_passthrough(data)
    round_trip = bench_round_trip()
    met = (
        rate > TARGET_SCAN_MB_S
        and throughput >= TARGET_PASSTHROUGH
        and round_trip <= TARGET_ROUND_TRIP
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

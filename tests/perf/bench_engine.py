"""Engine speed figures (DESIGN §10). Run: .venv/bin/python tests/perf/bench_engine.py

Not a pytest module. Each bench_* function measures one thing and prints one figure;
main() runs them all in one run. The hook spawned everywhere is tests/perf/tiny_hook.c
compiled (reads stdin to EOF, prints {}), so the figures measure spawning, not an
interpreter's start-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import anyio

from relay.engine.command import prepare_launch
from relay.engine.runner import install_child_watcher, run_process

HERE = Path(__file__).resolve().parent
BUILD = HERE / ".build"
TARGET_RATIO = 1.6
EVENT = (
    b'{"session_id":"bench","cwd":"/tmp","timestamp":"2025-01-01T00:00:00.000Z",'
    b'"hook_event_name":"BeforeTool","transcript_path":null,"agent_name":null,'
    b'"tool_name":"Bash","tool_input":{"command":"ls -la"}}'
)  # the same bytes floor.c writes
WARMUP = 100


def build(source: str, output: str) -> Path:
    """Compile tests/perf/SOURCE with gcc -O2 into tests/perf/.build/OUTPUT (when stale)."""
    BUILD.mkdir(exist_ok=True)
    binary = BUILD / output
    source_path = HERE / source
    if not binary.exists() or binary.stat().st_mtime < source_path.stat().st_mtime:
        subprocess.run(["gcc", "-O2", "-Wall", "-o", str(binary), str(source_path)], check=True)
    return binary


def bench_floor(hook: Path, runs: int) -> float:
    """The C floor: posix_spawn + pipes + waitpid, median ms per spawn."""
    floor = build("floor.c", "floor")
    completed = subprocess.run(
        [str(floor), str(hook), str(runs)], check=True, capture_output=True, text=True
    )
    median = float(completed.stdout)
    print(f"floor (C posix_spawn)   {median:.2f} ms")
    return median


def bench_relay_per_hook(hook: Path, runs: int, floor_ms: float) -> float:
    """relay's run_process on the tiny hook, sequentially in one event loop, median ms."""
    launch = prepare_launch(str(hook), None, {})
    env = dict(os.environ)

    async def measure() -> list[float]:
        times = []
        for index in range(WARMUP + runs):
            start = time.perf_counter()
            result = await run_process(launch, stdin=EVENT, env=env, cwd=None, timeout=10)
            elapsed = time.perf_counter() - start
            if result.exit_code != 0 or result.stdout != b"{}\n":
                raise SystemExit(f"relay run failed: {result}")
            if index >= WARMUP:
                times.append(elapsed * 1000)
        return times

    median = statistics.median(anyio.run(measure))
    ratio = median / floor_ms
    print(
        f"relay per hook          {median:.2f} ms  ({ratio:.2f}x floor, target <= {TARGET_RATIO}x)"
    )
    return median


def bench_anyio_open_process(hook: Path, runs: int, floor_ms: float) -> float:
    """For reference: the same hook through anyio.open_process (PidfdChildWatcher), median ms."""
    env = dict(os.environ)

    async def run_once() -> bytes:
        async with await anyio.open_process(
            [str(hook)], env=env, start_new_session=True
        ) as process:
            assert process.stdin and process.stdout and process.stderr
            await process.stdin.send(EVENT)
            await process.stdin.aclose()
            chunks: list[bytes] = []

            async def drain(stream: anyio.abc.ByteReceiveStream, into: list[bytes]) -> None:
                async for chunk in stream:
                    into.append(chunk)

            async with anyio.create_task_group() as group:
                group.start_soon(drain, process.stdout, chunks)
                group.start_soon(drain, process.stderr, [])
            await process.wait()
        return b"".join(chunks)

    async def measure() -> list[float]:
        times = []
        for index in range(WARMUP + runs):
            start = time.perf_counter()
            output = await run_once()
            elapsed = time.perf_counter() - start
            if output != b"{}\n":
                raise SystemExit(f"anyio run failed: {output!r}")
            if index >= WARMUP:
                times.append(elapsed * 1000)
        return times

    install_child_watcher()
    median = statistics.median(anyio.run(measure))
    print(f"anyio open_process      {median:.2f} ms  ({median / floor_ms:.2f}x floor, reference)")
    return median


def main(argv: list[str] | None = None) -> int:
    """Run every benchmark once and print one line per figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=2000, help="spawns per figure")
    options = parser.parse_args(argv)
    hook = build("tiny_hook.c", "tiny_hook")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {options.runs} runs each")
    floor_ms = bench_floor(hook, options.runs)
    relay_ms = bench_relay_per_hook(hook, options.runs, floor_ms)
    bench_anyio_open_process(hook, options.runs, floor_ms)
    return 0 if relay_ms <= TARGET_RATIO * floor_ms else 1


if __name__ == "__main__":
    sys.exit(main())

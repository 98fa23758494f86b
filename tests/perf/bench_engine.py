"""Engine speed figures (DESIGN §10). Run: .venv/bin/python tests/perf/bench_engine.py

Not a pytest module. Each bench_* function measures one thing and prints one figure;
main() runs them all in one run. The hook spawned everywhere is tests/perf/tiny_hook.c
compiled (reads stdin to EOF, prints {}), so the figures measure spawning, not an
interpreter's start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import anyio

from relay.engine.command import prepare_launch
from relay.engine.runner import install_child_watcher, run_process
from relay.engine.system import HookSystem

HERE = Path(__file__).resolve().parent
BUILD = HERE / ".build"
K = TypeVar("K")
TARGET_RATIO = 1.6
TARGET_REGISTERED_RATIO = 1.3
TARGET_TRUSTED_RATIO = 1.1
TARGET_NO_MATCH_US = 5.0
TARGET_SIXTEEN_MS = 120.0
TARGET_STARTUP_RATIO = 1.5
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


def write_settings(directory: Path, hooks: dict[str, object]) -> Path:
    """A settings file with these hooks, for HookSystem(settings=[...])."""
    path = directory / f"settings-{len(list(directory.iterdir()))}.json"
    path.write_text(json.dumps({"hooks": hooks}))
    return path


def bench_hook_system_per_hook(hook: Path, runs: int, floor_ms: float, scratch: Path) -> float:
    """One command hook through the whole engine (HookSystem.fire, telemetry on), median ms."""
    settings = write_settings(scratch, {"BeforeTool": [{"hooks": [{"command": str(hook)}]}]})
    system = HookSystem(cwd=scratch, settings=[settings])
    payload = {"tool_name": "Bash", "tool_input": {"command": "ls -la"}}

    async def measure() -> list[float]:
        times = []
        for index in range(WARMUP + runs):
            start = time.perf_counter()
            result = await system.fire("BeforeTool", payload)
            elapsed = time.perf_counter() - start
            if result.errors or len(result.hooks) != 1:
                raise SystemExit(f"HookSystem run failed: {result}")
            if index >= WARMUP:
                times.append(elapsed * 1000)
        return times

    median = statistics.median(anyio.run(measure))
    system.close()
    ratio = median / floor_ms
    print(
        f"HookSystem.fire, 1 hook {median:.2f} ms  ({ratio:.2f}x floor, target <= {TARGET_RATIO}x)"
    )
    return median


def bench_pinned_per_hook(hook: Path, runs: int, floor_ms: float, scratch: Path) -> float:
    """The same through a trusted project hook whose program is a project file: relay runs
    the bytes its trust check read, here from a sealed memfd copy (DESIGN §7), median ms."""
    project = scratch / "pinned-project"
    (project / ".git").mkdir(parents=True)
    (project / ".relay").mkdir()
    (project / "hooks").mkdir()
    shutil.copy2(hook, project / "hooks" / "tiny_hook")
    hooks = {"BeforeTool": [{"hooks": [{"command": "./hooks/tiny_hook"}]}]}
    (project / ".relay" / "settings.json").write_text(json.dumps({"hooks": hooks}))
    _trust(project, os.environ)
    system = HookSystem(cwd=project)
    payload = {"tool_name": "Bash", "tool_input": {"command": "ls -la"}}

    async def measure() -> list[float]:
        times = []
        for index in range(WARMUP + runs):
            start = time.perf_counter()
            result = await system.fire("BeforeTool", payload)
            elapsed = time.perf_counter() - start
            if result.errors or len(result.hooks) != 1:
                raise SystemExit(f"pinned hook run failed: {result}")
            if index >= WARMUP:
                times.append(elapsed * 1000)
        return times

    median = statistics.median(anyio.run(measure))
    system.close()
    ratio = median / floor_ms
    print(
        f"HookSystem.fire, 1 pinned project hook {median:.2f} ms  ({ratio:.2f}x floor, "
        f"target <= {TARGET_RATIO}x)"
    )
    return median


def bench_no_match(scratch: Path, calls: int = 200_000) -> float:
    """An event with no matching hook, in-process: mean µs per fire, for two cases."""
    settings = write_settings(
        scratch,
        {
            "BeforeTool": [{"matcher": "Write|Edit", "hooks": [{"command": "true"}]}],
            "AfterTool": [{"hooks": [{"command": "true"}]}],
        },
    )
    system = HookSystem(cwd=scratch, settings=[settings], telemetry=False)
    system.initialize()
    cases = {
        "no hook for the event": ("SessionStart", {"source": "startup"}),
        "matcher does not match": ("BeforeTool", {"tool_name": "Bash", "tool_input": {}}),
    }
    worst = 0.0

    async def measure(event: str, payload: dict[str, object]) -> float:
        fire = system.fire
        for _ in range(1000):
            await fire(event, payload)
        start = time.perf_counter()
        for _ in range(calls):
            await fire(event, payload)
        return (time.perf_counter() - start) / calls * 1e6

    for label, (event, payload) in cases.items():
        per_call = anyio.run(measure, event, payload)
        worst = max(worst, per_call)
        print(f"no match ({label}) {per_call:.2f} µs  (target < {TARGET_NO_MATCH_US:g} µs)")
    return worst


def bench_registered_hooks(scratch: Path, rounds: int = 31) -> float:
    """What a `relay hooks run` process pays beyond its start-up: a fresh HookSystem (read
    and validate the settings, check trust) firing one matching project hook, with 0, 100
    and 999 other trusted project hooks registered for another event (1,000 hook entries
    in all: the settings file's cap). Rounds interleave the three projects. Median ms per
    call; returns the ratio of 1,000 hooks to one (target <= 1.3x)."""
    payload = {"tool_name": "Bash", "tool_input": {"command": "ls"}}
    projects: dict[int, Path] = {}
    for others in (0, 100, 999):
        project = projects[others] = scratch / f"hooked-{others}"
        (project / ".git").mkdir(parents=True)
        (project / ".relay").mkdir()
        hooks = {
            "BeforeTool": [{"matcher": "Bash", "hooks": [{"command": "true", "name": "one"}]}],
            "AfterTool": [
                {"hooks": [{"command": f"true {i}", "name": f"other-{i}"} for i in range(others)]}
            ],
        }
        (project / ".relay" / "settings.json").write_text(json.dumps({"hooks": hooks}))
        _trust(project, os.environ)
    times = _interleaved(
        {others: _fire_one(project, payload) for others, project in projects.items()}, rounds
    )
    medians = {others: statistics.median(values) for others, values in times.items()}
    ratio = medians[999] / medians[0]
    print(
        "registered hooks, one runs: "
        + ", ".join(f"{n + 1} hooks {ms:.2f} ms" for n, ms in medians.items())
        + f"  (1,000 vs 1: {ratio:.2f}x, target <= {TARGET_REGISTERED_RATIO}x)"
    )
    return ratio


def bench_trusted_projects(scratch: Path, rounds: int = 31, projects: int = 100_000) -> float:
    """The same call (a fresh HookSystem firing one trusted project hook) with a trust
    store holding this project alone and with `projects` other projects trusted too
    (written straight into the store's layout: trusting them one by one would fsync
    100,000 times). Returns the ratio (target <= 1.1x)."""
    from relay.config.trust import KEYLESS, _project_id

    project = scratch / "trusted-project"
    (project / ".git").mkdir(parents=True)
    (project / ".relay").mkdir()
    hooks = {"BeforeTool": [{"matcher": "Bash", "hooks": [{"command": "true", "name": "one"}]}]}
    (project / ".relay" / "settings.json").write_text(json.dumps({"hooks": hooks}))
    payload = {"tool_name": "Bash", "tool_input": {"command": "ls"}}
    homes = {"1 project": scratch / "home-one", f"{projects:,} projects": scratch / "home-many"}
    for home in homes.values():
        _trust(project, {**os.environ, "RELAY_HOME": str(home)})
    start = time.perf_counter()
    folder = homes[f"{projects:,} projects"] / "state" / "trust"
    record = json.dumps({"f" * 64: {"description": "BeforeTool: true"}}).encode()
    for number in range(projects):
        root = f"/projects/p{number:06d}"
        keys = folder / _project_id(root) / "keys"
        keys.mkdir(parents=True)
        (keys.parent / "root").write_text(root + "\n")
        (keys / f"{KEYLESS}.json").write_bytes(record)
    built = time.perf_counter() - start
    times = _interleaved(
        {
            label: _fire_one(project, payload, {**os.environ, "RELAY_HOME": str(home)})
            for label, home in homes.items()
        },
        rounds,
    )
    medians = {label: statistics.median(values) for label, values in times.items()}
    one, many = medians.values()
    ratio = many / one
    print(
        "trusted projects, one hook runs: "
        + ", ".join(f"{label} {ms:.2f} ms" for label, ms in medians.items())
        + f"  ({ratio:.2f}x, target <= {TARGET_TRUSTED_RATIO}x; store written in {built:.0f} s)"
    )
    return ratio


def _trust(project: Path, environ: dict[str, str] | os._Environ[str]) -> None:
    """`relay trust --yes`, as a user would trust a project's hooks."""
    command = [sys.executable, "-m", "relay", "trust", "--yes", "--cwd", str(project)]
    subprocess.run(command, env=environ, check=True, capture_output=True)


def _fire_one(
    project: Path, payload: dict[str, object], environ: dict[str, str] | None = None
) -> Callable[[], None]:
    def fire() -> None:
        system = HookSystem(cwd=project, telemetry=False, environ=environ)
        result = system.run("BeforeTool", payload)
        system.close()
        if len(result.hooks) != 1:
            raise SystemExit(f"expected the one matching hook to run: {result}")

    return fire


def _interleaved(calls: dict[K, Callable[[], None]], rounds: int) -> dict[K, list[float]]:
    """ms per call of each, the calls taking turns (a warm-up round first, not counted)."""
    times: dict[K, list[float]] = {name: [] for name in calls}
    for round_number in range(rounds + 1):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            if round_number:
                times[name].append((time.perf_counter() - start) * 1000)
    return times


def bench_sixteen_sleepers(scratch: Path, rounds: int = 10) -> float:
    """16 hooks that each sleep 100 ms, one event: median wall time in ms."""
    sleeper = {"command": "sleep 0.1"}
    hooks = [{**sleeper, "name": f"sleeper-{i}", "env": {"N": str(i)}} for i in range(16)]
    settings = write_settings(scratch, {"Idle": [{"hooks": hooks}]})
    system = HookSystem(cwd=scratch, settings=[settings])

    async def measure() -> list[float]:
        times = []
        for _ in range(rounds + 1):
            start = time.perf_counter()
            result = await system.fire("Idle", {"idle_seconds": 30})
            times.append((time.perf_counter() - start) * 1000)
            if len(result.hooks) != 16 or result.errors:
                raise SystemExit(f"16 sleepers failed: {result.errors}")
        return times[1:]

    median = statistics.median(anyio.run(measure))
    system.close()
    print(f"16 hooks x sleep 100 ms {median:.1f} ms  (target < {TARGET_SIXTEEN_MS:g} ms)")
    return median


def bench_cli_startup(scratch: Path, rounds: int = 30) -> float:
    """Whole-process `relay hooks run` with no hooks vs `python -c "import anyio, msgspec, click"`."""
    relay = shutil.which("relay", path=str(Path(sys.executable).parent))
    if relay is None:
        raise SystemExit("the relay console script is not installed next to this Python")
    project = scratch / "empty-project"
    (project / ".git").mkdir(parents=True, exist_ok=True)
    commands = {
        "imports": [sys.executable, "-c", "import anyio, msgspec, click"],
        "relay": [relay, "hooks", "run", "SessionStart", "--cwd", str(project)],
    }
    # Steady state: a user's install has relay's bytecode compiled after its first run; a
    # shell with PYTHONDONTWRITEBYTECODE=1 would otherwise recompile edited modules each time.
    package = Path(__file__).resolve().parents[2] / "relay"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=True)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds + 2):
        for name, argv in commands.items():  # interleaved, so drift hits both alike
            start = time.perf_counter()
            subprocess.run(argv, input=b"{}", check=True, capture_output=True)
            times[name].append((time.perf_counter() - start) * 1000)
    imports = statistics.median(times["imports"][2:])
    relay_ms = statistics.median(times["relay"][2:])
    ratio = relay_ms / imports
    print(f"import anyio, msgspec, click  {imports:.1f} ms")
    print(
        f"relay hooks run, no hooks     {relay_ms:.1f} ms  ({ratio:.2f}x, target <= {TARGET_STARTUP_RATIO}x)"
    )
    return ratio


def main(argv: list[str] | None = None) -> int:
    """Run every benchmark once and print one line per figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=2000, help="spawns per figure")
    options = parser.parse_args(argv)
    hook = build("tiny_hook.c", "tiny_hook")
    scratch = Path(tempfile.mkdtemp(prefix="relay-bench-"))
    # Bench in a throwaway RELAY_HOME: no user or system hooks, no trace in the real state dir.
    os.environ["RELAY_HOME"] = str(scratch / "home")
    os.environ["RELAY_SYSTEM_SETTINGS"] = str(scratch / "no-system-settings.json")
    (scratch / "settings").mkdir()
    (scratch / ".git").mkdir()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {options.runs} runs each")
    try:
        floor_ms = bench_floor(hook, options.runs)
        relay_ms = bench_relay_per_hook(hook, options.runs, floor_ms)
        system_ms = bench_hook_system_per_hook(hook, options.runs, floor_ms, scratch / "settings")
        pinned_ms = bench_pinned_per_hook(hook, options.runs, floor_ms, scratch)
        bench_anyio_open_process(hook, options.runs, floor_ms)
        no_match_us = bench_no_match(scratch / "settings")
        sixteen_ms = bench_sixteen_sleepers(scratch / "settings")
        startup_ratio = bench_cli_startup(scratch)
        registered_ratio = bench_registered_hooks(scratch)
        trusted_ratio = bench_trusted_projects(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    missed = [
        name
        for name, ok in {
            "per hook": max(relay_ms, system_ms, pinned_ms) <= TARGET_RATIO * floor_ms,
            "no match": no_match_us < TARGET_NO_MATCH_US,
            "16 sleepers": sixteen_ms < TARGET_SIXTEEN_MS,
            "start-up": startup_ratio <= TARGET_STARTUP_RATIO,
            "registered hooks": registered_ratio <= TARGET_REGISTERED_RATIO,
            "trusted projects": trusted_ratio <= TARGET_TRUSTED_RATIO,
        }.items()
        if not ok
    ]
    print("all targets met" if not missed else f"targets missed: {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

"""`relay mcp` start-up as a host pays it: spawn to the answer of `initialize`, and to the
tool list (wall time, and the server's CPU time by then), against a bare Python start
(`python3 -I -S -c pass`) measured in the same run. The server is started as `relay
install` registers it: `<python> -m relay mcp`.

Hosts start MCP servers alongside their own start-up and wait for them in the background
(DESIGN §12: the server must not slow the host's start noticeably). Bytecode is compiled
first, as an installed package has it. Run: .venv/bin/python tests/perf/bench_mcp.py
"""

from __future__ import annotations

import compileall
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

RUNS = 15
SERVER = [sys.executable, "-m", "relay", "mcp", "--name", "Bench"]
TICKS = os.sysconf("SC_CLK_TCK")

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


def _send(process: subprocess.Popen[bytes], message: dict[str, object]) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps(message).encode() + b"\n")
    process.stdin.flush()


def _answer(process: subprocess.Popen[bytes], request_id: int) -> dict[str, object]:
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        if not line:
            raise SystemExit("relay mcp ended before answering")
        message = json.loads(line)
        if message.get("id") == request_id:
            return message


def _cpu(pid: int) -> float:
    """Seconds of CPU (user and system, every thread) the process has used so far."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def one_start(env: dict[str, str], cwd: str) -> tuple[float, float, float]:
    start = time.perf_counter()
    process = subprocess.Popen(
        SERVER,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
    )
    _send(process, INITIALIZE)
    _answer(process, 1)
    initialized = time.perf_counter() - start
    _send(process, INITIALIZED)
    _send(process, LIST)
    tools = _answer(process, 2)
    listed = time.perf_counter() - start
    cpu = _cpu(process.pid)
    assert "tools" in tools["result"]  # type: ignore[operator]
    process.stdin.close()  # type: ignore[union-attr]
    process.wait(timeout=10)
    return initialized, listed, cpu


def bare_python() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
    return time.perf_counter() - start


def main() -> None:
    compileall.compile_dir(sysconfig.get_paths()["purelib"], quiet=1)
    compileall.compile_dir(str(Path(__file__).resolve().parents[2] / "relay"), quiet=1)
    with tempfile.TemporaryDirectory() as home, tempfile.TemporaryDirectory() as project:
        os.mkdir(os.path.join(project, ".git"))
        env = {**os.environ, "RELAY_HOME": home}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        one_start(env, project)  # warm the file cache
        starts, lists, cpus, bare = [], [], [], []
        for _ in range(RUNS):
            initialized, listed, cpu = one_start(env, project)
            starts.append(initialized)
            lists.append(listed)
            cpus.append(cpu)
            bare.append(bare_python())
    start, listed, cpu, floor = (statistics.median(x) * 1000 for x in (starts, lists, cpus, bare))
    print(f"relay mcp: initialize answered {start:6.0f} ms  (median of {RUNS})")
    print(f"           tools listed        {listed:6.0f} ms")
    print(f"           CPU by then         {cpu:6.0f} ms")
    print(f"python3 -I -S -c pass           {floor:6.0f} ms  ({start / floor:.0f}x)")


if __name__ == "__main__":
    main()

"""`relay up` speed (issue 30): a headless team of 10 scripted agents, from the command to
every agent live (its `relay run` session registered). Run:
.venv/bin/python tests/perf/bench_fleet_up.py [--agents 10] [--runs 5]

Not a pytest module. Each run uses a fresh RELAY_HOME and project, times `relay up
--headless` (which returns once every agent is live), then `relay down`. Bytecode is
compiled first, as a user's install has it. Target: under 3 s on 2 cores (median).
Prints the median and every run's figure; exits 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import relay

AGENT = Path(__file__).resolve().parent.parent / "resources" / "fleet" / "agent.py"
TARGET_SECONDS = 3.0


def team_file(project: Path, agents: int, records: Path) -> None:
    lines = ['team = "bench"', ""]
    for number in range(agents):
        lines += [
            "[[agent]]",
            f'name = "agent{number}"',
            f'command = ["{sys.executable}", "{AGENT}"]',
            f'env = {{ AGENT_RECORD = "{records}/agent{number}.jsonl" }}',
            "",
        ]
    (project / "relay.team.toml").write_text("\n".join(lines))


def one_run(agents: int) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-up-") as folder:
        base = Path(folder)
        project, home, records = base / "project", base / "home", base / "records"
        for path in (project, home, records):
            path.mkdir()
        team_file(project, agents, records)
        env = dict(os.environ, RELAY_HOME=str(home))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        command = [sys.executable, "-m", "relay"]
        started = time.perf_counter()
        done = subprocess.run(
            [*command, "up", "--yes", "--headless"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - started
        subprocess.run([*command, "down"], cwd=project, env=env, capture_output=True, check=False)
        if done.returncode != 0 or done.stdout.count("live (relay run pid") != agents:
            raise SystemExit(f"relay up failed:\n{done.stdout}\n{done.stderr}")
        return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    compileall.compile_dir(str(Path(relay.__file__).parent), quiet=1)
    one_run(options.agents)  # warm: the file cache, bytecode of what compileall missed
    figures = [one_run(options.agents) for _ in range(options.runs)]
    median = statistics.median(figures)
    print(
        f"relay up --headless, {options.agents} scripted agents until all live: "
        f"median {median:.2f} s over {options.runs} runs "
        f"({', '.join(f'{figure:.2f}' for figure in figures)}); target < {TARGET_SECONDS:g} s"
    )
    return 0 if median < TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())

"""relay's TTY mode in miniature: raw_terminal + passthrough around a fake agent.

Usage: passthrough_app.py OUTPUT_LOG AGENT_ARGV...
Writes every byte passthrough gave to on_output to OUTPUT_LOG when the agent has
exited, then prints `APP DONE <exit code>`.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

import anyio

from relay.session.pty import AgentPty
from relay.session.terminal import exit_request, passthrough, raw_terminal, terminal_size


def main() -> int:
    log_path, argv = Path(sys.argv[1]), sys.argv[2:]
    rows, cols = terminal_size(0)
    agent = AgentPty.spawn(argv, rows=rows, cols=cols)
    seen = bytearray()
    code = None
    try:
        with raw_terminal(0):
            try:
                code = anyio.run(partial(passthrough, agent, on_output=seen.extend))
            except BaseExceptionGroup as group:  # SIGTERM's SystemExit, raised inside a task
                request = exit_request(group)
                if request is None:
                    raise
                raise request from None
    finally:
        agent.close()
        log_path.write_bytes(bytes(seen))
    print(f"APP DONE {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

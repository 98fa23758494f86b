"""Runs raw_terminal on its own terminal (a PTY the test holds) and ends as told.

Usage: raw_mode_app.py MODE, MODE one of: normal, exception, interrupt, sigterm,
handler, nested, size. Prints a marker at each step and then waits for one key, so the
test can look at the terminal's modes in between: `RAW` inside the block, `INNER DONE`
after a nested block, `OWN HANDLER` when its own SIGTERM handler runs, `RESTORED` after
the block; then it waits for a line and exits 0. `size` prints terminal_size.
"""

from __future__ import annotations

import os
import signal
import sys

from relay.session.terminal import raw_terminal, terminal_size


def say(text: str) -> None:
    os.write(1, (text + "\r\n").encode())


def pause() -> None:
    os.read(0, 1)


def main() -> int:
    mode = sys.argv[1]
    if mode == "size":
        rows, cols = terminal_size(0)
        say(f"SIZE {rows} {cols}")
        return 0
    if mode == "handler":
        # relay's handler restores the terminal, calls this one, then goes back to raw.
        signal.signal(signal.SIGTERM, lambda *_: say("OWN HANDLER"))
    try:
        with raw_terminal(0):
            if mode == "nested":
                with raw_terminal(0):
                    say("RAW")
                    pause()
                say("INNER DONE")
            else:
                say("RAW")
            pause()  # SIGTERM arrives here in the sigterm and handler modes
            if mode == "exception":
                raise RuntimeError("boom")
            if mode == "interrupt":
                raise KeyboardInterrupt
    except (RuntimeError, KeyboardInterrupt) as exc:
        say(f"CAUGHT {type(exc).__name__}")
    say("RESTORED")
    sys.stdin.readline()
    return 0


if __name__ == "__main__":
    sys.exit(main())

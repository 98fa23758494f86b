"""A fake agent for the `relay run` TTY tests: a prompt, an answer to every line, its size on SIGWINCH.

Usage: line_agent.py RECORD PIDFILE, or line_agent.py --show (print SHOWN and exit).

Writes its pid to PIDFILE, then prints the prompt `agent> `. Every line read is
appended to RECORD (UTF-8, one line each, flushed at once) and answered
`agent got: <line>`. The line `show` prints SHOWN (colours and UTF-8); `quit N` exits
with N. SIGWINCH prints `size: ROWSxCOLS`; SIGUSR1 prints `@ping:x hello` on a line of
its own (a directive, printed while a line may be half typed). Exits 0 at end of input.
"""

from __future__ import annotations

import os
import signal
import sys

SHOWN = "\x1b[1;31mbold red\x1b[0m \x1b[42mon green\x1b[0m h\u00e9llo w\u00f6rld \u2713 \u2192 \u65e5\u672c"
PROMPT = "agent> "


def say(text: str) -> None:
    os.write(1, text.encode())


def on_resize(signum: int, frame: object) -> None:
    size = os.get_terminal_size(0)
    say(f"\nsize: {size.lines}x{size.columns}\n{PROMPT}")


def on_usr1(signum: int, frame: object) -> None:
    say("\n@ping:x hello\n")


def main() -> int:
    if sys.argv[1:] == ["--show"]:
        say(SHOWN + "\n")
        return 0
    record_path, pid_path = sys.argv[1], sys.argv[2]
    signal.signal(signal.SIGWINCH, on_resize)
    signal.signal(signal.SIGUSR1, on_usr1)
    with open(pid_path + ".tmp", "w") as pid_file:
        pid_file.write(str(os.getpid()))
    os.replace(pid_path + ".tmp", pid_path)  # whole or absent for the test that polls it
    say(PROMPT)
    with open(record_path, "a", encoding="utf-8") as record:
        while raw := sys.stdin.buffer.readline():
            line = raw.decode().rstrip("\n")
            record.write(line + "\n")
            record.flush()
            say(f"agent got: {line}\n")
            if line == "show":
                say(SHOWN + "\n")
            elif line.startswith("quit "):
                return int(line.split()[1])
            say(PROMPT)
    return 0


if __name__ == "__main__":
    sys.exit(main())

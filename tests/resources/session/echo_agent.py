"""A fake agent for the PTY tests: reads lines from its terminal and answers.

Prints `READY pid=… pgid=… sid=… tty=… ctty=…` at start and `SIZE rows cols` on every
SIGWINCH. Each line read is answered `GOT '<line>'`; `exit N` exits with N, `size`
prints the size. Exits 0 at end of input (Ctrl-D on an empty line).

Options: --record FILE appends every line read to FILE; --ignore-term ignores SIGTERM
and SIGHUP; --child FILE starts two children that ignore SIGTERM and SIGHUP (one in a
process group of its own) and writes their pids to FILE; --banner prints BANNER
(colours, UTF-8, a tab); --bracketed-paste turns bracketed paste on and strips its
markers from the lines read.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

BANNER = "\x1b[1;32mGREEN\x1b[0m h\u00e9llo \u2713\ttab\n".encode()


def say(text: str) -> None:
    os.write(1, (text + "\n").encode())


def size() -> str:
    rows, cols = os.get_terminal_size(0).lines, os.get_terminal_size(0).columns
    return f"SIZE {rows} {cols}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record")
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--child")
    parser.add_argument("--bracketed-paste", action="store_true")
    parser.add_argument("--banner", action="store_true")
    options = parser.parse_args()

    if options.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGWINCH, lambda *_: say(size()))
    if options.child:
        # Two stubborn children: one in the agent's process group, one in a group of its
        # own (still in the agent's session).
        stubborn = (
            "import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
            "time.sleep(600)\n"
        )
        children = [
            subprocess.Popen([sys.executable, "-c", stubborn]),
            subprocess.Popen([sys.executable, "-c", stubborn], process_group=0),
        ]
        with open(options.child, "w") as pid_file:
            pid_file.write(" ".join(str(child.pid) for child in children))
    try:
        os.close(os.open("/dev/tty", os.O_RDWR))
        ctty = "yes"
    except OSError:
        ctty = "no"
    pid = os.getpid()
    say(f"READY pid={pid} pgid={os.getpgid(0)} sid={os.getsid(0)} tty={os.isatty(0)} ctty={ctty}")
    if options.banner:
        os.write(1, BANNER)
    if options.bracketed_paste:
        os.write(1, b"\x1b[?2004h")
    for raw_line in sys.stdin:
        line = raw_line.rstrip("\n")
        if options.bracketed_paste:
            line = line.replace("\x1b[200~", "").replace("\x1b[201~", "")
        if options.record:
            with open(options.record, "a", encoding="utf-8") as record:
                record.write(line + "\n")
        if line.startswith("exit "):
            return int(line.split()[1])
        if line == "size":
            say(size())
            continue
        say(f"GOT {line!r}")
    say("EOF")
    return 0


if __name__ == "__main__":
    sys.exit(main())

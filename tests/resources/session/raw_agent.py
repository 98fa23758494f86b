"""An agent that reads its terminal key by key (raw mode), as TUIs do, and submits a line
at each CR. For the paste-mode tests of relay run (tests/test_session.py).

usage: raw_agent.py RECORD [--paste] [--kitty] [--ask-on-key] [--toggle] [--off]
                           [--show FILE] [--print FILE] [--job-show FILE FLAG]
                           [--job-read] [--reads N]

  --paste      turn bracketed paste on as it starts and take pastes: a CR inside
               ESC[200~ … ESC[201~ is a line break, not a submission. Without it the
               agent knows nothing of pastes: every CR submits, markers are kept as text.
  --kitty      turn the kitty keyboard protocol on as it starts (ESC[>1u, as Codex does)
               and read the keys a terminal then sends: ESC[117;5u (Ctrl-U) clears the
               line, ESC[13u (Enter) submits it, as a CR does; other escape sequences
               are dropped
  --ask-on-key print `@ask:x go` as soon as the first key of the first line is read
After the first line, in this order:
  --toggle     turn bracketed paste off and on again itself (as bash does around a
               command it runs, and Gemini CLI around an editor it opens)
  --off        turn bracketed paste off itself
  --show FILE  show FILE with a real `cat` that writes to the same terminal (a tool the
               agent runs, in the agent's own process group)
  --print FILE show FILE by writing its bytes itself
  --job-show FILE FLAG
               show FILE with a job in a process group of its own that has the terminal
               (a shell's job control); the job then prints `@shown:x done` and waits for
               FLAG (which the test's @shown handler creates, at most 30 s), so relay
               reads the file while the job has the terminal
  --job-read   run a job in a process group of its own that has the terminal, knows
               nothing of pastes, prints `@ask:x go` and reads a line ("job")
Then the agent takes its terminal back, prints `@ask:x go` and reads N lines (--reads,
default 1).

Each line read is recorded in RECORD as a JSON line {"label", "line"}: "start" for the
first, "answer" for the agent's others, "job" for the line a job read.
"""

import json
import os
import signal
import subprocess
import sys
import time
import tty

PASTE_START = b"\x1b[200~"
PASTE_END = b"\x1b[201~"

args = sys.argv[1:]
record = open(args[0], "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run


def option(name: str, count: int = 1) -> list[str] | None:
    if name not in args:
        return None
    at = args.index(name)
    return args[at + 1 : at + 1 + count]


def read_line(label: str, paste: bool, *, kitty: bool = False, ask_on_key: bool = False) -> None:
    os.write(1, b"> ")
    typed = b""
    while True:
        key = os.read(0, 1)
        if not key:
            sys.exit(9)
        if ask_on_key:
            os.write(1, b"\r\n@ask:x go\r\n")
            ask_on_key = False
        if kitty and key == b"\x1b":
            sequence = key + os.read(0, 1)
            while sequence[1:] == b"[" or not 0x40 <= sequence[-1] <= 0x7E:
                sequence += os.read(0, 1)
            if sequence == b"\x1b[117;5u":
                typed = b""
            elif sequence == b"\x1b[13u":
                typed += b"\r"
                break
            continue
        typed += key
        if paste and typed.endswith(PASTE_START):
            typed = typed[: -len(PASTE_START)]
            while not typed.endswith(PASTE_END):
                typed += os.read(0, 1)
            typed = typed[: -len(PASTE_END)].replace(b"\r", b"\n")
        elif key == b"\r":
            break
    line = typed[:-1].decode(errors="replace")
    record.write(json.dumps({"label": label, "line": line}) + "\n")
    record.flush()


def take_terminal() -> None:
    """Make this process's group the terminal's foreground group (SIGTTOU ignored, as a
    shell does: a background group may not otherwise)."""
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    os.tcsetpgrp(0, os.getpgrp())


def run_job(*job_args: str) -> None:
    """This script again, as a job in a process group of its own, until it ends."""
    command = [sys.executable, __file__, args[0], "--as-job", *job_args]
    subprocess.run(command, check=True, process_group=0)
    take_terminal()


if "--as-job" in args:  # a job: it takes the terminal itself, so it never writes before
    take_terminal()
    shown = option("--job-show", 2)
    if shown is not None:
        with open(shown[0], "rb") as file:
            os.write(1, file.read())
        os.write(1, b"\r\n@shown:x done\r\n")
        for _ in range(600):
            if os.path.exists(shown[1]):
                break
            time.sleep(0.05)
    else:
        os.write(1, b"\r\n@ask:x go\r\n")
        read_line("job", paste=False)
    sys.exit(0)

paste = "--paste" in args
kitty = "--kitty" in args
tty.setraw(0)
if paste:
    os.write(1, b"\x1b[?2004h")
if kitty:
    os.write(1, b"\x1b[>1u")

read_line("start", paste, kitty=kitty, ask_on_key="--ask-on-key" in args)
if "--toggle" in args:
    os.write(1, b"\x1b[?2004l")
    time.sleep(0.05)  # as a command would run in between: a chunk of its own, usually
    os.write(1, b"\x1b[?2004h")
if "--off" in args:
    os.write(1, b"\x1b[?2004l")
show = option("--show")
if show is not None:
    subprocess.run(["cat", show[0]], check=True)
printed = option("--print")
if printed is not None:
    with open(printed[0], "rb") as file:
        os.write(1, file.read())
job_show = option("--job-show", 2)
if job_show is not None:
    run_job("--job-show", *job_show)
if "--job-read" in args:
    run_job("--job-read")
os.write(1, b"\r\n@ask:x go\r\n")
reads = int((option("--reads") or ["1"])[0])
for _ in range(reads):
    read_line("answer", paste, kitty=kitty)

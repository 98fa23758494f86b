"""An agent that reads its terminal key by key (raw mode), as TUIs do, and submits a line
at each CR. For the paste-mode tests of relay run (tests/test_session.py).

usage: raw_agent.py RECORD [--paste] [--show FILE] [--reads N]

  --paste      turn bracketed paste on as it starts and take pastes: a CR inside
               ESC[200~ … ESC[201~ is a line break, not a submission. Without it the
               agent knows nothing of pastes: every CR submits, markers are kept as text.
  --show FILE  after the first line, show FILE with a real `cat` that writes to the same
               terminal (a tool the agent runs)
  --reads N    lines to read after printing `@ask:x go` (default 1)

Each line read is recorded in RECORD as a JSON line {"label", "line"}: "start" for the
first, "answer" for the others.
"""

import json
import os
import subprocess
import sys
import tty

PASTE_START = b"\x1b[200~"
PASTE_END = b"\x1b[201~"

args = sys.argv[1:]
record = open(args[0], "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run
paste = "--paste" in args
show = args[args.index("--show") + 1] if "--show" in args else None
reads = int(args[args.index("--reads") + 1]) if "--reads" in args else 1

tty.setraw(0)
if paste:
    os.write(1, b"\x1b[?2004h")


def read_line(label: str) -> None:
    os.write(1, b"> ")
    typed = b""
    while True:
        key = os.read(0, 1)
        if not key:
            sys.exit(9)
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


read_line("start")
if show is not None:
    subprocess.run(["cat", show], check=True)
os.write(1, b"\r\n@ask:x go\r\n")
for _ in range(reads):
    read_line("answer")

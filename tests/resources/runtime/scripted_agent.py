"""A fake agent for session tests: follows a JSON script of steps and records what it reads.

argv[1]: the script, a JSON list of steps:
  {"print": TEXT}        print a line
  {"read": LABEL}        read one line from stdin; record {"label": LABEL, "line": ...}
  {"sleep": SECONDS}
  {"exit": CODE}
  {"noecho": true}       turn the terminal's echo off (only the agent's own prints show)
argv[2]: the record file (JSON lines).
"""

import json
import sys
import termios
import time

steps = json.loads(sys.argv[1])
record = open(sys.argv[2], "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run
for step in steps:
    if "print" in step:
        print(step["print"], flush=True)
    elif "read" in step:
        print("> ", end="", flush=True)  # a prompt, as real agents draw one before reading
        line = sys.stdin.readline()
        record.write(json.dumps({"label": step["read"], "line": line.rstrip("\r\n")}) + "\n")
        record.flush()
        if not line:
            sys.exit(9)
    elif "sleep" in step:
        time.sleep(step["sleep"])
    elif "noecho" in step:
        attributes = termios.tcgetattr(0)
        attributes[3] &= ~termios.ECHO
        termios.tcsetattr(0, termios.TCSANOW, attributes)
    elif "exit" in step:
        sys.exit(step["exit"])

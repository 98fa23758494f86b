"""A fake agent for session tests: follows a JSON script of steps and records what it reads.

argv[1]: the script, a JSON list of steps:
  {"print": TEXT}        print a line
  {"read": LABEL}        read one line from stdin; record {"label": LABEL, "line": ...}
  {"sleep": SECONDS}
  {"exit": CODE}
  {"noecho": true}       turn the terminal's echo off (only the agent's own prints show)
  {"echo_then": TEXT, "print": LINE, "label": LABEL}
                         raw mode: echo typed keys itself until they end with TEXT, print
                         LINE right after that echo (before the Enter), then read to the
                         Enter and record the line: relay's typing and the agent's next
                         line on one screen line, every time
  {"shell": COMMAND, "label": LABEL}
                         run COMMAND with sh, printing "working…" until it ends; record
                         its exit code and output
  {"hook": EVENT, "payload": {...}, "label": LABEL}
                         call relay as a host calls its hooks (`relay hooks run --dialect
                         claude EVENT`, the payload on stdin, this environment) and record
                         its answer
argv[2]: the record file (JSON lines).
"""

import json
import sys
import termios
import time

steps = json.loads(sys.argv[1])
record = open(sys.argv[2], "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run
for step in steps:
    if "echo_then" in step:
        import os
        import tty

        tty.setraw(0)
        typed = b""
        while not typed.endswith(step["echo_then"].encode()):
            key = os.read(0, 1)
            typed += key
            os.write(1, key)
        os.write(1, step["print"].encode() + b"\r\n")
        while not typed.endswith(b"\r"):
            typed += os.read(0, 1)
        line = typed.decode(errors="replace").rstrip("\r")
        record.write(json.dumps({"label": step["label"], "line": line}) + "\n")
        record.flush()
    elif "hook" in step:
        import os
        import subprocess

        payload = {"session_id": "host-session", "cwd": os.getcwd(), **step["payload"]}
        done = subprocess.run(
            [sys.executable, "-m", "relay", "hooks", "run", "--dialect", "claude", step["hook"]],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            check=False,
        )
        record.write(json.dumps({"label": step["label"], "line": done.stdout.strip()}) + "\n")
        record.flush()
    elif "shell" in step:
        # Run a command as an agent runs a tool, printing while it works (an agent that
        # prints is busy: relay waits for it to go quiet), and record how it ended.
        import subprocess

        child = subprocess.Popen(
            step["shell"], shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        while child.poll() is None:
            print("working…", flush=True)
            time.sleep(0.1)
        output = child.stdout.read().decode(errors="replace") if child.stdout else ""
        record.write(
            json.dumps({"label": step["label"], "line": f"{child.returncode} {output}"}) + "\n"
        )
        record.flush()
    elif "print" in step:
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

"""An agent that answers every message it is typed with `@relay:OTHER …` and, when relay
refuses to send, tries again half a second later, as a naive agent in a reply loop does.

argv: NAME OTHER RECORD STOP [first]
  RECORD  a JSON-lines file: {"event": "message" | "queued" | "refused" | "other", "line": …}
  STOP    the bot exits (0) once this file exists, or after 300 s
  first   send the first message instead of waiting for one
"""

import json
import os
import select
import sys
import time

name, other, record_path, stop_path = sys.argv[1:5]
first = sys.argv[5:] == ["first"]
record = open(record_path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the run
RETRY_SECONDS = 0.5
deadline = time.monotonic() + 300
sent = 0
retry_at: float | None = None
last = [""]  # the last message said, for a retry


def note(event: str, line: str) -> None:
    record.write(json.dumps({"event": event, "line": line}) + "\n")
    record.flush()


def say(text: str) -> None:
    last[0] = text
    print(f"@relay:{other} {text}", flush=True)


print(f"{name} ready", flush=True)  # an agent draws something before it reads
if first:
    say(f"ping from {name}")
pending = b""
while not os.path.exists(stop_path) and time.monotonic() < deadline:
    wait = 0.2 if retry_at is None else max(0.0, min(0.2, retry_at - time.monotonic()))
    readable, _, _ = select.select([0], [], [], wait)
    if retry_at is not None and time.monotonic() >= retry_at:
        retry_at = None
        say(f"again: {last[0].removeprefix('again: ')}")
    if not readable:
        continue
    chunk = os.read(0, 4096)
    if not chunk:
        break
    pending += chunk
    *lines, pending = pending.split(b"\n")
    for raw in lines:
        line = raw.decode(errors="replace").strip("\r")
        if line.startswith("Relay message from "):
            note("message", line)
            sent += 1
            say(f"reply {sent} from {name}")
        elif line.startswith("✓ Queued"):
            note("queued", line)
        elif line.startswith("✗ Not sent"):
            note("refused", line)
            retry_at = time.monotonic() + RETRY_SECONDS
        elif line:
            note("other", line)

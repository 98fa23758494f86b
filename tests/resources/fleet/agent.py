"""A scripted team agent for `relay up` tests: says it is ready, then answers each line it
reads. `say TEXT` prints TEXT (a directive such as `@relay:Bob hi`); `exit N` exits with N
(either also as the body of a message relay types in: `Relay message from X [id]: say …`).
Every line it reads is appended to $AGENT_RECORD (JSON lines with its run number)."""

import json
import os
import re
import sys
from pathlib import Path

record = Path(os.environ["AGENT_RECORD"])
runs = record.with_suffix(".runs")
run = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(run))
name = os.environ.get("RELAY_AGENT_NAME", "?")
print(f"ready {name} run {run}", flush=True)
for raw in sys.stdin:
    line = raw.rstrip("\r\n")
    with record.open("a") as stream:
        stream.write(json.dumps({"run": run, "line": line}) + "\n")
    body = re.sub(r"^Relay message from \S+ \[\w+\]: ", "", line)
    if body.startswith("say "):
        print(body[4:], flush=True)
    elif body.startswith("exit "):
        sys.exit(int(body[5:]))
    else:
        print(f"heard: {line}", flush=True)

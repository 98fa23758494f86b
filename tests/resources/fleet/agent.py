"""A scripted team agent for `relay up` tests: says it is ready, then answers each line it
reads. `say TEXT` prints TEXT (a directive such as `@relay:Bob hi`); `exit N` exits with N.
Every line it reads is appended to $AGENT_RECORD (JSON lines with its run number)."""

import json
import os
import sys
from pathlib import Path

record = Path(os.environ["AGENT_RECORD"])
runs = record.with_suffix(".runs")
run = int(runs.read_text()) + 1 if runs.exists() else 1
runs.write_text(str(run))
name = os.environ.get("RELAY_AGENT_NAME", "?")
print(f"ready {name} run {run}", flush=True)
for line in sys.stdin:
    line = line.rstrip("\r\n")
    with record.open("a") as stream:
        stream.write(json.dumps({"run": run, "line": line}) + "\n")
    if line.startswith("say "):
        print(line[4:], flush=True)
    elif line.startswith("exit "):
        sys.exit(int(line[5:]))
    else:
        print(f"heard: {line}", flush=True)

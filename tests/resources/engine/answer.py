#!/usr/bin/env python3
"""Answer with argv[1] on stdout, argv[3] on stderr, and exit with argv[2]; record stdin to $RECORD_DIR."""

import json
import os
import sys

data = sys.stdin.read()
record = os.environ.get("RECORD_DIR")
if record:
    name = os.environ.get("HOOK_ID", "hook")
    with open(os.path.join(record, name + ".json"), "w") as f:
        json.dump({"stdin": json.loads(data), "cwd": os.getcwd(), "env": dict(os.environ)}, f)
if len(sys.argv) > 1:
    sys.stdout.write(sys.argv[1])
if len(sys.argv) > 3:
    sys.stderr.write(sys.argv[3])
sys.exit(int(sys.argv[2]) if len(sys.argv) > 2 else 0)

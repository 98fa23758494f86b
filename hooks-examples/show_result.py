#!/usr/bin/env python3
"""Print a `relay hooks run` result (JSON on stdin) for people: used by demo.sh."""

import json
import sys

result = json.load(sys.stdin)
line = f"decision: {result['decision']}"
if result["reason"]:
    line += f"  (reason: {result['reason']})"
print(line.replace("\n", "\n    "))
for key in ("inject", "systemMessage", "tool_input", "stopped_by"):
    value = result.get(key)
    if value:
        text = value if isinstance(value, str) else json.dumps(value)
        print(f"{key}: " + text.replace("\n", "\n    "))
for hook in result["hooks"]:
    note = f", error: {hook['error']}" if hook["error"] else ""
    print(f"  hook {hook['name']}: exit {hook['exit_code']} in {hook['duration_ms']:.1f} ms{note}")

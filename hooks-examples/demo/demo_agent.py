#!/usr/bin/env python3
"""A scripted stand-in for an AI coding agent, for `make demo` (no network, no API key).

It behaves like a real agent under `relay run`: it reads its first input (relay types
the SessionStart context in), prints tool calls and asks relay's hook engine before
"running" each one (as Claude Code does with `relay hooks run --dialect claude
PreToolUse` as its hook), prints an `@deploy:` directive and reads the answer relay
types back, waits until relay nudges it after a quiet spell, then ends cleanly.
"""

import json
import os
import subprocess
import sys
import time

RELAY = os.environ.get("RELAY_BIN", "relay")


def say(text: str) -> None:
    print(text, flush=True)


def tool_call(command: str) -> None:
    """Ask the hook engine about a Bash call, then "run" it or report the block."""
    say(f"⏺ Bash({command})")
    event = {"tool_name": "Bash", "tool_input": {"command": command}}
    done = subprocess.run(
        [RELAY, "hooks", "run", "--dialect", "claude", "PreToolUse"],
        input=json.dumps(event), capture_output=True, text=True, check=False,
    )
    # Read the answer as Claude Code does: a JSON permission decision, or exit 2.
    answer = json.loads(done.stdout or "{}") if done.returncode == 0 else {}
    specific = answer.get("hookSpecificOutput") or {}
    if done.returncode == 2:
        say(f"  ✗ blocked by a hook: {done.stderr.strip()}")
    elif specific.get("permissionDecision") == "deny":
        say(f"  ✗ blocked by a hook: {specific.get('permissionDecisionReason', '')}")
    else:
        say("  ✓ allowed; output: total 3  README.md  src/  tests/")


def read_line(label: str) -> str:
    line = sys.stdin.readline()
    if not line:
        say(f"agent: no {label} (stdin closed)")
        sys.exit(1)
    return line.strip()


say("demo-agent 0.1: a scripted stand-in for an AI coding agent")
say("agent: waiting for my first instructions…")
context = read_line("start-up context")
say(f"agent: got start-up context from relay: {context[:70]}{'…' if len(context) > 70 else ''}")
# Read the rest of a multi-line injection, if any, without waiting long for it.
tool_call("ls -la")
tool_call("rm -rf / --no-preserve-root")
say("agent: asking the deploy handler for a dry run:")
say("@deploy:staging release 1.4.2")
answer = read_line("deploy answer")
say(f"agent: the deploy handler answered: {answer}")
say("agent: thinking quietly for a while…")
nudge = read_line("idle nudge")
say(f"agent: relay nudged me after a quiet spell: {nudge}")
say("agent: done, exiting")
time.sleep(0.2)

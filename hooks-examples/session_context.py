#!/usr/bin/env python3
"""SessionStart: tell the agent which branch it is on and what changed recently (plain text = inject)."""

import json
import subprocess
import sys


def git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


event = json.load(sys.stdin)
branch = git("rev-parse", "--abbrev-ref", "HEAD")
if not branch:
    sys.exit(0)  # not a git checkout: no opinion
lines = [f"Git branch: {branch}"]
commits = git("log", "--oneline", "-5")
if commits:
    lines += ["Recent commits:", *("  " + line for line in commits.splitlines())]
status = git("status", "--short")
if status:
    lines.append(f"Uncommitted changes in {len(status.splitlines())} file(s).")
print("\n".join(lines))

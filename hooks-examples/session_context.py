#!/usr/bin/env python3
"""session_context.py: tell the agent, as a session starts, where it is in git.

Event: SessionStart (the same name in relay, Claude Code and Gemini CLI), any source.
Answer: plain text on stdout, which relay reads as `inject` for SessionStart (added to
the agent's context): the branch (or detached commit), the last 5 commits, and how many
files have uncommitted changes. No output outside a git work tree or without git.
Every git call is bounded (5 s). Standard library only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def git(cwd: str, *args: str) -> str:
    """git's output, or "" when it fails, is missing or takes too long."""
    try:
        done = subprocess.run(
            ["git", "-C", cwd, *args],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


try:
    event = json.load(sys.stdin)
except ValueError as error:
    sys.exit(f"session_context.py: the event is not JSON: {error}")
cwd = event.get("cwd") if isinstance(event, dict) and event.get("cwd") else os.getcwd()
if git(cwd, "rev-parse", "--is-inside-work-tree") != "true":
    sys.exit(0)  # not a git checkout: no opinion
branch = git(cwd, "symbolic-ref", "--short", "-q", "HEAD")  # works before the first commit
if not branch:
    branch = f"(detached HEAD at {git(cwd, 'rev-parse', '--short', 'HEAD')})"
lines = [f"Git branch: {branch}"]
commits = git(cwd, "log", "--oneline", "--no-decorate", "-5")
if commits:
    lines += ["Recent commits:", *("  " + line for line in commits.splitlines())]
status = git(cwd, "status", "--porcelain")
if status:
    lines.append(f"Uncommitted changes in {len(status.splitlines())} file(s).")
print("\n".join(lines))

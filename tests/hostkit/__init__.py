"""Real hosts (Claude Code, Gemini CLI, Codex) for the suite: installed from npm into a
cache outside the checkout, run headless against scripted model servers on 127.0.0.1.

Not a test module: tests import it as `from hostkit import ...` (tests/ is on sys.path,
next to conftest.py).
"""

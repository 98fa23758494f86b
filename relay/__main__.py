"""`python -m relay …` is the `relay` command (what the hook clients fall back to)."""

from relay.cli.entry import run

run()

"""`relay hooks wait-mail`: the background hook that wakes an idle host when mail arrives."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from relay.hosts import HOST_NAMES


@click.command(name="wait-mail", hidden=True)
@click.option("--dialect", type=click.Choice(HOST_NAMES), default="claude", show_default=True)
def wait_mail(dialect: str) -> None:
    """Wait for mail for $RELAY_AGENT_NAME; print it and exit 2 (the host's asyncRewake wakes
    the model with it), or exit 0 after a while or when the host is gone."""
    from relay.hosts import host
    from relay.hosts.waiter import wait_for_mail

    stdin = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    code, text = wait_for_mail(host(dialect), stdin, dict(os.environ), Path.cwd())
    if text:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    raise SystemExit(code)

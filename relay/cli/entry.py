"""The `relay` console script: `relay hooks run` takes the fast path, the rest go to click."""

from __future__ import annotations

import sys


def run() -> None:
    """Console-script entry point."""
    argv = sys.argv[1:]
    if argv[:2] == ["hooks", "run"]:
        from relay.cli.hookcall import main as hook_call

        hook_call(argv[2:])  # exits, unless click must handle the arguments
    from relay.cli.main import main

    sys.exit(main())

"""The `relay` console script: `relay hooks run` and a plain `relay agents` take fast paths
(no click to import), the rest go to click."""

from __future__ import annotations

import sys


def run() -> None:
    """Console-script entry point."""
    argv = sys.argv[1:]
    if argv[:2] == ["hooks", "run"]:
        from relay.cli.hookcall import main as hook_call

        hook_call(argv[2:])  # exits, unless click must handle the arguments
    elif argv[:1] == ["agents"]:
        from relay.cli.team_view import quick_agents

        code = quick_agents(argv)
        if code is not None:
            sys.exit(code)
    from relay.cli.main import main

    sys.exit(main())

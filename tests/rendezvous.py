"""Hooks that prove they ran side by side, without a stopwatch.

`meet(folder, count, name)` is a POSIX shell fragment: the hook marks itself arrived in
`folder`, then waits until `count` hooks have arrived. Hooks run in parallel all get
past it; hooks run one after another never do (the first waits alone until the bound
and exits 3). So a test asserts on exit codes, not on how long a loaded machine took.

Not a test module: tests import it as `from rendezvous import meet`."""

from __future__ import annotations

import shlex
from pathlib import Path

BOUND = 60.0  # seconds a hook waits for the others before giving up (exit 3)
_STEP = 0.05


def meet(folder: Path, count: int, name: str) -> str:
    """Shell text: mark `name` arrived in `folder`, then wait for `count` arrivals."""
    folder.mkdir(parents=True, exist_ok=True)
    where = shlex.quote(str(folder))
    tries = int(BOUND / _STEP)
    return (
        f": > {where}/{shlex.quote(name)}; tries=0; "
        f"while :; do set -- {where}/*; [ $# -ge {count} ] && break; "
        f"tries=$((tries + 1)); [ $tries -gt {tries} ] && exit 3; sleep {_STEP}; done"
    )

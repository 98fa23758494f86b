"""How much work a SQLite operation does, counted in virtual-machine steps: a cost that
does not depend on the machine's speed, so a test can say that one grows with the data
and another does not.

Not a test module: tests import it as `from sqlite_steps import vm_steps` (pytest puts
tests/ on sys.path, next to conftest.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable


def vm_steps(connection: sqlite3.Connection, action: Callable[[], object], *, per: int = 1) -> int:
    """SQLite virtual-machine steps (in units of `per`) that `action` costs on `connection`."""
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    connection.set_progress_handler(tick, per)
    try:
        action()
    finally:
        connection.set_progress_handler(None, 0)
    return steps

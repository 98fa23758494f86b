"""What relay saw of each hook run, in full: for `relay hooks test` and replays."""

from __future__ import annotations

import msgspec

from relay.protocol.output import HookReport


class HookTrace(msgspec.Struct, kw_only=True):
    """One hook run: how it was chosen and started, what it was sent and what it printed."""

    name: str
    source: str
    registered_as: str
    dialect: str
    matcher: str | None
    matched: str
    mode: str
    argv: list[str]
    cwd: str | None
    timeout: float
    stdin: str
    stdout: str
    stderr: str
    report: HookReport

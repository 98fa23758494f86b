"""`relay hooks run` on the fast path: no click, no asyncio, no interpreter teardown.

A host pays for this process on every event (DESIGN §10), so the console script sends
`relay hooks run …` here before importing click; anything this parser does not handle
(help, a usage error) goes on to click's command, which gives the same answers.
"""

from __future__ import annotations

import os
import sys

from relay.server.client import Call, Reply


def main(argv: list[str]) -> None:
    """Answer `relay hooks run ARGV` and exit; returns only when click must take over."""
    from relay.hosts.call import lost_call, parse_run_args, prepare
    from relay.server.client import LOST_VARIABLE

    lost = os.environ.pop(LOST_VARIABLE, None)  # a client's server stopped mid-call
    cwd = _cwd()
    args = parse_run_args(argv, cwd)
    if args is None:
        return
    stdin = _read_stdin()
    call = Call(argv=argv, cwd=cwd, env=dict(os.environ), stdin=stdin)
    reply = (lost_call(args, call, lost) if lost is not None else prepare(args, call)).finish()
    _emit(reply)
    # Everything is flushed and every hook reaped: skip the interpreter's teardown, which
    # costs a host tens of milliseconds per event.
    os._exit(reply.exit_code)


def _emit(reply: Reply) -> None:
    stdout = sys.stdout.buffer
    stdout.write(reply.stdout)
    stdout.flush()
    sys.stderr.buffer.write(reply.stderr)
    sys.stderr.flush()
    reply.returned()


def _read_stdin() -> bytes:
    # stdin may be a terminal (not read) or closed altogether (`<&-`): both are "no event".
    if sys.stdin is None or sys.stdin.isatty():
        return b""
    return sys.stdin.buffer.read()


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:
        return ""  # deleted: the event's cwd or --cwd must say where the project is

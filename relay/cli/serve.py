"""`relay serve`: run, start, inspect or stop the resident server behind the hook clients."""

from __future__ import annotations

import json
import sys
import time

import click

from relay.server.server import DEFAULT_IDLE_SECONDS

NOT_RUNNING = 3
"""`relay serve --status` when no server runs: systemctl's and LSB's "program is not running"."""


@click.command()
@click.option("--socket", "socket_path", help="Listen here (default: this user's and install's).")
@click.option(
    "--idle-seconds",
    type=click.FloatRange(min=1),
    default=DEFAULT_IDLE_SECONDS,
    show_default=True,
    help="Exit after this long without a call.",
)
@click.option("--detach", is_flag=True, help="Start it in the background and return.")
@click.option(
    "--status",
    is_flag=True,
    help="Show the running server's state (JSON); exit 3 when none is running, as "
    "`systemctl status` does.",
)
@click.option(
    "--stop",
    is_flag=True,
    help="Stop the running server; returns once its process has ended (exit 0 also when "
    "none was running).",
)
def serve(
    socket_path: str | None, idle_seconds: float, detach: bool, status: bool, stop: bool
) -> None:
    """Keep settings, trust and the hook log warm for the hook clients that hosts run.

    Clients start it on demand and it exits when idle; run it by hand to watch it
    (foreground), or use --status and --stop.
    """
    from relay.server import client

    path = socket_path or client.socket_path()
    if stop:
        _stop(path)
        return
    if status:
        answer = client.control(path, "status")
        if answer is None:
            # A state, not an error: exit 3 is "not running" for systemctl and LSB scripts.
            click.echo(f"not running: no relay server at {path}")
            click.get_current_context().exit(NOT_RUNNING)
        click.echo(answer.decode())
        return
    if detach:
        _start_detached(path)
        return
    _serve(path, idle_seconds)


def _stop(path: str) -> None:
    from relay.errors import RelayError
    from relay.server import client

    pid, gone = client.stop_server(path)
    if pid is None:
        click.echo(f"no relay server was running at {path}; nothing to stop")
    elif gone:
        click.echo(f"stopped the relay server at {path} (pid {pid})")
    else:
        raise RelayError(
            f"the relay server at {path} (pid {pid}) agreed to stop but is still running "
            f"after {client.STOP_WAIT:g} s; it may be finishing a long hook call "
            f"(`kill {pid}` ends it)"
        )


def _start_detached(path: str) -> None:
    import contextlib
    import os

    from relay.errors import RelayError
    from relay.server import client

    if client.control(path, "status") is None:
        # Asked for explicitly: start one even right after a client tried.
        with contextlib.suppress(OSError):
            os.unlink(path + ".spawned")
        client.start_server(path, python=sys.executable)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        answer = client.control(path, "status")
        if answer is not None:
            click.echo(f"relay server running at {path} (pid {json.loads(answer)['pid']})")
            return
        time.sleep(0.05)
    raise RelayError(f"the relay server did not start at {path}")


def _serve(path: str, idle_seconds: float) -> None:
    from relay.hosts.call import Caches, parse_run_args, prepare
    from relay.server.client import Call
    from relay.server.server import Prepared, Server

    caches = Caches()

    def handler(call: Call) -> Prepared | None:
        args = parse_run_args(call.argv, call.cwd)
        if args is None:
            return None
        return prepare(args, call, caches, on_close=False)

    server = Server(
        path, handler, idle_seconds=idle_seconds, on_stop=caches.close, figures=caches.figures
    )
    if not server.bind():
        click.echo(f"relay: a server is already running at {path}", err=True)
        return
    click.echo(f"relay: serving hook calls at {path} (pid {server.status()['pid']})", err=True)
    import gc

    # Everything imported so far lives as long as the server: out of the collector's sight,
    # so the collections that calls trigger do not walk it again each time.
    gc.collect()
    gc.freeze()
    server.serve_forever()

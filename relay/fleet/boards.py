"""The status board the messaging settings call for: this machine's SQLite board, or
(with `messaging.transport: nats`) the team's board in NATS; and the machine label
statuses carry."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

from relay.config.model import MessagingConfig
from relay.fleet.board import SqliteBoard
from relay.fleet.model import StatusBoard

MACHINE_VARIABLE = "RELAY_MACHINE"
"""The machine label (`relay up --machine` sets it for its agents); else the host name."""


def machine_label(env: Mapping[str, str] | None = None) -> str:
    """This machine's label in statuses: $RELAY_MACHINE, else the host name."""
    env = os.environ if env is None else env
    return env.get(MACHINE_VARIABLE) or socket.gethostname()


@asynccontextmanager
async def open_board(
    config: MessagingConfig,
    team: str,
    *,
    name: str | None = None,
    on_problem: Callable[[str], None] | None = None,
    path: Path | None = None,
) -> AsyncIterator[StatusBoard]:
    """The board of `team` to publish to and read from, as the messaging settings
    configure it, closed on exit. `name`: who opens it (an agent's name in its session,
    else $USER), for a board on a server; `on_problem`: told what goes wrong without
    stopping anything (each once); `path`: the SQLite board's file (default fleet.db in
    the state folder)."""
    if config.transport == "nats":
        from relay.config.model import NatsConfig
        from relay.fleet.nats_board import open_nats_board

        async with open_nats_board(
            config.nats or NatsConfig(), team, name=name, on_problem=on_problem
        ) as nats_board:
            yield nats_board
        return
    board = SqliteBoard(path)
    try:
        yield board
    finally:
        board.close()

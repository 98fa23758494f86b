"""The status board the messaging settings call for: this machine's SQLite board, or
(with `messaging.transport: nats`) the team's board in NATS; and the machine label
statuses carry."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Mapping
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
    config: MessagingConfig, *, path: Path | None = None
) -> AsyncIterator[StatusBoard]:
    """The board to publish to and read from, as the messaging settings configure it
    (`path`: the SQLite board's file, default fleet.db in the state folder); closed on exit."""
    board = SqliteBoard(path)
    try:
        yield board
    finally:
        board.close()

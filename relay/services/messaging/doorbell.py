"""The doorbell: a Unix datagram socket a waiting recipient listens on and a sender pokes
after its commit, so a delivery needs no polling loop.

The sockets live in Linux's abstract namespace (no file to clean up after a crash, no
108-byte path limit), named from the mailbox file, the team and the agent, so two
RELAY_HOMEs on one machine never ring each other's bells. A poke carries no data the
receiver trusts: it only says "look at the mailbox now". A lost poke costs one poll
interval, never a message.
"""

from __future__ import annotations

import contextlib
import hashlib
import socket
from pathlib import Path

import anyio


def bell_address(store: Path, team: str, name: str) -> bytes:
    """The abstract socket address of an agent's doorbell."""
    digest = hashlib.blake2b(f"{store.resolve()}\0{team}\0{name}".encode(), digest_size=12)
    return b"\0relay-bell-" + digest.hexdigest().encode()


def ring(address: bytes) -> bool:
    """Poke a doorbell; False when nobody is listening (the recipient polls or is away)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        try:
            sock.sendto(b"!", address)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except BlockingIOError:
            return True  # its queue is full of pokes already: it will look
        except OSError:
            return False
    return True


class Doorbell:
    """A recipient's end: bound while the agent is live; `wait` returns on a poke or a timeout."""

    def __init__(self, address: bytes) -> None:
        self.address = address
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        try:
            self._sock.bind(address)
        except OSError:
            self._sock.close()
            raise

    async def wait(self, timeout: float) -> bool:
        """Wait for a poke, at most `timeout` seconds; True if one came. Pokes are drained."""
        rang = self._drain()
        if rang:
            return True
        with anyio.move_on_after(timeout):
            await anyio.wait_readable(self._sock)
        return self._drain()

    def _drain(self) -> bool:
        rang = False
        while True:
            try:
                self._sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return rang
            except OSError:
                return rang
            rang = True

    def close(self) -> None:
        """Stop listening."""
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> Doorbell:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

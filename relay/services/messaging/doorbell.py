"""The doorbell: a Unix datagram socket a waiting recipient listens on and a sender pokes
after its commit, so a delivery needs no polling loop.

The sockets live in Linux's abstract namespace (no file to clean up after a crash, no
108-byte path limit). Each session binds an address of its own, 128 random bits, and
records it in the agent's row of the mailbox, which only the user can read (0600 in a
0700 folder): senders look it up there. Another user's process cannot bind a bell
first (it cannot know the address before the session exists, and once bound it is
taken) nor receive its pokes; the most it can do is learn the name from /proc/net/unix
and poke it, which only makes the session look at its mailbox. A poke carries no data
the receiver trusts: it only says "look at the mailbox now". A lost poke costs one poll
interval, never a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from collections.abc import Iterable

import anyio


def new_bell_address() -> bytes:
    """A fresh, unguessable abstract socket address for one session's doorbell."""
    return b"\0relay-bell-" + secrets.token_hex(16).encode()


def ring(address: bytes) -> bool:
    """Poke a doorbell; False when nobody is listening (the recipient polls or is away)."""
    return ring_all([address]) == 1


def ring_all(addresses: Iterable[bytes]) -> int:
    """Poke each doorbell, through one socket; how many had a listener."""
    addresses = list(addresses)
    if not addresses:
        return 0
    rung = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for address in addresses:
            try:
                sock.sendto(b"!", address)
            except BlockingIOError:
                pass  # its queue is full of pokes already: it will look
            except OSError:  # refused, not found: nobody listening
                continue
            rung += 1
    return rung


class Doorbell:
    """A recipient's end: bound while the agent is live; `wait` returns on a poke or a timeout.
    Without an address, a fresh one (`new_bell_address`).

    Waited on in an asyncio event loop (anyio's asyncio backend, as `relay run` uses). The
    socket is watched by one reader callback for the bell's whole life, so a poke costs
    the woken loop one callback and one task step: a broadcast wakes every session of the
    machine at once, and the last of them waits for the CPU the others spend waking."""

    def __init__(self, address: bytes | None = None) -> None:
        self.address = address if address is not None else new_bell_address()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        try:
            self._sock.bind(self.address)
        except OSError:
            self._sock.close()
            raise
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop whose reader watches the socket (from the first `wait`)."""
        self._rang = False
        self._waiter: asyncio.Future[bool] | None = None

    async def wait(self, timeout: float) -> bool:
        """Wait for a poke, at most `timeout` seconds; True if one came. Pokes are drained.
        One task at a time (anyio.BusyResourceError for a second one)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._unwatch()
            loop.add_reader(self._sock.fileno(), self._on_readable)
            self._loop = loop
        if self._rang or self._drain():  # rung since the last wait, seen by the loop or not
            self._rang = False
            return True
        if timeout <= 0:
            return False
        if self._waiter is not None:
            raise anyio.BusyResourceError("waiting on")
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiter = waiter
        timer = loop.call_later(timeout, _settle, waiter, False)
        try:
            return await waiter
        except BaseException:
            # Cancelled after a poke settled the wait: kept for the next wait.
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self._rang = True
            raise
        finally:
            timer.cancel()
            self._waiter = None

    def _on_readable(self) -> None:
        if not self._drain():
            return
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(True)
        else:  # kept for the next wait (none under way, or it timed out just now)
            self._rang = True

    def _unwatch(self) -> None:
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(OSError, ValueError):
                loop.remove_reader(self._sock.fileno())

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
        self._unwatch()
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> Doorbell:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _settle(waiter: asyncio.Future[bool], rang: bool) -> None:
    if not waiter.done():
        waiter.set_result(rang)

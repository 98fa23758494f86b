"""The doorbell: a Unix datagram socket a waiting recipient listens on and a sender pokes
after its commit, so a delivery needs no polling loop.

Each session binds a socket of its own, named by 128 random bits, in a folder only the
user can enter (`bell_folder`: `$XDG_RUNTIME_DIR/agent-relay/bells/`, else
`/tmp/agent-relay-<uid>/bells/`, mode 0700), and records its path in the agent's row of
the mailbox, which only the user can read (0600 in a 0700 folder): senders look it up
there. Another user's process can neither bind a bell first nor receive its pokes, and
it cannot poke one either: the kernel refuses it at the folder (EACCES), so a flood of
pokes from another user costs the session nothing (in the abstract namespace, where
bells lived before, anyone who read the name in /proc/net/unix could make the session
wake and look at its mailbox for every datagram). Where no such folder can be had (the
/tmp one made first by another user), `Doorbell()` raises OSError and the session polls.
A session removes its socket when it closes; one left by a session that died is removed
by the next doorbell made in the folder. A bell recorded by an older relay (an abstract
address, starting with a NUL byte) is still rung.

A poke is one byte, "look at the mailbox now", or it carries a delivery that its sender
handed to the session in its own transaction (mailbox.py, "Hand-over at the send"), as
JSON. What a session records in the mailbox (`record`) is its address and a key of 128
random bits: a sender hands mail at the send only to a session whose record has a key (a
relay from before the hand-over at the send records the address alone, and reads pokes
without looking at them), and the poke carries the key. The session takes what a poke
carries only with its key, and only from a process of its own user (or root), as the
kernel vouches for it (SO_PASSCRED: such a process could write the mailbox anyway). So a
process that cannot read the mailbox (an agent sandboxed away from it) cannot make a
session hand anything over; any other poke, and one cut short, count as bare pokes: the
session looks at the mailbox. A doorbell whose kernel does not attach the credentials
refuses to start (`Doorbell()` raises OSError): the session polls. A lost poke costs one
poll interval, never a message.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import stat
import struct
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio  # imported where a bell is waited on: the CLI reads mailboxes without it

BELL_NAME_LIMIT = 100
"""The longest socket path a bell takes (sun_path holds 108 bytes on Linux)."""
SWEEP_LIMIT = 64
"""Sockets of dead sessions a new doorbell removes at most (a bounded cost at a start)."""


def bell_folder() -> str | None:
    """The folder for this user's doorbells, made if need be; None when none is private
    (only this user can enter it, and its parent is theirs and closed to writers)."""
    bases = []
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        bases.append(os.path.join(runtime, "agent-relay"))
    bases.append(f"/tmp/agent-relay-{os.getuid()}")
    for base in bases:
        folder = os.path.join(base, "bells")
        if len(folder) + 33 > BELL_NAME_LIMIT:
            continue
        try:
            # Each level 0700 (os.makedirs gives only the last one the mode): the /tmp
            # one is also the server's socket folder, which must be private.
            os.makedirs(base, mode=0o700, exist_ok=True)
            os.makedirs(folder, mode=0o700, exist_ok=True)
            parent, own = os.lstat(base), os.lstat(folder)
        except OSError:
            continue
        uid = os.getuid()
        # Nobody else may rename the folder away (the parent) nor reach into it.
        if (
            stat.S_ISDIR(parent.st_mode)
            and parent.st_uid == uid
            and not parent.st_mode & 0o022
            and stat.S_ISDIR(own.st_mode)
            and own.st_uid == uid
            and not own.st_mode & 0o077
        ):
            return folder
    return None


def new_bell_address() -> bytes:
    """A fresh, unguessable socket path for one session's doorbell, in `bell_folder`;
    OSError when there is no private folder for it."""
    folder = bell_folder()
    if folder is None:
        raise OSError("no folder only this user can enter for the doorbell")
    return os.fsencode(os.path.join(folder, secrets.token_hex(16)))


def _sweep(folder: str) -> None:
    """Remove the sockets of sessions that died (nobody listens there any more)."""
    try:
        names = os.listdir(folder)[:SWEEP_LIMIT]
    except OSError:
        return
    for name in names:
        path = os.path.join(folder, name)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
            try:
                probe.connect(path)  # sends nothing
            except ConnectionRefusedError:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            except OSError:
                continue


_KEYED = b"#key="
"""Between a bell's address and its key in the mailbox's record of it."""


def bell_record(address: bytes, key: str) -> bytes:
    """What the mailbox records for a session's doorbell: its address and its key."""
    return address + _KEYED + key.encode()


def parse_bell_record(record: bytes) -> tuple[bytes, str | None]:
    """A recorded doorbell's address, and its key (None: a relay that takes no delivery
    from a poke recorded it)."""
    address, keyed, key = record.partition(_KEYED)
    return (address, key.decode("ascii", "replace")) if keyed else (record, None)


POKE = b"!"
"""A bare poke: look at the mailbox."""
CARRY_LIMIT = 32 * 1024
"""The longest datagram a poke carries; a larger delivery goes by the mailbox alone."""
_CREDENTIALS = struct.Struct("3i")
"""struct ucred: the sender's pid, uid and gid, as the kernel attaches them (SO_PASSCRED)."""
_ANCILLARY = socket.CMSG_SPACE(_CREDENTIALS.size)


def ring(address: bytes) -> bool:
    """Poke a doorbell; False when the poke did not go in (see `ring_all`)."""
    return not ring_all([address])


def ring_all(
    addresses: Iterable[bytes], carrying: Mapping[bytes, bytes] | None = None
) -> list[bytes]:
    """Poke each doorbell, through one socket, with the datagram `carrying` holds for its
    address (else a bare poke); return the addresses whose poke did not go in: nobody
    listens there (the session is gone, or polls), or its queue is full (of pokes the
    session has not read yet: a bare one is not missed, it will look)."""
    carrying = carrying or {}
    # Bare pokes first: what a datagram holds counts against the sending socket until it
    # is read, and a few long deliveries would leave no room for the pokes after them.
    ordered = sorted(dict.fromkeys(addresses), key=lambda address: address in carrying)
    missed: list[bytes] = []
    if not ordered:
        return missed
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for address in ordered:
            datagram = carrying.get(address, POKE)
            try:
                sock.sendto(datagram, address)
            except BlockingIOError:
                if datagram is POKE or not _send_alone(datagram, address):
                    missed.append(address)  # its queue full (of pokes: it will look)
            except OSError:  # refused, not found: nobody listening
                missed.append(address)
    return missed


def _send_alone(datagram: bytes, address: bytes) -> bool:
    """Send through a socket of its own (the shared one's buffer may be what is full)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(datagram, address)
    except OSError:
        return False
    return True


class Doorbell:
    """A recipient's end: bound while the agent is live; `wait` returns on a poke or a timeout.
    Without an address, a fresh one (`new_bell_address`).

    Waited on in an asyncio event loop (anyio's asyncio backend, as `relay run` uses). The
    socket is watched by one reader callback for the bell's whole life, so a poke costs
    the woken loop one callback and one task step: a broadcast wakes every session of the
    machine at once, and the last of them waits for the CPU the others spend waking."""

    def __init__(self, address: bytes | None = None) -> None:
        self.address = address if address is not None else new_bell_address()
        self._path = None if self.address.startswith(b"\0") else self.address
        """The socket's file, removed at close (an abstract address has none)."""
        if self._path is not None:
            _sweep(os.path.dirname(os.fsdecode(self._path)))
        self.key = secrets.token_hex(16)
        """What a poke that carries a delivery must hold (see the module docstring)."""
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        try:
            passcred = getattr(socket, "SO_PASSCRED", None)
            if passcred is None:  # not Linux: no abstract namespace either
                raise OSError("no SO_PASSCRED on this system")
            self._sock.setsockopt(socket.SOL_SOCKET, passcred, 1)
            self._sock.bind(self.address)
        except OSError:
            self._sock.close()
            raise
        self._buffer = bytearray(CARRY_LIMIT + 1)
        self._uid = os.getuid()
        self._carried: list[bytes] = []
        self._bare = False
        self._loop: asyncio.AbstractEventLoop | None = None
        """The loop whose reader watches the socket (from the first `wait`)."""
        self._rang = False
        self._waiter: asyncio.Future[bool] | None = None
        if not self._vouched():
            self.close()
            raise OSError("the kernel does not say who pokes the doorbell (SO_PASSCRED)")

    async def wait(self, timeout: float) -> bool:
        """Wait for a poke, at most `timeout` seconds; True if one came. Pokes are drained.
        One task at a time (anyio.BusyResourceError for a second one)."""
        import asyncio

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
            import anyio

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

    @property
    def record(self) -> bytes:
        """What the mailbox records for this doorbell (`bell_record`)."""
        return bell_record(self.address, self.key)

    def collect(self) -> None:
        """Read what pokes have come, now, without waiting for the event loop to see them."""
        if self._drain():
            self._rang = True

    def take_carried(self) -> list[bytes]:
        """What the pokes since the last take carried (see `take`), leaving whether a bare
        poke came for `take`."""
        carried, self._carried = self._carried, []
        return carried

    def take(self) -> tuple[list[bytes], bool]:
        """What the pokes since the last `take` carried (from processes of this user or
        root; their key is the taker's to check), and whether any was a bare poke (or came
        from another user, or was cut short): then the mailbox must be looked at."""
        carried, bare = self._carried, self._bare
        self._carried, self._bare = [], False
        return carried, bare

    def _drain(self) -> bool:
        rang = False
        while True:
            try:
                size, ancillary, flags, _ = self._sock.recvmsg_into([self._buffer], _ANCILLARY)
            except (BlockingIOError, InterruptedError):
                return rang
            except OSError:
                return rang
            rang = True
            if size > len(POKE) and not flags & socket.MSG_TRUNC and self._ours(ancillary):
                self._carried.append(bytes(self._buffer[:size]))
            else:
                self._bare = True

    def _vouched(self) -> bool:
        """Whether a poke from this process arrives with its credentials (a kernel that
        did not attach them would make every delivery a poke carries look untrusted, and
        leave it handed to this session unseen: such a session polls instead)."""
        token = secrets.token_bytes(16)
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
                probe.sendto(token, self.address)
        except OSError:  # its queue already full of a stranger's pokes
            return False
        while True:  # a stranger's poke may have come first: kept, as any poke
            try:
                size, ancillary, _, _ = self._sock.recvmsg_into([self._buffer], _ANCILLARY)
            except OSError:
                return False
            if bytes(self._buffer[:size]) == token:
                return self._ours(ancillary)
            self._rang, self._bare = True, True

    def _ours(self, ancillary: list[tuple[int, int, bytes]]) -> bool:
        """Whether the kernel says the datagram came from a process of this user, or of
        root: both can write the mailbox (0600, this user's)."""
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                if len(data) < _CREDENTIALS.size:
                    return False
                _, uid, _ = _CREDENTIALS.unpack_from(data)
                return uid in (self._uid, 0)
        return False

    def close(self) -> None:
        """Stop listening, and remove the socket's file."""
        self._unwatch()
        with contextlib.suppress(OSError):
            self._sock.close()
        path, self._path = self._path, None
        if path is not None:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def __enter__(self) -> Doorbell:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _settle(waiter: asyncio.Future[bool], rang: bool) -> None:
    if not waiter.done():
        waiter.set_result(rang)

"""What a host's hooks say about its agent, passed on to the `relay run` session that runs
it: the tool it is in, and that it waits for the human (spec/fleet.md, "Live state").

When relay is a host's hook layer, each hook call of the host comes through relay's host
hook path with the session's environment, which carries $RELAY_STATUS_SOCKET: the path of
a Unix datagram socket the session listens on, in the user's private doorbell folder
(0700: only the user's own processes can reach it). The hook path sends one small
datagram for the events below and goes on at once: a send that fails (the session has
ended, its queue is full) is dropped, and the hook call never waits for the session. The
session turns what it hears into its status (relay.fleet.reporter).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator, Mapping

import msgspec

from relay.protocol.codec import EventEnvelope

STATUS_SOCKET_VARIABLE = "RELAY_STATUS_SOCKET"
NOTED_EVENTS = frozenset({"BeforeTool", "AfterTool", "Notification", "BeforeAgent", "AfterAgent"})
"""Canonical events the session hears of: a tool starts or ends, a notification (a
permission prompt, the agent waiting for input), a prompt submitted, a turn ended."""
NOTE_LIMIT = 1024
"""The longest datagram read; a tool name longer than fits is cut."""
MAX_MARKERS = 40
"""Message markers a note carries at most (they fit in NOTE_LIMIT with the rest)."""
_MARKER = re.compile(r"\[[0-9a-z]{8}\]")


class HostNote(msgspec.Struct, kw_only=True, frozen=True):
    """One host hook event, as the session hears of it."""

    event: str
    """The canonical event name (one of NOTED_EVENTS)."""
    tool: str = ""
    """BeforeTool/AfterTool's tool_name."""
    kind: str = ""
    """Notification's notification_type (Claude Code: permission_prompt, idle_prompt…)."""
    markers: tuple[str, ...] = ()
    """BeforeAgent: the `[id8]` message markers in the prompt the agent was given (the
    session's evidence that a message it typed was submitted)."""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(HostNote)


def tell_session(env: Mapping[str, str], envelope: EventEnvelope) -> None:
    """Send the session named by $RELAY_STATUS_SOCKET a note of this event, if it is one
    it hears of; never raises, never waits."""
    address = env.get(STATUS_SOCKET_VARIABLE)
    event = envelope.name
    if not address or event not in NOTED_EVENTS:
        return
    tool = envelope.field("tool_name") if event in ("BeforeTool", "AfterTool") else ""
    kind = envelope.field("notification_type") if event == "Notification" else ""
    prompt = envelope.field("prompt") if event == "BeforeAgent" else ""
    markers = (
        tuple(dict.fromkeys(_MARKER.findall(prompt)))[:MAX_MARKERS]
        if isinstance(prompt, str)
        else ()
    )
    note = HostNote(
        event=event,
        tool=tool[:200] if isinstance(tool, str) else "",
        kind=kind[:100] if isinstance(kind, str) else "",
        markers=markers,
    )
    import socket  # here: the hook path of an event from outside a session never loads it

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(_encoder.encode(note), address)
    except (OSError, ValueError):
        pass  # the session is gone or busy: a status is a view, the hook call goes on


class NoteListener:
    """The session's end: a socket bound in the private doorbell folder while it runs."""

    def __init__(self) -> None:
        import socket

        from relay.services.messaging.doorbell import new_bell_address

        self.address = os.fsdecode(new_bell_address())
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        try:
            self._sock.bind(self.address)
        except OSError:
            self._sock.close()
            raise

    async def notes(self) -> AsyncIterator[HostNote]:
        """The notes as they come (a datagram that is not a note is skipped)."""
        import anyio  # here: the hook path imports this module, and never waits

        while True:
            try:
                datagram = self._sock.recv(NOTE_LIMIT)
            except BlockingIOError:
                await anyio.wait_readable(self._sock)
                continue
            except OSError:
                return
            try:
                yield _decoder.decode(datagram)
            except msgspec.DecodeError:
                continue

    def close(self) -> None:
        """Stop listening and remove the socket's file."""
        self._sock.close()
        with contextlib.suppress(OSError):
            os.unlink(self.address)

"""The live feed: every page's events to every open page, as server-sent events.

`GET /api/events` answers `text/event-stream`: first `event: hello` (`data: {"seq": N}`),
then each event published after it, as

    id: 42
    event: team.member
    data: {"name": "Bob", …}

(one line of JSON), and a comment line (`: keep-alive`) after 15 quiet seconds. `id` is
the feed's sequence number, shared by every page: a snapshot route returns the number it
was read at, and the browser applies only the events above it. A browser that cannot
keep up (more than BACKLOG events waiting) is cut off; it reconnects and paints again
from the snapshots, as after any reconnection.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

BACKLOG = 2000
"""Events kept for one browser that has not read them yet."""
KEEP_ALIVE_SECONDS = 15.0
EVENT_TYPE = re.compile(r"[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)*")
_encoder = msgspec.json.Encoder()


class Feed:
    """The events published since the server started, fanned out to every browser."""

    def __init__(self) -> None:
        self.seq = 0
        """The number of the last event published."""
        self._subscribers: set[MemoryObjectSendStream[bytes]] = set()
        self.closed = False

    def publish(self, kind: str, data: Any) -> int:
        """Send event `kind` (`PAGE.WHAT`) with `data` (anything msgspec encodes) to every
        browser; its sequence number."""
        if not EVENT_TYPE.fullmatch(kind):
            raise ValueError(f"not an event type: {kind!r} (expected PAGE.WHAT, lowercase)")
        self.seq += 1
        frame = b"id: %d\nevent: %s\ndata: %s\n\n" % (
            self.seq,
            kind.encode(),
            _encoder.encode(data),
        )
        for stream in list(self._subscribers):
            try:
                stream.send_nowait(frame)
            except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._drop(stream)  # it reconnects and paints from the snapshots again
        return self.seq

    def subscribe(self) -> AsyncIterator[bytes]:
        """The frames of one browser: `hello` with the current number, then every event
        published from now on, until it goes or the feed closes."""
        send, receive = anyio.create_memory_object_stream[bytes](BACKLOG)
        hello = b'event: hello\ndata: {"seq": %d}\n\n' % self.seq
        if self.closed:
            send.close()
        else:
            self._subscribers.add(send)
        return self._frames(hello, send, receive)

    async def _frames(
        self,
        hello: bytes,
        send: MemoryObjectSendStream[bytes],
        receive: MemoryObjectReceiveStream[bytes],
    ) -> AsyncIterator[bytes]:
        try:
            yield hello
            with receive:
                while True:
                    with anyio.move_on_after(KEEP_ALIVE_SECONDS) as quiet:
                        try:
                            frame = await receive.receive()
                        except anyio.EndOfStream:
                            return
                    yield b": keep-alive\n\n" if quiet.cancelled_caught else frame
        finally:
            self._drop(send)

    def close(self) -> None:
        """End every browser's stream (the server is stopping)."""
        self.closed = True
        for stream in list(self._subscribers):
            self._drop(stream)

    def _drop(self, stream: MemoryObjectSendStream[bytes]) -> None:
        self._subscribers.discard(stream)
        stream.close()

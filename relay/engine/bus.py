"""An in-process message bus with request/response by correlation id (as Gemini CLI has).

A host that keeps its parts decoupled publishes HOOK_EXECUTION_REQUEST and awaits the
HOOK_EXECUTION_RESPONSE with the same correlationId. The hook handler validates each
request and always answers: a malformed request or a failed run gets an error envelope,
never an exception in the publisher.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from relay.errors import RelayError
from relay.protocol.codec import EventError
from relay.protocol.dialects import UnknownEventError
from relay.protocol.output import AggregatedResult

if TYPE_CHECKING:
    from relay.engine.system import HookSystem

HOOK_EXECUTION_REQUEST = "HOOK_EXECUTION_REQUEST"
HOOK_EXECUTION_RESPONSE = "HOOK_EXECUTION_RESPONSE"


class HookExecutionRequest(
    msgspec.Struct, kw_only=True, tag=HOOK_EXECUTION_REQUEST, tag_field="type"
):
    """Ask the hook system to fire an event."""

    eventName: str
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    correlationId: str = msgspec.field(default_factory=lambda: uuid.uuid4().hex)


class HookExecutionResponse(
    msgspec.Struct, kw_only=True, tag=HOOK_EXECUTION_RESPONSE, tag_field="type"
):
    """The answer to one request: the merged result, or an error."""

    correlationId: str
    success: bool
    output: AggregatedResult | None = None
    error: str | None = None


BusMessage = HookExecutionRequest | HookExecutionResponse
Subscriber = Callable[[Any], Awaitable[None]]


class BusError(RelayError):
    """A request that got no response in time."""


class MessageBus:
    """Publish/subscribe by message type, plus request/response by correlation id."""

    def __init__(self) -> None:
        self._subscribers: dict[str, list[Subscriber]] = {}
        self._waiting: dict[str, tuple[anyio.Event, list[HookExecutionResponse]]] = {}

    def subscribe(self, message_type: str, subscriber: Subscriber) -> None:
        """Call `subscriber(message)` for every message of this type."""
        self._subscribers.setdefault(message_type, []).append(subscriber)

    async def publish(self, message: BusMessage) -> None:
        """Deliver a message to its subscribers (and to a request waiting for it)."""
        if isinstance(message, HookExecutionResponse):
            waiting = self._waiting.get(message.correlationId)
            if waiting is not None:
                waiting[1].append(message)
                waiting[0].set()
            message_type = HOOK_EXECUTION_RESPONSE
        else:
            message_type = HOOK_EXECUTION_REQUEST
        for subscriber in self._subscribers.get(message_type, []):
            await subscriber(message)

    async def publish_raw(self, data: dict[str, Any]) -> None:
        """Publish a message given as a plain object; one that is not valid is answered with an error."""
        try:
            message: BusMessage = msgspec.convert(data, BusMessage)
        except msgspec.ValidationError as exc:
            correlation = data.get("correlationId") if isinstance(data, dict) else None
            await self.publish(
                HookExecutionResponse(
                    correlationId=str(correlation or ""),
                    success=False,
                    error=f"invalid bus message: {exc}",
                )
            )
            return
        await self.publish(message)

    async def request(
        self, request: HookExecutionRequest, *, timeout: float = 120.0
    ) -> HookExecutionResponse:
        """Publish a request and wait for the response with its correlationId."""
        arrived = anyio.Event()
        responses: list[HookExecutionResponse] = []
        self._waiting[request.correlationId] = (arrived, responses)
        try:
            # Publishing runs the handler inline, so it belongs inside the time limit too.
            with anyio.move_on_after(timeout):
                await self.publish(request)
                await arrived.wait()
        finally:
            del self._waiting[request.correlationId]
        if not responses:
            raise BusError(
                f"no response to {request.eventName} request {request.correlationId} in {timeout:g}s"
            )
        return responses[0]


def attach(bus: MessageBus, hooks: HookSystem) -> None:
    """Serve HOOK_EXECUTION_REQUEST messages on `bus` with `hooks`."""

    async def serve(request: HookExecutionRequest) -> None:
        try:
            result = await hooks.fire(request.eventName, request.input)
        except (UnknownEventError, EventError, RelayError) as exc:
            response = HookExecutionResponse(
                correlationId=request.correlationId, success=False, error=str(exc)
            )
        except Exception as exc:  # the handler always answers
            response = HookExecutionResponse(
                correlationId=request.correlationId,
                success=False,
                error=f"internal error: {type(exc).__name__}: {exc}",
            )
        else:
            response = HookExecutionResponse(
                correlationId=request.correlationId, success=True, output=result
            )
        await bus.publish(response)

    bus.subscribe(HOOK_EXECUTION_REQUEST, serve)

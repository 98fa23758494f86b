"""The built-in `@relay:` namespace: an agent sends a message to another agent, or to all.

@relay:Bob the build is green, you can merge
@relay:* I am taking the database migration
@relay:Bob [thread:release-1.4] tagged, over to you
@relay:Bob <<<
several lines
>>>
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from relay.protocol.events import PatternMatch
from relay.services.messaging.model import BROADCAST, LoopStoppedError, Message, MessagingError

if TYPE_CHECKING:
    from relay.services.messaging.messenger import Messenger

BUILTIN_NAME = "@relay (built-in)"
_THREAD = re.compile(r"\[thread:([^\]\s]+)\]\s*")


def parse(target: str, message: str) -> tuple[str, str, str | None]:
    """(recipient, body, thread) of `@relay:TARGET MESSAGE`; `[thread:ID]` may lead the message."""
    thread = None
    found = _THREAD.match(message)
    if found:
        thread, message = found.group(1), message[found.end() :]
    return target, message, thread


async def answer(messenger: Messenger, sender: str, target: str, message: str) -> dict[str, str]:
    """Run one `@relay:` directive; return the hook answer: `inject`, what to type back to
    the sender, and `systemMessage` for the human when it stopped a reply loop."""
    recipient, body, thread = parse(target, message)
    if not recipient:
        return {
            "inject": "Send to whom? Write @relay:NAME message (or @relay:* message for everyone)."
        }
    if not body.strip():
        return {"inject": f"Nothing to send: write @relay:{recipient} <message>"}
    try:
        sent, recipients = await messenger.send(sender, recipient, body, thread)
    except LoopStoppedError as exc:
        refused = {"inject": f"✗ Not sent: {exc.message}"}
        # The human sees it once per stop, on the sender's terminal; the other agent's
        # session shows the notice relay sent it.
        return {**refused, "systemMessage": exc.notice} if exc.new_stop else refused
    except MessagingError as exc:
        return {"inject": f"✗ Not sent: {exc.message}"}
    where = f" in thread {sent.thread}" if sent.thread else ""
    if recipient == BROADCAST:
        return {"inject": f"✓ Queued for {', '.join(recipients)} [{sent.short_id}]{where}"}
    return {"inject": f"✓ Queued for {recipient} [{sent.short_id}]{where}"}


class MessagingDirectives:
    """The built-in handler for PatternMatch events of namespace `relay` (a Python hook).

    The sender is the event's agent, so one registration serves every session a
    HookSystem runs. A mailbox that fails is reported to the agent, never raised.
    """

    def __init__(self, messenger: Messenger) -> None:
        self.messenger = messenger

    async def __call__(self, event: PatternMatch) -> dict[str, str]:
        sender = event.agent_name or "unknown"
        return await answer(self.messenger, sender, event.target, event.message)


def delivery_text(message: Message, body: str | None = None) -> str:
    """How a message is typed into its recipient: `Relay message from <sender> [<id8>]: <body>`."""
    thread = f" [thread:{message.thread}]" if message.thread else ""
    return (
        f"Relay message from {message.sender} [{message.short_id}]{thread}: "
        f"{message.body if body is None else body}"
    )

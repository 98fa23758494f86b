"""Which of a team's messages to show: the filters of `relay messages`, and the search text
turned into an FTS5 query that cannot be anything but words.

The mailbox indexes message bodies with SQLite FTS5 (mailbox.py). A user's search text
is never handed to FTS5 as a query: its query language (`"`, `*`, `NEAR`, `AND`, `-`,
column filters, parentheses) would turn a typo into a syntax error and let text meant as
words act as operators. Each whitespace-separated piece is quoted instead, so FTS5 reads
it as a phrase of the words in it, and a message matches when it holds every piece.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import msgspec

from relay.services.messaging.model import Message, MessagingError
from relay.timestamps import iso_millis

__all__ = [
    "Found",
    "HistoryQuery",
    "SearchTextError",
    "TimeBoundError",
    "match_expression",
    "moment",
]


class SearchTextError(MessagingError):
    """Search text with no word in it (empty, or only punctuation)."""

    def __init__(self, text: str) -> None:
        self.text = text
        if not text.strip():
            reason = "the search text is empty: give one or more words"
        else:
            reason = (
                f"the search text {text!r} has no words in it (letters or digits): "
                "punctuation alone is not indexed"
            )
        super().__init__(reason)


class TimeBoundError(MessagingError):
    """A --since or --until that is neither a duration nor an ISO date or time."""

    def __init__(self, text: str, *, option: str, out_of_range: bool = False) -> None:
        self.text = text
        self.option = option
        if out_of_range:
            reason = f"{option} {text!r} is further back or ahead than a date can be"
        else:
            reason = (
                f"{option} {text!r} is neither a duration ago (90m, 12h, 7d) nor an ISO date "
                "or time (2026-11-28, 2026-11-28T09:30, 2026-11-28T09:30:00Z)"
            )
        super().__init__(reason)


class HistoryQuery(msgspec.Struct, kw_only=True, frozen=True):
    """Which of the team's messages to show; every filter given must hold."""

    sender: str | None = None
    recipient: str | None = None
    """The recipient field as sent: a name, or `*` for broadcasts."""
    since: str | None = None
    """Sent at or after this moment (relay's form, `moment`)."""
    until: str | None = None
    """Sent before this moment (relay's form)."""
    text: str | None = None
    """Words that must all be in the body (case and accents ignored); see `match_expression`."""
    thread: str | None = None


class Found(msgspec.Struct, kw_only=True, frozen=True):
    """A message of the history and its place in the mailbox's commit order."""

    seq: int
    message: Message


_PIECES = re.compile(r"\S+")


def match_expression(text: str) -> str:
    """An FTS5 query for messages holding every word of `text`: each piece quoted (its
    quotes doubled), pieces with no letter or digit left out (FTS5 indexes none of
    them). SearchTextError when nothing is left."""
    pieces = [
        piece
        for piece in _PIECES.findall(text.replace("\0", " "))
        if any(character.isalnum() for character in piece)
    ]
    if not pieces:
        raise SearchTextError(text)
    return " ".join('"' + piece.replace('"', '""') + '"' for piece in pieces)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def moment(text: str, *, option: str = "--since", now: datetime | None = None) -> str:
    """`text` as a moment in relay's form: a duration ago (90m, 12h, 7d, 2w, 30s; a bare
    number is days, as `relay agents --older-than` reads it) or an ISO 8601 date or date
    and time (without a zone: local time). TimeBoundError if neither."""
    now = now or datetime.now(UTC)
    stripped = text.strip()
    duration = _DURATION.fullmatch(stripped)
    if duration is not None:
        seconds = float(duration.group(1)) * _UNITS[duration.group(2).lower() or "d"]
        try:
            return iso_millis(now - timedelta(seconds=seconds))
        except OverflowError:
            raise TimeBoundError(text, option=option, out_of_range=True) from None
    try:
        parsed = datetime.fromisoformat(stripped)
    except ValueError:
        raise TimeBoundError(text, option=option) from None
    try:
        if parsed.tzinfo is None:
            parsed = parsed.astimezone()  # this machine's local time, as a terminal shows it
        return iso_millis(parsed.astimezone(UTC))
    except (OverflowError, ValueError):
        raise TimeBoundError(text, option=option, out_of_range=True) from None

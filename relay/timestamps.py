"""The one form relay writes times in: ISO 8601, UTC, milliseconds and a Z
(`2026-11-28T02:50:00.123Z`). Stored times of this form sort as text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def iso_millis(moment: datetime) -> str:
    """`moment` (aware, in UTC) in relay's form. `isoformat` is C code, several times
    quicker than `strftime`, and this is on the path of every event and message."""
    return moment.isoformat(timespec="milliseconds")[:-6] + "Z"


def utc_millis(offset: float = 0.0) -> str:
    """Now (plus `offset` seconds), in relay's form."""
    moment = datetime.now(UTC)
    return iso_millis(moment + timedelta(seconds=offset) if offset else moment)

"""ULIDs: 128-bit ids that sort by creation time (48-bit milliseconds, 80 random bits).

Monotonic within a process: two ids made in the same millisecond differ by one in their
random part, so a sender's ids sort in the order it made them.
"""

from __future__ import annotations

import os
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base 32
_RANDOM_BITS = 80
_lock = threading.Lock()
_last = [0, 0]  # milliseconds and random part of the last id made here


def new_ulid() -> str:
    """A new ULID, 26 characters of Crockford base 32."""
    with _lock:
        now = time.time_ns() // 1_000_000
        last_ms, last_random = _last
        if now <= last_ms:  # same millisecond, or the clock stepped back
            now, random = last_ms, last_random + 1
            if random >> _RANDOM_BITS:  # 2^80 ids in one millisecond: take the next one
                now, random = now + 1, int.from_bytes(os.urandom(10), "big")
        else:
            random = int.from_bytes(os.urandom(10), "big")
        _last[:] = [now, random]
    value = (now << _RANDOM_BITS) | random
    return "".join(_ALPHABET[(value >> shift) & 31] for shift in range(125, -1, -5))


def ulid_time_ms(ulid: str) -> int:
    """The milliseconds since the epoch that a ULID was made at."""
    value = 0
    for char in ulid[:10].upper():
        value = value * 32 + _ALPHABET.index(char)
    return value

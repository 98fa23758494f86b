"""The escape sequences relay acts on in an agent's output, found in one search.

Two readers act on a few sequences of the output: the injector follows private modes
(`ESC[?2004h`, bracketed paste) and full resets (`ESC c`), and the runtime reads the
screen once the agent addresses the cursor by row or opens the alternate screen
(`screen.draws_screen`). Coloured output holds an ESC every fifty bytes or so, and a
regex search stops at each one: a single search for any of these sequences costs about
a third of the two searches it spares, and most chunks have none (tests/perf/
bench_session.py).
"""

from __future__ import annotations

import re

ACTED_ON = re.compile(rb"\x1b(?:\[(?:\?[0-9;]*+[hl]|[0-9;]*+[ABHfdr])|c)")
"""A private mode set or reset, or a full reset (the injector's `_PRIVATE_MODE`); cursor
addressing, a scroll region or the alternate screen (`screen._ADDRESSING`). Whatever
either finds, this finds. The quantifiers are possessive: at a colour code the search
fails at once."""


def acted_on(data: bytes) -> bool:
    """Whether `data` may hold a sequence that the injector or the screen reader acts on."""
    return ACTED_ON.search(data) is not None

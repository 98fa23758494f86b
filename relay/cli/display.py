"""Showing stored or foreign text (messages, memories, hook output, logged inputs) on a
terminal: control characters are made visible, never emitted.

A message body or a memory may hold `ESC ] 52 ; c ; … BEL` (an OSC 52 clipboard write), a
DCS string, cursor moves or a bidirectional override: printed raw, they act on the
reader's terminal. `--json` output is left exact (JSON escapes them anyway).
"""

from __future__ import annotations

import re

_CONTROL = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)
"""C0 controls but tab and newline, DEL, C1 controls (U+009B is a one-character CSI), and
the bidirectional formatting characters that reorder what a line shows."""


def visible(text: str) -> str:
    """`text` with each control character shown in caret notation (ESC as `^[`, CR as
    `^M`, DEL as `^?`) or as its code point (`<U+009B>`, `<U+202E>`). Newlines and tabs
    stay as they are."""
    return _CONTROL.sub(_shown, text)


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"<U+{code:04X}>"

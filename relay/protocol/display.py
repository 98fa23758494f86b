"""Showing foreign text (messages, memories, hook output, logged inputs, a project's hook
commands and scripts) on a terminal: control and format characters are made visible,
never emitted. Pure text, no I/O.

A message body or a memory may hold `ESC ] 52 ; c ; … BEL` (an OSC 52 clipboard write), a
DCS string, cursor moves, a bidirectional override that reorders a line, or a line
separator: printed raw, they act on the reader's terminal or hide what a line says.
`--json` output is left exact (JSON escapes them anyway).
"""

from __future__ import annotations

import unicodedata

_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp"})
"""Control, format (bidi overrides, zero-width characters), line and paragraph separators."""


def visible(text: str, *, keep_newlines: bool = True) -> str:
    """`text` with each control or format character shown in caret notation (ESC as `^[`,
    CR as `^M`, DEL as `^?`) or as its code point (`<U+009B>`, `<U+202E>`). Tabs stay, and
    newlines unless `keep_newlines` is False (a one-line field, such as a hook's command
    under review, then cannot fake a line of its own: `^J`)."""
    if text.isprintable():
        return text
    kept = "\t\n" if keep_newlines else "\t"
    return "".join(
        _shown(char) if char not in kept and unicodedata.category(char) in _HIDDEN else char
        for char in text
    )


def _shown(char: str) -> str:
    code = ord(char)
    if code < 0x20:
        return "^" + chr(code + 0x40)
    if code == 0x7F:
        return "^?"
    return f"<U+{code:04X}>"

"""Showing foreign text (messages, memories, hook output, logged inputs, a project's hook
names, matchers, commands and scripts, a host's settings) on a terminal: control and
format characters are made visible, never emitted. Pure text, no I/O. This is relay's one
door to the terminal (STYLE 17): every human-facing print of such text goes through
`visible`.

A message body or a memory may hold `ESC ] 52 ; c ; … BEL` (an OSC 52 clipboard write),
a DCS, APC, PM or SOS string, cursor moves (CSI), the same in their 8-bit C1 form
(U+009B CSI, U+009D OSC, U+0090 DCS, U+009F APC …), a bidirectional override or isolate
that reorders a line (U+202A to U+202E, U+2066 to U+2069, U+200E/U+200F, U+061C), or a line
separator: printed raw, they act on the reader's terminal or hide what a line says. With
every ESC and every C1 character shown as text, no sequence can start, whatever follows.
`--json` output is left exact (JSON escapes C0 anyway; `json_visible` escapes the rest
for JSON that a person reads).
"""

from __future__ import annotations

import unicodedata

_HIDDEN = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
"""Control (C0, DEL, C1), format (bidi controls, zero-width characters), line and
paragraph separators, and lone surrogates (a file name read with surrogateescape: printed
raw, it would raise instead)."""


def visible(text: str, *, one_line: bool = False) -> str:
    """`text` with each control or format character shown in caret notation (ESC as `^[`,
    CR as `^M`, DEL as `^?`) or as its code point (`<U+009B>`, `<U+202E>`). Tabs stay, and
    newlines unless `one_line` (a one-line field, such as a hook's name or command in a
    table or under review, then cannot fake a line of its own: `^J`)."""
    if text.isprintable():
        return text
    kept = "\t" if one_line else "\t\n"
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


def json_visible(text: str) -> str:
    """JSON text that a person reads (a preview of settings, an event under test) with the
    characters JSON leaves raw but a terminal acts on (DEL, C1, bidi and other format
    controls, line separators) written as `\\uXXXX` escapes: the same JSON value, inert
    on a terminal. C0 controls are escaped by every JSON encoder already, and these
    characters can only stand inside a JSON string, where the escape means the same."""
    if text.isascii() and "\x7f" not in text:
        return text
    return "".join(_json_escaped(char) for char in text)


def _json_escaped(char: str) -> str:
    code = ord(char)
    if code < 0x7F or unicodedata.category(char) not in _HIDDEN:
        return char
    if code > 0xFFFF:  # a surrogate pair, as JSON writes a character beyond the BMP
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"

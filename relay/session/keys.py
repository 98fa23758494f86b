"""The human's keys as terminals send them once an agent asks for more than legacy bytes.

An agent may turn on the kitty keyboard protocol (`CSI > flags u`; Codex does), and relay
passes that to the human's terminal like the rest of the agent's output. A terminal
that supports it (kitty, WezTerm, foot, Ghostty, iTerm2, Alacritty) then sends Escape,
Ctrl- and Alt- keys, and Enter, Tab and Backspace with a modifier, as
`CSI key[:shifted[:base]] [; mods[:event]] [; text] u`; under flag 8 ("report all
keys as escape codes") every key, plain Enter and letters included. xterm with
modifyOtherKeys sends a modified key as `CSI 27 ; mods ; key ~` instead.

`legacy` turns one such sequence into the bytes the same key sends without the
protocol, so the injector's model of the human's line (`injector._HumanLine`) reads
both alike: Enter is CR, Ctrl-U is 0x15, Ctrl-W 0x17, Backspace DEL, a letter itself.
Only presses and repeats count (flag 2 reports releases too). The text a key typed, when
the terminal reports it (flag 16), is that text. Backspace with Ctrl or Alt deletes a
word, as agents' input boxes take it (Codex); Shift-Enter and the other modified Enters,
Ctrl-J and Ctrl-M put a line break in the box, which submits nothing.
"""

from __future__ import annotations

_SHIFT, _ALT, _CTRL = 1, 2, 4
_SUPER_HYPER_META = 8 | 16 | 32
_LOCKS = 64 | 128  # Caps Lock, Num Lock: reported, not held
_RELEASE = 3
_ENTER = (13, 57414)  # Enter, the keypad's Enter
_BACKSPACE = 127
_TAB = 9
_WORD = b"\x17"  # Ctrl-W
_KEYPAD = {57399 + digit: ord(str(digit)) for digit in range(10)} | {
    57409: ord("."),
    57410: ord("/"),
    57411: ord("*"),
    57412: ord("-"),
    57413: ord("+"),
    57415: ord("="),
    57416: ord(","),
}
"""The keypad's keys that type a character (flag 1 reports them by their own codes)."""
_NOT_KEYS = frozenset(range(57358, 57361)) | frozenset(range(57441, 57455))
"""Lock and modifier keys pressed alone (flag 8): no key a legacy terminal would send."""
_CTRL_BYTES = {ord(c): index + 1 for index, c in enumerate("abcdefghijklmnopqrstuvwxyz")} | {
    ord(" "): 0,
    ord("@"): 0,
    ord("2"): 0,
    ord("["): 27,
    ord("3"): 27,
    ord("\\"): 28,
    ord("4"): 28,
    ord("]"): 29,
    ord("5"): 29,
    ord("^"): 30,
    ord("6"): 30,
    ord("~"): 30,
    ord("_"): 31,
    ord("7"): 31,
    ord("/"): 31,
    ord("8"): 127,
    ord("?"): 127,
}
"""What Ctrl and a key send in legacy mode (the kitty protocol's "legacy ctrl mapping")."""
_NEWLINE_CTRL_KEYS = (ord("j"), ord("m"))
"""Ctrl-J and Ctrl-M, which an input box takes for a line break once the protocol tells
them from LF and Enter (Codex's composer)."""


def legacy(params: bytes, final: int) -> bytes | None:
    """The legacy bytes of the key in `CSI params final`: b"" for a key that types
    nothing (Escape, an Alt- or Super- shortcut, a function key sent this way, a
    modified Enter), None when it is no key pressed (a release, a lone modifier, a
    terminal's reply such as `CSI ? flags u`, another sequence)."""
    fields = params.split(b";")
    if final == 0x7E:  # xterm's modifyOtherKeys: CSI 27 ; mods ; key ~
        if len(fields) != 3 or fields[0] != b"27":
            return None  # a function key (Delete, F5, …) or a paste marker
        fields = [fields[2], fields[1]]
    elif final != 0x75 or len(fields) > 3:
        return None
    keys = fields[0].split(b":")
    mods = fields[1].split(b":") if len(fields) > 1 else [b""]
    code = _number(keys[0], None)
    shifted = _number(keys[1], 0) if len(keys) > 1 else 0
    base = _number(keys[2], 0) if len(keys) > 2 else 0
    modifiers = _number(mods[0], 1)
    event = _number(mods[1], 1) if len(mods) > 1 else 1
    if code is None or shifted is None or base is None or modifiers is None or event is None:
        return None  # not a key: a private marker (?, <, =, >), or malformed
    if event == _RELEASE or len(keys) > 3 or len(mods) > 2 or modifiers < 1:
        return None
    if len(fields) == 3 and fields[2]:  # the text the key typed (flag 16)
        return _text(fields[2])
    if code > 0x10FFFF or code in _NOT_KEYS:
        return None
    return _key(code, shifted, base, modifiers - 1)


def _number(field: bytes, default: int | None) -> int | None:
    if not field:
        return default
    return int(field) if field.isdigit() and len(field) <= 8 else None


def _text(field: bytes) -> bytes | None:
    """The text of `text-as-codepoints`, without control characters (the protocol
    allows none)."""
    points = [_number(point, None) for point in field.split(b":")]
    if any(point is None or point > 0x10FFFF for point in points):
        return None
    return "".join(
        chr(point) for point in points if point is not None and _printable(point)
    ).encode()


def _printable(point: int) -> bool:
    return 0x20 <= point <= 0x10FFFF and not 0x7F <= point < 0xA0 and not 0xD800 <= point < 0xE000


def _key(code: int, shifted: int, base: int, modifiers: int) -> bytes:
    held = modifiers & ~_LOCKS
    if code in _ENTER:
        return b"\r" if not held else b""  # modified: a line break in the box
    if code == _BACKSPACE:
        if held & _SUPER_HYPER_META:
            return b""
        return _WORD if held & (_CTRL | _ALT) else b"\x7f"
    if code == _TAB:
        return b"\t" if not held else b""
    code = _KEYPAD.get(code, code)
    if held & ~_SHIFT:  # Ctrl, Alt or another: no text
        if held != _CTRL:
            return b""  # Alt-key moves, Ctrl-Shift- and Super- keys are shortcuts
        if code >= 0x80 and 0 < base < 0x80:
            code = base  # the key in the PC-101 layout (Ctrl and the Cyrillic es key, U+0441, is Ctrl-C)
        if code in _NEWLINE_CTRL_KEYS:
            return b""  # told apart from Enter here only: a line break in the box
        byte = _CTRL_BYTES.get(code)
        return bytes((byte,)) if byte is not None else b""
    if not _printable(code) or 0xE000 <= code < 0xF900:
        return b""  # Escape, a C0 key, or a functional key in the Private Use Area
    if held & _SHIFT and shifted and _printable(shifted):
        return chr(shifted).encode()
    if bool(held & _SHIFT) != bool(modifiers & 64):  # Shift, or Caps Lock
        return chr(code).upper().encode()
    return chr(code).encode()

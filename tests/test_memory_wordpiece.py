"""MiniLM's WordPiece tokenizer written here (relay/services/memory/wordpiece.py) gives
the token ids that tokenizers gives with the model's own settings (BertNormalizer,
BertPreTokenizer, WordPiece, [CLS] … [SEP], truncation at 128): on the relevance sets,
on texts of every script, accents, CJK, emoji and special tokens, on random texts, and
on every character of the Basic Multilingual Plane and of the tables where Python's and
tokenizers' Unicode differ."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

from relay.services.memory import wordpiece

tokenizers = pytest.importorskip("tokenizers", reason="the semantic extra is not installed")
sys.path.insert(0, str(Path(__file__).parent / "perf"))

from bench_memory import generate  # noqa: E402
from memory_paraphrases import QUESTIONS, memories  # noqa: E402
from memory_relevance import PARAPHRASES, QUERIES  # noqa: E402
from memory_relevance import memories as relevance_memories  # noqa: E402

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TEXTS = [
    "Café naïve résumé Ångström crème brûlée Ærø São Paulo Zürich",
    "ΣΊΣΥΦΟΣ ΟΔΥΣΣΕΥΣ final sigma ς Σ",
    "İstanbul ǅemal ﬁle ẞ straße ŉ",
    "[CLS] hello [SEP] [MASK]x[PAD]y[UNK] [cls] [ SEP ]",
    "a" * 150,
    "x " * 300,
    "tokens\x00with\x01control\x7f\x9f\ufffd\u200b\u200d\ufeff",
    "emoji 👩‍👩‍👧 🏳️‍🌈 flags 🇫🇷 😀🎉",
    "日本語のテキストと中文和한국어 漢字かな交じり",
    "",
    "   \t\n  ",
    "antidisestablishmentarianism supercalifragilisticexpialidocious",
    "e\u0301 o\u0308 n\u0303 a\u0300\u0301\u0302",
    "\uff26\uff35\uff2c\uff2c\uff37\uff29\uff24\uff34\uff28 \uff46\uff55\uff4c\uff4c",  # full width
    "Ⅻ ① ² ½ ℃ №",
    "path/to/file.py:12: error E1234 `make test` --flag=value (x)[y]{z}",
    "ascii \x0b\x0c\x1c\x1d\x1e\x1f controls and\ttabs\r\nnewlines",
    "\u00a0non-breaking\u2009thin\u3000ideographic\u2028line\u2029paragraph",
    "Привет мир, Καλημέρα κόσμε, مرحبا بالعالم, שלום עולם, नमस्ते दुनिया",
]


@pytest.fixture(scope="module")
def reference() -> Any:
    """tokenizers with all-MiniLM-L6-v2's settings (as its tokenizer.json has them)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordPiece

    vocabulary = wordpiece.VOCABULARY.read_text(encoding="utf-8").split("\n")[:-1]
    tokenizer = Tokenizer(
        WordPiece(
            {token: place for place, token in enumerate(vocabulary)},
            unk_token="[UNK]",
            max_input_chars_per_word=100,
        )
    )
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=None, lowercase=True
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 101), ("[SEP]", 102)]
    )
    tokenizer.add_special_tokens(SPECIAL)
    tokenizer.enable_truncation(128)
    return tokenizer


def _differing(reference: Any, texts: list[str]) -> list[tuple[str, list[int], list[int]]]:
    mine = wordpiece.load(128)
    # One text at a time: encode_batch's threads cost half as much CPU again for the same
    # ids (1.4 against 0.97 CPU-s on every character's texts), and each text is tokenized
    # once by each side.
    differing = []
    for text in texts:
        ids, got = reference.encode(text).ids, mine.encode(text)
        if ids != got:
            differing.append((text, ids, got))
    return differing[:5]


def test_the_relevance_sets_and_hand_picked_texts_tokenize_alike(reference: Any) -> None:
    texts = [
        *TEXTS,
        *(memory.content for memory in relevance_memories()),
        *(memory.content for memory in memories()),
        *(question for question, *_ in QUESTIONS),
        *(query for query, *_ in QUERIES),
        *(query for query, *_ in PARAPHRASES),
        *(memory.content for memory in generate(2000, seed=2)),
    ]
    assert _differing(reference, texts) == []


def test_random_texts_of_every_script_tokenize_alike(reference: Any) -> None:
    vocabulary = wordpiece.VOCABULARY.read_text(encoding="utf-8").split("\n")[1000:-1]
    rng = random.Random(11)
    texts = []
    for _ in range(3000):
        parts = []
        for _ in range(rng.randrange(1, 40)):
            pick = rng.random()
            if pick < 0.4:
                parts.append(rng.choice(vocabulary).replace("##", ""))
            elif pick < 0.6:
                code = rng.choice((rng.randrange(0x20, 0xD800), rng.randrange(0xE000, 0x110000)))
                parts.append(chr(code))
            elif pick < 0.8:
                parts.append(rng.choice(vocabulary).upper())
            else:
                parts.append(rng.choice([" ", "\t", "\n", "-", ".", "é", "\u0301", "Σ", *SPECIAL]))
        texts.append("".join(part + (" " if rng.random() < 0.6 else "") for part in parts))
    assert _differing(reference, texts) == []


def test_every_character_tokenizes_alike(reference: Any) -> None:
    """Each character of the Basic Multilingual Plane, and of the tables of differences,
    inside a word, alone, and after a capital."""
    codes = [code for code in range(0x10000) if not 0xD800 <= code <= 0xDFFF]
    tables = (wordpiece._KEPT, wordpiece._DROPPED, wordpiece._NOT_PUNCTUATION)
    codes += sorted(set().union(*tables, wordpiece._PUNCTUATION, wordpiece._LOWER))
    texts = [f"a{chr(code)}b {chr(code)} X{chr(code)}" for code in codes]
    assert _differing(reference, texts) == []

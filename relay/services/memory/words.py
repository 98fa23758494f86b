"""The words of a memory or a query that search looks at (by words, and by meaning)."""

from __future__ import annotations

import re

__all__ = ["MAX_QUERY_TERMS", "STOP_WORDS", "meaningful_text", "query_words"]

MAX_QUERY_TERMS = 32
"""More words than this add little relevance and cost time on every search."""
_STOP_WORDS_TEXT = """
a an and are as at be by can do does for from how i in is it me my of on or our should so
that the their there these this to was we what when where which who why will with you your
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
"""Left out of a query that has other words: they match nearly every memory, so they
rank nothing and cost the most (FTS5 reads the whole list of a word's matches)."""
_WORD = re.compile(r"\w+")


def query_words(query: str) -> list[str]:
    """The words a search looks for: lower-cased, each once, without stop words (unless
    the query has nothing else), at most MAX_QUERY_TERMS."""
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(query)))
    meaningful = [word for word in words if word not in STOP_WORDS]
    return (meaningful or words)[:MAX_QUERY_TERMS]


def meaningful_text(text: str) -> str:
    """`text` without its stop words (the text itself when it has nothing else): what
    an embedding is made from, so that "how", "the" and "is" do not pull every short
    question towards every other."""
    words = _WORD.findall(text)
    kept = [word for word in words if word.lower() not in STOP_WORDS]
    return " ".join(kept) if kept else text

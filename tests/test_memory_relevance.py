"""Memory search answers well (tests/memory_relevance.py): among 300 memories on the same
subjects with the same words, the memory that answers a question comes in the first
three for at least 90% of the 41 keyword questions, by words alone and hybrid; and
hybrid search finds the answers to the 40 paraphrase questions (no word in common with
their answer) at least 20 points more often than search by words, which cannot.

Figures today (tests/perf/bench_memory.py prints them): by words, recall@3 0.902 and
MRR 0.916 on keyword questions, 0.000 on paraphrases; hybrid with MiniLM (the `meaning`
extra) 0.927 and 0.940 on keyword questions, 0.700 and 0.596 on paraphrases (with
wordllama, the fallback: 0.902 and 0.923, 0.275 and 0.254). On the larger set of
tests/memory_paraphrases.py (102 questions), hybrid recall@3 is 0.657 with MiniLM and
0.216 with wordllama. A change that makes search faster must not make these worse."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import memory_paraphrases as paraphrases
import memory_relevance as relevance
import pytest

from relay.services.memory.sqlite import SqliteMemory, query_words


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SqliteMemory]]:
    path = tmp_path_factory.mktemp("relevance") / "memory.db"
    with SqliteMemory(path) as hybrid, SqliteMemory(path, semantic=False) as words:
        hybrid.import_memories(relevance.memories())
        yield {"hybrid": hybrid, "words": words}


def _evaluate(store: SqliteMemory, queries: list[tuple[str, list[str]]]) -> tuple[float, float]:
    def search(query: str) -> list[str]:
        return [hit.memory.id for hit in store.search(query, project=relevance.PROJECT)]

    return relevance.evaluate(search, queries)


@pytest.mark.parametrize("kind", ["words", "hybrid"])
def test_search_finds_the_answers_to_keyword_questions_first(
    stores: dict[str, SqliteMemory], kind: str
) -> None:
    recall_at_3, mrr = _evaluate(stores[kind], relevance.QUERIES)
    print(f"{kind}: recall@3 {recall_at_3:.3f}  MRR {mrr:.3f}")
    assert recall_at_3 >= 0.9 and mrr >= 0.9, (recall_at_3, mrr)


def test_hybrid_search_is_no_worse_on_keyword_questions(stores: dict[str, SqliteMemory]) -> None:
    hybrid = _evaluate(stores["hybrid"], relevance.QUERIES)
    words = _evaluate(stores["words"], relevance.QUERIES)
    assert hybrid[0] >= words[0] and hybrid[1] >= words[1], (hybrid, words)


def test_hybrid_search_finds_paraphrases_that_words_cannot(stores: dict[str, SqliteMemory]) -> None:
    hybrid = _evaluate(stores["hybrid"], relevance.PARAPHRASES)
    words = _evaluate(stores["words"], relevance.PARAPHRASES)
    print(f"paraphrases: hybrid {hybrid}, words {words}")
    assert hybrid[0] >= words[0] + 0.20, (hybrid, words)


def test_paraphrase_questions_share_no_word_with_their_answers() -> None:
    """Checked with the store's own tokenizer (porter stemming, as FTS5 indexes): no
    query word, stop words aside, is in the memory the question should find."""
    assert len(relevance.PARAPHRASES) >= 30
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE VIRTUAL TABLE t USING fts5(content, tokenize='porter unicode61')")
    for query, keys in relevance.PARAPHRASES:
        for key in keys:
            content, _ = relevance.ANSWERS[key]
            connection.execute("DELETE FROM t")
            connection.execute("INSERT INTO t(content) VALUES (?)", (content,))
            for word in query_words(query):
                (found,) = connection.execute(
                    "SELECT count(*) FROM t WHERE t MATCH ?", (f'"{word}"',)
                ).fetchone()
                assert found == 0, f"{query!r} shares {word!r} with answer-{key}"


@pytest.fixture(scope="module")
def larger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, SqliteMemory]]:
    """memory_paraphrases' 102 memories among memory_relevance's 340, with each model."""
    path = tmp_path_factory.mktemp("paraphrases")
    stores = {}
    for model in ("minilm", "wordllama"):
        store = SqliteMemory(path / f"{model}.db", model=model)
        store.import_memories([*relevance.memories(), *paraphrases.memories()])
        stores[model] = store
    yield stores
    for store in stores.values():
        store.close()


def test_minilm_finds_most_answers_to_questions_in_other_words(
    larger: dict[str, SqliteMemory],
) -> None:
    """On 102 questions that share no word with their memory, the MiniLM model (the
    `meaning` extra) finds the answer in the first three for at least 60% (wordllama,
    the fallback, for about 20%): the target of spec/memory.md."""
    figures = {}
    for model, store in larger.items():

        def search(query: str, store: SqliteMemory = store) -> list[str]:
            return [hit.memory.id for hit in store.search(query, project=relevance.PROJECT)]

        figures[model] = relevance.evaluate(search, paraphrases.QUESTIONS)
    print(f"larger paraphrase set: {figures}")
    assert figures["minilm"][0] >= 0.6, figures
    assert figures["minilm"][0] >= figures["wordllama"][0] + 0.3, figures


def test_the_larger_paraphrase_set_shares_no_word_with_its_answers() -> None:
    assert len(paraphrases.QUESTIONS) >= 100
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE VIRTUAL TABLE t USING fts5(content, tokenize='porter unicode61')")
    for query, keys in paraphrases.QUESTIONS:
        for key in keys:
            connection.execute("DELETE FROM t")
            connection.execute("INSERT INTO t(content) VALUES (?)", (paraphrases.ANSWERS[key],))
            for word in query_words(query):
                (found,) = connection.execute(
                    "SELECT count(*) FROM t WHERE t MATCH ?", (f'"{word}"',)
                ).fetchone()
                assert found == 0, f"{query!r} shares {word!r} with answer-{key}"

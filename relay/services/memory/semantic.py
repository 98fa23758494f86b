"""Search by meaning: text embeddings, and the in-memory index that finds the memories
nearest to a query.

Two models can make the embeddings, the better one that is installed is used
(`load_embedder`): all-MiniLM-L6-v2 (minilm.py, the `meaning` extra), a small sentence
transformer, and else a static model, wordllama (this module, the `semantic` extra).
Without either, search is by words only.

The static model is wordllama's `l2_supercat` at 256 dimensions (MIT), shipped inside the
`wordllama` wheel: a token embedding table (safetensors) and a tokenizer (tokenizers'
JSON). A text's embedding is the mean of its tokens' rows, unit length. Both files are
read straight from the installed package; `wordllama` itself is never imported (it sets
up the root logger on import, and its loader looks for the tokenizer in a folder the
wheel does not have and then tries the network). Nothing is downloaded, ever.

Every memory's embedding is kept twice (see sqlite.py, `memory_vectors`): its signs as
a code of one bit a dimension (32 bytes for wordllama, 48 for MiniLM), held in memory by
`VectorIndex` and compared by Hamming distance (one XOR and popcount pass over the
store's codes), and in int8 for the exact cosine of
the few hundred nearest codes. wordllama needs numpy, safetensors and tokenizers (the
`semantic` extra); `load_embedder` says why neither model can be used when they are
missing.
"""

from __future__ import annotations

import importlib.util
import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from relay.services.memory.words import meaningful_text

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "DIMENSIONS",
    "MODEL",
    "MODELS",
    "Embedder",
    "SemanticUnavailable",
    "VectorIndex",
    "WordLlama",
    "close_models",
    "embed_query",
    "forget_queries",
    "from_int8",
    "load_embedder",
    "model_report",
    "sign_codes",
    "to_int8",
]

MODEL = "wordllama/l2_supercat/256 without stop words"
"""The embedding model, as `memory_meta` records it: vectors of another are redone."""
DIMENSIONS = 256
CODE_BYTES = DIMENSIONS // 8
MAX_TOKENS = 512
"""Tokens of a text that count: a long memory is known by its beginning."""
_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
_TENSOR = "embedding.weight"
INSTALL_HINT = "pip install 'agent-relay[semantic]'"


class SemanticUnavailable(Exception):
    """Search by meaning cannot be used here; the message says why and what to install."""


class Embedder(Protocol):
    """A model that makes embeddings: texts to unit-length float32 vectors."""

    @property
    def name(self) -> str:
        """The model, as `memory_meta` records it: vectors of another are redone."""
        ...

    @property
    def dimensions(self) -> int:
        """How wide its vectors are (a multiple of 64)."""
        ...

    @property
    def centred(self) -> bool:
        """Whether similarity is measured from the store's centre (sqlite.py, _centre)."""
        ...

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One row per text; a zero row for a text with nothing to embed."""
        ...


class WordLlama:
    """Texts to unit-length float32 vectors (DIMENSIONS wide). Thread-safe."""

    name = MODEL
    dimensions = DIMENSIONS
    centred = False
    """Its vectors leave out stop words already; centring them lost answers on
    tests/memory_relevance.py (keyword recall@3 0.902 to 0.878)."""

    def __init__(self, table: NDArray[Any], tokenizer: Any) -> None:
        self._table = table
        self._tokenizer = tokenizer
        self._lock = threading.Lock()  # a Tokenizer's settings are shared state

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One row per text, made from its words less stop words (words.meaningful_text);
        a text with no tokens gets a zero row (similar to nothing)."""
        import numpy as np

        meaningful = [meaningful_text(text) for text in texts]
        with self._lock:
            encodings = self._tokenizer.encode_batch(meaningful, add_special_tokens=False)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        present = np.flatnonzero(lengths)
        if present.size:
            tokens = itertools.chain.from_iterable(encoding.ids for encoding in encodings)
            ids = np.fromiter(tokens, dtype=np.int64, count=int(lengths.sum()))
            np.clip(ids, 0, self._table.shape[0] - 1, out=ids)
            starts = np.concatenate(([0], np.cumsum(lengths[present])[:-1]))
            sums = np.add.reduceat(self._table[ids], starts, axis=0)
            norms = np.linalg.norm(sums, axis=1, keepdims=True)
            vectors[present] = sums / np.maximum(norms, 1e-12)
        return vectors


_loaded: dict[str, Embedder] = {}
_failed: dict[str, SemanticUnavailable] = {}
_load_lock = threading.Lock()


def _load_minilm() -> Embedder:
    # In a child process: the model would add about 150 MB to this one's resident set
    # (embedding_process.py), for a long-lived dashboard or server as much as for a CLI.
    from relay.services.memory import embedding_process

    return embedding_process.start()


def _load_wordllama() -> Embedder:
    return _load()


MODELS: dict[str, Callable[[], Embedder]] = {"minilm": _load_minilm, "wordllama": _load_wordllama}
"""The models by name, the better first: `load_embedder` takes the first installed."""


def load_embedder(model: str | None = None) -> Embedder:
    """The best installed model (or the one named, a key of MODELS), loaded once per
    process (MiniLM about 1 s, in its own process; wordllama 0.15 s); SemanticUnavailable,
    saying why for each and what to install, when none can be."""
    names = list(MODELS) if model is None else [model]
    if not set(names) <= set(MODELS):
        raise SemanticUnavailable(f"no embedding model {model!r}: one of {', '.join(MODELS)}")
    reasons = []
    with _load_lock:
        for name in names:
            if name not in _loaded and name not in _failed:
                try:
                    _loaded[name] = MODELS[name]()
                except SemanticUnavailable as exc:
                    _failed[name] = exc
            if name in _loaded:
                return _loaded[name]
            reasons.append(f"{name}: {_failed[name]}")
    raise SemanticUnavailable("; ".join(reasons))


QUERY_CACHE = 1024
"""Queries whose embeddings a process keeps (about 1.5 KB each with MiniLM): an agent
asks the same few questions again and again, and with MiniLM a new query's embedding is
most of a search's time (tests/perf/bench_memory.py)."""
_queries: OrderedDict[tuple[str, str], NDArray[np.float32]] = OrderedDict()
_queries_lock = threading.Lock()


def embed_query(embedder: Embedder, query: str) -> NDArray[np.float32]:
    """The query's embedding by `embedder`, made once per process for the last
    QUERY_CACHE queries (read-only: it is shared)."""
    key = (embedder.name, query)
    with _queries_lock:
        known = _queries.get(key)
        if known is not None:
            _queries.move_to_end(key)
            return known
    made: NDArray[np.float32] = embedder.embed([query])[0]
    made.flags.writeable = False
    with _queries_lock:
        _queries[key] = made
        while len(_queries) > QUERY_CACHE:
            _queries.popitem(last=False)
    return made


def forget_queries(query: str | None = None) -> None:
    """Drop the embeddings kept of `query` (of every query: None), for every model
    (tests/perf/bench_memory.py measures a search that embeds its query)."""
    with _queries_lock:
        for key in [key for key in _queries if query is None or key[1] == query]:
            del _queries[key]


def close_models() -> None:
    """Stop the processes of the models this process loaded (MiniLM's child; they would
    stop by themselves when it exits); a later search loads them again."""
    with _load_lock:
        loaded = list(_loaded.values())
        _loaded.clear()
    for embedder in loaded:
        close = getattr(embedder, "close", None)
        if close is not None:
            close()


def model_report() -> tuple[bool, str]:
    """Which model search by meaning uses in this install, in one line for `relay doctor`,
    and whether it is the best one (false: a fallback, or none)."""
    try:
        embedder = load_embedder()
    except SemanticUnavailable as exc:
        return False, f"search by meaning is off, by words only ({exc})"
    if embedder.name == MODEL:
        why = _failed.get("minilm")
        return False, f"search by meaning with wordllama, the small fallback (MiniLM: {why})"
    engine = str(getattr(embedder, "engine", "") or "")
    run_by = f" ({engine})" if engine else ""
    return True, f"search by meaning with {embedder.name}{run_by}"


def _load() -> WordLlama:
    try:
        import numpy as np
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise SemanticUnavailable(f"{exc.name or exc} is not installed ({INSTALL_HINT})") from None
    spec = importlib.util.find_spec("wordllama")  # finds the package without importing it
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        raise SemanticUnavailable(f"the wordllama model is not installed ({INSTALL_HINT})")
    package = Path(folders[0])
    weights, tokenizer_file = package.joinpath(*_WEIGHTS), package.joinpath(*_TOKENIZER)
    try:
        table = load_file(str(weights))[_TENSOR]
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
    except Exception as exc:
        # OSError, KeyError (no such tensor), and safetensors' and tokenizers' own types
        # for a damaged file: whatever it is, the answer is search by words.
        raise SemanticUnavailable(f"cannot read the wordllama model in {package}: {exc}") from None
    if table.ndim != 2 or table.shape[1] != DIMENSIONS:
        raise SemanticUnavailable(f"unexpected wordllama weights of shape {table.shape}")
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_TOKENS)
    # float32 once (32 MB): converting gathered float16 rows on every embed costs more.
    return WordLlama(np.ascontiguousarray(table, dtype=np.float32), tokenizer)


def sign_codes(vectors: NDArray[np.float32]) -> NDArray[np.uint64]:
    """Each row's signs packed into one bit a dimension, as uint64 words."""
    import numpy as np

    packed = np.packbits(vectors > 0, axis=1)
    return np.ascontiguousarray(packed).view(np.uint64)


def to_int8(vectors: NDArray[np.float32]) -> NDArray[np.int8]:
    """Each row scaled so its largest component is ±127, rounded (cosine is unchanged
    by the scale; the rounding costs well under 1% of it)."""
    import numpy as np

    peaks = np.maximum(np.abs(vectors).max(axis=1, keepdims=True), 1e-12)
    scaled: NDArray[np.int8] = np.round(vectors * (127.0 / peaks)).astype(np.int8)
    return scaled


def from_int8(rows: Sequence[bytes], dimensions: int) -> NDArray[np.float32]:
    """int8 vectors as stored, back to unit-length float32 rows."""
    import numpy as np

    matrix = np.frombuffer(b"".join(rows), dtype=np.int8).reshape(len(rows), dimensions)
    values = matrix.astype(np.float32)
    unit: NDArray[np.float32] = values / np.maximum(
        np.linalg.norm(values, axis=1, keepdims=True), 1e-12
    )
    return unit


class _Shard:
    """The codes of one scope's memories (a project's, or the global ones)."""

    def __init__(self, words: int) -> None:
        import numpy as np

        self.codes = np.empty((0, words), dtype=np.uint64)
        self.seqs = np.empty(0, dtype=np.int64)
        self._pending: list[tuple[NDArray[np.int64], NDArray[np.uint64]]] = []

    def add(self, seqs: NDArray[np.int64], codes: NDArray[np.uint64]) -> None:
        self._pending.append((seqs, codes))

    def arrays(self) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
        if self._pending:
            import numpy as np

            self.seqs = np.concatenate([self.seqs, *(s for s, _ in self._pending)])
            self.codes = np.concatenate([self.codes, *(c for _, c in self._pending)])
            self._pending.clear()
        return self.seqs, self.codes


class VectorIndex:
    """The sign codes of a store's embedded memories, by scope, in memory.

    Loaded from `memory_vectors` in `vseq` order and kept up to date by loading what is
    newer than `loaded_through`. A memory forgotten, or re-embedded, leaves its old code
    behind; the exact re-rank reads the current vectors and calls `forget` for the
    seqs that have none, and `stale` says when so many are dead that a reload is due.
    """

    def __init__(self, dimensions: int = DIMENSIONS) -> None:
        self.words = dimensions // 64
        """uint64 words in a code."""
        self.loaded_through = 0
        self.size = 0
        self._shards: dict[str | None, _Shard] = {}
        self._dead: set[int] = set()

    def add(
        self,
        vseqs: Sequence[int],
        seqs: Sequence[int],
        projects: Sequence[str | None],
        codes: bytes,
    ) -> None:
        """Add rows (in vseq order); `codes` is their codes (`words` * 8 bytes each), joined."""
        import numpy as np

        if not seqs:
            return
        words = np.frombuffer(codes, dtype=np.uint64).reshape(len(seqs), self.words)
        seq_array = np.asarray(seqs, dtype=np.int64)
        by_scope: dict[str | None, list[int]] = {}
        for row, project in enumerate(projects):
            by_scope.setdefault(project, []).append(row)
        for project, rows in by_scope.items():
            index = np.asarray(rows, dtype=np.int64)
            self._shards.setdefault(project, _Shard(self.words)).add(seq_array[index], words[index])
        self.loaded_through = max(self.loaded_through, int(vseqs[-1]))
        self.size += len(seqs)
        self._dead.difference_update(int(seq) for seq in seqs)

    def forget(self, seqs: Sequence[int]) -> None:
        """These seqs have no vector any more (forgotten or changed): skip their codes."""
        self._dead.update(seqs)

    @property
    def stale(self) -> bool:
        """More than a fifth of the codes are dead: time to load the index again."""
        return len(self._dead) > max(1000, self.size // 5)

    def nearest(
        self, query: NDArray[np.uint64], scopes: Sequence[str | None], count: int
    ) -> list[int]:
        """The seqs of up to `count` memories in `scopes` whose codes are nearest to the
        query's (Hamming distance), nearest first."""
        import numpy as np

        found_seqs: list[NDArray[np.int64]] = []
        found_distances: list[NDArray[np.uint32]] = []
        for scope in dict.fromkeys(scopes):
            shard = self._shards.get(scope)
            if shard is None:
                continue
            seqs, codes = shard.arrays()
            if not len(seqs):
                continue
            distances = np.bitwise_count(codes ^ query).sum(axis=1, dtype=np.uint32)
            wanted = min(count + len(self._dead), len(seqs))
            if wanted < len(seqs):
                best = np.argpartition(distances, wanted - 1)[:wanted]
                seqs, distances = seqs[best], distances[best]
            found_seqs.append(seqs)
            found_distances.append(distances)
        if not found_seqs:
            return []
        all_seqs = np.concatenate(found_seqs)
        order = np.argsort(np.concatenate(found_distances), kind="stable")
        ranked = [int(seq) for seq in all_seqs[order]]
        if self._dead:
            ranked = [seq for seq in ranked if seq not in self._dead]
        return ranked[:count]

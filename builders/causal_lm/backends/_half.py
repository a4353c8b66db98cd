"""onnxruntime in fp16 or bf16 (the engine step's `compute`): the onnx step's fp32 graph
converted to the half dtype, then what builders/causal_lm/backends/onnxruntime.py does
for fp32 (onnxruntime's offline optimization, saved; a smoke run at the largest batch).
onnxruntime.build() calls build() here for every compute but fp32.

The conversion is onnxruntime's own (onnxruntime.transformers.float16, the converter
its transformer optimizer uses): weights cast once from fp32, activations and the KV
cache (past/present) in fp16, logits kept fp32 (the converter casts them back), ops
without a schema for the dtype (and the converter's DEFAULT_OP_BLOCK_LIST) left in
fp32 between Casts. bf16 is the same conversion with every fp16 type made bf16, and
the weights rounded from their fp32 values (not from fp16, which would clip them).

Then onnxruntime decides what it runs:
- a node it has no kernel for in the dtype, which its CPU provider does not cast to
  fp32 itself (bf16: it casts fp16 only), fails the session with NOT_IMPLEMENTED: the
  step ends unsupported-here with onnxruntime's message, which names the op;
- its CPU provider runs an fp16 node without an fp16 kernel in fp32 between Casts it
  inserts (InsertCastTransformer). If it does that to the MatMuls (onnxruntime 1.32's
  x86 CPU provider registers no fp16 MatMul, Add, Mul, Softmax ... kernels), the
  engine would store fp16 and compute fp32, slower than the fp32 engine: the step ends
  unsupported-here saying so. Where the MatMuls run in the dtype (an arm64 build with
  fp16 kernels, the CUDA provider), the engine is built, and engine.json's `compute`
  lists any ops onnxruntime still runs in fp32.
"""

from __future__ import annotations

import collections
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builders.causal_lm.backends import Options
from builders.common import graph, ort

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
FLOAT, FLOAT16, BFLOAT16 = 1, 10, 16  # onnx.TensorProto's element types
ELEMENT = {"fp16": FLOAT16, "bf16": BFLOAT16}
# Ops whose dtype is the engine's compute: they must run in it for the engine to be built.
# The weight products are FusedMatMul once the onnx step reads weights as stored, and
# the attention's are inside GroupQueryAttention in a fused-attention graph: counting
# MatMul alone once let an engine computing every weight product in fp32 pass.
MATMULS = ("MatMul", "Gemm", "FusedMatMul", "GroupQueryAttention")


def build(request: Request, writer: Writer, opts: Options) -> None:
    import onnxruntime

    if opts.quantized:
        raise request.error(
            f"compute {opts.compute} on onnxruntime converts an fp32 graph; this one is quantized",
            "this is a kiln bug in kiln/catalog/buildable.py; please report it",
        )
    source = request.inputs["onnx"]
    io = json.loads((source / "io.json").read_text())
    ort.check_limits(request, opts.max_seq_len, io)
    provider = ort.provider(request, opts.target)
    model = convert(graph.load(source / "model.onnx"), opts.compute)
    saved = writer.path("engine.onnx")
    with tempfile.TemporaryDirectory() as tmp:
        converted = Path(tmp) / "model.onnx"
        graph.save(model, converted)
        graph.check(model, saved=converted)  # the conversion wrote a valid graph
        before = _float32(arithmetic(converted))  # what the converter kept in fp32
        try:
            ort.optimize(converted, saved, provider, external=True)
        except onnxruntime.capi.onnxruntime_pybind11_state.NotImplemented as exc:
            raise request.unsupported(
                f"onnxruntime {onnxruntime.__version__}'s {provider} cannot run "
                f"{DTYPES[opts.compute]}: {_message(exc)}"
            ) from None
    runs = arithmetic(saved)
    request.log(f"ops by the dtype onnxruntime computes them in: {_counts(runs)}")
    dtype = DTYPES[opts.compute]
    fp32 = _float32(runs)
    cast = sorted(op for op, n in fp32.items() if n > before.get(op, 0))  # onnxruntime's Casts
    if any(op in fp32 for op in MATMULS):
        total = sum(sum(runs.get(op, {}).values()) for op in MATMULS)
        slow = sum(fp32.get(op, 0) for op in MATMULS)
        raise request.unsupported(
            f"onnxruntime {onnxruntime.__version__}'s {provider} has no {dtype} kernel for "
            f"{', '.join(cast)}: it computes them in float32 between the Casts it inserts "
            f"({slow} of {total} matrix products), so the engine would store {dtype} and compute "
            "float32, slower than the fp32 engine"
        )
    session = ort.load(saved, provider)
    batch = opts.max_batch_size
    ort.smoke(request, session, "logits", _feeds(io, batch, dtype), (batch, 4, io["vocab_size"]))
    inputs, outputs = graph.value_info(model.graph.input), graph.value_info(model.graph.output)
    kv_cache = {**io["kv_cache"], "dtype": dtype}
    writer.write_json("io.json", {**io, "inputs": inputs, "outputs": outputs, "kv_cache": kv_cache})
    data = ort.external_data(saved)
    compute = {"dtype": dtype, "float32_ops": fp32}
    ort.engine_json(
        writer, provider, batch, opts.max_seq_len, file="engine.onnx", data=data, compute=compute
    )


def convert(model: Any, compute: str) -> Any:
    """The fp32 graph in the half dtype: onnxruntime's float16 converter, logits kept
    float32, ops without a schema for the dtype kept float32 between Casts; for bf16,
    every float16 type then made bfloat16, weights rounded from their fp32 values;
    nodes in topological order."""
    from onnxruntime.transformers import float16
    from onnxruntime.transformers.onnx_model import OnnxModel

    originals = {t.name: t for t in model.graph.initializer if t.data_type == FLOAT}
    blocked = [*float16.DEFAULT_OP_BLOCK_LIST, *_without_schema(model, ELEMENT[compute])]
    half = float16.convert_float_to_float16(
        model, keep_io_types=["logits"], op_block_list=blocked, disable_shape_infer=False
    )
    if compute == "bf16":
        _retarget_bf16(half, originals)
    # the converter appends the Casts it inserts for blocked ops; onnx wants them in order
    OnnxModel.graph_topological_sort(half.graph, is_deterministic=True)
    return half


def _without_schema(model: Any, element: int) -> list[str]:
    """Op types of the graph whose ONNX schema (at the graph's opset) has no float type
    constraint that admits `element`: converting them would make an invalid graph."""
    import onnx

    name = f"tensor({onnx.helper.tensor_dtype_to_string(element).split('.')[-1].lower()})"
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    out = set()
    for op in {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}:
        schema = onnx.defs.get_schema(op, opset)
        floats = [c for c in schema.type_constraints if "tensor(float)" in c.allowed_type_strs]
        if floats and not all(name in c.allowed_type_strs for c in floats):
            out.add(op)
    return sorted(out)


def _retarget_bf16(model: Any, originals: dict[str, Any]) -> None:
    """In place: every float16 tensor, value and Cast of the converted graph becomes
    bfloat16; an initializer converted from an fp32 one is rounded from that."""
    import ml_dtypes
    import numpy as np
    import onnx
    from onnx import numpy_helper

    def bf16(tensor: Any) -> Any:
        name = tensor.name
        found = originals.get(name)
        values = numpy_helper.to_array(found if found is not None else tensor)
        return numpy_helper.from_array(values.astype(np.float32).astype(ml_dtypes.bfloat16), name)

    g = model.graph
    for tensor in g.initializer:
        if tensor.data_type == FLOAT16:
            tensor.CopyFrom(bf16(tensor))
    for value in (*g.input, *g.output, *g.value_info):
        if value.type.tensor_type.elem_type == FLOAT16:
            value.type.tensor_type.elem_type = BFLOAT16
    for node in g.node:
        for attr in node.attribute:
            if node.op_type == "Cast" and attr.name == "to" and attr.i == FLOAT16:
                attr.i = BFLOAT16
            elif attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == FLOAT16:
                attr.t.CopyFrom(bf16(attr.t))


def arithmetic(saved: Path) -> dict[str, dict[str, int]]:
    """Per op type of the graph saved at `saved` (Casts and pure data movement left
    out), how many nodes compute in each float dtype, from onnx's type inference (for
    the engine onnxruntime wrote, its inserted Casts included)."""
    import onnx

    model = onnx.load(str(saved), load_external_data=False)
    inferred = onnx.shape_inference.infer_shapes(model)
    g = inferred.graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.output, *g.value_info)}
    types |= {t.name: t.data_type for t in g.initializer}
    for node in g.node:  # ops onnx cannot infer (onnxruntime's own): a Cast's type is known
        if node.op_type == "Cast":
            types.setdefault(node.output[0], next(a.i for a in node.attribute if a.name == "to"))
    names = {FLOAT: "float32", FLOAT16: "float16", BFLOAT16: "bfloat16"}
    runs: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for node in g.node:
        if node.op_type in MOVES:
            continue
        found = {names[types[x]] for x in node.input if types.get(x) in names}
        for dtype in found:
            runs[node.op_type][dtype] += 1
    return {op: dict(n) for op, n in sorted(runs.items())}


# Ops that only move, index or reshape values: what they read says nothing of where
# onnxruntime computes.
MOVES = frozenset(
    {
        "Cast",
        "Concat",
        "Expand",
        "Flatten",
        "Gather",
        "Identity",
        "Reshape",
        "Shape",
        "Slice",
        "Split",
        "Squeeze",
        "Transpose",
        "Unsqueeze",
    }
)


def _float32(runs: dict[str, dict[str, int]]) -> dict[str, int]:
    """How many nodes of each op type compute in float32."""
    return {op: n["float32"] for op, n in runs.items() if n.get("float32")}


def _counts(runs: dict[str, dict[str, int]]) -> str:
    return "; ".join(
        f"{op} " + ", ".join(f"{n} {d}" for d, n in sorted(by.items())) for op, by in runs.items()
    )


def _message(exc: Exception) -> str:
    """onnxruntime's error without its '[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : ' prefix."""
    text = str(exc)
    return text.rsplit(" : ", 1)[-1] if text.startswith("[ONNXRuntimeError]") else text


def _feeds(io: dict[str, Any], batch: int, dtype: str) -> dict[str, Any]:
    """The fp32 engine's smoke feeds (onnxruntime._feeds), the empty cache in `dtype`,
    as the runtime makes it (runtime/causal_lm.py: io.json's kv_cache dtype)."""
    import ml_dtypes
    import numpy as np

    from builders.causal_lm.backends.onnxruntime import _feeds as fp32_feeds

    element = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    feeds = fp32_feeds(io, batch)
    for entry in io["kv_cache"]["entries"]:
        feeds[entry["past"]] = feeds[entry["past"]].astype(element)
    return feeds

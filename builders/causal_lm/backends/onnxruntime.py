"""onnxruntime: the engine is the graph after onnxruntime's own offline optimization
(builders/common/ort.py), saved so the runtime loads it without re-optimizing. A
smoke run at the largest batch proves it loads.

A quantized graph (option `quantized`) keeps its quantized weights. onnxruntime's
`session.disable_quant_qdq` would keep Q/DQ as written, but that same switch makes
ConstantFolding fold DequantizeLinear too: graph_transformer_utils.cc builds
`ConstantFolding(cpu_ep, !disable_quant_qdq, ...)`, whose second argument is
`skip_dequantize_linear`. Every int8/float8/int4 weight then came back as fp32, and a
quantized bundle was no smaller than the fp32 one (tiny-llama: 0.64 MB fp32, 0.65-0.70
MB quantized). So the Q/DQ transformers stay enabled at the session level, and
ConstantFolding skips DequantizeLinear, while each transformer that would fuse or
rewrite Q/DQ is disabled by name (QDQ_TRANSFORMERS). The saved graph keeps what the
onnx step wrote: `DQ(int8|float8 weight) -> MatMul` for activation-quantized and fp8
graphs, and for weight-only int8/int4 the fused MatMulNBits the onnx step converted
them to (builders/causal_lm/_nbits.py), with quantized initializers on disk. Weights
of 1 KiB and more are saved as external data, which the bundle carries beside the
graph: a tensor with the onnx step's bytes is read from a copy of that step's data
file (for an fp32 graph the checkpoint's own model.safetensors, stored once with it:
builders/common/weights.py), the rest from engine.onnx.data (ort.share_weights).

GPU targets use the CUDA provider, which only onnxruntime-gpu has; where it is not
installed the step ends `unsupported-here`.

A `compute` of fp16 or bf16 converts the fp32 graph to that dtype first
(builders/causal_lm/backends/_half.py), where onnxruntime can compute it.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

from builders.causal_lm.backends import Options, _half
from builders.common import ort

# onnxruntime 1.32 graph transformers (graph_transformer_utils.cc) that fuse, move or
# rewrite Q/DQ when `session.disable_quant_qdq` is off. Disabled so the graph computes
# exactly DQ -> MatMul (DQMatMulToMatMulNBits, inside QDQSelectorActionTransformer,
# would otherwise make int8/int4 weights MatMulNBits with int8-quantized activations
# at accuracy level 4, and MatMulIntegerToFloat rejects float8).
QDQ_TRANSFORMERS = (
    "DoubleQDQPairsRemover",
    "QDQPropagationTransformer",
    "WeightBiasQuantization",
    "QDQS8ToU8Transformer",
    "QDQSelectorActionTransformer",
    "MatMulIntegerToFloatFusion",
    "DynamicQuantizeMatMulFusion",
    "MatMulNBitsFusion",
    "QDQFinalCleanupTransformer",
)


def build(request: Any, writer: Any) -> None:
    opts = Options.model_validate(request.options)
    if opts.compute != "fp32":
        _half.build(request, writer, opts)
        return
    source = request.inputs["onnx"]
    io = json.loads((source / "io.json").read_text())
    ort.check_limits(request, opts.max_seq_len, io)
    provider = ort.provider(request, opts.target)
    disabled = QDQ_TRANSFORMERS if opts.quantized else ()
    saved = writer.path("engine.onnx")
    ort.optimize(source / "model.onnx", saved, provider, disabled, external=True)
    skips = _fuse_skip_norms(saved)
    request.log(f"{skips} residual Add + RMSNorm pairs -> SkipSimplifiedLayerNormalization")
    shared, new = ort.share_weights(saved, source / "model.onnx")
    request.log(f"weights: {shared:,d} bytes are the onnx step's, {new:,d} new")
    session = ort.load(saved, provider)  # the smoke run loads what the bundle carries
    batch = opts.max_batch_size
    ort.smoke(request, session, "logits", _feeds(io, batch), (batch, 4, io["vocab_size"]))
    shutil.copyfile(source / "io.json", writer.path("io.json"))
    kept = {"disabled_optimizers": list(disabled)} if disabled else {}
    data = ort.external_data(writer.path("engine.onnx"))
    ort.engine_json(
        writer, provider, batch, opts.max_seq_len, file="engine.onnx", data=data, **kept
    )
    if opts.quantized:
        request.log(f"kept quantized weights: {_stored(writer.path('engine.onnx'))}")


def _fuse_skip_norms(saved: Any) -> int:
    """graph.fuse_skip_norms on the saved engine's graph; its weights stay where
    onnxruntime wrote them."""
    import onnx

    from builders.common import graph

    model = onnx.load(str(saved), load_external_data=False)
    fused = graph.fuse_skip_norms(model)
    if fused:
        onnx.save_model(model, str(saved))
    return fused


def _feeds(io: dict[str, Any], batch: int) -> dict[str, Any]:
    """A prefill of 4 tokens at `batch` rows with an empty cache, as the runtime feeds it."""
    import numpy as np

    feeds = {
        "input_ids": np.zeros((batch, 4), np.int64),
        "attention_mask": np.ones((batch, 4), np.int64),
        "position_ids": np.tile(np.arange(4, dtype=np.int64), (batch, 1)),
    }
    for entry in io["kv_cache"]["entries"]:  # shapes observed at export (causal_lm/_cache.py)
        shape = [{"batch": batch, "seq": 0}.get(d, d) for d in entry["shape"]]
        feeds[entry["past"]] = np.zeros(shape, np.float32)
    if io.get("position_axes", 1) == 3:  # M-RoPE's (t, h, w), a text token's: all equal
        feeds["position_ids"] = np.repeat(feeds["position_ids"][..., None], 3, axis=-1)
    if io.get("logits_to_keep"):  # every position's logits (export.py)
        feeds["logits_to_keep"] = np.array(0, np.int64)
    for v in io["inputs"]:  # a VLM's decoder: no image token fed, no feature rows
        if v["name"] in ("image_features", "deepstack_features"):  # (DeepStack's: Qwen3-VL)
            feeds[v["name"]] = np.zeros((0, *v["shape"][1:]), np.float32)
    return feeds


def _stored(path: Any) -> str:
    """Initializer count per data type, e.g. 'FLOAT 24, INT8 17' (for the build log)."""
    import collections

    import onnx

    model = onnx.load(str(path), load_external_data=False)
    types = collections.Counter(
        onnx.TensorProto.DataType.Name(t.data_type) for t in model.graph.initializer
    )
    return ", ".join(f"{k} {v}" for k, v in sorted(types.items()))

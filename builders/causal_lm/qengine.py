"""engine (quantized graphs, onnxruntime): the engine keeps the graph's quantized weights.

builders/causal_lm/backends/onnxruntime.py sets `session.disable_quant_qdq` for quantized graphs
(so no Q/DQ fusion changes the fake-quant arithmetic that validate compares), but in
onnxruntime that same switch makes ConstantFolding fold DequantizeLinear too:
graph_transformer_utils.cc builds `ConstantFolding(cpu_ep, !disable_quant_qdq, ...)`,
whose second argument is `skip_dequantize_linear`. Every int8/float8/int4 weight then
came back as fp32, and a quantized bundle was no smaller than the fp32 one (tiny-llama:
0.64 MB fp32, 0.65-0.70 MB quantized).

Here the Q/DQ transformers stay enabled at the session level, so ConstantFolding skips
DequantizeLinear, and each transformer that would fuse or rewrite Q/DQ is disabled by
name instead (`disabled_optimizers`). The saved graph keeps `DQ(int8|float8|int4
weight) -> MatMul`: the same arithmetic, with quantized initializers on disk.

A separate builder (chosen by the engine step's `quantized` option, kiln/plan/toolchain.py
OPTION_BUILDERS) rather than an edit of builders/causal_lm/backends/: that folder is hashed into
every engine key, and fp32 engines must keep theirs.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

from pydantic import Field

from builders.causal_lm.engine import Options as EngineOptions
from builders.causal_lm.engine import check_limits

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


class Options(EngineOptions):
    quantized: bool = Field(
        description="The graph stores quantized weights (int8, float8, int4) behind "
        "DequantizeLinear; the engine keeps them quantized."
    )


def build(request: Any, writer: Any) -> None:
    import numpy as np
    import onnxruntime as ort

    opts = Options.model_validate(request.options)
    if opts.backend != "onnxruntime":
        raise request.error(f"quantized engine for backend {opts.backend}", "kiln bug")
    source = request.inputs["onnx"]
    io = json.loads((source / "io.json").read_text())
    check_limits(request, opts, io)
    provider = "CPUExecutionProvider" if opts.target == "cpu" else "CUDAExecutionProvider"
    if provider not in ort.get_available_providers():
        raise request.unsupported(
            f"onnxruntime {ort.__version__} here has no {provider} "
            f"(available: {', '.join(ort.get_available_providers())})"
        )
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(writer.path("engine.onnx"))
    session = ort.InferenceSession(
        str(source / "model.onnx"),
        so,
        providers=[provider],
        disabled_optimizers=list(QDQ_TRANSFORMERS),
    )
    _smoke(request, session, io, opts.max_batch_size, np)
    shutil.copyfile(source / "io.json", writer.path("io.json"))
    writer.write_json(
        "engine.json",
        {
            "backend": "onnxruntime",
            "version": ort.__version__,
            "provider": provider,
            "graph_optimization_level": "ORT_ENABLE_EXTENDED",
            "disabled_optimizers": list(QDQ_TRANSFORMERS),
            "file": "engine.onnx",
            "max_batch_size": opts.max_batch_size,
            "max_seq_len": opts.max_seq_len,
        },
    )
    request.log(f"kept quantized weights: {_stored(writer.path('engine.onnx'))}")


def _smoke(request: Any, session: Any, io: dict[str, Any], batch: int, np: Any) -> None:
    """One run at the largest batch proves the saved graph loads and runs."""
    feeds = {
        "input_ids": np.zeros((batch, 4), np.int64),
        "attention_mask": np.ones((batch, 4), np.int64),
        "position_ids": np.tile(np.arange(4, dtype=np.int64), (batch, 1)),
    }
    for entry in io["kv_cache"][
        "entries"
    ]:  # shapes observed at export (builders/causal_lm/_cache.py)
        shape = [{"batch": batch, "seq": 0}.get(d, d) for d in entry["shape"]]
        feeds[entry["past"]] = np.zeros(shape, np.float32)
    logits = session.run(["logits"], feeds)[0]
    if logits.shape != (batch, 4, io["vocab_size"]) or not np.isfinite(logits).all():
        raise request.error(f"engine smoke run gave logits of shape {logits.shape}", "kiln bug")


def _stored(path: Any) -> str:
    """Initializer count per data type, e.g. 'FLOAT 24, INT8 17' (for the build log)."""
    import collections

    import onnx

    model = onnx.load(str(path), load_external_data=False)
    types = collections.Counter(
        onnx.TensorProto.DataType.Name(t.data_type) for t in model.graph.initializer
    )
    return ", ".join(f"{k} {v}" for k, v in sorted(types.items()))

"""onnxruntime: the engine is the graph after onnxruntime's own offline optimization
(fusions at ORT_ENABLE_EXTENDED, which stays portable across CPUs; the layout
optimizations of ORT_ENABLE_ALL are hardware-specific), saved so the runtime loads
it without re-optimizing. A smoke run at the largest batch proves it loads.

GPU targets use the CUDA provider, which only onnxruntime-gpu has; where it is not
installed the step ends `unsupported-here`.
"""

from __future__ import annotations

import json
import shutil
from typing import Any


def build(request: Any, writer: Any, opts: Any) -> None:
    import numpy as np
    import onnxruntime as ort

    from builders.causal_lm.engine import check_limits

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
    if io.get("quantization"):
        # Keep Q/DQ as written: onnxruntime 1.30 fuses float8 DQ -> MatMul into
        # MatMulIntegerToFloat, which rejects float8 (measured on the GPU host), and
        # unfused DQ -> MatMul is exactly the fake-quant arithmetic validate compares.
        so.add_session_config_entry("session.disable_quant_qdq", "1")
    session = ort.InferenceSession(str(source / "model.onnx"), so, providers=[provider])
    kv = io["kv_cache"]
    batch = opts.max_batch_size
    feeds = {
        "input_ids": np.zeros((batch, 4), np.int64),
        "attention_mask": np.ones((batch, 4), np.int64),
        "position_ids": np.tile(np.arange(4, dtype=np.int64), (batch, 1)),
    }
    for entry in kv["entries"]:  # shapes observed at export (builders/causal_lm/_cache.py)
        shape = [{"batch": batch, "seq": 0}.get(d, d) for d in entry["shape"]]
        feeds[entry["past"]] = np.zeros(shape, np.float32)
    logits = session.run(["logits"], feeds)[0]
    if logits.shape != (batch, 4, io["vocab_size"]) or not np.isfinite(logits).all():
        raise request.error(f"engine smoke run gave logits of shape {logits.shape}", "kiln bug")
    shutil.copyfile(source / "io.json", writer.path("io.json"))
    writer.write_json(
        "engine.json",
        {
            "backend": "onnxruntime",
            "version": ort.__version__,
            "provider": provider,
            "graph_optimization_level": "ORT_ENABLE_EXTENDED",
            "file": "engine.onnx",
            "max_batch_size": opts.max_batch_size,
            "max_seq_len": opts.max_seq_len,
        },
    )

"""engine: build the runnable engine with a backend.

onnxruntime: the engine is the graph after onnxruntime's own offline optimization
(fusions at ORT_ENABLE_EXTENDED, which stays portable across CPUs; the layout
optimizations of ORT_ENABLE_ALL are hardware-specific), saved so the runtime
loads it without re-optimizing. A smoke run at the largest batch proves it loads.
"""

from __future__ import annotations

import json
import shutil
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: str = Field(pattern="^onnxruntime$", description="Engine backend.")
    max_batch_size: int = Field(ge=1, description="Largest batch the engine serves.")
    max_seq_len: int = Field(ge=1, description="Largest prompt plus generated length.")


def build(request: Any, writer: Any) -> None:
    import numpy as np
    import onnxruntime as ort

    opts = Options.model_validate(request.options)
    source = request.inputs["onnx"]
    io = json.loads((source / "io.json").read_text())
    limit = io["max_position_embeddings"]
    if opts.max_seq_len > limit:
        raise request.error(
            f"build.max_seq_len {opts.max_seq_len} exceeds the model's "
            f"max_position_embeddings {limit}",
            f"set build.max_seq_len to {limit} or less",
        )
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(writer.path("engine.onnx"))
    provider = "CPUExecutionProvider"
    session = ort.InferenceSession(str(source / "model.onnx"), so, providers=[provider])
    kv = io["kv_cache"]
    batch = opts.max_batch_size
    feeds = {
        "input_ids": np.zeros((batch, 4), np.int64),
        "attention_mask": np.ones((batch, 4), np.int64),
        "position_ids": np.tile(np.arange(4, dtype=np.int64), (batch, 1)),
    }
    for entry in kv["entries"]:  # shapes observed at export (builders/_cache.py)
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

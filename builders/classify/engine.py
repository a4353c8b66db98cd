"""engine (text-classification): onnxruntime's offline optimization, saved, smoke-run.

The same optimization level as builders/engine.py (ORT_ENABLE_EXTENDED, portable
across CPUs); the smoke run feeds the largest batch, right-padded.
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
    max_seq_len: int = Field(ge=1, description="Longest input, in tokens.")
    task: str = Field(pattern="^text-classification$", description="The recipe's task.")


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
    batch, seq = opts.max_batch_size, 4
    feeds = {name: np.zeros((batch, seq), np.int64) for name in io["graph_inputs"]}
    feeds["attention_mask"] = np.ones((batch, seq), np.int64)
    feeds["attention_mask"][-1, 2:] = 0
    logits = session.run(["logits"], feeds)[0]
    if logits.shape != (batch, len(io["labels"])) or not np.isfinite(logits).all():
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

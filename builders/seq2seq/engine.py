"""engine (text2text-generation, automatic-speech-recognition): onnxruntime's offline
optimization of both graphs (ORT_ENABLE_EXTENDED, as builders/causal_lm/engine.py), saved, and
a smoke run at the largest batch: encode, then one decoder step from an empty cache."""

from __future__ import annotations

import json
import shutil
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from builders.seq2seq import SPEECH, TASK_PATTERN


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: str = Field(pattern="^onnxruntime$", description="Engine backend.")
    max_batch_size: int = Field(ge=1, description="Largest batch the engine serves.")
    max_seq_len: int = Field(ge=1, description="Longest input, and longest output, in tokens.")
    task: str = Field(pattern=TASK_PATTERN, description="The recipe's task.")


def _context(sessions: dict[str, Any], io: dict[str, Any], batch: int) -> dict[str, Any]:
    """The decoder's per-input feeds, from the encoder run on zeros."""
    import numpy as np

    if io["task"] == SPEECH:
        shape = (batch, io["features"]["num_mel_bins"], io["features"]["frames"])
        out = sessions["encoder"].run(None, {"input_features": np.zeros(shape, np.float32)})
        return {e["name"]: t for e, t in zip(io["cross_cache"]["entries"], out[1:], strict=True)}
    mask = np.ones((batch, 4), np.int64)
    hidden = sessions["encoder"].run(
        None, {"input_ids": np.zeros((batch, 4), np.int64), "attention_mask": mask}
    )[0]
    return {"encoder_hidden": hidden, "encoder_attention_mask": mask}


def build(request: Any, writer: Any) -> None:
    import numpy as np
    import onnxruntime as ort

    opts = Options.model_validate(request.options)
    source = request.inputs["onnx"]
    io = json.loads((source / "io.json").read_text())
    limit = io["max_position_embeddings"]
    if limit is not None and opts.max_seq_len > limit:
        raise request.error(
            f"build.max_seq_len {opts.max_seq_len} exceeds the model's "
            f"max_position_embeddings {limit}",
            f"set build.max_seq_len to {limit} or less",
        )
    provider = "CPUExecutionProvider"
    sessions = {}
    for name, graph in io["graphs"].items():
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = str(writer.path(graph["file"]))
        sessions[name] = ort.InferenceSession(str(source / graph["file"]), so, providers=[provider])
    batch = opts.max_batch_size
    feeds = {
        "decoder_input_ids": np.zeros((batch, 1), np.int64),
        **_context(sessions, io, batch),
    }
    for e in io["kv_cache"]["entries"]:
        feeds[e["past"]] = np.zeros([{"batch": batch, "seq": 0}.get(d, d) for d in e["shape"]])
        feeds[e["past"]] = feeds[e["past"]].astype(np.float32)
    logits = sessions["decoder"].run(["logits"], feeds)[0]
    if logits.shape != (batch, 1, io["vocab_size"]) or not np.isfinite(logits).all():
        raise request.error(f"engine smoke run gave logits of shape {logits.shape}", "kiln bug")
    shutil.copyfile(source / "io.json", writer.path("io.json"))
    writer.write_json(
        "engine.json",
        {
            "backend": "onnxruntime",
            "version": ort.__version__,
            "provider": provider,
            "graph_optimization_level": "ORT_ENABLE_EXTENDED",
            "files": {name: graph["file"] for name, graph in io["graphs"].items()},
            "max_batch_size": opts.max_batch_size,
            "max_seq_len": opts.max_seq_len,
        },
    )

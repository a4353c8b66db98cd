"""engine (text2text-generation, automatic-speech-recognition): onnxruntime's offline
optimization of both graphs (builders/common/ort.py), saved, and a smoke run at the
largest batch: encode, then one decoder step from an empty cache."""

from __future__ import annotations

import json
import shutil
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from builders.common import ort
from builders.seq2seq import SPEECH, TASK_PATTERN


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: str = Field(pattern="^onnxruntime$", description="Engine backend.")
    max_batch_size: int = Field(ge=1, description="Largest batch the engine serves.")
    max_seq_len: int = Field(ge=1, description="Longest input, and longest output, in tokens.")
    task: str = Field(pattern=TASK_PATTERN, description="The recipe's task.")
    target: str = Field(pattern="^cpu$", description="Build target; this task builds for cpu.")
    max_input_len: int = Field(ge=1, description="Longest prompt; max_seq_len bounds inputs here.")
    quantized: Literal[False] = Field(description="fp32 graphs only: nothing quantized to keep.")


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

    opts = Options.model_validate(request.options)
    source = request.inputs["onnx"]
    io = json.loads((source / "io.json").read_text())
    ort.check_limits(request, opts.max_seq_len, io)
    provider = ort.provider(request, opts.target)
    sessions = {
        name: ort.optimize(source / graph["file"], writer.path(graph["file"]), provider)
        for name, graph in io["graphs"].items()
    }
    batch = opts.max_batch_size
    feeds = {
        "decoder_input_ids": np.zeros((batch, 1), np.int64),
        **_context(sessions, io, batch),
    }
    for e in io["kv_cache"]["entries"]:
        feeds[e["past"]] = np.zeros([{"batch": batch, "seq": 0}.get(d, d) for d in e["shape"]])
        feeds[e["past"]] = feeds[e["past"]].astype(np.float32)
    ort.smoke(request, sessions["decoder"], "logits", feeds, (batch, 1, io["vocab_size"]))
    shutil.copyfile(source / "io.json", writer.path("io.json"))
    files = {name: graph["file"] for name, graph in io["graphs"].items()}
    ort.engine_json(writer, provider, batch, opts.max_seq_len, files=files)

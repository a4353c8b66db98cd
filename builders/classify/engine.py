"""engine (text-classification): onnxruntime's offline optimization, saved, smoke-run
(builders/common/encoder.py); the smoke run's logits are [batch, num_labels]."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from builders.common import encoder

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: str = Field(pattern="^onnxruntime$", description="Engine backend.")
    max_batch_size: int = Field(ge=1, description="Largest batch the engine serves.")
    max_seq_len: int = Field(ge=1, description="Longest input, in tokens.")
    task: str = Field(pattern="^text-classification$", description="The recipe's task.")
    target: str = Field(pattern="^cpu$", description="Build target; this task builds for cpu.")
    max_input_len: int = Field(ge=1, description="Longest prompt; max_seq_len bounds inputs here.")
    quantized: Literal[False] = Field(description="fp32 graphs only: nothing quantized to keep.")


def build(request: Request, writer: Writer) -> None:
    opts = Options.model_validate(request.options)
    io = json.loads((request.inputs["onnx"] / "io.json").read_text())
    encoder.engine(request, writer, opts, "logits", (-1, len(io["labels"])))

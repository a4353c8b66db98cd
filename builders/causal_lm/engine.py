"""engine: build the runnable engine with the recipe's backend.

One interface, three backends (builders/causal_lm/backends/): each is a module with
`build(request, writer, options)` that writes the engine file, `io.json` (the
KV-cache I/O contract) and `engine.json` (backend, version, device, file, limits),
which the bundle step and runtime/ read. Nothing else in kiln knows which backend
built an engine.

  onnxruntime  the ONNX graph after onnxruntime's offline optimization (CPU here;
               the CUDA provider where onnxruntime-gpu is installed)
  aoti         torch.export + AOTInductor: a compiled .pt2 package (CPU or CUDA)
  tensorrt     the TensorRT Python API: ONNX parser, strongly typed network,
               optimization profiles from the build options, timing cache
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: str = Field(pattern="^(onnxruntime|aoti|tensorrt)$", description="Engine backend.")
    max_batch_size: int = Field(ge=1, description="Largest batch the engine serves.")
    max_seq_len: int = Field(ge=1, description="Largest prompt plus generated length.")
    target: str = Field("cpu", description="cpu, or the NVIDIA SM version to build for.")
    max_input_len: int | None = Field(None, ge=1, description="Longest prompt, in tokens.")


def check_limits(request: Request, opts: Options, io: dict[str, Any]) -> None:
    limit = io["max_position_embeddings"]
    if opts.max_seq_len > limit:
        raise request.error(
            f"build.max_seq_len {opts.max_seq_len} exceeds the model's "
            f"max_position_embeddings {limit}",
            f"set build.max_seq_len to {limit} or less",
        )


def build(request: Request, writer: Writer) -> None:
    opts = Options.model_validate(request.options)
    backend = importlib.import_module(f"builders.causal_lm.backends.{opts.backend}")
    backend.build(request, writer, opts)

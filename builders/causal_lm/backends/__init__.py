"""engine (text-generation): one builder per backend, `build(request, writer)`, chosen
by the step's `backend` option (kiln.plan.toolchain.builder_module). Each writes the
engine file, `io.json` (the KV-cache I/O contract) and `engine.json` (backend,
version, device, file, limits), which the bundle step and runtime/ read. Nothing
else in kiln knows which backend built an engine.

  onnxruntime  the ONNX graph after onnxruntime's offline optimization (CPU here;
               the CUDA provider where onnxruntime-gpu is installed); a quantized
               graph keeps its quantized weights
  _half        onnxruntime's compute fp16|bf16: the fp32 graph converted to the dtype
               first, unsupported-here where onnxruntime cannot compute it
  aoti         torch.export + AOTInductor: a compiled .pt2 package (CPU or CUDA)
  inductor     torch.export programs (decode, chunked prefill) over a static KV cache,
               weights once in safetensors, and their kernels
  _shards      inductor's tensor parallelism: each rank's weight shard, the programs'
               all-reduces (build.tensor_parallel)
  _images      inductor's image-text-to-text engine: the prefill program that merges
               image features, the decoder's weights alone, the refusal of Gemma 3
  _drafter     inductor's DFlash/DSpark drafter: the target programs' captured hidden
               states, and the drafter's own programs in the same engine
  _kernels     inductor's kernels: the programs compiled (autotuned on CUDA) on the
               build host in a fresh process, the Inductor cache that makes, and a
               second process's load from it alone (runtime/kernels.py)
  tensorrt     the TensorRT Python API: ONNX parser, strongly typed network,
               optimization profiles from the build options, timing cache

Options is what every backend's step carries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str = Field(
        pattern="^(text-generation|image-text-to-text)$", description="The recipe's task."
    )
    backend: str = Field(pattern="^(onnxruntime|aoti|tensorrt)$", description="Engine backend.")
    compute: str = Field(
        pattern="^(fp32|fp16|bf16)$",
        description="Compute and KV-cache dtype (precision.compute; a companion's: fp32).",
    )
    max_batch_size: int = Field(ge=1, description="Largest batch the engine serves.")
    max_seq_len: int = Field(ge=1, description="Largest prompt plus generated length.")
    target: str = Field(description="cpu, or the NVIDIA SM version to build for.")
    max_input_len: int = Field(ge=1, description="Longest prompt, in tokens.")
    quantized: bool = Field(
        description="The graph stores quantized weights (int8, float8, int4) behind "
        "DequantizeLinear (onnxruntime keeps them quantized)."
    )


def fp32_only(request: Request, opts: Options) -> None:
    """A backend that computes fp32 only refuses any other `compute` (the planner never
    asks: kiln/catalog/buildable.py's HALF_COMPUTE)."""
    if opts.compute != "fp32":
        raise request.error(
            f"the {opts.backend} backend computes fp32 only; this step asks for {opts.compute}",
            "this is a kiln bug in kiln/catalog/buildable.py (HALF_COMPUTE); please report it",
        )

"""aoti: torch.export of the KV-cache module, compiled ahead of time by AOTInductor
into one .pt2 package that runtime/ loads with `torch._inductor.aoti_load_package`.

It compiles the fp32 checkpoint: torch.export fails on modelopt's fake-quantized
models ("We found a fake tensor in the exported program constant's list", measured
with modelopt 0.47.0 and torch 2.13), so plan.py refuses quantized aoti recipes.
The example batch is 2 (batch 1 specializes the batch dimension, FIELD_NOTES); the
dimensions are Dim.DYNAMIC so one package serves prefill (past 0) and decode.
Targets: cpu here; a GPU target compiles for CUDA where torch sees a device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

from builders.causal_lm.backends import Options, fp32_only


def _dynamic_shapes(entries: list[dict[str, Any]]) -> tuple[Any, ...]:
    from torch.export import Dim

    from builders.causal_lm._cache import SEQ_AXIS

    d = Dim.DYNAMIC
    past = tuple({0: d, SEQ_AXIS: d} for _ in entries)
    return ({0: d, 1: d}, {0: d, 1: d}, {0: d, 1: d}, past)


def build(request: Request, writer: Writer) -> None:
    import torch

    from builders.causal_lm import _cache, _tracefix
    from builders.causal_lm.export import (
        describe,
        example_inputs,
        explicit_cache_module,
        value_info,
    )
    from builders.common.hf import load_for_export
    from builders.common.ort import check_limits

    opts = Options.model_validate(request.options)
    fp32_only(request, opts)
    device = "cpu" if opts.target == "cpu" else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise request.unsupported(f"aoti for {opts.target} needs a CUDA device; this host has none")
    if device == "cuda" and torch.__version__.startswith(CUDA_LOADER_CRASHES):
        raise request.unsupported(
            f"AOTInductor's CUDA package loader crashes with torch {torch.__version__}: a toy "
            "Linear+ReLU package segfaults in aoti_load_package on the H200 (torch 2.11+cu130; "
            "bench/probes/aoti_cuda_probe.py reproduces it); build this model for the GPU with the "
            "inductor backend"
        )
    model = load_for_export(request.inputs["checkpoint"] / "checkpoint")
    entries = _cache.observe(request, model)
    model.to(device)
    meta = describe(model, entries)
    check_limits(request, opts.max_seq_len, meta)
    module = explicit_cache_module(model, entries)
    example = example_inputs(entries, device)
    request.log(f"torch.export + AOTInductor for {device}")
    with torch.no_grad(), _tracefix.traceable(model), _no_empty_constants():
        program = torch.export.export(
            module, example, dynamic_shapes=_dynamic_shapes(entries), strict=False
        )
        path = torch._inductor.aoti_compile_and_package(
            program, package_path=str(writer.path("engine.pt2"))
        )
        _smoke(request, path, opts.max_batch_size, meta, device)
    writer.write_json("io.json", {**meta, **value_info(entries)})
    writer.write_json(
        "engine.json",
        {
            "backend": "aoti",
            "version": torch.__version__,
            "provider": device,
            "file": "engine.pt2",
            "max_batch_size": opts.max_batch_size,
            "max_seq_len": opts.max_seq_len,
        },
    )


# torch releases whose AOTInductor CUDA loader was measured to crash on load (the
# package compiles): such a build is not attempted, it is unsupported here.
CUDA_LOADER_CRASHES = ("2.11.",)


@contextlib.contextmanager
def _no_empty_constants() -> Iterator[None]:
    """Start each cache layer from a zero-length slice of its first keys, not from
    transformers' `torch.tensor([])`: export lifts those empties into zero-size
    constants, and the CUDA package's loader crashed on them (segfault in _load_aoti,
    measured on the H200 with torch 2.11). Slices are graph values, not constants."""
    from transformers.cache_utils import DynamicLayer

    original = DynamicLayer.lazy_initialization

    def lazy(self: Any, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> None:
        original(self, key_states, value_states, *args, **kwargs)
        self.keys, self.values = key_states[..., :0, :], value_states[..., :0, :]

    DynamicLayer.lazy_initialization = lazy
    try:
        yield
    finally:
        DynamicLayer.lazy_initialization = original


def _smoke(request: Request, path: str, batch: int, meta: dict[str, Any], device: str) -> None:
    """A prefill at the largest batch with an empty cache, as the runtime feeds it."""
    import torch

    runner = torch._inductor.aoti_load_package(path)
    ids = torch.zeros(batch, 4, dtype=torch.long, device=device)
    past = [
        torch.zeros(batch, e["shape"][1], 0, e["shape"][3], device=device)
        for e in meta["kv_cache"]["entries"]
    ]
    positions = torch.arange(4, device=device).expand(batch, 4).contiguous()
    logits = runner(ids, torch.ones_like(ids), positions, *past)[0]
    if tuple(logits.shape) != (batch, 4, meta["vocab_size"]) or not logits.isfinite().all():
        raise request.error(f"engine smoke run gave logits of shape {logits.shape}", "kiln bug")

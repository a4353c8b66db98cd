"""export: load the checkpoint with transformers and write ONNX with an explicit KV cache.

The graph's contract, which the runtime relies on:

    inputs   input_ids [batch, seq] int64
             attention_mask [batch, past + seq] int64     (1 = real token, 0 = padding)
             position_ids [batch, seq] int64
             past.<layer>.key / past.<layer>.value [batch, kv_heads, past, head_dim]
    outputs  logits [batch, seq, vocab]
             present.<layer>.key / present.<layer>.value [batch, kv_heads, past + seq, head_dim]

A prefill passes past tensors with past = 0. The example batch is 2 and the example
past is non-empty: with batch 1 the exporter specializes the batch dimension to a
constant (FIELD_NOTES). The legacy TorchScript exporter is used: it is 10-20x
faster than dynamo for these graphs and is the one that handles fake-quantized
models later on.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opset: int = Field(17, ge=17, le=23, description="ONNX opset to export.")
    exporter: str = Field("torchscript", pattern="^torchscript$", description="torch exporter.")


def kv_shape(config: Any) -> tuple[int, int, int]:
    """(layers, kv_heads, head_dim) of the model's cache."""
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return config.num_hidden_layers, getattr(config, "num_key_value_heads", heads), head_dim


def io_names(layers: int) -> tuple[list[str], list[str]]:
    kv = [(i, kind) for i in range(layers) for kind in ("key", "value")]
    inputs = ["input_ids", "attention_mask", "position_ids"] + [f"past.{i}.{k}" for i, k in kv]
    outputs = ["logits"] + [f"present.{i}.{k}" for i, k in kv]
    return inputs, outputs


def _needs_cuda(request: Any) -> bool:
    quantized = request.inputs.get("quantized")
    if quantized is None:
        return False
    return bool(json.loads((quantized / "quantize.json").read_text())["weights"] == "nvfp4")


def build(request: Any, writer: Any) -> None:
    import torch

    from builders._hf import example_inputs, explicit_cache_module, load_causal_lm

    opts = Options.model_validate(request.options)
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    model = load_causal_lm(checkpoint)
    if "quantized" in request.inputs:
        from builders._hf import restore_quantized

        model = restore_quantized(model, request.inputs["quantized"])
    # NVFP4's fake-quant kernels run on CUDA only (builders/quantize.py)
    device = "cuda" if _needs_cuda(request) else "cpu"
    model.to(device)
    layers = model.config.num_hidden_layers
    example = example_inputs(model.config, device)
    inputs, outputs = io_names(layers)
    dynamic = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch", 1: "seq"},
        "logits": {0: "batch", 1: "seq"},
        **{name: {0: "batch", 2: "past"} for name in inputs[3:]},
        **{name: {0: "batch", 2: "total"} for name in outputs[1:]},
    }
    request.log(f"exporting {type(model).__name__} ({layers} layers) to ONNX opset {opts.opset}")
    # The tracer warns about the cache's Python-side bookkeeping (empty-cache checks,
    # padding arithmetic) being frozen into the trace. Those branches are the same
    # for every shape the runtime feeds, and validate checks the graph against the
    # reference at many shapes, so the warnings are noise here.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(
                explicit_cache_module(model),
                example,
                str(writer.path("model.onnx")),
                input_names=inputs,
                output_names=outputs,
                dynamic_axes=dynamic,
                opset_version=opts.opset,
                dynamo=False,
            )
        except Exception as exc:
            if not _needs_cuda(request):
                raise
            # NVFP4: modelopt needs opset 23 for FP4 tensors (api_facts 2); the
            # TorchScript exporter, the only one that exports fake-quant models, stops at 20
            raise request.unsupported(
                f"the TorchScript exporter cannot write this NVFP4 graph at opset "
                f"{opts.opset}: {type(exc).__name__}: {str(exc)[:300]}"
            ) from None
    meta = describe(model)
    if "quantized" in request.inputs:
        done = json.loads((request.inputs["quantized"] / "quantize.json").read_text())
        meta["quantization"] = {k: done[k] for k in ("weights", "kv_cache", "config", "device")}
    writer.write_json("export.json", meta)


def describe(model: Any) -> dict[str, Any]:
    """What the runtime needs to know about the graph's model: cache layout, sizes."""
    layers, kv_heads, head_dim = kv_shape(model.config)
    return {
        "architecture": type(model).__name__,
        "model_type": model.config.model_type,
        "kv_cache": {
            "layers": layers,
            "kv_heads": kv_heads,
            "head_dim": head_dim,
            "dtype": "float32",
            "layout": ["batch", "kv_heads", "seq", "head_dim"],
            "past": "past.{layer}.{kind}",
            "present": "present.{layer}.{kind}",
        },
        "vocab_size": model.config.vocab_size,
        "max_position_embeddings": model.config.max_position_embeddings,
    }


def value_info(layers: int) -> dict[str, list[dict[str, Any]]]:
    """The I/O contract as onnx.py's io.json writes it, for engines built without ONNX."""
    inputs, outputs = io_names(layers)
    kv = ["batch", "kv_heads", "past", "head_dim"]
    ins = [{"name": n, "dtype": "int64", "shape": ["batch", "seq"]} for n in inputs[:3]]
    ins[1]["shape"] = ["batch", "total"]
    ins += [{"name": n, "dtype": "float32", "shape": kv} for n in inputs[3:]]
    outs = [{"name": "logits", "dtype": "float32", "shape": ["batch", "seq", "vocab"]}]
    total = ["batch", "kv_heads", "total", "head_dim"]
    outs += [{"name": n, "dtype": "float32", "shape": total} for n in outputs[1:]]
    return {"inputs": ins, "outputs": outs}

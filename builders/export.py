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

import warnings
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opset: int = Field(17, ge=17, le=23, description="ONNX opset to export.")
    exporter: str = Field("torchscript", pattern="^torchscript$", description="torch exporter.")
    hidden: str = Field(
        "none",
        pattern="^(none|mtp|eagle3|dflash|dspark)$",
        description="Also output the hidden states this drafter reads, as output 'hidden' "
        "(builders/_capture.py); 'none' keeps the ordinary graph.",
    )


def cache_shapes(model: Any) -> list[tuple[int, int, int, int]]:
    """(key heads, key dim, value heads, value dim) per layer, read from one forward:
    some models cache compressed or unequal keys and values (DeepseekV3, FIELD_NOTES)."""
    import torch

    with torch.no_grad():
        out = model(input_ids=torch.ones(1, 1, dtype=torch.long), use_cache=True)
    return [
        (layer.keys.shape[1], layer.keys.shape[3], layer.values.shape[1], layer.values.shape[3])
        for layer in out.past_key_values.layers
    ]


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


def _capture(request: Any, opts: Options, model: Any) -> list[str]:
    """The capture points of opts.hidden, from the drafter's config (input 'drafter')."""
    import json

    from builders._capture import capture_points

    if opts.hidden == "none":
        return []
    drafter: dict[str, Any] = {}
    if "drafter" in request.inputs:
        drafter = json.loads((request.inputs["drafter"] / "checkpoint" / "config.json").read_text())
    try:
        return capture_points(opts.hidden, model.config.to_dict(), drafter)
    except ValueError as exc:
        raise request.error(str(exc), "fix the drafter checkpoint's layer ids") from None


def build(request: Any, writer: Any) -> None:
    import torch
    from transformers import DynamicCache

    from builders._capture import install_hooks
    from builders._hf import load_causal_lm

    opts = Options.model_validate(request.options)
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    model = load_causal_lm(checkpoint)
    if "adapter" in request.inputs:  # a LoRA companion is merged here, at export
        from builders._adapter import with_adapter

        model = with_adapter(request, model, merge=True)
    shapes = cache_shapes(model)
    layers, kv_heads, head_dim = len(shapes), shapes[0][0], shapes[0][1]
    points = _capture(request, opts, model)
    seen = install_hooks(model, points) if points else {}

    class WithExplicitCache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(
            self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any
        ) -> Any:
            cache = DynamicCache(config=model.config)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=cache,
                use_cache=True,
            )
            present = [
                t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)
            ]
            hidden = [torch.cat([seen[p] for p in points], dim=-1)] if points else []
            return (out.logits, *present, *hidden)

    batch, past_len, seq = 2, 3, 4
    example = (
        torch.ones(batch, seq, dtype=torch.long),
        torch.ones(batch, past_len + seq, dtype=torch.long),
        torch.arange(past_len, past_len + seq).expand(batch, seq).contiguous(),
        *[
            torch.zeros(batch, heads, past_len, dim)
            for k_heads, k_dim, v_heads, v_dim in shapes
            for heads, dim in ((k_heads, k_dim), (v_heads, v_dim))
        ],
    )
    inputs, outputs = io_names(layers)
    outputs += ["hidden"] if points else []
    dynamic = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch", 1: "seq"},
        "logits": {0: "batch", 1: "seq"},
        **{name: {0: "batch", 2: "past"} for name in inputs[3:]},
        **{name: {0: "batch", 2: "total"} for name in outputs[1:] if name != "hidden"},
        **({"hidden": {0: "batch", 1: "seq"}} if points else {}),
    }
    request.log(f"exporting {type(model).__name__} ({layers} layers) to ONNX opset {opts.opset}")
    # The tracer warns about the cache's Python-side bookkeeping (empty-cache checks,
    # padding arithmetic) being frozen into the trace. Those branches are the same
    # for every shape the runtime feeds, and validate checks the graph against the
    # reference at many shapes, so the warnings are noise here.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            WithExplicitCache(),
            example,
            str(writer.path("model.onnx")),
            input_names=inputs,
            output_names=outputs,
            dynamic_axes=dynamic,
            opset_version=opts.opset,
            dynamo=False,
        )
    writer.write_json(
        "export.json",
        {
            "architecture": type(model).__name__,
            "model_type": model.config.model_type,
            "kv_cache": {
                "layers": layers,
                "kv_heads": kv_heads,
                "head_dim": head_dim,
                "dtype": "float32",
                "layout": ["batch", "kv_heads", "seq", "head_dim"],
                "value_heads": shapes[0][2],
                "value_dim": shapes[0][3],
                "past": "past.{layer}.{kind}",
                "present": "present.{layer}.{kind}",
            },
            "vocab_size": model.config.vocab_size,
            "hidden": points,
            "max_position_embeddings": model.config.max_position_embeddings,
        },
    )

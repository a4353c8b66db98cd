"""export: load the checkpoint with transformers and write ONNX with an explicit KV cache.

The graph's contract, which the runtime relies on:

    inputs   input_ids [batch, seq] int64
             attention_mask [batch, past + seq] int64     (1 = real token, 0 = padding)
             position_ids [batch, seq] int64
             past.<layer>.key / past.<layer>.value [batch, heads, past, dim]
    outputs  logits [batch, seq, vocab]
             present.<layer>.key / present.<layer>.value [batch, heads, past + seq, dim]

heads and dim are observed per layer and per tensor from one forward pass
(builders/_cache.py) and recorded in export.json's kv_cache.entries; MLA models
cache keys and values of different widths.

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
    task: str = Field("text-generation", description="The recipe's task (kiln.schema.TASKS).")
    hidden: str = Field(
        "none",
        pattern="^(none|mtp|eagle3|dflash|dspark)$",
        description="Also output the hidden states this drafter reads, as output 'hidden' "
        "(builders/_capture.py); 'none' keeps the ordinary graph.",
    )


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


def io_names(entries: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    inputs = ["input_ids", "attention_mask", "position_ids"] + [e["past"] for e in entries]
    outputs = ["logits"] + [e["present"] for e in entries]
    return inputs, outputs


def build(request: Any, writer: Any) -> None:
    import torch

    from builders import _cache, _tracefix
    from builders._capture import install_hooks
    from builders._hf import load_for_export

    opts = Options.model_validate(request.options)
    if opts.task != "text-generation":
        from builders.unsupported import Unsupported, task_not_built

        raise Unsupported(task_not_built(opts.task))
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    model = load_for_export(checkpoint)
    if "adapter" in request.inputs:  # a LoRA companion is merged here, at export
        from builders._adapter import with_adapter

        model = with_adapter(request, model, merge=True)
    entries = _cache.observe(model)
    points = _capture(request, opts, model)
    seen = install_hooks(model, points) if points else {}

    class WithExplicitCache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(
            self, input_ids: Any, attention_mask: Any, position_ids: Any, *past: Any
        ) -> Any:
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                cache=_cache.full_cache(past, entries),
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
        *_cache.example(entries, batch, past_len),
    )
    inputs, outputs = io_names(entries)
    outputs += ["hidden"] if points else []
    dynamic = {
        "input_ids": {0: "batch", 1: "seq"},
        "attention_mask": {0: "batch", 1: "total"},
        "position_ids": {0: "batch", 1: "seq"},
        "logits": {0: "batch", 1: "seq"},
        **{name: {0: "batch", _cache.SEQ_AXIS: "past"} for name in inputs[3:]},
        **{
            name: {0: "batch", _cache.SEQ_AXIS: "total"} for name in outputs[1:] if name != "hidden"
        },
        **({"hidden": {0: "batch", 1: "seq"}} if points else {}),
    }
    layers = model.config.get_text_config(decoder=True).num_hidden_layers
    request.log(f"exporting {type(model).__name__} ({layers} layers) to ONNX opset {opts.opset}")
    # The tracer warns about the cache's Python-side bookkeeping (empty-cache checks,
    # padding arithmetic) being frozen into the trace. Those branches are the same
    # for every shape the runtime feeds, and validate checks the graph against the
    # reference at many shapes, so the warnings are noise here.
    with torch.no_grad(), warnings.catch_warnings(), _tracefix.traceable(model):
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
    writer.write_json("export.json", {**describe(model, entries), "hidden": points})


def describe(model: Any, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """export.json: what the runtime needs to know about the graph. `entries` is the
    cache contract per tensor; kv_heads/head_dim stay for readers of uniform caches."""
    shapes = {(e["shape"][1], e["shape"][3]) for e in entries}
    uniform = shapes.pop() if len(shapes) == 1 else (None, None)
    config = model.config
    return {
        "architecture": type(model).__name__,
        "model_type": config.model_type,
        "kv_cache": {
            "layers": len({e["layer"] for e in entries}),
            "kv_heads": uniform[0],
            "head_dim": uniform[1],
            "dtype": "float32",
            "layout": ["batch", "kv_heads", "seq", "head_dim"],
            "past": "past.{layer}.{kind}",
            "present": "present.{layer}.{kind}",
            "entries": entries,
        },
        "vocab_size": config.get_text_config(decoder=True).vocab_size,
        "max_position_embeddings": config.get_text_config(decoder=True).max_position_embeddings,
    }

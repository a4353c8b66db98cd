"""onnx: turn the exported graph into the one the engine builds from.

It folds constants and removes dead nodes (onnxscript's optimizer roughly halves
the node count of a legacy export), checks the model with full shape inference,
checks the I/O contract the runtime relies on, and records that contract in
io.json.

Quantized graphs (modelopt's Q/DQ) come in two forms (`qdq`): `standard`, where the
TensorRT-only ops are rewritten to standard ONNX and weights are stored quantized
(builders/causal_lm/_qdq.py), for onnxruntime; and `tensorrt`, modelopt's own ops kept as they
are, for TensorRT's ONNX parser, which registers them by name (api_facts 1).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_DTYPES = {1: "float32", 7: "int64", 10: "float16", 16: "bfloat16"}
# The optimizer folds constants up to these sizes; weights are larger than its defaults.
_FOLD_LIMIT = 1 << 28


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    optimize: bool = Field(True, description="Run onnxscript's graph optimizer.")
    qdq: str = Field(
        pattern="^(none|standard|tensorrt)$",
        description="How a quantized graph writes Q/DQ: standard ONNX, or TensorRT's own "
        "ops; 'none' for an fp32 graph.",
    )
    task: str = Field(pattern="^text-generation$", description="The recipe's task.")


def _value_info(values: Any) -> list[dict[str, Any]]:
    out = []
    for v in values:
        t = v.type.tensor_type
        shape = [d.dim_param or d.dim_value for d in t.shape.dim]
        out.append(
            {"name": v.name, "dtype": _DTYPES.get(t.elem_type, str(t.elem_type)), "shape": shape}
        )
    return out


def build(request: Any, writer: Any) -> None:
    import onnx

    opts = Options.model_validate(request.options)
    source = request.inputs["export"]
    exported = json.loads((source / "export.json").read_text())
    model = onnx.load(str(source / "model.onnx"))
    before = len(model.graph.node)
    if opts.optimize:
        import onnxscript.optimizer

        # quantized graphs: fold the weight subgraphs around the Q/DQ ops too
        limits = {"input_size_limit": _FOLD_LIMIT, "output_size_limit": _FOLD_LIMIT}
        model = onnxscript.optimizer.optimize(model, **(limits if opts.qdq != "none" else {}))
    if opts.qdq == "standard":
        model = _standard(request, model)
    # TensorRT's own ops have no ONNX schema; the checker cannot infer through them
    onnx.checker.check_model(model, full_check=opts.qdq != "tensorrt")
    inputs, outputs = _value_info(model.graph.input), _value_info(model.graph.output)
    entries = exported["kv_cache"]["entries"]
    expected_in = ["input_ids", "attention_mask", "position_ids"] + [e["past"] for e in entries]
    names = [v["name"] for v in inputs]
    if names != expected_in:
        raise request.error(
            f"the exported graph's inputs {names} break the KV-cache contract",
            "this is a kiln bug in builders/causal_lm/export.py; please report it",
        )
    onnx.save(model, str(writer.path("model.onnx")))
    if opts.qdq != "none":
        from builders.causal_lm._qdq import trt_ops

        exported["qdq"] = {"form": opts.qdq, "trt_ops": trt_ops(model)}
    writer.write_json("io.json", {**exported, "inputs": inputs, "outputs": outputs})
    request.log(f"{before} -> {len(model.graph.node)} nodes, checked")


def _standard(request: Any, model: Any) -> Any:
    import onnxscript.optimizer

    from builders.causal_lm._qdq import NoStandardForm, fold_weight_quantization, to_standard

    try:
        model, rewritten = to_standard(model)
    except NoStandardForm as exc:
        raise request.unsupported(
            f"onnxruntime cannot run this precision: {exc}; it needs TensorRT "
            "(build.backend: tensorrt)"
        ) from None
    folded = fold_weight_quantization(model)
    request.log(f"rewrote {rewritten or 'no'} TensorRT ops; {folded} weights stored quantized")
    return onnxscript.optimizer.optimize(model)

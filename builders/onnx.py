"""onnx: turn the exported graph into the one the engine builds from.

It folds constants and removes dead nodes (onnxscript's optimizer roughly halves
the node count of a legacy export), checks the model with full shape inference,
checks the I/O contract the runtime relies on, and records that contract in
io.json. Quantized precisions will rewrite TensorRT-only Q/DQ ops here too.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_DTYPES = {1: "float32", 7: "int64", 10: "float16", 16: "bfloat16"}


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    optimize: bool = Field(True, description="Run onnxscript's graph optimizer.")


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

        model = onnxscript.optimizer.optimize(model)
    onnx.checker.check_model(model, full_check=True)
    inputs, outputs = _value_info(model.graph.input), _value_info(model.graph.output)
    entries = exported["kv_cache"]["entries"]
    expected_in = ["input_ids", "attention_mask", "position_ids"] + [e["past"] for e in entries]
    names = [v["name"] for v in inputs]
    if names != expected_in:
        raise request.error(
            f"the exported graph's inputs {names} break the KV-cache contract",
            "this is a kiln bug in builders/export.py; please report it",
        )
    onnx.save(model, str(writer.path("model.onnx")))
    writer.write_json("io.json", {**exported, "inputs": inputs, "outputs": outputs})
    request.log(f"{before} -> {len(model.graph.node)} nodes, checked")

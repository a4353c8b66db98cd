"""onnx (text-classification): optimize, check, and record the graph's I/O contract."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    optimize: bool = Field(True, description="Run onnxscript's graph optimizer.")
    task: str = Field(pattern="^text-classification$", description="The recipe's task.")


def build(request: Any, writer: Any) -> None:
    import onnx

    from builders.onnx import _value_info

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
    names = [v["name"] for v in inputs]
    if names != exported["graph_inputs"] or [v["name"] for v in outputs] != ["logits"]:
        raise request.error(
            f"the exported graph's inputs {names} break the classifier contract",
            "this is a kiln bug in builders/classify/export.py; please report it",
        )
    onnx.save(model, str(writer.path("model.onnx")))
    writer.write_json("io.json", {**exported, "inputs": inputs, "outputs": outputs})
    request.log(f"{before} -> {len(model.graph.node)} nodes, checked")

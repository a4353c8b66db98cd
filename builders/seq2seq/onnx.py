"""onnx (text2text-generation, automatic-speech-recognition): optimize and check both
graphs, record their I/O."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from builders.seq2seq import TASK_PATTERN

GRAPHS = ("encoder", "decoder")


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    optimize: bool = Field(True, description="Run onnxscript's graph optimizer.")
    task: str = Field(pattern=TASK_PATTERN, description="The recipe's task.")
    qdq: str = Field(pattern="^none$", description="fp32 graphs only: no Q/DQ to write.")


def build(request: Any, writer: Any) -> None:
    import onnx

    from builders.causal_lm.onnx import _value_info

    opts = Options.model_validate(request.options)
    source = request.inputs["export"]
    exported = json.loads((source / "export.json").read_text())
    expected = exported["inputs"]  # the contract the export wrote down, per graph
    graphs = {}
    for name in GRAPHS:
        model = onnx.load(str(source / f"{name}.onnx"))
        if opts.optimize:
            import onnxscript.optimizer

            model = onnxscript.optimizer.optimize(model)
        onnx.checker.check_model(model, full_check=True)
        inputs, outputs = _value_info(model.graph.input), _value_info(model.graph.output)
        if [v["name"] for v in inputs] != expected[name]:
            raise request.error(
                f"the exported {name} graph's inputs break the seq2seq contract",
                "this is a kiln bug in builders/seq2seq/export.py; please report it",
            )
        onnx.save(model, str(writer.path(f"{name}.onnx")))
        graphs[name] = {"file": f"{name}.onnx", "inputs": inputs, "outputs": outputs}
    writer.write_json("io.json", {**exported, "graphs": graphs})
    request.log("encoder and decoder optimized and checked")

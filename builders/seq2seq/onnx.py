"""onnx (text2text-generation, automatic-speech-recognition): optimize and check both
graphs, record their I/O."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from builders.seq2seq import TASK_PATTERN

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

GRAPHS = ("encoder", "decoder")


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    optimize: bool = Field(True, description="Run onnxscript's graph optimizer.")
    task: str = Field(pattern=TASK_PATTERN, description="The recipe's task.")
    qdq: str = Field(pattern="^none$", description="fp32 graphs only: no Q/DQ to write.")


def build(request: Request, writer: Writer) -> None:
    import onnx

    from builders.common import graph

    opts = Options.model_validate(request.options)
    source = request.inputs["export"]
    exported = json.loads((source / "export.json").read_text())
    expected = exported["inputs"]  # the contract the export wrote down, per graph
    graphs = {}
    for name in GRAPHS:
        model = onnx.load(str(source / f"{name}.onnx"))
        if opts.optimize:
            model = graph.tidy(model)
        inputs, outputs = graph.check(model)
        if [v["name"] for v in inputs] != expected[name]:
            raise request.error(
                f"the exported {name} graph's inputs break the seq2seq contract",
                "this is a kiln bug in builders/seq2seq/export.py; please report it",
            )
        onnx.save(model, str(writer.path(f"{name}.onnx")))
        graphs[name] = {"file": f"{name}.onnx", "inputs": inputs, "outputs": outputs}
    writer.write_json("io.json", {**exported, "graphs": graphs})
    request.log("encoder and decoder optimized and checked")

"""onnx (feature-extraction): optimize, check, and record the graph's I/O contract."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from builders.common import encoder

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    optimize: bool = Field(True, description="Run onnxscript's graph optimizer.")
    task: str = Field(pattern="^feature-extraction$", description="The recipe's task.")
    qdq: str = Field(pattern="^none$", description="fp32 graphs only: no Q/DQ to write.")


def build(request: Request, writer: Writer) -> None:
    opts = Options.model_validate(request.options)
    encoder.check_graph(request, writer, opts.optimize, "last_hidden_state", "embed")

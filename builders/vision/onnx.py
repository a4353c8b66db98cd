"""onnx (image-features): optimize, check, and record the graph's I/O contract."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from builders.common import encoder

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    optimize: bool = Field(True, description="Run onnxscript's graph optimizer.")
    task: str = Field(pattern="^image-features$", description="The step's task.")


def build(request: Request, writer: Writer) -> None:
    opts = Options.model_validate(request.options)
    encoder.check_graph(request, writer, opts.optimize, "image_features", "vision")

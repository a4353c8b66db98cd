"""engine (image-features): onnxruntime's offline optimization, saved, and a smoke run
on one image (the graph takes one a run), whose features must be [tokens_per_image,
hidden] and finite."""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from builders.common import ort

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: str = Field(pattern="^onnxruntime$", description="Engine backend.")
    task: str = Field(pattern="^image-features$", description="The step's task.")
    target: str = Field(
        pattern="^cpu$", description="Build target; the vision program builds for cpu."
    )


def build(request: Request, writer: Writer) -> None:
    import numpy as np

    opts = Options.model_validate(request.options)
    source = request.inputs["onnx"]
    io = json.loads((source / "io.json").read_text())
    provider = ort.provider(request, opts.target)
    session = ort.optimize(source / "model.onnx", writer.path("engine.onnx"), provider)
    height, width = io["image_size"]
    feeds = {"pixel_values": np.zeros((1, 3, height, width), np.float32)}
    rows = io["tokens_per_image"]
    ort.smoke(request, session, "image_features", feeds, (rows, io["hidden_size"]))
    shutil.copyfile(source / "io.json", writer.path("io.json"))
    ort.engine_json(writer, provider, 1, 0, file="engine.onnx")

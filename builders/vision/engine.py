"""engine (image-features): onnxruntime's offline optimization, saved, and a smoke run
on one image (the graph takes one a run), whose features must be [tokens_per_image,
hidden] and finite."""

from __future__ import annotations

import json
import shutil
from typing import TYPE_CHECKING, Any

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
    if io.get("layout") == "grid":  # Qwen2-VL style: a 4 x 6 patch grid, 6 tokens
        feeds, rows = _grid_feeds(io["grid"], (1, 4, 6))
        feeds = {k: v for k, v in feeds.items() if k in io["graph_inputs"]}
    elif io.get("layout") == "crops":  # one picture's 3 crops (grey, unmasked)
        height, width = io["image_size"]
        feeds = {
            "pixel_values": np.full((1, 3, 3, height, width), 0.5, np.float32),
            "pixel_attention_mask": np.ones((1, 3, height, width), np.int64),
        }
        feeds = {k: v for k, v in feeds.items() if k in io["graph_inputs"]}  # InternVL: no mask
        rows = 3 * io["tokens_per_image"]
    else:
        height, width = io["image_size"]
        feeds = {"pixel_values": np.zeros((1, 3, height, width), np.float32)}
        rows = io["tokens_per_image"]
    ort.smoke(request, session, "image_features", feeds, (rows, io["hidden_size"]))
    shutil.copyfile(source / "io.json", writer.path("io.json"))
    ort.engine_json(writer, provider, 1, 0, file="engine.onnx")


def _grid_feeds(grid: dict[str, int], thw: tuple[int, int, int]) -> tuple[dict[str, Any], int]:
    """A grid vision program's inputs for one picture of patch grid `thw` (zero
    pixels; the index inputs as runtime/mrope.py makes them), and its feature rows."""
    import numpy as np

    from runtime.mrope import tokens_of, vision_inputs

    merge, patch = grid["spatial_merge_size"], grid["patch_size"]
    width = grid["channels"] * grid["temporal_patch_size"] * patch * patch
    pixels = np.zeros((thw[0] * thw[1] * thw[2], width), np.float32)
    side = grid.get("position_grid", 0)  # Qwen3-VL's learned positions' taps
    index = vision_inputs([thw], merge, grid["window_size"], patch, side)
    return {"pixel_values": pixels, **index}, tokens_of(thw, merge)

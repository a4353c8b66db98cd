"""export (image-features): the checkpoint's vision tower and projector as one ONNX
graph, pixel values -> the image features its language model reads at the image
tokens (builders/vision/__init__.py's contract), through transformers' own
`get_image_features`, so the feature layer, the CLS drop and the projector are the
model's choices, not kiln's.

export.json records what the runtime needs besides the graph: the image size the
processor makes, the features' rows per image and width, the image token id, and the
text the checkpoint's processor writes for one image: the placeholder the chat template
leaves for an image part (`image_placeholder`) and what the processor replaces it with
before tokenizing (`image_sequence`: LLaVA's 16 image tokens; Gemma 3's image tokens
between <start_of_image> and <end_of_image>, set off by blank lines). The runtime
expands the rendered chat the same way, on text, so the tokenizer merges what the
processor's tokenizer merges.
"""

from __future__ import annotations

import json
import warnings
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from builders.vision import _crops, _grid

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

# Architectures whose image features are a fixed number of rows per picture of one
# fixed size (CLIP- and SigLIP-style towers behind a projector): the graph's contract.
FIXED_SIZE = ("LlavaForConditionalGeneration", "Gemma3ForConditionalGeneration")


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    opset: int = Field(17, ge=17, le=23, description="ONNX opset to export.")
    exporter: str = Field("torchscript", pattern="^torchscript$", description="torch exporter.")
    task: str = Field(pattern="^image-features$", description="The step's task.")


def image_size(checkpoint: Any) -> tuple[int, int]:
    """(height, width) of the pixel values the checkpoint's processor makes: its crop,
    else its resize target."""
    config = json.loads((checkpoint / "preprocessor_config.json").read_text())
    size = config.get("crop_size") if config.get("do_center_crop", True) else None
    size = size or config.get("size")
    if isinstance(size, int):
        return size, size
    if isinstance(size, dict) and "height" in size:
        return int(size["height"]), int(size["width"])
    if isinstance(size, dict) and "shortest_edge" in size:
        return int(size["shortest_edge"]), int(size["shortest_edge"])
    raise ValueError(f"preprocessor_config.json: no fixed image size in {size!r}")


def image_text(processor: Any, rows: int) -> tuple[str, str]:
    """(placeholder, sequence): the text a chat template writes for one image part, and
    the text the processor puts in its place (Gemma3Processor's full_image_sequence,
    else the image token once per feature row, as LlavaProcessor writes it)."""
    placeholder = str(processor.image_token)
    sequence = getattr(processor, "full_image_sequence", None)
    return placeholder, str(sequence) if sequence is not None else placeholder * rows


def checked_image_text(checkpoint: Any, rows: int, token: int, size: tuple[int, int]) -> Any:
    """image_text of the checkpoint's processor, checked against the processor itself: its
    ids for one image's placeholder are the tokenizer's ids of the sequence, with `rows`
    image tokens (so the runtime's expansion is the processor's, not a guess)."""
    from PIL import Image
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(checkpoint, backend="pil")
    placeholder, sequence = image_text(processor, rows)
    picture = Image.new("RGB", (size[1], size[0]), (128, 128, 128))
    made = processor(images=[picture], text=placeholder, return_tensors="np")["input_ids"][0]
    ours = processor.tokenizer(sequence, add_special_tokens=False)["input_ids"]
    tail = [int(t) for t in made[len(made) - len(ours) :]]
    if tail != list(ours) or int((made == token).sum()) != rows:
        raise ValueError(
            f"the processor writes {made.tolist()} for one image; expanding "
            f"{placeholder!r} to {sequence!r} gives {list(ours)}"
        )
    return placeholder, sequence


def build(request: Request, writer: Writer) -> None:
    import torch

    from builders.common.hf import IMAGE_TEXT, load_causal_lm

    opts = Options.model_validate(request.options)
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    model = load_causal_lm(checkpoint, IMAGE_TEXT)
    name = type(model).__name__
    if name in _grid.ARCHITECTURES:  # pictures of any size, each its own grid
        return _export_grid(request, writer, model, checkpoint, opts.opset)
    if name in _crops.ARCHITECTURES:  # pictures cut into as many crops as they need
        return _export_crops(request, writer, model, checkpoint, opts.opset)
    if name not in FIXED_SIZE:
        built = ", ".join((*FIXED_SIZE, *_grid.ARCHITECTURES, *_crops.ARCHITECTURES))
        raise request.unsupported(
            f"{name}'s vision program is not exported by kiln yet (built: {built})"
        )
    height, width = image_size(checkpoint)

    class Vision(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, pixel_values: Any) -> Any:
            out = self.model.model.get_image_features(pixel_values=pixel_values)
            feats = getattr(out, "pooler_output", out)
            if isinstance(feats, (list, tuple)):
                feats = torch.cat(list(feats), dim=0)
            return feats.reshape(-1, feats.shape[-1])

    # One image per run: transformers hands the features back as a list per image
    # (list(features), traced as a Split of a fixed count), so the graph takes one.
    example = torch.zeros(1, 3, height, width)
    with torch.no_grad():
        rows, hidden = Vision()(example).shape
    request.log(f"exporting {name}'s vision tower ({height} x {width} images) to ONNX")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's frozen-branch warnings: shapes are fixed
        torch.onnx.export(
            Vision().eval(),
            (example,),
            str(writer.path("model.onnx")),
            input_names=["pixel_values"],
            output_names=["image_features"],
            opset_version=opts.opset,
            dynamo=False,
        )
    config = model.config
    placeholder, sequence = checked_image_text(
        checkpoint, int(rows), int(config.image_token_id), (height, width)
    )
    writer.write_json(
        "export.json",
        {
            "task": "image-features",
            "architecture": name,
            "model_type": config.model_type,
            "graph_inputs": ["pixel_values"],
            "image_size": [height, width],
            "tokens_per_image": int(rows),
            "hidden_size": int(hidden),
            "image_token_id": int(config.image_token_id),
            "image_placeholder": placeholder,
            "image_sequence": sequence,
        },
    )


def _export_grid(request: Request, writer: Writer, model: Any, checkpoint: Any, opset: int) -> None:
    """A Qwen2-VL-style vision program (builders/vision/_grid.py) and its export.json: the
    placeholder the chat template writes for a picture is the image token once, which
    the processor repeats once per feature row of that picture (checked here on a
    picture of a grid other than a square)."""
    from PIL import Image

    from builders.common.hf import load_processor

    request.log(f"exporting {type(model).__name__}'s vision tower (any grid) to ONNX")
    meta = _grid.export(request, writer, model, opset)
    config = model.config
    processor = load_processor(checkpoint)
    token, placeholder = int(config.image_token_id), str(processor.image_token)
    picture = Image.new("RGB", (84, 56), (128, 128, 128))
    made = processor(images=[picture], text=placeholder, return_tensors="np")
    t, h, w = (int(x) for x in made["image_grid_thw"][0])
    rows = t * h * w // config.vision_config.spatial_merge_size**2
    ours = processor.tokenizer(placeholder * rows, add_special_tokens=False)["input_ids"]
    if made["input_ids"][0].tolist() != list(ours):
        raise request.error(
            f"the processor writes {made['input_ids'][0].tolist()} for one picture of grid "
            f"{(t, h, w)}; repeating {placeholder!r} {rows} times gives {list(ours)}",
            "this is a kiln bug in builders/vision/export.py; please report it",
        )
    writer.write_json(
        "export.json",
        {
            "task": "image-features",
            "architecture": type(model).__name__,
            "model_type": config.model_type,
            **meta,
            "image_token_id": token,
            "vision_start_token_id": int(config.vision_start_token_id),
            "image_placeholder": placeholder,
            "image_sequence": placeholder,  # once per feature row of the picture
        },
    )


def _export_crops(
    request: Request, writer: Writer, model: Any, checkpoint: Any, opset: int
) -> None:
    """A crops vision program (Idefics3, InternVL: builders/vision/_crops.py) and its
    export.json: the placeholder is the chat template's <image> (InternVL's
    <IMG_CONTEXT>), which the runtime replaces by each picture's sequence for its crop
    grid (checked against the processor there)."""
    name = type(model).__name__
    request.log(f"exporting {name}'s vision tower (any crop count) to ONNX")
    meta = _crops.export(request, writer, model, opset)
    placeholder, sequence = _crops.checked_image_text(
        request, checkpoint, meta["tokens_per_image"], name
    )
    config = model.config
    writer.write_json(
        "export.json",
        {
            "task": "image-features",
            "architecture": type(model).__name__,
            "model_type": config.model_type,
            **meta,
            "image_token_id": int(config.image_token_id),
            "image_placeholder": placeholder,
            "image_sequence": sequence,  # an unsplit picture's; runtime/crops_vlm.py
        },
    )

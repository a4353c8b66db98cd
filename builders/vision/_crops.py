"""An Idefics3-style vision program (SmolVLM): the crops of one picture -> its image
features after the connector, in one ONNX graph whose crop count is dynamic.

Idefics3ImageProcessor cuts a picture into crops of the tower's image size row by row
plus a global view (runtime/images.py idefics3_crops), so pictures of other aspect
ratios have other crop counts. transformers' get_image_features drops all-zero
(padding) crops, turns the processor's pixel mask into a patch mask, runs the tower and
the connector (pixel shuffle, then the projection) on every crop at once, and splits
the result per prompt with .tolist(), which the TorchScript tracer would freeze at the
example's count: the graph's module is get_image_features without that split (one
picture a run; its rows are that picture's, crop after crop). torch.bucketize, with
which the tower's embeddings place a crop's patches, has no ONNX form in the legacy
exporter: it is swapped during the export for the same count of boundaries at or below
each value (its right=True rule), and an int torch.full is given its dtype.

    inputs   pixel_values          [1, crops, 3, S, S] float32  (runtime/images.py)
             pixel_attention_mask  [1, crops, S, S] int64       (1: a real pixel)
    outputs  image_features        [real crops * tokens_per_crop, hidden] float32

The export checks the graph's module against transformers' own get_image_features on
pictures of several crop counts before anything is written, and the processor's prompt
for each against runtime/crops_vlm.py's expansion of the placeholder. It is traced with
whole pixel masks: every crop the processor makes is S x S, so a real crop's mask is
all ones (a padding crop, all zeros, is dropped before the tower).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

ARCHITECTURES = ("Idefics3ForConditionalGeneration",)
INPUTS = ["pixel_values", "pixel_attention_mask"]
CHECKED_CROPS = (1, 3, 5)  # one unsplit picture, 2 x 1 + 1 and 2 x 2 + 1
EXAMPLE_CROPS = 3
# (width, height) of pictures whose prompts are checked against the processor: wide,
# tall and square pictures (at SmolVLM's sizes, other grids)
CHECKED_PICTURES = ((64, 48), (20, 60), (90, 30), (32, 32))


def vision_module(model: Any) -> Any:
    """get_image_features of one picture's crops, without the split per prompt."""
    import torch

    inner = model.model
    patch = int(model.config.vision_config.patch_size)

    class Crops(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, pixel_values: Any, pixel_attention_mask: Any) -> Any:
            _, _, channels, height, width = pixel_values.shape
            flat = pixel_values.reshape(-1, channels, height, width)
            real = (flat == 0.0).sum(dim=(-1, -2, -3)) != channels * height * width
            flat = flat[real]
            mask = pixel_attention_mask.reshape(-1, height, width)[real]
            grid = mask.reshape(-1, height // patch, patch, width // patch, patch)
            patches = grid.sum(dim=(2, 4)) > 0
            states = self.inner.vision_model(
                pixel_values=flat, patch_attention_mask=patches
            ).last_hidden_state
            features = self.inner.connector(states)
            return features.reshape(-1, features.shape[-1])

    return Crops().eval()


@contextlib.contextmanager
def traceable_bucketize() -> Iterator[None]:
    """torch.bucketize(x, boundaries, right=True) as the count of boundaries <= x, and
    torch.full of an int fill given its dtype (int64, which torch infers and the legacy
    exporter does not: the embeddings' position ids came out float, which Gather
    refuses), while the embeddings run."""
    import torch

    bucketize, full = torch.bucketize, torch.full

    def counted(values: Any, boundaries: Any, *, right: bool = False, **kw: Any) -> Any:
        if not right or kw:
            return bucketize(values, boundaries, right=right, **kw)
        return (boundaries <= values.unsqueeze(-1)).to(torch.int64).sum(dim=-1)

    def typed_full(size: Any, fill_value: Any, **kw: Any) -> Any:
        if isinstance(fill_value, int) and not isinstance(fill_value, bool):
            kw.setdefault("dtype", torch.int64)
        return full(size, fill_value, **kw)

    torch.bucketize, torch.full = counted, typed_full
    try:
        yield
    finally:
        torch.bucketize, torch.full = bucketize, full


def example(crops: int, side: int, seed: int = 0) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    pixels = torch.rand(1, crops, 3, side, side, generator=generator) * 2 - 1
    return pixels, torch.ones(1, crops, side, side, dtype=torch.long)


def check(request: Request, model: Any, module: Any, side: int) -> None:
    """The module, run with the export's swaps (traceable_bucketize), equals
    get_image_features, run without them, on pictures of CHECKED_CROPS crops."""
    import torch

    for crops in CHECKED_CROPS:
        pixels, mask = example(crops, side, seed=crops)
        with torch.no_grad():
            theirs = model.model.get_image_features(
                pixel_values=pixels, pixel_attention_mask=mask
            ).pooler_output[0]
            with traceable_bucketize():
                ours = module(pixels, mask)
        if ours.shape != theirs.shape or not torch.allclose(ours, theirs, atol=1e-5, rtol=0):
            raise request.error(
                f"the vision module gives {tuple(ours.shape)} for {crops} crops where "
                f"get_image_features gives {tuple(theirs.shape)}, or other values",
                "this is a kiln bug in builders/vision/_crops.py; please report it",
            )


def export(request: Request, writer: Writer, model: Any, opset: int) -> dict[str, Any]:
    """Write model.onnx; return export.json's vision fields (the module docstring)."""
    import warnings

    import torch

    vision = model.config.vision_config
    side = int(vision.image_size)
    module = vision_module(model)
    check(request, model, module, side)
    pixels, mask = example(EXAMPLE_CROPS, side)
    with torch.no_grad():
        rows, hidden = module(pixels, mask).shape
    with torch.no_grad(), warnings.catch_warnings(), traceable_bucketize():
        warnings.simplefilter("ignore")  # the tracer's frozen-branch warnings
        torch.onnx.export(
            module,
            (pixels, mask),
            str(writer.path("model.onnx")),
            input_names=INPUTS,
            output_names=["image_features"],
            dynamic_axes={
                "pixel_values": {1: "crops"},
                "pixel_attention_mask": {1: "crops"},
                "image_features": {0: "rows"},
            },
            opset_version=opset,
            dynamo=False,
        )
    return {
        "graph_inputs": INPUTS,
        "layout": "crops",
        "image_size": [side, side],
        "tokens_per_image": int(rows) // EXAMPLE_CROPS,  # a crop's: the processor's image_seq_len
        "hidden_size": int(hidden),
    }


def checked_image_text(request: Request, checkpoint: Any, per_crop: int) -> tuple[str, str]:
    """(placeholder, the unsplit picture's sequence), after checking the processor's ids
    for pictures of CHECKED_PICTURES' sizes against the runtime's expansion of the
    placeholder by each one's crop grid (runtime/crops_vlm.py image_sequence)."""
    import json

    from PIL import Image
    from transformers import AutoProcessor

    from runtime import images
    from runtime.crops_vlm import image_sequence

    processor = AutoProcessor.from_pretrained(checkpoint, backend="pil")
    placeholder = str(processor.image_token)
    if int(processor.image_seq_len) != per_crop:
        raise request.error(
            f"the processor writes {processor.image_seq_len} image tokens a crop; the "
            f"vision program makes {per_crop} feature rows a crop",
            "the checkpoint's processor_config.json image_seq_len must match its model",
        )
    opts = images.settings(json.loads((checkpoint / "preprocessor_config.json").read_text()))
    text = f"a{placeholder}b"
    for size in CHECKED_PICTURES:
        picture = Image.new("RGB", size, (128, 128, 128))
        made = processor(images=[picture], text=text, return_tensors="np")["input_ids"][0]
        _, (rows, cols) = images.idefics3_crops(picture, opts)
        expanded = text.replace(placeholder, image_sequence(rows, cols, placeholder, per_crop))
        ours = processor.tokenizer(expanded)["input_ids"]
        if made.tolist() != list(ours):
            raise request.error(
                f"the processor writes {made.tolist()} for a {size[0]}x{size[1]} picture "
                f"({rows} x {cols} crops); the runtime's expansion gives {list(ours)}",
                "this is a kiln bug in runtime/crops_vlm.py; please report it",
            )
    return placeholder, image_sequence(0, 0, placeholder, per_crop)

"""A crops vision program (Idefics3, SmolVLM; InternVL): the crops of one picture -> its
image features after the connector, in one ONNX graph whose crop count is dynamic.

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

InternVL (TILED) differs where its model and processor do. GotOcr2ImageProcessor cuts a
picture into a grid of tiles chosen by aspect ratio plus a thumbnail, every tile S x S
(runtime/images.py got_ocr2_tiles), and transformers' get_image_features takes the
tiles with no pixel mask and returns [tiles, tokens, hidden] without a split, so the
graph's module is get_image_features itself on the picture's tiles, and its one input
is pixel_values. Its embeddings resample their position table bicubically whenever
the tracer runs ("always interpolate when tracing"), to the size it already has: the
export uses the table as it is (own_positions), as get_image_features does untraced.
InternVLProcessor writes a picture as its tiles' tokens in one run between <img> and
</img> (runtime/crops_vlm.py tiles_sequence).

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

ARCHITECTURES = ("Idefics3ForConditionalGeneration", "InternVLForConditionalGeneration")
TILED = ("InternVLForConditionalGeneration",)  # tiles without pixel masks, one token run
INPUTS = ["pixel_values", "pixel_attention_mask"]
CHECKED_CROPS = (1, 3, 5)  # one unsplit picture, 2 x 1 + 1 and 2 x 2 + 1
EXAMPLE_CROPS = 3
# (width, height) of pictures whose prompts are checked against the processor: wide,
# tall and square pictures (at SmolVLM's sizes, other grids)
CHECKED_PICTURES = ((64, 48), (20, 60), (90, 30), (32, 32))


def tiled(model: Any) -> bool:
    return type(model).__name__ in TILED


def vision_module(model: Any) -> Any:
    """get_image_features of one picture's crops, without the split per prompt."""
    import torch

    inner = model.model
    if tiled(model):

        class Tiles(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = inner

            def forward(self, pixel_values: Any) -> Any:
                _, _, channels, height, width = pixel_values.shape
                flat = pixel_values.reshape(-1, channels, height, width)
                features = self.inner.get_image_features(pixel_values=flat).pooler_output
                return features.reshape(-1, features.shape[-1])

        return Tiles().eval()
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


@contextlib.contextmanager
def own_positions(model: Any) -> Iterator[None]:
    """InternVL's position table as it is, while the tracer runs (the module docstring):
    every tile is the tower's image size, for which interpolate_pos_encoding returns the
    table untraced."""
    embeddings = model.model.vision_tower.embeddings
    embeddings.interpolate_pos_encoding = lambda _states, _h, _w: embeddings.position_embeddings
    try:
        yield
    finally:
        del embeddings.interpolate_pos_encoding


def export_swaps(model: Any) -> contextlib.AbstractContextManager[None]:
    """What the tracer needs swapped while it runs the architecture's module."""
    return own_positions(model) if tiled(model) else traceable_bucketize()


def example(crops: int, size: tuple[int, int], seed: int = 0) -> tuple[Any, Any]:
    import torch

    generator = torch.Generator().manual_seed(seed)
    pixels = torch.rand(1, crops, 3, *size, generator=generator) * 2 - 1
    return pixels, torch.ones(1, crops, *size, dtype=torch.long)


def check(request: Request, model: Any, module: Any, size: tuple[int, int]) -> None:
    """The module, run with the export's swaps (export_swaps), equals
    get_image_features, run without them, on pictures of CHECKED_CROPS crops."""
    import torch

    for crops in CHECKED_CROPS:
        pixels, mask = example(crops, size, seed=crops)
        with torch.no_grad():
            if tiled(model):  # transformers' layout: every picture's tiles, one batch
                out = model.model.get_image_features(pixel_values=pixels[0]).pooler_output
                theirs = out.reshape(-1, out.shape[-1])
            else:
                theirs = model.model.get_image_features(
                    pixel_values=pixels, pixel_attention_mask=mask
                ).pooler_output[0]
            with export_swaps(model):
                ours = module(*inputs_of(model, pixels, mask))
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
    side = vision.image_size  # InternVL's config holds (height, width)
    size = (int(side[0]), int(side[1])) if isinstance(side, (list, tuple)) else (side, side)
    module = vision_module(model)
    check(request, model, module, size)
    pixels, mask = example(EXAMPLE_CROPS, size)
    args = inputs_of(model, pixels, mask)
    names = INPUTS[: len(args)]
    with torch.no_grad():
        rows, hidden = module(*args).shape
    with torch.no_grad(), warnings.catch_warnings(), export_swaps(model):
        warnings.simplefilter("ignore")  # the tracer's frozen-branch warnings
        torch.onnx.export(
            module,
            args,
            str(writer.path("model.onnx")),
            input_names=names,
            output_names=["image_features"],
            dynamic_axes={
                **{name: {1: "crops"} for name in names},
                "image_features": {0: "rows"},
            },
            opset_version=opset,
            dynamo=False,
        )
    return {
        "graph_inputs": names,
        "layout": "crops",
        "image_size": list(size),
        "tokens_per_image": int(rows) // EXAMPLE_CROPS,  # a crop's: the processor's image_seq_len
        "hidden_size": int(hidden),
    }


def inputs_of(model: Any, pixels: Any, mask: Any) -> tuple[Any, ...]:
    """The module's inputs: InternVL's tiles take no pixel mask."""
    return (pixels,) if tiled(model) else (pixels, mask)


def checked_image_text(
    request: Request, checkpoint: Any, per_crop: int, architecture: str
) -> tuple[str, str]:
    """(placeholder, the unsplit picture's sequence), after checking the processor's ids
    for pictures of CHECKED_PICTURES' sizes against the runtime's expansion of the
    placeholder by each one's crop grid (runtime/crops_vlm.py image_sequence, and
    tiles_sequence for InternVL)."""
    import json

    from PIL import Image

    from builders.common.hf import load_processor
    from runtime import images
    from runtime.crops_vlm import crops_of, image_sequence, tiles_sequence

    processor = load_processor(checkpoint)
    placeholder = str(processor.image_token)
    is_tiled = architecture in TILED
    written = processor.image_seq_length if is_tiled else processor.image_seq_len
    if int(written) != per_crop:
        raise request.error(
            f"the processor writes {written} image tokens a crop; the vision program "
            f"makes {per_crop} feature rows a crop",
            "the checkpoint's processor_config.json image_seq_len (InternVL: "
            "image_seq_length) must match its model",
        )
    opts = images.settings(json.loads((checkpoint / "preprocessor_config.json").read_text()))
    cut = images.got_ocr2_tiles if is_tiled else images.idefics3_crops
    unsplit = (
        f"{processor.start_image_token}{placeholder * per_crop}{processor.end_image_token}"
        if is_tiled
        else image_sequence(0, 0, placeholder, per_crop)
    )
    text = f"a{placeholder}b"
    for size in CHECKED_PICTURES:
        picture = Image.new("RGB", size, (128, 128, 128))
        made = processor(images=[picture], text=text, return_tensors="np")["input_ids"][0]
        _, (rows, cols) = cut(picture, opts)
        sequence = (
            tiles_sequence(unsplit, placeholder, per_crop, crops_of(rows, cols))
            if is_tiled
            else image_sequence(rows, cols, placeholder, per_crop)
        )
        ours = processor.tokenizer(text.replace(placeholder, sequence))["input_ids"]
        if made.tolist() != list(ours):
            raise request.error(
                f"the processor writes {made.tolist()} for a {size[0]}x{size[1]} picture "
                f"({rows} x {cols} crops); the runtime's expansion gives {list(ours)}",
                "this is a kiln bug in runtime/crops_vlm.py; please report it",
            )
    return placeholder, unsplit

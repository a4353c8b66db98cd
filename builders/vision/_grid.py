"""A Qwen2-VL-style vision program (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): patches of any
number of pictures, each of its own grid, -> their image features, in one ONNX graph
whose patch count is dynamic.

transformers' vision tower computes its index tensors from image_grid_thw with Python
loops and .tolist() (transformers/vision_utils.py), and its eager attention splits the
patches by those spans into a Python list: the TorchScript tracer would freeze one grid
into the graph. So the graph takes the index tensors as inputs, computed in numpy at
run time by runtime/mrope.py vision_inputs (transformers 5.24 lets the same tensors be
precomputed: vision_utils' `kwargs`), and each block's attention is the whole patch
sequence under a mask that keeps a query to the keys of its own span (window_segments
for windowed blocks, image_segments for the fullatt_block_indexes ones): a masked key's
weight is exactly 0, as a key of another span is absent in transformers' split. The
mask is [patches, patches]: 64 MiB of float32 at 4,096 patches (a 1,792 x 1,792
picture), so a real checkpoint's largest pictures pay for it; the tiny ones have at
most 64 patches.

    inputs   pixel_values     [patches, channels * temporal * patch * patch] float32
             patch_positions  [patches, 2] int64      (each patch's (h, w) grid index)
             window_index     [patches / merge^2] int64 (merged units in window order)
             window_segments  [patches] int64          (in window order)
             image_segments   [patches] int64          (in window order)
    outputs  image_features   [patches / merge^2, hidden] float32 (in the pictures' order)

Qwen2-VL's tower has no windows (every block attends over its picture), so its graph
takes no window_index and no window_segments (export.json graph_inputs; the runtime
feeds the inputs the graph has).

Qwen3-VL's tower has no windows either, and two things more (Qwen3VLVisionModel):
learned position embeddings on a square grid, resampled bilinearly to each picture's
grid (get_vision_interpolation_indices_and_weights: 4 taps a patch, whose indices and
weights are inputs, position_taps and position_weights, made by runtime/mrope.py), and
DeepStack: the blocks of deepstack_visual_indexes each feed a merger of their own,
whose rows its decoder adds at the image tokens after its first layers
(builders/causal_lm/export.py). So its graph has a second output:

    inputs   pixel_values, patch_positions, position_taps [patches, 4] int64,
             position_weights [patches, 4] float32, image_segments
    outputs  image_features       [patches / merge^2, hidden]
             deepstack_features   [patches / merge^2, levels, hidden]

The export checks the graph's module against transformers' own get_image_features on
pictures of several grids, one run and several at once, before anything is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

ARCHITECTURES = (
    "Qwen2_5_VLForConditionalGeneration",
    "Qwen2VLForConditionalGeneration",
    "Qwen3VLForConditionalGeneration",
)
INPUTS = ["pixel_values", "patch_positions", "window_index", "window_segments", "image_segments"]
WINDOWLESS = ["pixel_values", "patch_positions", "image_segments"]  # Qwen2-VL's tower
# Qwen3-VL's tower: windowless, with its position embeddings' taps
DEEPSTACK = [
    "pixel_values",
    "patch_positions",
    "position_taps",
    "position_weights",
    "image_segments",
]
# (t, h, w) patch grids the module is checked on: the tiny processor's smallest and
# largest (4 and 16 tokens), two aspect ratios, and two pictures in one run
CHECKED = [[(1, 4, 4)], [(1, 8, 8)], [(1, 6, 4)], [(1, 4, 6), (1, 2, 8)]]
EXAMPLE = [(1, 4, 6), (1, 6, 4)]  # the export's example: two pictures, 48 patches


def windowed(model: Any) -> bool:
    """Whether the tower attends within windows in some blocks (Qwen2.5-VL's)."""
    return hasattr(model.model.visual, "fullatt_block_indexes")


def deepstack(model: Any) -> int:
    """The tower's DeepStack levels (Qwen3-VL's deepstack_visual_indexes; 0: none)."""
    return len(getattr(model.model.visual, "deepstack_merger_list", ()))


def inputs(model: Any) -> list[str]:
    if deepstack(model):
        return DEEPSTACK
    return INPUTS if windowed(model) else WINDOWLESS


def outputs(model: Any) -> list[str]:
    return ["image_features"] + (["deepstack_features"] if deepstack(model) else [])


def position_grid(model: Any) -> int:
    """The side of the tower's square grid of learned position embeddings (0: none)."""
    return int(getattr(model.model.visual, "num_grid_per_side", 0))


def vision_module(model: Any) -> Any:
    """Qwen2_5_VisionTransformerPretrainedModel.forward (or Qwen2-VL's, windowless) with
    its index tensors as inputs and masked attention (the module docstring)."""
    import importlib

    import torch

    visual = model.model.visual
    qwen = importlib.import_module(type(visual).__module__)  # its apply_rotary_pos_emb_vision
    full = set(getattr(visual, "fullatt_block_indexes", range(len(visual.blocks))))

    def attend(attn: Any, x: Any, cos: Any, sin: Any, mask: Any) -> Any:
        n = x.shape[0]
        q, k, v = attn.qkv(x).reshape(n, 3, attn.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
        q, k = qwen.apply_rotary_pos_emb_vision(q, k, cos, sin)
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # [heads, n, dim]
        weights = torch.matmul(q, k.transpose(1, 2)) * attn.scaling + mask
        weights = torch.softmax(weights, dim=-1, dtype=torch.float32)
        out = torch.matmul(weights, v).transpose(0, 1).reshape(n, -1)
        return attn.proj(out)

    def masked(segments: Any) -> Any:
        same = segments[:, None] == segments[None, :]
        low = torch.full((), torch.finfo(torch.float32).min)
        return torch.where(same, torch.zeros(()), low)

    class GridVision(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.visual = visual

        def forward(
            self,
            pixel_values: Any,
            patch_positions: Any,
            window_index: Any,
            window_segments: Any,
            image_segments: Any,
        ) -> Any:
            x = visual.patch_embed(pixel_values)
            n = x.shape[0]
            x = visual.permute_input_for_window_attn(x, window_index, seq_len=n)
            cos, sin = visual.rotary_pos_emb(x, patch_positions)
            cos = visual.permute_input_for_window_attn(cos, window_index, seq_len=n)
            sin = visual.permute_input_for_window_attn(sin, window_index, seq_len=n)
            masks = {False: masked(window_segments), True: masked(image_segments)}
            for i, block in enumerate(visual.blocks):
                x = x + attend(block.attn, block.norm1(x), cos, sin, masks[i in full])
                x = x + block.mlp(block.norm2(x))
            merged = visual.merger(x)
            return merged[torch.argsort(window_index)]

    class Windowless(torch.nn.Module):
        """Qwen2VisionTransformerPretrainedModel.forward: every block over its picture."""

        def __init__(self) -> None:
            super().__init__()
            self.visual = visual

        def forward(self, pixel_values: Any, patch_positions: Any, image_segments: Any) -> Any:
            x = visual.patch_embed(pixel_values)
            cos, sin = visual.rotary_pos_emb(x, patch_positions)
            mask = masked(image_segments)
            for block in visual.blocks:
                x = x + attend(block.attn, block.norm1(x), cos, sin, mask)
                x = x + block.mlp(block.norm2(x))
            return visual.merger(x)

    class DeepStack(torch.nn.Module):
        """Qwen3VLVisionModel.forward: the resampled position embeddings added to the
        patches, every block over its picture, and the DeepStack mergers' rows."""

        def __init__(self) -> None:
            super().__init__()
            self.visual = visual

        def forward(
            self,
            pixel_values: Any,
            patch_positions: Any,
            position_taps: Any,
            position_weights: Any,
            image_segments: Any,
        ) -> Any:
            x = visual.patch_embed(pixel_values)
            learned = visual.pos_embed(position_taps) * position_weights[:, :, None]
            x = x + learned.sum(1).to(x.dtype)
            cos, sin = visual.rotary_pos_emb(x, patch_positions)
            mask = masked(image_segments)
            levels = list(visual.deepstack_visual_indexes)
            deep = []
            for i, block in enumerate(visual.blocks):
                x = x + attend(block.attn, block.norm1(x), cos, sin, mask)
                x = x + block.mlp(block.norm2(x))
                if i in levels:
                    deep.append(visual.deepstack_merger_list[levels.index(i)](x))
            return visual.merger(x), torch.stack(deep, 1)

    if deepstack(model):
        return DeepStack().eval()
    return (GridVision() if windowed(model) else Windowless()).eval()


def feeds(model: Any, grids: list[tuple[int, int, int]], seed: int = 0) -> dict[str, Any]:
    """Random patches of `grids` and their index inputs (runtime/mrope.py), as tensors."""
    import numpy as np
    import torch

    from runtime.mrope import vision_inputs

    config = model.config.vision_config
    width = 3 * config.temporal_patch_size * config.patch_size**2
    patches = sum(t * h * w for t, h, w in grids)
    pixels = np.random.default_rng(seed).standard_normal((patches, width)).astype(np.float32)
    window = window_size(config)
    side = position_grid(model)
    index = vision_inputs(grids, config.spatial_merge_size, window, config.patch_size, side)
    return {
        "pixel_values": torch.from_numpy(pixels),
        **{k: torch.from_numpy(v) for k, v in index.items()},
    }


def per_second(model: Any) -> int:
    """Qwen2.5-VL's tokens_per_second (0 for the others: Qwen2-VL steps a video's t
    positions by 1, and Qwen3-VL writes timestamps into the text instead)."""
    if model.config.model_type != "qwen2_5_vl":
        return 0
    return int(model.config.vision_config.tokens_per_second)


def window_size(config: Any) -> int:
    """The tower's window in pixels; a windowless tower's (Qwen2-VL) is one merged unit,
    whose window inputs its graph does not take."""
    return int(getattr(config, "window_size", 0) or config.patch_size * config.spatial_merge_size)


def check(request: Request, model: Any, module: Any) -> float:
    """The largest |difference| between the module's features (and DeepStack rows) and
    transformers' get_image_features over CHECKED; a build error past 1e-5."""
    import torch

    worst = 0.0
    for grids in CHECKED:
        fed = feeds(model, grids)
        with torch.no_grad():
            ours = module(*[fed[k] for k in inputs(model)])
            out = model.model.get_image_features(
                pixel_values=fed["pixel_values"], image_grid_thw=torch.tensor(grids)
            )
            theirs = torch.cat(list(out.pooler_output), 0)
            if deepstack(model):  # each level's rows, per picture, as [rows, levels, hidden]
                levels = [torch.cat(list(rows), 0) for rows in out.deepstack_features]
                worst = max(worst, float((ours[1] - torch.stack(levels, 1)).abs().max()))
                ours = ours[0]
        worst = max(worst, float((ours - theirs).abs().max()))
    if worst > 1e-5:
        raise request.error(
            f"the vision program's module differs from transformers' get_image_features by "
            f"{worst:.2e} on grids {CHECKED}",
            "this is a kiln bug in builders/vision/_grid.py; please report it",
        )
    return worst


def export(request: Request, writer: Writer, model: Any, opset: int) -> dict[str, Any]:
    """Write model.onnx; returns export.json's grid-specific part."""
    import warnings

    import torch

    module = vision_module(model)
    worst = check(request, model, module)
    request.log(f"vision module matches transformers' get_image_features (max |d| {worst:.1e})")
    fed = feeds(model, EXAMPLE)
    names = inputs(model)
    dynamic = {
        "pixel_values": {0: "patches"},
        "patch_positions": {0: "patches"},
        "window_index": {0: "units"},
        "window_segments": {0: "patches"},
        "image_segments": {0: "patches"},
        "position_taps": {0: "patches"},
        "position_weights": {0: "patches"},
        "image_features": {0: "units"},
        "deepstack_features": {0: "units"},
    }
    dynamic = {k: v for k, v in dynamic.items() if k in names or k in outputs(model)}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's warnings on shape arithmetic
        torch.onnx.export(
            module,
            tuple(fed[k] for k in names),
            str(writer.path("model.onnx")),
            input_names=names,
            output_names=outputs(model),
            dynamic_axes=dynamic,
            opset_version=opset,
            dynamo=False,
        )
    config = model.config.vision_config
    return {
        "graph_inputs": names,
        **({"graph_outputs": outputs(model)} if deepstack(model) else {}),
        "layout": "grid",
        "grid": {
            "patch_size": config.patch_size,
            "temporal_patch_size": config.temporal_patch_size,
            "spatial_merge_size": config.spatial_merge_size,
            "window_size": window_size(config),
            "channels": 3,
            # Qwen3-VL's: its learned positions' grid side, and its DeepStack levels
            **({"position_grid": position_grid(model)} if position_grid(model) else {}),
            **({"deepstack_levels": deepstack(model)} if deepstack(model) else {}),
            # Qwen2.5-VL's: a video's t positions step by this * seconds per frame group
            # (get_rope_index; runtime/grid_vlm.py video_patches)
            **({"tokens_per_second": per_second(model)} if per_second(model) else {}),
        },
        "hidden_size": int(model.config.get_text_config(decoder=True).hidden_size),
        "tokens_per_image": 0,  # per picture: t * h * w / merge^2 of its grid
    }

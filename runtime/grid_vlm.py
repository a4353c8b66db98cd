"""GridVisionBundle: a vision-language bundle whose pictures are each their own patch
grid and whose decoder rotates by 3-D positions (Qwen2-VL, Qwen2.5-VL, Qwen3-VL;
bundle.json vision.layout "grid", vision.position_axes 3).

    image files -> runtime/images.py: Qwen2VLImageProcessor's patches and each
                   picture's (t, h, w) grid, in numpy
                -> vision.onnx, one picture a run, with the grid's index inputs
                   (runtime/mrope.py vision_inputs): t * h * w / merge^2 feature rows
                   per picture (ImageFeatures: the rows, and the grids they came from)
    messages    -> the chat template, whose image part is <|vision_start|><|image_pad|>
                   <|vision_end|>; each picture's <|image_pad|> is repeated once per
                   feature row of it, as Qwen2_5_VLProcessor repeats it before
                   tokenizing (the pad is a special token: repeating its id is the same)
    positions   -> [batch, seq, 3] from the ids and the grids (runtime/mrope.py), which
                   the causal-LM loop slices along seq for chunked prefill and prefix
                   reuse as it slices 1-D ones, and steps by one on all three axes

Qwen3-VL's vision program also takes its learned position grid's taps (runtime/mrope.py
position_taps; bundle.json vision.grid.position_grid) and gives DeepStack rows per level
(vision.grid.deepstack_levels), which its decoder takes as deepstack_features [rows,
levels, hidden] beside image_features (builders/causal_lm/export.py). A picture token's
features here are its merged features and then each level's rows, side by side in one
row ([tokens, (1 + levels) * hidden]), so every slice the generation loop makes along
the rows (batches, prefill chunks) keeps them together; feeds() splits them again.

No torch and no transformers at run time: onnxruntime, numpy, Pillow and tokenizers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runtime.causal_lm import IMAGES
from runtime.format import BundleError
from runtime.mrope import Grid, batch_positions, tokens_of, vision_inputs
from runtime.vlm import VisionBundle

DEEPSTACK = "deepstack_features"  # a DeepStack decoder's input (Qwen3-VL)


class ImageFeatures(np.ndarray):
    """Image feature rows [tokens, hidden] that remember the grid of each picture they
    came from (`grids`, in order), which the decoder's positions need: rows pass through
    the generation loop as any features do."""

    grids: list[Grid]

    def __new__(cls, rows: np.ndarray, grids: Sequence[Grid]) -> ImageFeatures:
        made = np.asarray(rows).view(cls)
        made.grids = [tuple(int(x) for x in g) for g in grids]  # type: ignore[misc]
        return made

    def __array_finalize__(self, obj: Any) -> None:
        self.grids = getattr(obj, "grids", [])


class GridVisionBundle(VisionBundle):
    """VisionBundle for grid vision programs and M-RoPE decoders (module docstring)."""

    def __init__(self, path: Path, threads: int | None = None) -> None:
        super().__init__(path, threads)
        spec = self.meta["vision"]
        if spec.get("layout") != "grid" or spec.get("position_axes") != 3:
            raise BundleError(f"{path}: bundle.json's vision is no grid program with 3-D positions")
        self.grid = dict(spec["grid"])
        self.merge = int(self.grid["spatial_merge_size"])
        # a windowless tower (Qwen2-VL) takes no window inputs
        self.vision_inputs = {i.name for i in self.vision.get_inputs()}
        self.side = int(self.grid.get("position_grid", 0))  # Qwen3-VL's learned positions
        self.levels = int(self.grid.get("deepstack_levels", 0))  # and its DeepStack levels
        self.hidden = self.no_images.shape[1]
        self.no_images = np.zeros((0, (1 + self.levels) * self.hidden), np.float32)

    def pixels(self, paths: Sequence[Path | str]) -> np.ndarray:
        """The patches of each image at `paths` as the processor makes them, [images,
        patches, width]: pictures of one grid (ask one at a time for others)."""
        patches, grids = self.patches(paths)
        sizes = {t * h * w for t, h, w in grids}
        if len(sizes) > 1:
            raise BundleError(f"pictures of grids {grids} have patch counts {sorted(sizes)}")
        return patches.reshape(len(grids), -1, patches.shape[-1])

    def patches(self, paths: Sequence[Path | str]) -> tuple[np.ndarray, list[Grid]]:
        """The images' patches, concatenated [patches, width], and each one's grid."""
        from runtime import images

        made = images.pixel_values([Path(p) for p in paths], self.processor)
        grids = [(int(t), int(h), int(w)) for t, h, w in made["image_grid_thw"]]
        return made["pixel_values"], grids

    def image_features(self, paths: Sequence[Path | str]) -> ImageFeatures:
        """The features of the images at `paths`, in order, with their grids."""
        if not paths:
            return ImageFeatures(self.no_images, [])
        return self.run_vision(*self.patches(paths))

    def run_vision(self, patches: np.ndarray, grids: Sequence[Grid]) -> ImageFeatures:
        """The vision program on patches of pictures of `grids` (patches()), one picture
        a run: its attention mask is [patches, patches]."""
        runs, start = [], 0
        window, patch = self.grid["window_size"], self.grid["patch_size"]
        names = ["image_features"] + (["deepstack_features"] if self.levels else [])
        for grid in grids:
            size = grid[0] * grid[1] * grid[2]
            index = vision_inputs([grid], self.merge, window, patch, self.side)
            index = {k: v for k, v in index.items() if k in self.vision_inputs}
            feeds = {"pixel_values": patches[start : start + size], **index}
            made = self.vision.run(names, feeds)  # DeepStack's [rows, levels, hidden] last
            runs.append(np.concatenate([a.reshape(len(a), -1) for a in made], 1))
            start += size
        return ImageFeatures(np.concatenate(runs), grids)

    def feeds(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        positions: np.ndarray,
        past: list[np.ndarray],
        keep: int = 0,
        images: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """Bundle.feeds, each picture token's row split into image_features and, for a
        DeepStack decoder, deepstack_features (the module docstring)."""
        feeds = super().feeds(ids, mask, positions, past, keep, images)
        if self.levels and IMAGES in feeds:
            rows = np.asarray(feeds[IMAGES])
            feeds[IMAGES] = np.ascontiguousarray(rows[:, : self.hidden])
            deep = rows[:, self.hidden :].reshape(len(rows), self.levels, self.hidden)
            feeds[DEEPSTACK] = np.ascontiguousarray(deep)
        return feeds

    def encode_chat(
        self,
        messages: list[dict[str, Any]],
        thinking: bool | None = None,
        images: np.ndarray | None = None,
    ) -> list[int]:
        """The conversation's token ids, each picture's image token repeated once per
        feature row of it: `images` are the pictures' features (image_features), in
        the order of the conversation's image parts."""
        ids = super().encode_chat(messages, thinking)
        grids = list(getattr(images, "grids", []))
        token = self.image_token
        if ids.count(token) != len(grids):  # type: ignore[arg-type]
            raise BundleError(
                f"the conversation has {ids.count(token)} image parts but "  # type: ignore[arg-type]
                f"{len(grids)} pictures' features were given; this bundle's pictures are "
                "each their own size, so give encode_chat the features of its pictures "
                "(image_features) as images="
            )
        out: list[int] = []
        for t in ids:
            out.extend([t] * tokens_of(grids.pop(0), self.merge) if t == token else [t])
        return out

    def ask(self, text: str, images: Sequence[Path | str] = ()) -> tuple[list[int], np.ndarray]:
        """VisionBundle.ask: the images' features first, which decide their tokens."""
        parts: list[dict[str, str]] = [{"type": "image"} for _ in images]
        parts.append({"type": "text", "text": text})
        features = self.image_features(images)
        return self.encode_chat([{"role": "user", "content": parts}], images=features), features

    def rope_positions(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        positions: np.ndarray,
        images: Sequence[np.ndarray | None],
    ) -> np.ndarray:
        """[batch, seq, 3] M-RoPE positions of a left-padded batch (Bundle.rope_positions),
        each row's images placed by the grids its features carry."""
        grids = [list(getattr(f, "grids", [])) for f in images]
        try:
            return batch_positions(ids, mask, int(self.image_token or -1), grids, self.merge)
        except ValueError as exc:
            raise BundleError(
                f"{exc}: give each prompt's image features as image_features made them "
                "(they carry the pictures' grids, which place their tokens)"
            ) from None

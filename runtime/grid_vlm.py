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

Videos come as their frames' image files (kiln decodes no video container), taken at
`fps` frames a second (transformers' 24 for frames without their clip):
runtime/images.py video_pixel_values makes the video processor's patches, frames
grouped in twos along t, and the same vision program runs on each video's grid (t > 1:
its spans are per frame group, as cu_seqlens are). A video part renders <|video_pad|>,
repeated once per feature row as the processor repeats it, so the ids are the
processor's; the decoder's graph merges rows at the image token only, so its feeds carry
the image token where the ids have the video one (the embedding is replaced either
way). Qwen2-VL, Qwen2.5-VL: a video's t positions step by tokens_per_second *
second_per_grid_t (Qwen2.5-VL; 1 for Qwen2-VL), second_per_grid_t being
temporal_patch_size / fps. Qwen3-VL: its processor keeps frames at 2 a second of the
clip and writes each frame group as "<T seconds><|vision_start|><|video_pad|>...
<|vision_end|>" inside the video part's own vision_start/end, T the group's time; its
get_rope_index places each frame group as a picture of grid (1, h, w). So its features
keep one (1, h, w) grid a frame group, each with its time (`stamps`), and the vision
program runs a frame group at a time (the tower attends within a frame group only).

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

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runtime.causal_lm import IMAGES
from runtime.chat import check_messages, texts
from runtime.format import BundleError
from runtime.mrope import Grid, batch_positions, tokens_of, vision_inputs
from runtime.vlm import VisionBundle

DEEPSTACK = "deepstack_features"  # a DeepStack decoder's input (Qwen3-VL)
VIDEO = "<|video_pad|>"  # the Qwen-VL processors' video token


class ImageFeatures(np.ndarray):
    """Image feature rows [tokens, hidden] that remember the grid of each picture they
    came from (`grids`, in order), which the decoder's positions need: rows pass through
    the generation loop as any features do. A video among them is marked in `videos`,
    with its t positions' step in `intervals` (1 for a picture). A Qwen3-VL video is one
    grid a frame group, each with its time in `stamps` (None elsewhere), `starts` marking
    where each picture or video begins."""

    grids: list[Grid]
    videos: list[bool]
    intervals: list[float]
    stamps: list[float | None]
    starts: list[bool]

    def __new__(
        cls,
        rows: np.ndarray,
        grids: Sequence[Grid],
        videos: Sequence[bool] | None = None,
        intervals: Sequence[float] | None = None,
        stamps: Sequence[float | None] | None = None,
        starts: Sequence[bool] | None = None,
    ) -> ImageFeatures:
        made = np.asarray(rows).view(cls)
        made.grids = [tuple(int(x) for x in g) for g in grids]  # type: ignore[misc]
        count = len(made.grids)
        made.videos = list(videos) if videos is not None else [False] * count
        made.intervals = list(intervals) if intervals is not None else [1.0] * count
        made.stamps = list(stamps) if stamps is not None else [None] * count
        made.starts = list(starts) if starts is not None else [True] * count
        return made

    def __array_finalize__(self, obj: Any) -> None:
        self.grids = getattr(obj, "grids", [])
        self.videos = getattr(obj, "videos", [False] * len(self.grids))
        self.intervals = getattr(obj, "intervals", [1.0] * len(self.grids))
        self.stamps = getattr(obj, "stamps", [None] * len(self.grids))
        self.starts = getattr(obj, "starts", [True] * len(self.grids))

    def parts(self) -> list[tuple[bool, list[int]]]:
        """Each picture's and video's (is it a video, the indices of its grids)."""
        found: list[tuple[bool, list[int]]] = []
        for i, start in enumerate(self.starts):
            if start or not found:
                found.append((self.videos[i], [i]))
            else:
                found[-1][1].append(i)
        return found


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
        # the processor's video token (Qwen2VLProcessor's "<|video_pad|>")
        found = self.tokenizer.token_to_id(VIDEO)
        self.video_token: int | None = None if found is None else int(found)

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

    def video_patches(
        self, videos: Sequence[Sequence[Path | str]], fps: float | None = None
    ) -> tuple[np.ndarray, ImageFeatures]:
        """The videos' patches (each given as its frames' image files, taken `fps` a
        second), concatenated [patches, width], and their grids, t steps and times as
        empty ImageFeatures (module docstring)."""
        from runtime import images

        if self.video_token is None:
            raise BundleError("this bundle's tokenizer has no <|video_pad|>: it takes no video")
        rate = images.DEFAULT_FPS if fps is None else float(fps)
        if not (math.isfinite(rate) and rate > 0):
            raise BundleError(f"fps={fps!r}: a video's frame rate is a number above 0")
        opts = images.video_settings(self.processor, self.video_processor)
        made = images.video_pixel_values(
            [[Path(p) for p in v] for v in videos], self.processor, self.video_processor, rate
        )
        grids = [(int(t), int(h), int(w)) for t, h, w in made["video_grid_thw"]]
        none = np.zeros((0, self.no_images.shape[1]), np.float32)
        if opts["stamped"]:  # Qwen3-VL: a (1, h, w) grid a frame group, with its time
            split = [[(1, h, w)] * t for t, h, w in grids]
            return made["pixel_values_videos"], ImageFeatures(
                none,
                [g for s in split for g in s],
                [True] * sum(map(len, split)),
                stamps=[x for times in made["video_timestamps"] for x in times],
                starts=[i == 0 for s in split for i in range(len(s))],
            )
        per_second = self.grid.get("tokens_per_second")
        if per_second is None and "window_index" in self.vision_inputs:
            raise BundleError(
                "this Qwen2.5-VL bundle predates video input (its bundle.json has no "
                "vision.grid.tokens_per_second); rebuild it"
            )
        step = opts["temporal_patch_size"] / rate  # second_per_grid_t
        interval = float(np.float32(per_second) * np.float32(step)) if per_second else 1.0
        return made["pixel_values_videos"], ImageFeatures(
            none, grids, [True] * len(grids), [interval] * len(grids)
        )

    def video_features(
        self, videos: Sequence[Sequence[Path | str]], fps: float | None = None
    ) -> ImageFeatures:
        """The features of the videos, each given as its frames' image files (taken
        `fps` a second; transformers' 24 when not given), in order."""
        if not videos:
            return ImageFeatures(self.no_images, [])
        patches, meta = self.video_patches(videos, fps)
        rows = self.run_vision(patches, meta.grids)
        return ImageFeatures(
            np.asarray(rows), meta.grids, meta.videos, meta.intervals, meta.stamps, meta.starts
        )

    def media_features(
        self,
        images: Sequence[Path | str] = (),
        videos: Sequence[Sequence[Path | str]] = (),
        fps: float | None = None,
    ) -> ImageFeatures:
        """The features of `images` and then `videos` (taken `fps` a second), in that
        order: the order of a conversation whose image parts all come before its video
        parts."""
        pictures, clips = self.image_features(images), self.video_features(videos, fps)
        return join(pictures, clips)

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
        if images is not None and len(images):
            ids = self._as_images(ids)
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
        """The conversation's token ids, each picture's image token (each video's video
        token) repeated once per feature row of it: `images` are the pictures' and
        videos' features (image_features, video_features, media_features), in the order
        of the conversation's image and video parts."""
        checked = check_messages(messages, parts=True, videos=self.video_token is not None)
        for i, m in enumerate(checked):
            for name in (VIDEO, self.image_placeholder):
                if any(name in t for t in texts(m["content"])):
                    raise BundleError(
                        f"message {i} ({m['role']}) writes {name!r} in its text; give each "
                        'image or video as an {"type": "image"} or {"type": "video"} part'
                    )
        text = self.render_chat(messages, thinking)
        text = text.replace(self.image_placeholder, self.image_sequence)
        ids = list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        if not isinstance(images, ImageFeatures):
            images = ImageFeatures(np.zeros((0, 1), np.float32), [])
        parts = images.parts()
        marks = (self.image_token, self.video_token)
        said = ["video" if t == self.video_token else "image" for t in ids if t in marks]
        given = ["video" if video else "image" for video, _ in parts]
        if said != given:
            raise BundleError(
                f"the conversation has {said.count('image')} image and {said.count('video')} "
                f"video parts ({', '.join(said) or 'none'}) but the features given are of "
                f"{given.count('image')} pictures and {given.count('video')} videos; this "
                "bundle's pictures are each their own size, so give encode_chat the features "
                "of its pictures and videos (image_features, video_features, in the parts' "
                "order) as images="
            )
        clips = [grids for video, grids in parts if video]
        if any(images.stamps[g[0]] is not None for g in clips):
            pieces = text.split(VIDEO)
            after = zip(clips, pieces[1:], strict=True)
            text = pieces[0] + "".join(_stamped(images, clip) + rest for clip, rest in after)
            ids = list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        grids = list(images.grids)
        out: list[int] = []
        for t in ids:
            out.extend([t] * tokens_of(grids.pop(0), self.merge) if t in marks else [t])
        return out

    def _as_images(self, ids: np.ndarray) -> np.ndarray:
        """`ids` with each video token as the image token: the decoder's graph writes
        feature rows at image tokens (module docstring)."""
        if self.video_token is None or self.image_token is None:
            return ids
        return np.where(ids == self.video_token, self.image_token, ids)

    def _check_images(self, ids: np.ndarray, images: list[np.ndarray | None]) -> None:
        super()._check_images(self._as_images(ids), images)

    def _chunk_images(
        self, ids: np.ndarray, images: list[np.ndarray | None] | None, used: list[int]
    ) -> np.ndarray | None:
        return super()._chunk_images(self._as_images(ids), images, used)

    def rope_positions(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        positions: np.ndarray,
        images: Sequence[np.ndarray | None],
    ) -> np.ndarray:
        """[batch, seq, 3] M-RoPE positions of a left-padded batch (Bundle.rope_positions),
        each row's images and videos placed by the grids (and t steps) their features
        carry. Decoding steps on from the last token's position, which get_rope_index's
        rope delta makes the largest one + 1: a video whose t positions pass the text
        after it is refused, not stepped on from the wrong place."""
        grids = [list(getattr(f, "grids", [])) for f in images]
        steps = [
            list(getattr(f, "intervals", [1.0] * len(g)))
            for f, g in zip(images, grids, strict=True)
        ]
        tokens = [t for t in (self.image_token, self.video_token) if t is not None] or [-1]
        try:
            made = batch_positions(ids, mask, tokens, grids, self.merge, steps)
        except ValueError as exc:
            raise BundleError(
                f"{exc}: give each prompt's image features as image_features made them "
                "(they carry the pictures' grids, which place their tokens)"
            ) from None
        if ids.shape[1] and (made.max(axis=(1, 2)) > made[:, -1].max(axis=-1)).any():
            raise BundleError(
                "a video's t positions pass the position of the prompt's last token, from "
                "which this runtime steps decoding on (transformers steps from the largest): "
                "give fewer frames or more text after the video"
            )
        return made


def join(*parts: np.ndarray) -> ImageFeatures:
    """Features of pictures and videos one after the other, their grids, marks, t steps,
    times and starts kept in that order."""
    rows = np.concatenate([np.asarray(p) for p in parts])
    keep = [p for p in parts if isinstance(p, ImageFeatures)]
    return ImageFeatures(
        rows,
        [g for p in keep for g in p.grids],
        [v for p in keep for v in p.videos],
        [i for p in keep for i in p.intervals],
        [x for p in keep for x in p.stamps],
        [x for p in keep for x in p.starts],
    )


def _stamped(features: ImageFeatures, clip: Sequence[int]) -> str:
    """A Qwen3-VL video's text in place of its <|video_pad|>: each frame group's time
    and its own vision_start, video token and vision_end (Qwen3VLProcessor
    .replace_video_token, before the token is repeated per feature row)."""
    return "".join(
        f"<{features.stamps[i]:.1f} seconds><|vision_start|>{VIDEO}<|vision_end|>" for i in clip
    )

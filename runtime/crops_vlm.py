"""CropsVisionBundle: a vision-language bundle whose pictures are cut into crops, as many
as each picture's aspect ratio asks, plus a global view (Idefics3, SmolVLM, InternVL;
bundle.json vision.layout "crops").

    image files -> runtime/images.py: the crops and each picture's (rows, cols) split
                   grid, in numpy: Idefics3ImageProcessor's (with pixel masks) or
                   GotOcr2ImageProcessor's tiles and thumbnail (InternVL)
                -> vision.onnx, one picture's crops a run: crops * tokens_per_image
                   feature rows (CropFeatures: the rows, and the grids they came from)
    messages    -> the chat template, whose image part is the placeholder (<image>,
                   <IMG_CONTEXT>); each is replaced in the rendered text by its picture's
                   sequence, then tokenized

The two differ in the sequence alone, which the processor family (its
preprocessor_config.json) decides: Idefics3Processor writes each crop's tokens behind a
marker and its position, then the global view's (image_sequence); InternVLProcessor
writes every tile's tokens, thumbnail's last, as one run between the markers it puts
around an unsplit picture's (<img>, </img>: tiles_sequence).

InternVL also takes videos, as their frames' image files (kiln decodes no container):
InternVLVideoProcessor resizes every frame to its size (torchvision's uint8 bicubic,
runtime/images.py frame_tiles), each frame is one tile of the same vision program, and
InternVLProcessor writes the video part's <video> as "Frame1: <img>...</img>\nFrame2:
..." (frame_sequence), each frame's tokens an unsplit picture's. CropFeatures mark a
video's entry by its frame count (`frames`).

The decoder is the ordinary one (1-D positions, causal mask, features merged at the
image tokens). No torch and no transformers at run time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runtime.format import BundleError
from runtime.vlm import VisionBundle

# Idefics3Processor's own strings (not in any config file): the marker around each crop's
# tokens and the tag of the global view; a crop at row r, column c is <row_r_col_c>.
FAKE_TOKEN = "<fake_token_around_image>"
GLOBAL_TAG = "<global-img>"
VIDEO = "<video>"  # InternVL's video token (its tokenizer_config.json video_token)

RowsCols = tuple[int, int]


def image_sequence(rows: int, cols: int, token: str, per_crop: int) -> str:
    """The text Idefics3Processor puts in place of one picture's placeholder: each crop's
    tokens behind a marker and its position, a line per row of crops, then a blank line
    and the global view's tokens between markers; an unsplit picture (0, 0) is the
    global view alone."""
    crop = token * per_crop
    whole = f"{FAKE_TOKEN}{GLOBAL_TAG}{crop}{FAKE_TOKEN}"
    if rows == 0 and cols == 0:
        return whole
    lines = (
        "".join(f"{FAKE_TOKEN}<row_{r + 1}_col_{c + 1}>{crop}" for c in range(cols)) + "\n"
        for r in range(rows)
    )
    return "".join(lines) + "\n" + whole


def tiles_sequence(unsplit: str, token: str, per_crop: int, crops: int) -> str:
    """The text InternVLProcessor puts in place of one picture's placeholder: the tokens
    of all its `crops` tiles as one run, between the markers around `unsplit`, the
    sequence of a picture that is one tile (<img>, </img>; builders/vision/_crops.py
    records it, checked against the processor)."""
    head, tail = unsplit[: unsplit.index(token)], unsplit[unsplit.rindex(token) + len(token) :]
    return head + token * per_crop * crops + tail


def crops_of(rows: int, cols: int) -> int:
    """A picture's crop count: its grid plus the global view, or the global view alone."""
    return rows * cols + 1 if rows or cols else 1


def frame_sequence(unsplit: str, frames: int) -> str:
    """The text InternVLProcessor puts in place of a video's <video>: a line a frame,
    "FrameN: " and then the sequence of a picture that is one tile."""
    return "\n".join(f"Frame{i + 1}: {unsplit}" for i in range(frames))


class CropFeatures(np.ndarray):
    """Image feature rows [tokens, hidden] that remember the (rows, cols) grid of each
    picture they came from (`grids`, in order), which its prompt's sequence needs; a
    video's entry has its frame count in `frames` (0 for a picture) and grid (0, 0)."""

    grids: list[RowsCols]
    frames: list[int]

    def __new__(
        cls, rows: np.ndarray, grids: Sequence[RowsCols], frames: Sequence[int] | None = None
    ) -> CropFeatures:
        made = np.asarray(rows).view(cls)
        made.grids = [(int(r), int(c)) for r, c in grids]
        made.frames = [int(n) for n in frames] if frames is not None else [0] * len(made.grids)
        return made

    def __array_finalize__(self, obj: Any) -> None:
        self.grids = getattr(obj, "grids", [])
        self.frames = getattr(obj, "frames", [0] * len(self.grids))


def join(*parts: np.ndarray) -> CropFeatures:
    """Features of pictures and videos one after the other, their grids and frame counts
    kept in that order."""
    rows = np.concatenate([np.asarray(p) for p in parts])
    keep = [p for p in parts if isinstance(p, CropFeatures)]
    return CropFeatures(
        rows, [g for p in keep for g in p.grids], [n for p in keep for n in p.frames]
    )


class CropsVisionBundle(VisionBundle):
    """VisionBundle for pictures split into crops (module docstring)."""

    def __init__(self, path: Path, threads: int | None = None) -> None:
        from runtime import images

        super().__init__(path, threads)
        if self.meta["vision"].get("layout") != "crops":
            raise BundleError(f"{path}: bundle.json's vision is no crops program")
        # InternVL's tiles are one run of tokens; Idefics3's crops each have their own
        self.tiled = images.family(self.processor) == "GotOcr2ImageProcessor"
        self.graph_inputs = {i.name for i in self.vision.get_inputs()}
        found = self.tokenizer.token_to_id(VIDEO) if self.tiled else None
        self.video_token: int | None = None if found is None else int(found)

    def crops(self, paths: Sequence[Path | str]) -> dict[str, np.ndarray]:
        """The processor's inputs for the images at `paths` (runtime/images.py
        idefics3_pixel_values, tiled_pixel_values): crops, each picture's grid and, for
        Idefics3, pixel masks."""
        from runtime import images

        return images.pixel_values([Path(p) for p in paths], self.processor)

    def pixels(self, paths: Sequence[Path | str]) -> np.ndarray:
        """The crops of each image at `paths` as the processor makes them, [images,
        crops, 3, S, S], zero crops after a picture's own up to the most any has."""
        return self.crops(paths)["pixel_values"]

    def image_features(self, paths: Sequence[Path | str]) -> CropFeatures:
        """The features of the images at `paths`, in order, with their grids: the
        vision program on each picture's own crops."""
        if not paths:
            return CropFeatures(self.no_images, [])
        return self.run_vision(self.crops(paths))

    def run_vision(self, made: dict[str, np.ndarray]) -> CropFeatures:
        """The vision program on each picture's own crops of `made` (crops()), one
        picture a run, the zero crops that pad it to the batch's most left out."""
        grids = [(int(r), int(c)) for r, c in made["rows_cols"]]
        runs = []
        for i, (rows, cols) in enumerate(grids):
            n = crops_of(rows, cols)
            feeds = {  # InternVL's graph takes no pixel mask
                name: made[name][i : i + 1, :n]
                for name in ("pixel_values", "pixel_attention_mask")
                if name in self.graph_inputs
            }
            runs.append(self.vision.run(["image_features"], feeds)[0])
        return CropFeatures(np.concatenate(runs), grids)

    def video_features(
        self, videos: Sequence[Sequence[Path | str]], fps: float | None = None
    ) -> CropFeatures:
        """The features of the videos, each given as its frames' image files, in order:
        every frame one tile of the vision program (module docstring). `fps` changes
        nothing here: InternVL's video processor keeps every frame and writes no times,
        as transformers' does without do_sample_frames."""
        from runtime import images

        if not videos:
            return CropFeatures(self.no_images, [])
        if self.video_token is None:
            raise BundleError(f"this bundle's tokenizer has no {VIDEO}: it takes no video")
        tiles = images.frame_tiles(
            [[Path(p) for p in v] for v in videos], self.processor, self.video_processor
        )
        size = tuple(self.vision.get_inputs()[0].shape[-2:])  # fixed: the tile's side
        if tiles[0].shape[-2:] != size:  # every video's frames are resized to one size
            raise BundleError(
                f"the video processor resizes frames to {tiles[0].shape[-2:]}, but the "
                f"vision program takes {size} tiles"
            )
        runs = [self.vision.run(["image_features"], {"pixel_values": t[None]})[0] for t in tiles]
        return CropFeatures(np.concatenate(runs), [(0, 0)] * len(tiles), [len(t) for t in tiles])

    def media_features(
        self,
        images: Sequence[Path | str] = (),
        videos: Sequence[Sequence[Path | str]] = (),
        fps: float | None = None,
    ) -> CropFeatures:
        """The features of `images` and then `videos`, in that order."""
        return join(self.image_features(images), self.video_features(videos, fps))

    def encode_chat(
        self,
        messages: list[dict[str, Any]],
        thinking: bool | None = None,
        images: np.ndarray | None = None,
    ) -> list[int]:
        """The conversation's token ids, each image part's placeholder (each video part's
        <video>) replaced in the rendered text by its picture's (video's) sequence:
        `images` are the pictures' and videos' features (image_features,
        video_features, media_features), in the order of the conversation's parts."""
        from runtime.chat import check_messages, texts

        videos = self.video_token is not None
        for i, m in enumerate(check_messages(messages, parts=True, videos=videos)):
            for name, kind in ((self.image_placeholder, "image"), (VIDEO, "video")):
                if any(name in t for t in texts(m["content"])):
                    what = "the image placeholder" if kind == "image" else "the video token"
                    raise BundleError(
                        f"message {i} ({m['role']}) writes {what} {name!r} in its text; "
                        f'give each {kind} as an {{"type": "{kind}"}} part instead'
                    )
        marks = [re.escape(self.image_placeholder)] + ([re.escape(VIDEO)] if videos else [])
        pieces = re.split(f"({'|'.join(marks)})", self.render_chat(messages, thinking))
        said = ["video" if p == VIDEO else "image" for p in pieces[1::2]]
        grids = list(getattr(images, "grids", []))
        frames = list(getattr(images, "frames", [0] * len(grids)))
        given = ["video" if n else "image" for n in frames]
        if said != given:
            raise BundleError(
                f"the conversation has {said.count('image')} image and {said.count('video')} "
                f"video parts but the features given are of {given.count('image')} pictures "
                f"and {given.count('video')} videos; this bundle's pictures are each cut "
                "into their own number of crops, so give encode_chat the features of its "
                "pictures and videos (image_features, video_features, in the parts' order) "
                "as images="
            )
        text = pieces[0]
        for (rows, cols), n, piece in zip(grids, frames, pieces[2::2], strict=True):
            text += frame_sequence(self.sequence(0, 0), n) if n else self.sequence(rows, cols)
            text += piece
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def sequence(self, rows: int, cols: int) -> str:
        """The text in place of the placeholder of a picture of split grid (rows, cols)."""
        token, per_crop = self.image_placeholder, self.tokens_per_image
        if self.tiled:
            return tiles_sequence(self.image_sequence, token, per_crop, crops_of(rows, cols))
        return image_sequence(rows, cols, token, per_crop)

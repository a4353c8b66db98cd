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

The decoder is the ordinary one (1-D positions, causal mask, features merged at the
image tokens). No torch and no transformers at run time.
"""

from __future__ import annotations

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


class CropFeatures(np.ndarray):
    """Image feature rows [tokens, hidden] that remember the (rows, cols) grid of each
    picture they came from (`grids`, in order), which its prompt's sequence needs."""

    grids: list[RowsCols]

    def __new__(cls, rows: np.ndarray, grids: Sequence[RowsCols]) -> CropFeatures:
        made = np.asarray(rows).view(cls)
        made.grids = [(int(r), int(c)) for r, c in grids]
        return made

    def __array_finalize__(self, obj: Any) -> None:
        self.grids = getattr(obj, "grids", [])


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

    def encode_chat(
        self,
        messages: list[dict[str, Any]],
        thinking: bool | None = None,
        images: np.ndarray | None = None,
    ) -> list[int]:
        """The conversation's token ids, each image part's placeholder replaced in the
        rendered text by its picture's sequence: `images` are the pictures' features
        (image_features), in the order of the conversation's image parts."""
        from runtime.chat import check_messages, texts

        for i, m in enumerate(check_messages(messages, parts=True)):
            if any(self.image_placeholder in t for t in texts(m["content"])):
                raise BundleError(
                    f"message {i} ({m['role']}) writes the image placeholder "
                    f"{self.image_placeholder!r} in its text; give each image as an "
                    '{"type": "image"} part instead'
                )
        pieces = self.render_chat(messages, thinking).split(self.image_placeholder)
        grids = list(getattr(images, "grids", []))
        if len(pieces) - 1 != len(grids):
            raise BundleError(
                f"the conversation has {len(pieces) - 1} image parts but {len(grids)} "
                "pictures' features were given; this bundle's pictures are each cut into "
                "their own number of crops, so give encode_chat the features of its "
                "pictures (image_features) as images="
            )
        text = pieces[0]
        for (rows, cols), piece in zip(grids, pieces[1:], strict=True):
            text += self.sequence(rows, cols)
            text += piece
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def sequence(self, rows: int, cols: int) -> str:
        """The text in place of the placeholder of a picture of split grid (rows, cols)."""
        token, per_crop = self.image_placeholder, self.tokens_per_image
        if self.tiled:
            return tiles_sequence(self.image_sequence, token, per_crop, crops_of(rows, cols))
        return image_sequence(rows, cols, token, per_crop)

    def ask(self, text: str, images: Sequence[Path | str] = ()) -> tuple[list[int], np.ndarray]:
        """VisionBundle.ask: the images' features first, which decide their tokens."""
        parts: list[dict[str, str]] = [{"type": "image"} for _ in images]
        parts.append({"type": "text", "text": text})
        features = self.image_features(images)
        return self.encode_chat([{"role": "user", "content": parts}], images=features), features

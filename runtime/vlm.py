"""Run a vision-language bundle (image-text-to-text): images in, tokens out.

The bundle is a causal-LM bundle (runtime/causal_lm.py runs its text decoder, with
prefix reuse, chunked prefill, guided decoding and the logits processors) plus a
vision program, vision.onnx, and the checkpoint's preprocessor_config.json
(bundle.json "vision", builders/causal_lm/bundle.py). A prompt with images goes:

    image files  -> runtime/images.py: the processor's pixel values, in numpy
                 -> vision.onnx: image features [images * tokens_per_image, hidden]
    messages     -> the chat template, one image placeholder per image part, each
                    expanded in the text to the image's sequence (tokens_per_image
                    image tokens, with the markers around them the checkpoint's
                    processor writes), then tokenized
                 -> the decoder, whose graph writes the k-th feature row at the k-th
                    image token (builders/causal_lm/export.py)

No torch and no transformers' models at run time: onnxruntime, numpy, Pillow and
tokenizers (transformers' template renderer for the chat, as for text bundles).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runtime.causal_lm import Bundle, Generation, Row
from runtime.encoder import session_options
from runtime.format import BundleError, read_json
from runtime.sampling import Sampler

TASK = "image-text-to-text"


class VisionBundle(Bundle):
    """A vision-language bundle: Bundle's generation, with images."""

    TASK = TASK

    def __init__(self, path: Path, threads: int | None = None) -> None:
        import onnxruntime as ort

        super().__init__(path, threads)
        spec = self.meta.get("vision")
        if not isinstance(spec, dict) or self.image_token is None:
            raise BundleError(f"{path}: an image-text-to-text bundle without its vision program")
        engine = spec["engine"]
        # Beside a decoder of another backend, the vision session's threads must not
        # spin-wait after their run: on 2 cores they took the Inductor prefill's CPU
        # and doubled its time to first token (bench/results/vlm_spin_2026-12-06.txt);
        # beside an onnxruntime decoder, spinning costs nothing measurable.
        decoder = self.meta["engines"]["main"]["backend"]
        options = session_options(threads, spin=decoder == "onnxruntime")
        self.vision = ort.InferenceSession(
            str(self.path / engine["file"]), options, providers=[engine["provider"]]
        )
        self.processor: dict[str, Any] = read_json(self.path / spec["processor"])
        # the checkpoint's video_preprocessor_config.json, where it has one
        named = spec.get("video_processor")
        self.video_processor: dict[str, Any] | None = (
            read_json(self.path / named) if named else None
        )
        self.tokens_per_image = int(spec["tokens_per_image"])
        self.image_placeholder = str(spec["image_placeholder"])
        self.image_sequence = str(spec["image_sequence"])

    def pixels(self, paths: Sequence[Path | str]) -> np.ndarray:
        """The pixel values of the images at `paths`, as the checkpoint's processor
        makes them (runtime/images.py; a bad file is a BundleError naming it)."""
        from runtime import images

        return images.pixel_values([Path(p) for p in paths], self.processor)["pixel_values"]

    def image_features(self, paths: Sequence[Path | str]) -> np.ndarray:
        """The features of the images at `paths`, [len(paths) * tokens_per_image,
        hidden], in order: the vision program on one image at a time (its graph takes
        one, builders/vision/)."""
        if not paths:
            return self.no_images
        pixels = self.pixels(paths)
        runs = [
            self.vision.run(["image_features"], {"pixel_values": pixels[i : i + 1]})[0]
            for i in range(len(pixels))
        ]
        return np.concatenate(runs)

    def encode_chat(
        self,
        messages: list[dict[str, Any]],
        thinking: bool | None = None,
        images: np.ndarray | None = None,
    ) -> list[int]:
        """The conversation's token ids (Bundle.encode_chat), each image part's
        placeholder expanded in the rendered text to the image's sequence, as the
        checkpoint's processor expands it before tokenizing (builders/vision/export.py
        recorded both, checked against the processor). `images`, the pictures'
        features, is unused: every picture here has one sequence (the subclasses whose
        pictures are each their own size read it)."""
        from runtime.chat import check_messages, texts

        for i, m in enumerate(check_messages(messages, parts=True)):
            if any(self.image_placeholder in t for t in texts(m["content"])):
                raise BundleError(
                    f"message {i} ({m['role']}) writes the image placeholder "
                    f"{self.image_placeholder!r} in its text; give each image as an "
                    '{"type": "image"} part instead'
                )
        text = self.render_chat(messages, thinking)
        text = text.replace(self.image_placeholder, self.image_sequence)
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def media_features(
        self,
        images: Sequence[Path | str] = (),
        videos: Sequence[Sequence[Path | str]] = (),
        fps: float | None = None,
    ) -> np.ndarray:
        """The features of `images` and then `videos` (each its frames' image files,
        taken `fps` a second), in that order; here, pictures only (the bundles that take
        videos, grid_vlm.py and crops_vlm.py, read them)."""
        if videos:
            raise BundleError("this bundle's processor takes no video")
        return self.image_features(images)

    def ask(
        self,
        text: str,
        images: Sequence[Path | str] = (),
        videos: Sequence[Sequence[Path | str]] = (),
        fps: float | None = None,
    ) -> tuple[list[int], np.ndarray]:
        """One user turn: the images, then the videos, then the text (the order
        llava-1.5's and most VLMs' templates put them in), as token ids and the
        features; the features first, which decide the tokens where each picture (or
        video) is its own size."""
        parts: list[dict[str, str]] = [{"type": "image"} for _ in images]
        parts += [{"type": "video"} for _ in videos]
        parts.append({"type": "text", "text": text})
        features = self.media_features(images, videos, fps)
        return self.encode_chat([{"role": "user", "content": parts}], images=features), features

    def generate_images(
        self,
        prompts: list[tuple[list[int], np.ndarray]],
        max_new_tokens: int,
        sampler: Sampler | None = None,
    ) -> Generation:
        """Generate for a batch of (token ids, image features) prompts."""
        sampler = sampler or Sampler()
        rows = [Row(ids, max_new_tokens, None, sampler, feats) for ids, feats in prompts]
        return self.generate_rows(rows)

"""InductorVisionBundle: a vision-language bundle (image-text-to-text) whose decoder is
the inductor engine (runtime/inductor.py): VisionBundle's images, chat and features,
InductorBundle's forward over the device cache.

    image files -> runtime/images.py -> vision.onnx on onnxruntime (bundle.json
                   vision.engine): features [images * tokens_per_image, hidden]
    token ids   -> the prefill program, window by window, each window with the
                   feature rows of its own image tokens (runtime/inductor_lm.py), then
                   the decode program, whose tokens are text

The vision program is the ONNX one on both backends (builders/causal_lm/backends/
_images.py says why), so this bundle runs with torch (the decoder's programs) and
onnxruntime (the vision program), and without transformers' models.

InductorGridVisionBundle is the same over a grid vision program and an M-RoPE decoder
(Qwen2-VL, Qwen2.5-VL; bundle.json vision.layout "grid"): GridVisionBundle's pictures,
each its own grid and token count, and its [B, T, 3] positions, which the programs take
as they are (program.json position_axes 3) and the decode step advances by one on all
three axes, as runtime/causal_lm.py steps them. InductorCropsVisionBundle is the same
over a crops vision program (Idefics3; vision.layout "crops"): CropsVisionBundle's
pictures, each cut into its own number of crops and expanded to its own sequence, before
the ordinary decoder.
"""

from __future__ import annotations

import numpy as np

from runtime.causal_lm import Generation
from runtime.crops_vlm import CropsVisionBundle
from runtime.grid_vlm import GridVisionBundle
from runtime.inductor_lm import InductorBundle
from runtime.sampling import Sampler
from runtime.vlm import VisionBundle


class InductorVisionBundle(InductorBundle, VisionBundle):
    """A vision-language bundle of the inductor backend (ordinary variant)."""

    def generate_images(
        self,
        prompts: list[tuple[list[int], np.ndarray]],
        max_new_tokens: int,
        sampler: Sampler | None = None,
    ) -> Generation:
        """VisionBundle.generate_images; greedy decoding stays on the device
        (InductorBundle.generate), each prompt's features merged by its prefill."""
        if sampler is not None and not sampler.greedy:  # Bundle's loop, which reads logits
            return VisionBundle.generate_images(self, prompts, max_new_tokens, sampler)
        ids = [p for p, _ in prompts]
        return self._greedy(ids, max_new_tokens, images=[f for _, f in prompts])


class InductorGridVisionBundle(InductorVisionBundle, GridVisionBundle):
    """An inductor vision-language bundle of a grid vision program and an M-RoPE decoder:
    GridVisionBundle's pictures and positions, InductorVisionBundle's decoder (the
    module docstring)."""


class InductorCropsVisionBundle(InductorVisionBundle, CropsVisionBundle):
    """An inductor vision-language bundle of a crops vision program: CropsVisionBundle's
    pictures and sequences, InductorVisionBundle's decoder (the module docstring)."""

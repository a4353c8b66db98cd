"""validate (image-text-to-text): the bundle through runtime/vlm.py against the
reference, on the same questions and images.

  * pixels: the runtime's numpy preprocessing of each image against the processor's
    (max_abs_pixel_diff);
  * tokens and logits: as a causal LM's (builders/causal_lm/validate.py compare): the
    bundle renders each turn through its own template and expands the image
    placeholders itself (tokenizer_match_rate), generates greedily in batches with
    the images' features, and its teacher-forced logits are compared at every
    position;
  * image sensitivity: the first prompt's last logits with the second image instead
    of the first move by image_sensitivity, against the reference's move
    (image_sensitivity_ratio): a bundle that ignored its images would score 0.

Each question's image and the bundle's answer go into the evidence as `answers`, which
the manifest records and the recipe's page shows beside its image.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(min_length=1, description="Questions (must equal the reference's).")
    images: list[str] = Field(min_length=2, description="Images (must equal the reference's).")
    max_new_tokens: int = Field(ge=1, description="Greedy tokens per prompt.")
    scored_positions: int = Field(
        0, ge=0, description="Evaluation-text positions (must equal the reference's)."
    )
    task: str = Field(pattern="^image-text-to-text$", description="The recipe's task.")
    chat: bool = Field(False, description="Unused: a VLM prompt is always a chat turn.")


def build(request: Request, writer: Writer) -> None:
    import numpy as np

    import runtime
    import runtime.crops_vlm  # runtime.open's runner of a crops vision program (Idefics3)
    import runtime.grid_vlm  # runtime.open's runner of a grid vision program (Qwen2.5-VL)
    import runtime.inductor_vlm  # runtime.open's runner of an inductor bundle
    from builders.causal_lm.validate import compare, score_text
    from builders.common import measure
    from builders.data import images
    from runtime import Sampler
    from runtime.vlm import VisionBundle

    opts = Options.model_validate(request.options)
    m = measure.start(request, lambda path: runtime.open(path, expect=VisionBundle))
    bundle, ref = m.bundle, m.reference
    stored = m.arrays("pixels.npz")
    pixel_diff = max(
        float(np.abs(bundle.pixels([images.path(name)])[0] - stored[name]).max())
        for name in stored.files
    )
    asked = [
        bundle.ask(prompt, [images.path(opts.images[i % len(opts.images)])])
        for i, prompt in enumerate(opts.prompts)
    ]
    _, tokenizer_agree = m.agreement([ids for ids, _ in asked])
    features = {tuple(ids): feats for ids, feats in asked}  # teacher forcing reads them

    class WithImages:
        """compare()'s view of the bundle: logits of a record's ids with its image."""

        def logits(self, ids: list[int]) -> np.ndarray:
            prompt = max((k for k in features if tuple(ids[: len(k)]) == k), key=len)
            # a generated image token is text (the tiny Idefics3 generates <image>)
            return bundle.logits(ids, features[prompt], generated=len(ids) - len(prompt))

    gen, per_s = m.generate(
        asked,
        "greedy decode",
        lambda b: bundle.generate_images(b, opts.max_new_tokens, Sampler()),
    )
    metrics = compare(WithImages(), ref, m.arrays("logits.npz"), gen)
    first_ids, first_feats = asked[0]
    # asked again with the other image, as the reference does (its tokens may differ in
    # number: a grid model's pictures are each their own size)
    moved = bundle.logits(*bundle.ask(opts.prompts[0], [images.path(opts.images[1])]))[-1]
    own = bundle.logits(first_ids, first_feats)[-1]
    sensitivity = float(np.abs(moved - own).max())
    reference = float(ref["image_sensitivity"]["max_abs_logit_change"])
    if opts.scored_positions:  # the decoder on the evaluation text, no image
        metrics.update(score_text(bundle, ref, m.arrays("text.npz")))
    metrics.update(
        tokenizer_match_rate=tokenizer_agree,
        decode_tokens_per_s=per_s,
        max_abs_pixel_diff=pixel_diff,
        image_sensitivity=sensitivity,
        reference_image_sensitivity=reference,
        image_sensitivity_ratio=sensitivity / reference if reference else 0.0,
    )
    said = [bundle.decode(g) for g in gen]
    records = ref["records"]
    outputs = [f"[{r['image']}] {text}" for r, text in zip(records, said, strict=True)]
    # What the site shows beside each image (issue 40); the manifest keeps each
    # answer's start (kiln.evidence.record), this file the whole of it.
    answers = [
        {"image": r["image"], "prompt": r["prompt"], "answer": text}
        for r, text in zip(records, said, strict=True)
    ]
    writer.evidence(metrics, outputs, m.backend("main"), answers=answers)
    request.log(
        "token match {token_match_rate:.3f}, max |dlogit| {max_abs_logit_diff:.2e}, pixels "
        "{max_abs_pixel_diff:.1e}, image sensitivity {image_sensitivity:.3f} "
        "(reference {reference_image_sensitivity:.3f})".format(**metrics)
    )

"""reference (image-text-to-text): the independent fp32 answer a VLM bundle is judged
against, from transformers alone: the checkpoint's own processor (its image
processor on PIL, its chat template, its placeholder expansion) and the model's own
greedy `generate` with the image, then the teacher-forced logits of prompt plus
continuation with the same pixels. Generation stops at EOS or the template's end of
turn, like the runtime; nothing else processes the logits.

It also records what the bundle is checked against besides tokens: each image's pixel
values (pixels.npz), how far the first prompt's last logits move when its image is
swapped for the second validation image (`image_sensitivity`): a bundle whose logits
do not move that way has lost its image; and, with scored_positions, the language
model's next-token scores on the shipped evaluation text (text.npz), which a quantized
recipe's statistical gates read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


# Architectures whose processor gives a picture's tiles as pixel_values [tiles, 3, S, S]
# (InternVLProcessor), where the others give [1, ...] a picture.
TILES_IN_BATCH = ("InternVLForConditionalGeneration",)


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(min_length=1, description="Questions, one per image.")
    images: list[str] = Field(min_length=2, description="builders/data/images/ files.")
    max_new_tokens: int = Field(ge=1, description="Greedy tokens per prompt.")
    dtype: str = Field(pattern="^float32$", description="Reference dtype; always fp32.")
    scored_positions: int = Field(
        0, ge=0, description="Positions of the shipped evaluation text to score; 0: none."
    )
    task: str = Field(pattern="^image-text-to-text$", description="The task.")
    chat: bool = Field(False, description="Unused: a VLM prompt is always a chat turn.")


def messages(prompt: str) -> list[dict[str, Any]]:
    """One user turn: the image, then the question (the shape runtime/vlm.py asks in)."""
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]


def generated_images(model: Any, encoded: Any, full: Any) -> Any:
    """Teacher-forced logits [seq, vocab] of prompt plus continuation when the model
    generated an image token: the prompt with its pixels, then the continuation over
    its cache, as generate fed them, so a generated image token is embedded as text.
    One forward of both would give the model more image tokens than its pixels have
    features, which transformers refuses (the tiny Idefics3 generates <image>, the tiny
    Qwen3-VL <|image_pad|>; a grid model's second forward takes its positions on from
    the first's rope deltas, as generate's decode steps do)."""
    import torch

    from builders.common.hf import cache_keyword

    prompt = encoded["input_ids"].shape[1]
    pixels = {k: v for k, v in encoded.items() if k not in ("input_ids", "attention_mask")}
    first = model(input_ids=full[:, :prompt], **pixels, use_cache=True)
    rest = model(
        input_ids=full[:, prompt:],
        use_cache=True,
        **{cache_keyword(model): first.past_key_values},
    )
    return torch.cat([first.logits[0], rest.logits[0]])


def build(request: Request, writer: Writer) -> None:
    import numpy as np
    import torch
    from transformers.image_utils import load_image

    from builders.causal_lm.reference import eval_windows, greedy, save_text_scores, through_eos
    from builders.common.hf import IMAGE_TEXT, load_causal_lm, load_processor
    from builders.data import images

    opts = Options.model_validate(request.options)
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    torch.manual_seed(0)
    processor = load_processor(checkpoint)
    tokenizer = processor.tokenizer
    model = load_causal_lm(checkpoint, IMAGE_TEXT)
    config, eos_ids = greedy(model, tokenizer, opts.max_new_tokens, chat=True)
    image_token = getattr(model.config, "image_token_id", None)
    pictures = {name: load_image(str(images.path(name))) for name in opts.images}
    # the evaluation text's windows first: a recipe asking more positions than it gives
    # fails here, not after the whole reference has run
    windows = eval_windows(tokenizer, opts.scored_positions) if opts.scored_positions else None

    def inputs(prompt: str, image: str) -> Any:
        text = processor.apply_chat_template(messages(prompt), add_generation_prompt=True)
        return processor(images=[pictures[image]], text=text, return_tensors="pt")

    records, logits, pixels = [], {}, {}
    for i, prompt in request.progress(enumerate(opts.prompts), len(opts.prompts), "fp32 reference"):
        image = opts.images[i % len(opts.images)]
        encoded = inputs(prompt, image)
        prompt_ids = encoded["input_ids"][0].tolist()
        with torch.no_grad():
            out = model.generate(**encoded, generation_config=config)
            new = through_eos(out[0, len(prompt_ids) :].tolist(), eos_ids)
            full = torch.tensor([prompt_ids + new])
            # Gemma 3's processor marks the image tokens (token_type_ids), which its mask
            # reads; the generated tokens are text
            marks = encoded.get("token_type_ids")
            typed = (
                {}
                if marks is None
                else {"token_type_ids": torch.nn.functional.pad(marks, (0, len(new)))}
            )
            if "image_grid_thw" in encoded:  # Qwen2.5-VL: get_rope_index reads the grids
                typed = {  # and the image tokens' marks; the generated tokens are text
                    "image_grid_thw": encoded["image_grid_thw"],
                    "mm_token_type_ids": torch.nn.functional.pad(
                        encoded["mm_token_type_ids"], (0, len(new))
                    ),
                }
            # a generated image token is text: one forward would give the model more
            # image tokens than its pixels have features (the tiny Idefics3 and Qwen3-VL
            # generate theirs); Gemma 3's marks keep the one forward
            if image_token not in new or "token_type_ids" in typed:
                forward = model(input_ids=full, pixel_values=encoded["pixel_values"], **typed)
                scores = forward.logits[0]
            else:
                scores = generated_images(model, encoded, full)
            logits[f"p{i}"] = scores.numpy().astype(np.float32)
        # one picture's pixel values; a grid processor's (Qwen2.5-VL) are all its patches,
        # and InternVL's processor puts a picture's tiles on the batch axis
        picture = encoded["pixel_values"]
        whole = "image_grid_thw" in encoded or type(model).__name__ in TILES_IN_BATCH
        picture = picture if whole else picture[0]
        pixels[image] = picture.numpy().astype(np.float32)
        records.append({"prompt": prompt, "image": image, "prompt_ids": prompt_ids, "tokens": new})
    # the first prompt's last position with the second image instead of the first
    swapped = inputs(opts.prompts[0], opts.images[1])
    with torch.no_grad():
        moved = model(**swapped).logits[0, -1].numpy()
    last = logits["p0"][len(records[0]["prompt_ids"]) - 1]
    np.savez(writer.path("logits.npz"), **logits)
    np.savez(writer.path("pixels.npz"), **pixels)
    # the language model on text alone (a quantized recipe's statistical gates)
    text = save_text_scores(writer, model, windows)
    writer.write_json(
        "reference.json",
        {
            "engine": "transformers",
            "dtype": "float32",
            "attn_implementation": "eager",
            "architecture": type(model).__name__,
            "eos": eos_ids,
            "records": records,
            **({"text": text} if text is not None else {}),
            "image_sensitivity": {
                "record": 0,
                "image": opts.images[1],
                "max_abs_logit_change": float(np.abs(moved - last).max()),
            },
        },
    )

"""reference: the independent fp32 answer a bundle is judged against.

transformers in fp32 with eager attention, on the fetched checkpoint: its own
tokenizer (transformers' AutoTokenizer, not the runtime's code path), its own
greedy `generate`, and the teacher-forced logits at every position of prompt plus
continuation. Generation semantics match the runtime exactly: stop at EOS, no
min_new_tokens, no repetition penalty (FIELD_NOTES: a processor difference is a
comparison of different things).

A model with sliding-window layers also records what its window does to the answer:
the longest prompt's teacher-forced logits with the window and with it widened past
the sequence (the config's sliding_window, which transformers' masks read on every
forward). A window that changes nothing would prove nothing about a bundle that
reproduces these logits (builders/causal_lm/_features.py reads it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(min_length=1, description="Prompts to run.")
    max_new_tokens: int = Field(ge=1, description="Greedy tokens per prompt.")
    dtype: str = Field(pattern="^float32$", description="Reference dtype; always fp32.")
    scored_positions: int = Field(
        0, ge=0, description="Positions of the shipped evaluation text to score; 0: none."
    )
    task: str = Field("text-generation", pattern="^text-generation$", description="The task.")
    chat: bool = Field(False, description="Each prompt is one user turn of a chat.")


def build(request: Request, writer: Writer) -> None:
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from builders.common.hf import load_causal_lm

    opts = Options.model_validate(request.options)
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = load_causal_lm(checkpoint)
    if "adapter" in request.inputs:  # peft's own PeftModel, unmerged, is the reference
        from builders.causal_lm._adapter import with_adapter

        model = with_adapter(request, model, merge=False)
    if opts.chat and tokenizer.chat_template is None:
        raise request.error(
            "validation.chat is set, but the checkpoint has no chat template",
            "leave validation.chat out for a checkpoint without one",
        )
    config, eos_ids = greedy(model, tokenizer, opts.max_new_tokens, opts.chat)
    # the text's windows first: a recipe asking more positions than the text gives
    # fails here, not after the whole reference has run
    text_windows = eval_windows(tokenizer, opts.scored_positions) if opts.scored_positions else None
    records, logits = [], {}
    for i, prompt in request.progress(enumerate(opts.prompts), len(opts.prompts), "fp32 reference"):
        if opts.chat:
            turn = [{"role": "user", "content": prompt}]
            chat = tokenizer.apply_chat_template(turn, add_generation_prompt=True, return_dict=True)
            prompt_ids = list(chat["input_ids"])
        else:
            prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        with torch.no_grad():
            ids = torch.tensor([prompt_ids])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
            new = through_eos(out[0, len(prompt_ids) :].tolist(), eos_ids)
            full = torch.tensor([prompt_ids + new])
            logits[f"p{i}"] = model(full).logits[0].numpy().astype(np.float32)
        records.append({"prompt": prompt, "prompt_ids": prompt_ids, "tokens": new})
    np.savez(writer.path("logits.npz"), **logits)
    window = _window_effect(model, records, logits)
    text = save_text_scores(writer, model, text_windows)
    writer.write_json(
        "reference.json",
        {
            "engine": "transformers",
            "dtype": "float32",
            "attn_implementation": "eager",
            "eos": eos_ids,
            "records": records,
            **({"text": text} if text is not None else {}),
            **({"sliding_window": window} if window is not None else {}),
        },
    )


def greedy(model: Any, tokenizer: Any, new_tokens: int, chat: bool) -> tuple[Any, list[int]]:
    """transformers' greedy GenerationConfig for a reference, and the ids it stops at:
    the model's EOS and, for a chat turn, the template's end of turn (the tokenizer's
    eos token), as the runtime stops; nothing else processes the logits."""
    from transformers import GenerationConfig

    eos = model.generation_config.eos_token_id
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
    if chat:
        end = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
        eos_ids += [end] if isinstance(end, int) and end not in eos_ids else []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    config = GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=new_tokens,
        eos_token_id=eos_ids,
        pad_token_id=pad,
    )
    return config, eos_ids


def through_eos(new: list[int], eos_ids: list[int]) -> list[int]:
    """Generated ids up to and including the first stop id."""
    at = next((j for j, t in enumerate(new) if t in eos_ids), None)
    return new if at is None else new[: at + 1]


def save_text_scores(writer: Writer, model: Any, windows: Any) -> dict[str, Any] | None:
    """The model's scores on the evaluation text's windows (score_eval_text): the
    per-position arrays into text.npz, the summary returned for reference.json; None
    without windows."""
    import numpy as np

    if windows is None:
        return None
    text = score_eval_text(model, windows)
    np.savez(writer.path("text.npz"), nll=text.pop("nll"), top1=text.pop("top1"))
    return text


def _window_effect(
    model: Any, records: list[dict[str, Any]], logits: dict[str, Any]
) -> dict[str, float] | None:
    """The sliding window (the narrowest a layer has) and, on the record with the longest
    prompt, the largest logit change past the window when the window is widened away:
    0 where the window never bites (a prompt within it) or transformers ignores it."""
    import numpy as np
    import torch
    from transformers import DynamicCache

    layers = DynamicCache(config=model.config).layers
    sizes = [w for w in (getattr(layer, "sliding_window", None) for layer in layers) if w]
    if not sizes:
        return None
    window = int(min(sizes))
    i = max(range(len(records)), key=lambda j: (len(records[j]["prompt_ids"]), -j))
    full = torch.tensor([records[i]["prompt_ids"] + records[i]["tokens"]])
    config = model.config
    kept = config.sliding_window
    config.sliding_window = 2 * full.shape[1] + max(sizes)  # wider than the sequence
    try:
        with torch.no_grad():
            unwindowed = model(full).logits[0].numpy().astype(np.float32)
    finally:
        config.sliding_window = kept
    effect = np.abs(unwindowed[window:] - logits[f"p{i}"][window:])
    return {
        "window": float(window),
        "record": float(i),
        "full_attention_max_abs_diff": float(effect.max()) if effect.size else 0.0,
    }


def eval_windows(tokenizer: Any, positions: int) -> list[list[int]]:
    from builders.causal_lm.scoring import TEXT, windows

    ids = tokenizer(TEXT.read_text(), add_special_tokens=True)["input_ids"]
    return windows(ids, positions)


def score_eval_text(model: Any, chunks: list[list[int]]) -> dict[str, Any]:
    """fp32 next-token NLL and top-1 over the shipped evaluation text."""
    import numpy as np
    import torch

    from builders.causal_lm.scoring import next_token_scores

    nll, top1 = [], []
    with torch.no_grad():
        for chunk in chunks:
            logits = model(torch.tensor([chunk])).logits[0].numpy()
            n, t = next_token_scores(logits, chunk)
            nll.append(n)
            top1.append(t)
    return {"windows": chunks, "nll": np.concatenate(nll), "top1": np.concatenate(top1)}

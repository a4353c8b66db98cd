"""reference (text2text-generation): transformers fp32 eager greedy `generate`.

Each prompt alone, transformers' own tokenizer. Generation semantics are the
runtime's: start at config.decoder_start_token_id (T5: 0; FIELD_NOTES), stop at
EOS, and no processor that the runtime does not apply: forced BOS/EOS, n-gram
blocking, repetition penalty and minimum length are switched off explicitly, since a
real checkpoint's generation_config may set them (FIELD_NOTES: a processor
difference is a comparison of different things). Teacher-forced decoder logits of
start token plus continuation are kept for the logit metrics.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(min_length=1, description="Prompts to run.")
    max_new_tokens: int = Field(ge=1, description="Greedy tokens per prompt.")
    dtype: str = Field(pattern="^float32$", description="Reference dtype; always fp32.")
    task: str = Field(pattern="^text2text-generation$", description="The recipe's task.")


def build(request: Any, writer: Any) -> None:
    import numpy as np
    import torch
    from transformers import AutoTokenizer, GenerationConfig

    from builders.seq2seq.export import load_seq2seq

    opts = Options.model_validate(request.options)
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = load_seq2seq(checkpoint)
    eos = model.generation_config.eos_token_id
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
    start = model.config.decoder_start_token_id
    config = GenerationConfig(
        do_sample=False,
        num_beams=1,
        max_new_tokens=opts.max_new_tokens,
        eos_token_id=eos_ids,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0],
        decoder_start_token_id=start,
        forced_bos_token_id=None,
        forced_eos_token_id=None,
        no_repeat_ngram_size=0,
        repetition_penalty=1.0,
        min_length=0,
    )
    records, logits = [], {}
    for i, prompt in request.progress(enumerate(opts.prompts), len(opts.prompts), "fp32 reference"):
        prompt_ids = tokenizer(prompt, add_special_tokens=True)["input_ids"]
        with torch.no_grad():
            ids = torch.tensor([prompt_ids])
            out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
            new = out[0, 1:].tolist()  # generate's output starts with the start token
            if any(t in eos_ids for t in new):
                new = new[: next(j for j, t in enumerate(new) if t in eos_ids) + 1]
            target = torch.tensor([[start, *new]])
            logits[f"p{i}"] = model(input_ids=ids, decoder_input_ids=target).logits[0].numpy()
        records.append({"prompt": prompt, "prompt_ids": prompt_ids, "tokens": new})
    np.savez(writer.path("logits.npz"), **{k: v.astype(np.float32) for k, v in logits.items()})
    writer.write_json(
        "reference.json",
        {
            "engine": "transformers",
            "dtype": "float32",
            "attn_implementation": "eager",
            "eos": eos_ids,
            "decoder_start_token_id": start,
            "records": records,
        },
    )

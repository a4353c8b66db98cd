"""reference (text-classification): transformers fp32 eager class probabilities.

Each prompt alone (batch 1, no padding), with transformers' own tokenizer: the
answer the bundle's padded batches must reproduce.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(min_length=1, description="Texts to classify.")
    dtype: str = Field(pattern="^float32$", description="Reference dtype; always fp32.")
    task: str = Field(pattern="^text-classification$", description="The recipe's task.")


def build(request: Request, writer: Writer) -> None:
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from builders.classify.export import load_classifier

    opts = Options.model_validate(request.options)
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = load_classifier(checkpoint)
    records, logits = [], {}
    for i, prompt in request.progress(enumerate(opts.prompts), len(opts.prompts), "fp32 reference"):
        encoded = tokenizer(prompt, add_special_tokens=True, return_tensors="pt")
        with torch.no_grad():
            row = model(**encoded).logits[0]
        probs = torch.softmax(row, dim=-1)
        logits[f"p{i}"] = row.numpy().astype(np.float32)
        records.append(
            {
                "prompt": prompt,
                "prompt_ids": encoded["input_ids"][0].tolist(),
                "probs": probs.tolist(),
                "label": int(probs.argmax()),
            }
        )
    np.savez(writer.path("logits.npz"), **logits)
    writer.write_json(
        "reference.json",
        {
            "engine": "transformers",
            "dtype": "float32",
            "attn_implementation": "eager",
            "labels": [model.config.id2label[i] for i in range(model.config.num_labels)],
            "records": records,
        },
    )

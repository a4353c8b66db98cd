"""reference (feature-extraction): transformers fp32 eager sentence embeddings.

Each prompt alone (batch 1, no padding), with transformers' own tokenizer, the
states of AutoModel's forward pooled in torch the way sentence-transformers' Pooling
and Normalize modules do (the checkpoint's modules.json, read by export.pooling):
independent of runtime/embed.py's numpy pooling, which validate checks it against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(min_length=1, description="Texts to embed.")
    dtype: str = Field(pattern="^float32$", description="Reference dtype; always fp32.")
    task: str = Field(pattern="^feature-extraction$", description="The recipe's task.")


def pooled(hidden: Any, mask: Any, pooling: dict[str, Any]) -> Any:
    """sentence-transformers' Pooling (mean, cls, max) then Normalize, in torch."""
    import torch

    weights = mask.unsqueeze(-1).to(hidden.dtype)
    if pooling["mode"] == "mean":
        out = (hidden * weights).sum(1) / torch.clamp(weights.sum(1), min=1e-9)
    elif pooling["mode"] == "cls":
        out = hidden[:, 0]
    else:
        out = hidden.masked_fill(weights == 0, -1e9).max(1).values
    return torch.nn.functional.normalize(out, p=2, dim=1) if pooling["normalize"] else out


def build(request: Request, writer: Writer) -> None:
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from builders.embed.export import load_encoder, pooling

    opts = Options.model_validate(request.options)
    checkpoint = request.inputs["checkpoint"] / "checkpoint"
    pool = pooling(request, checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = load_encoder(checkpoint)
    records, vectors = [], {}
    for i, prompt in request.progress(enumerate(opts.prompts), len(opts.prompts), "fp32 reference"):
        encoded = tokenizer(prompt, add_special_tokens=True, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**encoded).last_hidden_state
        vector = pooled(hidden, encoded["attention_mask"], pool)[0]
        vectors[f"p{i}"] = vector.numpy().astype(np.float32)
        records.append({"prompt": prompt, "prompt_ids": encoded["input_ids"][0].tolist()})
    np.savez(writer.path("embeddings.npz"), **vectors)
    writer.write_json(
        "reference.json",
        {
            "engine": "transformers",
            "dtype": "float32",
            "attn_implementation": "eager",
            "architecture": type(model).__name__,
            "pooling": pool,
            "records": records,
        },
    )

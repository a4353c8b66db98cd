"""validate (feature-extraction): the bundle's sentence embeddings vs the reference.

The bundle embeds all prompts in right-padded batches of its max_batch_size; the
reference ran each alone. Metrics (kiln.schema.METRICS): min_embedding_cosine,
max_abs_embedding_diff, tokenizer_match_rate, embed_texts_per_s.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(min_length=1, description="Texts (must equal the reference's).")
    task: str = Field(pattern="^feature-extraction$", description="The recipe's task.")


def compare(want: Any, got: Any) -> dict[str, float]:
    """Cosine per text (in float64) and the largest component difference."""
    import numpy as np

    a, b = want.astype(np.float64), got.astype(np.float64)
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return {
        "min_embedding_cosine": float(cos.min()),
        "max_abs_embedding_diff": float(np.abs(a - b).max()),
    }


def build(request: Any, writer: Any) -> None:
    import numpy as np

    import runtime
    from builders.common import encoder as _encoder

    opts = Options.model_validate(request.options)
    ref_dir = request.inputs["reference"]
    ref = json.loads((ref_dir / "reference.json").read_text())
    stored = np.load(ref_dir / "embeddings.npz")
    want = np.stack([stored[f"p{i}"] for i in range(len(ref["records"]))])
    bundle = runtime.open(request.inputs["bundle"])
    got, agree, per_s = _encoder.measure(request, bundle, opts.prompts, ref, bundle.embeddings)
    metrics = compare(want, got)
    metrics.update(tokenizer_match_rate=agree, embed_texts_per_s=per_s)
    outputs = [f"dim {row.size}, norm {np.linalg.norm(row):.6f}" for row in got]
    _encoder.write_evidence(writer, bundle, metrics, outputs)
    request.log(
        "min cosine {min_embedding_cosine:.9f}, max |d| {max_abs_embedding_diff:.2e}".format(
            **metrics
        )
    )

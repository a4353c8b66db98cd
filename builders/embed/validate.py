"""validate (feature-extraction): the bundle's sentence embeddings vs the reference.

The bundle embeds all prompts in right-padded batches of its max_batch_size; the
reference ran each alone. Metrics (kiln.schema.METRICS): min_embedding_cosine,
max_abs_embedding_diff, tokenizer_match_rate, embed_texts_per_s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


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


def build(request: Request, writer: Writer) -> None:
    import numpy as np

    import runtime
    from builders.common import measure
    from runtime.embed import Embedder

    opts = Options.model_validate(request.options)
    m = measure.start(request, lambda path: runtime.open(path, expect=Embedder))
    stored = m.arrays("embeddings.npz")
    want = np.stack([stored[f"p{i}"] for i in range(len(m.reference["records"]))])
    ids, agree = m.tokenize(opts.prompts)
    got, per_s = m.rows(ids, m.bundle.embeddings)
    metrics = compare(want, got)
    metrics.update(tokenizer_match_rate=agree, embed_texts_per_s=per_s)
    outputs = [f"dim {row.size}, norm {np.linalg.norm(row):.6f}" for row in got]
    writer.evidence(metrics, outputs, m.backend("main"))
    request.log(
        "min cosine {min_embedding_cosine:.9f}, max |d| {max_abs_embedding_diff:.2e}".format(
            **metrics
        )
    )

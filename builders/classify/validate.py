"""validate (text-classification): the bundle's class probabilities vs the reference.

The bundle classifies all prompts in right-padded batches of its max_batch_size;
the reference ran each alone. Metrics (kiln.schema.METRICS): max_abs_prob_diff,
class_match_rate, max_abs_logit_diff, tokenizer_match_rate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(min_length=1, description="Texts (must equal the reference's).")
    task: str = Field(pattern="^text-classification$", description="The recipe's task.")


def compare(ref: dict[str, Any], ref_logits: Any, logits: Any) -> dict[str, float]:
    import numpy as np

    from runtime.classify import softmax

    probs = softmax(logits)
    want = np.asarray([r["probs"] for r in ref["records"]], np.float64)
    theirs = np.stack([ref_logits[f"p{i}"] for i in range(len(ref["records"]))])
    labels = np.asarray([r["label"] for r in ref["records"]])
    return {
        "max_abs_prob_diff": float(np.abs(probs - want).max()),
        "class_match_rate": float((probs.argmax(-1) == labels).mean()),
        "max_abs_logit_diff": float(np.abs(logits - theirs).max()),
    }


def build(request: Request, writer: Writer) -> None:
    import runtime
    from builders.common import measure
    from runtime.classify import Classifier

    opts = Options.model_validate(request.options)
    m = measure.start(request, lambda path: runtime.open(path, expect=Classifier))
    ids, agree = m.tokenize(opts.prompts)
    logits, per_s = m.rows(ids, m.bundle.logits)
    metrics = compare(m.reference, m.arrays("logits.npz"), logits)
    metrics.update(tokenizer_match_rate=agree, classify_texts_per_s=per_s)
    outputs = [m.bundle.labels[int(row.argmax())] for row in logits]
    writer.evidence(metrics, outputs, m.backend("main"))
    request.log(
        "class match {class_match_rate:.3f}, max |dprob| {max_abs_prob_diff:.2e}, "
        "max |dlogit| {max_abs_logit_diff:.2e}".format(**metrics)
    )

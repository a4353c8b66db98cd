"""validate (text2text-generation, automatic-speech-recognition): the bundle's greedy
seq2seq output and decoder logits against the reference.

The same metrics as text-generation (kiln.schema.METRICS), so fp32-exact gates
apply: greedy tokens in right-padded batches of max_batch_size against each prompt
alone; teacher-forced decoder logits (start token plus reference continuation,
every position) max |delta| and cosine; a divergence counts as unexplained unless
the reference's top-2 gap there is under twice the measured max |delta logit|.
Speech reads the shipped clips through the runtime's own numpy log-mel, and
max_abs_feature_diff measures those features against the reference's
WhisperFeatureExtractor features (the input agreement, as tokenizer_match_rate is
for text).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from builders.seq2seq import SPEECH, TASK_PATTERN

if TYPE_CHECKING:
    from builders.common.measure import Measurement
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field([], description="Prompts (must equal the reference's).")
    audio: list[str] = Field([], description="Shipped clips (must equal the reference's).")
    max_new_tokens: int = Field(ge=1, description="Greedy tokens per prompt.")
    task: str = Field(pattern=TASK_PATTERN, description="The recipe's task.")


def compare(
    bundle: Any, ref: dict[str, Any], ref_logits: Any, gen: list[list[int]], inputs: list[Any]
) -> dict[str, float]:
    import numpy as np

    matched = total = 0
    first_div: int | None = None
    max_diff, min_cos = 0.0, 1.0
    gaps: list[tuple[int, int]] = []
    for i, (record, got) in enumerate(zip(ref["records"], gen, strict=True)):
        want = record["tokens"]
        same = [a == b for a, b in zip(want, got, strict=False)]
        agree = next((j for j, s in enumerate(same) if not s), min(len(got), len(want)))
        if agree < len(want):
            gaps.append((i, agree))
            first_div = agree if first_div is None else min(first_div, agree)
        matched += agree
        total += len(want)
        mine, theirs = bundle.logits(inputs[i], want), ref_logits[f"p{i}"]
        max_diff = max(max_diff, float(np.abs(mine - theirs).max()))
        cos = (mine * theirs).sum(-1) / (
            np.linalg.norm(mine, axis=-1) * np.linalg.norm(theirs, axis=-1)
        )
        min_cos = min(min_cos, float(cos.min()))
    unexplained = 0
    for i, pos in gaps:  # decoder row `pos` predicts token `pos` (row 0 reads the start)
        top2 = np.sort(ref_logits[f"p{i}"][pos])[-2:]
        unexplained += int(top2[1] - top2[0] > 2 * max_diff)
    longest = max(len(r["tokens"]) for r in ref["records"])
    return {
        "token_match_rate": matched / total if total else 1.0,
        "first_divergence": float(first_div if first_div is not None else longest),
        "max_abs_logit_diff": max_diff,
        "min_logit_cosine": min_cos,
        "unexplained_divergences": float(unexplained),
    }


def _inputs(m: Measurement, opts: Options) -> tuple[list[Any], dict[str, float]]:
    """What the bundle reads per record, and how far it agrees with the reference's
    input: prompt ids and tokenizer_match_rate, or features and max_abs_feature_diff."""
    import numpy as np

    if opts.task == SPEECH:
        from builders.data import audio

        feats = [m.bundle.read(audio.path(c)) for c in opts.audio]
        theirs = m.arrays("features.npz")
        diff = max(float(np.abs(f - theirs[f"p{i}"]).max()) for i, f in enumerate(feats))
        return feats, {"max_abs_feature_diff": diff}
    ids, agree = m.tokenize(opts.prompts)
    return ids, {"tokenizer_match_rate": agree}


def beam_search(
    bundle: Any, ref: dict[str, Any], inputs: list[Any], max_new_tokens: int
) -> dict[str, Any]:
    """The bundle's beam search (runtime/beams.py) against transformers' on the same
    inputs (the reference's "beams"), as an evidence feature; never part of the verdict."""
    beams = ref.get("beams")
    if not beams:
        return {"proved": False, "check": "the reference has no beam search outputs"}
    want = beams["tokens"]
    rules = {k: beams[k] for k in ("num_beams", "length_penalty", "early_stopping")}
    try:
        got = [bundle.generate([x], max_new_tokens, **rules).tokens[0] for x in inputs[: len(want)]]
    except Exception as exc:  # recorded as unproved: a feature never fails the step
        return {"proved": False, "check": f"raised {type(exc).__name__}: {exc}"}
    same = sum(int(a == b) for a, b in zip(got, want, strict=True))
    return {
        "proved": same == len(want),
        "check": f"beam search ({rules['num_beams']} beams, length_penalty "
        f"{rules['length_penalty']}, early_stopping {rules['early_stopping']}) gives "
        "transformers' beam search output on the same inputs",
        "metrics": {
            "inputs": float(len(want)),
            "equal": float(same),
            "num_beams": float(rules["num_beams"]),
        },
    }


def build(request: Request, writer: Writer) -> None:
    import runtime
    from builders.common import measure
    from runtime.seq2seq import Seq2Seq

    opts = Options.model_validate(request.options)
    m = measure.start(request, lambda path: runtime.open(path, expect=Seq2Seq))
    bundle = m.bundle
    inputs, agreement = _inputs(m, opts)
    gen, per_s = m.generate(
        inputs, "greedy seq2seq", lambda b: bundle.generate(b, opts.max_new_tokens)
    )
    metrics = compare(bundle, m.reference, m.arrays("logits.npz"), gen, inputs)
    metrics.update(agreement)
    metrics["decode_tokens_per_s"] = per_s
    features = {"beam_search": beam_search(bundle, m.reference, inputs, opts.max_new_tokens)}
    writer.evidence(
        metrics, [bundle.decode(g) for g in gen], m.backend("decoder"), features=features
    )
    request.log(
        "token match {token_match_rate:.3f}, max |dlogit| {max_abs_logit_diff:.2e}, "
        "min cosine {min_logit_cosine:.6f}".format(**metrics)
    )

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

import datetime
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from builders.seq2seq import SPEECH, TASK_PATTERN


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


def _inputs(
    bundle: Any, opts: Options, ref: dict[str, Any], ref_dir: Any
) -> tuple[list[Any], dict[str, float]]:
    """What the bundle reads per record, and how far it agrees with the reference's
    input: prompt ids and tokenizer_match_rate, or features and max_abs_feature_diff."""
    import numpy as np

    if opts.task == SPEECH:
        from builders.data import audio

        feats = [bundle.read(audio.path(c)) for c in opts.audio]
        theirs = np.load(ref_dir / "features.npz")
        diff = max(float(np.abs(f - theirs[f"p{i}"]).max()) for i, f in enumerate(feats))
        return feats, {"max_abs_feature_diff": diff}
    ids = [bundle.encode(p) for p in opts.prompts]
    agree = sum(a == r["prompt_ids"] for a, r in zip(ids, ref["records"], strict=True))
    return ids, {"tokenizer_match_rate": agree / len(opts.prompts)}


def build(request: Any, writer: Any) -> None:
    import numpy as np

    import runtime
    from kiln.hostinfo import host

    opts = Options.model_validate(request.options)
    ref_dir = request.inputs["reference"]
    ref = json.loads((ref_dir / "reference.json").read_text())
    ref_logits = np.load(ref_dir / "logits.npz")
    bundle = runtime.open(request.inputs["bundle"])
    inputs, agreement = _inputs(bundle, opts, ref, ref_dir)
    size = bundle.max_batch_size
    batches = [inputs[i : i + size] for i in range(0, len(inputs), size)]
    gen: list[list[int]] = []
    new_tokens, seconds = 0, 0.0
    for batch in request.progress(batches, len(batches), "greedy seq2seq"):
        out = bundle.generate(batch, opts.max_new_tokens)
        gen.extend(out.tokens)
        new_tokens += sum(len(t) for t in out.tokens)
        seconds += out.seconds
    metrics = compare(bundle, ref, ref_logits, gen, inputs)
    metrics.update(agreement)
    metrics["decode_tokens_per_s"] = new_tokens / seconds if seconds else 0.0
    engine = bundle.meta["engines"]["decoder"]
    writer.write_json(
        "evidence.json",
        {
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "host": host(),
            "backend": {
                "name": engine["backend"],
                "version": engine["backend_version"],
                "device": engine["provider"],
            },
            "metrics": metrics,
            "outputs": [bundle.decode(g) for g in gen],
        },
    )
    request.log(
        "token match {token_match_rate:.3f}, max |dlogit| {max_abs_logit_diff:.2e}, "
        "min cosine {min_logit_cosine:.6f}".format(**metrics)
    )

"""validate: run the bundle through runtime/ and measure it against the reference.

Metrics (names and meanings in kiln.schema.METRICS):
  * greedy: the bundle generates for all prompts, left-padded in batches of the
    bundle's max_batch_size, and is compared token by token with the reference;
  * logits: teacher-forced logits over prompt plus reference continuation, every
    position, compared with the reference's fp32 logits (max |delta|, cosine);
  * a greedy divergence must be explained by a small reference top-2 gap at the
    position where it happens; otherwise it counts as unexplained.

It writes measurements only (evidence.json, which the core stamps with date and
host). The core applies the gates and records the evidence. An ordinary bundle's
evidence also names the runtime features the validation ran on it and whether each
held (builders/causal_lm/_features.py); they do not enter the verdict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    prompts: list[str] = Field(min_length=1, description="Prompts (must equal the reference's).")
    max_new_tokens: int = Field(ge=1, description="Greedy tokens per prompt.")
    scored_positions: int = Field(
        0, ge=0, description="Evaluation-text positions (must equal the reference's)."
    )
    task: str = Field(pattern="^text-generation$", description="The recipe's task.")
    chat: bool = Field(False, description="Each prompt is one user turn of a chat.")


def compare(
    bundle: Any, ref: dict[str, Any], ref_logits: Any, gen: list[list[int]]
) -> dict[str, float]:
    import numpy as np

    matched = total = 0
    first_div = None
    max_diff = 0.0
    min_cos = 1.0
    gaps: list[tuple[int, int]] = []  # (prompt, position) of each divergence
    for i, (record, got) in enumerate(zip(ref["records"], gen, strict=True)):
        want = record["tokens"]
        n = len(want)
        same = [a == b for a, b in zip(want, got, strict=False)]
        agree = next((j for j, s in enumerate(same) if not s), min(len(got), n))
        if agree < n:
            gaps.append((i, agree))
            first_div = agree if first_div is None else min(first_div, agree)
        matched += agree
        total += n
        ids = record["prompt_ids"] + want
        mine = bundle.logits(ids)
        theirs = ref_logits[f"p{i}"]
        max_diff = max(max_diff, float(np.abs(mine - theirs).max()))
        cos = (mine * theirs).sum(-1) / (
            np.linalg.norm(mine, axis=-1) * np.linalg.norm(theirs, axis=-1)
        )
        min_cos = min(min_cos, float(cos.min()))
    unexplained = 0
    for i, pos in gaps:
        row = ref_logits[f"p{i}"][len(ref["records"][i]["prompt_ids"]) + pos - 1]
        top2 = np.sort(row)[-2:]
        if top2[1] - top2[0] > 2 * max_diff:
            unexplained += 1
    return {
        "token_match_rate": matched / total if total else 1.0,
        "first_divergence": float(
            first_div if first_div is not None else max(len(r["tokens"]) for r in ref["records"])
        ),
        "max_abs_logit_diff": max_diff,
        "min_logit_cosine": min_cos,
        "unexplained_divergences": float(unexplained),
    }


def score_text(bundle: Any, ref: dict[str, Any], ref_scores: Any) -> dict[str, float]:
    """Perplexity and top-1 agreement with the fp32 reference on the evaluation text."""
    import numpy as np

    from builders.causal_lm.scoring import next_token_scores

    nll, top1 = [], []
    for chunk in ref["text"]["windows"]:
        n, t = next_token_scores(bundle.logits(chunk), chunk)
        nll.append(n)
        top1.append(t)
    mine, theirs = np.concatenate(nll), ref_scores["nll"]
    return {
        "next_token_agreement": float((np.concatenate(top1) == ref_scores["top1"]).mean()),
        "log_perplexity_ratio": float(mine.mean() - theirs.mean()),
        "perplexity": float(np.exp(mine.mean())),
        "reference_perplexity": float(np.exp(theirs.mean())),
        "scored_positions": float(len(mine)),
    }


def _quantized_on(request: Request) -> dict[str, str]:
    """Where modelopt calibrated the weights (a GPU, for nvfp4 and GPU runs)."""
    meta = json.loads((request.inputs["bundle"] / "bundle.json").read_text())
    quantization = meta.get("quantization")
    if not quantization:
        return {}
    return {"quantization": quantization["config"], "quantized_on": quantization["device"]}


def shard_metrics(folder: Path) -> dict[str, float]:
    """A tensor-parallel bundle's ranks and their shards, read from its weights files:
    world_size, the largest rank's weight bytes and share of the split weights, and
    the bytes every rank holds whole (kiln.schema.METRICS); {} for an unsplit bundle."""
    import zipfile

    engine = json.loads((folder / "bundle.json").read_text())["engines"]["main"]
    world = int(engine.get("tensor_parallel", 1))
    if world == 1:
        return {}
    with zipfile.ZipFile(folder / engine["file"]) as archive:
        split = set(json.loads(archive.read("program.json"))["split"])
    sizes = [_tensor_bytes(folder / f"weights.rank{r}.safetensors") for r in range(world)]
    parts = [sum(n for name, n in s.items() if name in split) for s in sizes]
    whole = sum(n for name, n in sizes[0].items() if name not in split)
    return {
        "world_size": float(world),
        "rank_weight_bytes": float(max(sum(s.values()) for s in sizes)),
        "rank_split_fraction": max(parts) / sum(parts) if sum(parts) else 0.0,
        "replicated_weight_bytes": float(whole),
    }


def _tensor_bytes(path: Path) -> dict[str, int]:
    """Each tensor's bytes in a safetensors file, from its header alone."""
    with path.open("rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
    return {
        name: int(v["data_offsets"][1]) - int(v["data_offsets"][0])
        for name, v in header.items()
        if name != "__metadata__"
    }


def _determinism(request: Request, bundle: Any, opts: Options) -> dict[str, Any]:
    """The determinism feature over the validation's prompts, plain and (where the
    bundle has a chat template) as chat turns; recorded unproved if it cannot run."""
    from builders.causal_lm._determinism import determinism

    prompts = {"plain": [bundle.encode(p) for p in opts.prompts]}
    if bundle.has_chat:
        prompts["chat"] = [
            bundle.encode_chat([{"role": "user", "content": p}]) for p in opts.prompts
        ]
    try:
        return determinism(request, request.inputs["bundle"], prompts, opts.max_new_tokens)
    except Exception as exc:  # recorded, and (unproved) it fails the verdict
        return {"proved": False, "check": f"raised {type(exc).__name__}: {exc}"}


def build(request: Request, writer: Writer) -> None:
    import runtime
    from builders.causal_lm._features import exercise
    from builders.common import measure
    from runtime import Sampler
    from runtime.causal_lm import Bundle
    from runtime.inductor_lm import InductorBundle
    from runtime.speculative import diagnostics

    opts = Options.model_validate(request.options)
    m = measure.start(request, lambda path: runtime.open(path, expect=Bundle))
    bundle, ref = m.bundle, m.reference
    if opts.chat:  # the bundle renders the turn through its own copy of the template
        chat = [bundle.encode_chat([{"role": "user", "content": p}]) for p in opts.prompts]
        prompt_ids, tokenizer_agree = m.agreement(chat)
    else:
        prompt_ids, tokenizer_agree = m.tokenize(opts.prompts)
    gen, per_s = m.generate(
        prompt_ids, "greedy decode", lambda b: bundle.generate(b, opts.max_new_tokens, Sampler())
    )
    ref_logits = m.arrays("logits.npz")
    metrics = compare(bundle, ref, ref_logits, gen)
    metrics["tokenizer_match_rate"] = tokenizer_agree
    # A drafting bundle: its greedy output against its own target-only greedy output
    # (lossless means identical), and the acceptance diagnostics the gates read.
    metrics.update(diagnostics(bundle, prompt_ids, opts.max_new_tokens))
    if opts.scored_positions:
        metrics.update(score_text(bundle, ref, m.arrays("text.npz")))
    metrics["decode_tokens_per_s"] = per_s
    metrics.update(shard_metrics(request.inputs["bundle"]))
    backend = {**m.backend("main"), **_quantized_on(request)}
    # after the timed decode: it times nothing
    features = exercise(bundle, prompt_ids, ref, ref_logits, gen)
    if isinstance(bundle, InductorBundle) and not metrics.get("world_size"):
        # compiled code: the same in every process? (a tensor-parallel bundle's ranks
        # are fresh processes of their own each time it opens: not repeated here)
        features = features or {}
        features["determinism"] = _determinism(request, bundle, opts)
    extra = {"features": features} if features is not None else {}
    writer.evidence(metrics, [bundle.decode(g) for g in gen], backend, **extra)
    request.log(
        "token match {token_match_rate:.3f}, max |dlogit| {max_abs_logit_diff:.2e}, "
        "min cosine {min_logit_cosine:.6f}".format(**metrics)
    )

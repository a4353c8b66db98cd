"""The runtime features a causal-LM validation exercises on its bundle, recorded in the
evidence as `features` (kiln.schema.FeatureProof: proved, check, metrics):

  logits_processors  runtime/processors.py against transformers' LogitsProcessors of
                     the same name, on the bundle's own next-token logits: bit-equal
  guided_decoding    greedy output under a JSON schema (runtime/guided.py) parses and
                     matches it, on the bundle's own tokenizer (its family named)
  prefix_reuse       a prompt that extends an earlier request reuses its KV cache and
                     generates the tokens a cold run generates (not for the precisions
                     whose cache the runtime refuses to reuse: prefix_reuse_refusal)
  chunked_prefill    the prompt fed in chunks (the bundle's build.prefill_chunk_len,
                     else 8 tokens) generates the one-shot prefill's tokens
  sliding_window     (bundles with sliding-window layers whose max_seq_len passes the
                     window) the longest validated prompt runs past the window, the
                     window changes the reference's logits there (reference.py widens
                     it away to see), and the bundle's logits there stay within a
                     tenth of that change; prompts that stop short of it prove nothing
                     and say so

Prefix reuse and chunked prefill share their requests: the earlier request's answer
and the later prompt's one-shot (cold) tokens are generated once.

An ordinary causal-LM runner (runtime.causal_lm.Bundle) runs them all; the inductor
runner (InductorBundle) the processors and guided decoding, which its generate_with
serves the same way: its prefill program is its own fixed chunk, not the runtime's
prefill_chunk_len, and the runtime refuses it a prefix cache. A drafting bundle's
validation is about its speculation. A feature that raises is recorded unproved, with
the error; it never changes the verdict, which the gates decide.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NEW_TOKENS = 8
SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": 16},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
        "sure": {"type": "boolean"},
    },
    "required": ["answer", "count", "sure"],
    "additionalProperties": False,
}


def _matches(doc: Any) -> bool:
    """SCHEMA, checked by hand (jsonschema is not a build dependency)."""
    return (
        isinstance(doc, dict)
        and set(doc) == {"answer", "count", "sure"}
        and isinstance(doc["answer"], str)
        and len(doc["answer"]) <= 16
        and type(doc["count"]) is int
        and 0 <= doc["count"] <= 99
        and isinstance(doc["sure"], bool)
    )


def tokenizer_family(tokenizer_json: str) -> str:
    data = json.loads(tokenizer_json)
    model = data.get("model", {}).get("type", "?")
    pieces = json.dumps([data.get("pre_tokenizer"), data.get("decoder")])
    if model == "BPE" and "ByteLevel" in pieces:
        return "byte-level BPE"
    if model == "BPE" and data["model"].get("byte_fallback"):
        return "SentencePiece BPE (byte fallback)"
    if model == "Unigram":
        return "SentencePiece Unigram"
    return f"{model} ({'Metaspace' if 'Metaspace' in pieces else 'other'})"


def _processors(bundle: Any, prompt: list[int]) -> dict[str, Any]:
    import numpy as np
    import torch
    from transformers.generation import logits_process as lp

    from runtime.processors import Decoding

    ids = np.asarray(prompt, np.int64)
    logits = bundle.logits(prompt)[-1].astype(np.float32)
    eos = sorted(bundle.eos)
    split = max(len(prompt) - 2, 0)  # the last two tokens stand for generated ones
    words = [[int(ids[-1])], [int(ids[-2 % len(ids)]), 7], [5, 6, 8]]
    pairs = {
        "repetition_penalty": (
            Decoding(repetition_penalty=1.3),
            lp.RepetitionPenaltyLogitsProcessor(1.3),
        ),
        "bad_words": (Decoding(bad_words=words), lp.NoBadWordsLogitsProcessor(words, eos)),
        "min_length": (
            Decoding(min_length=len(prompt) + 1),
            lp.MinLengthLogitsProcessor(len(prompt) + 1, eos),
        ),
        "min_new_tokens": (
            Decoding(min_new_tokens=3),
            lp.MinNewTokensLengthLogitsProcessor(split, 3, eos),
        ),
        "banned_ids": (Decoding(banned_ids=[3, 11]), lp.SuppressTokensLogitsProcessor([3, 11])),
    }
    equal = 0
    for ours, theirs in pairs.values():
        got = logits.copy()
        for process in ours.chain(split, set(eos), logits.shape[-1]):
            got = process(ids, got)
        want = theirs(torch.tensor(ids[None]), torch.tensor(logits[None]))[0].numpy()
        equal += int(np.array_equal(got, want))
    return {
        "proved": equal == len(pairs),
        "check": f"{', '.join(pairs)}: the runtime's numpy processors against transformers' "
        "classes of the same name on the bundle's next-token logits, bit for bit",
        "metrics": {"processors": float(len(pairs)), "equal": float(equal)},
    }


def _guided(bundle: Any, prompts: list[list[int]]) -> dict[str, Any]:
    from runtime.guided import Grammar
    from runtime.processors import Decoding

    family = tokenizer_family(bundle.tokenizer_json())
    decoding = Decoding(grammar=Grammar.json_schema(SCHEMA))
    size = bundle.max_batch_size  # a batch-1 engine (the GPU latency recipes) one by one
    outputs = [
        tokens
        for i in range(0, len(prompts), size)
        for tokens in bundle.generate_with(prompts[i : i + size], 64, decoding).tokens
    ]
    valid = 0
    for tokens in outputs:
        with contextlib.suppress(ValueError):  # not JSON: not valid
            valid += int(_matches(json.loads(bundle.decode(tokens))))
    return {
        "proved": valid == len(prompts),
        "check": f"greedy output under a JSON schema parses and matches it ({family} tokenizer)",
        "metrics": {
            "outputs": float(len(prompts)),
            "valid": float(valid),
            "tokens": float(sum(len(t) for t in outputs)),
        },
    }


@dataclass(frozen=True)
class Requests:
    """An earlier request (the first prompt) and a later one that extends it by its
    greedy answer and the second prompt's tokens, within the bundle's max_seq_len, with
    the later one's tokens from a cold one-shot prefill."""

    first: list[int]
    later: list[int]
    cold: list[int]


def _requests(bundle: Any, prompts: list[list[int]]) -> Requests:
    first = prompts[0]
    answer = bundle.generate([first], NEW_TOKENS).tokens[0]
    extra = prompts[1 % len(prompts)]
    room = bundle.max_seq_len - NEW_TOKENS
    later = (first + answer + extra)[: max(room, len(first) + 1)]
    built = bundle.prefill_chunk_len
    bundle.prefill_chunk_len = 0
    try:
        cold = bundle.generate([later], NEW_TOKENS).tokens[0]
    finally:
        bundle.prefill_chunk_len = built
    return Requests(first, later, cold)


def _prefix(bundle: Any, r: Requests) -> dict[str, Any]:
    bundle.enable_prefix_cache(entries=1)
    try:
        bundle.generate([r.first], NEW_TOKENS)  # the earlier request, now cached
        warm = bundle.generate([r.later], NEW_TOKENS).tokens[0]
        reused = bundle.last_reused
    finally:
        bundle.prefix_cache = None
    return {
        "proved": warm == r.cold and reused > 0,
        "check": "a prompt extending an earlier request (its prompt and answer) prefills "
        "only the tokens after the cached ones, and generates the cold run's tokens",
        "metrics": {
            "prompt_tokens": float(len(r.later)),
            "reused_tokens": float(reused),
            "tokens_equal": float(warm == r.cold),
        },
    }


def _chunked(bundle: Any, r: Requests) -> dict[str, Any]:
    built = bundle.prefill_chunk_len
    chunk = built or 8
    bundle.prefill_chunk_len = chunk
    try:
        chunked = bundle.generate([r.later], NEW_TOKENS).tokens[0]
    finally:
        bundle.prefill_chunk_len = built
    source = "build.prefill_chunk_len" if built else "the validation's own, 8"
    return {
        "proved": chunked == r.cold and len(r.later) > chunk,
        "check": f"a {len(r.later)}-token prompt fed in chunks of {chunk} tokens ({source}) "
        "generates the one-shot prefill's tokens",
        "metrics": {
            "chunk": float(chunk),
            "prompt_tokens": float(len(r.later)),
            "tokens_equal": float(chunked == r.cold),
        },
    }


def windows(meta: dict[str, Any]) -> list[int]:
    """The sliding windows of a bundle's cached layers (bundle.json's kv_cache entries)."""
    entries = meta["io"]["kv_cache"]["entries"]
    return sorted({int(e["sliding_window"]) for e in entries if e.get("sliding_window")})


def _sliding(
    bundle: Any, ref: dict[str, Any], ref_logits: Any, gen: list[list[int]]
) -> dict[str, Any]:
    import numpy as np

    window = windows(bundle.meta)[0]
    seen = ref.get("sliding_window")
    if seen is None:
        raise ValueError(
            f"the bundle has {window}-token sliding-window layers, but the reference "
            "recorded no window (rebuild the reference)"
        )
    i = int(seen["record"])
    record = ref["records"][i]
    ids = record["prompt_ids"] + record["tokens"]
    mine = bundle.logits(ids)[window:]
    theirs = ref_logits[f"p{i}"][window:]
    past = float(np.abs(mine - theirs).max()) if mine.size else 0.0
    effect = float(seen["full_attention_max_abs_diff"])
    prompt = len(record["prompt_ids"])
    same = gen[i] == record["tokens"]
    held = int(seen["window"]) == window and prompt > window and effect > 0
    if prompt <= window:
        check = (
            f"no validated prompt runs past the {window}-token window (the longest has "
            f"{prompt} tokens): the recipe's prompts do not reach it"
        )
    else:
        check = (
            f"the longest validated prompt ({prompt} tokens, {len(ids)} with its "
            f"continuation) runs past the {window}-token window; past it, the bundle's "
            f"teacher-forced logits differ from the fp32 reference's by at most {past:.2g}, "
            f"against {effect:.2g} that the window itself makes in the reference (proved "
            "where that is at most a tenth)"
        )
    return {
        "proved": held and past * 10 <= effect,
        "check": check,
        "metrics": {
            "window": float(window),
            "prompt_tokens": float(prompt),
            "sequence_tokens": float(len(ids)),
            "past_window_max_abs_logit_diff": past,
            "full_attention_max_abs_diff": effect,
            "tokens_equal": float(same),
        },
    }


def exercise(
    bundle: Any,
    prompts: list[list[int]],
    ref: dict[str, Any],
    ref_logits: Any,
    gen: list[list[int]],
) -> dict[str, dict[str, Any]] | None:
    """Each feature's proof for an ordinary causal-LM bundle (the inductor runner's: the
    processors and guided decoding); None for other runners. `ref`, `ref_logits` and
    `gen` are the validation's reference and greedy outputs."""
    from runtime.causal_lm import Bundle, prefix_reuse_refusal
    from runtime.inductor_lm import InductorBundle

    if type(bundle) not in (Bundle, InductorBundle) or not prompts:
        return None
    shared: list[Requests] = []

    def requests() -> Requests:
        if not shared:
            shared.append(_requests(bundle, prompts))
        return shared[0]

    checks: dict[str, Callable[[], dict[str, Any]]] = {
        "logits_processors": lambda: _processors(bundle, prompts[0]),
        "guided_decoding": lambda: _guided(bundle, prompts[:2]),
    }
    if type(bundle) is InductorBundle:
        return _run(checks)
    if prefix_reuse_refusal(bundle.meta) is None:
        # (where the runtime refuses it, for activations or a KV cache quantized with
        # static scales, the feature does not apply: it is not checked, nor failed)
        checks["prefix_reuse"] = lambda: _prefix(bundle, requests())
    checks["chunked_prefill"] = lambda: _chunked(bundle, requests())
    if windows(bundle.meta) and bundle.max_seq_len > windows(bundle.meta)[0]:
        # (a bundle whose max_seq_len is within the window never reaches it)
        checks["sliding_window"] = lambda: _sliding(bundle, ref, ref_logits, gen)
    return _run(checks)


def _run(checks: dict[str, Callable[[], dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, check in checks.items():
        try:
            out[name] = check()
        except Exception as exc:  # recorded as unproved: a feature never fails the step
            out[name] = {"proved": False, "check": f"raised {type(exc).__name__}: {exc}"}
    return out

"""The runtime features a causal-LM validation exercises on its bundle, recorded in the
evidence as `features` (kiln.schema.FeatureProof: proved, check, metrics):

  logits_processors  runtime/processors.py against transformers' LogitsProcessors of
                     the same name, on the bundle's own next-token logits: bit-equal
  guided_decoding    greedy output under a JSON schema (runtime/guided.py) parses and
                     matches it, on the bundle's own tokenizer (its family named)
  prefix_reuse       a prompt that extends an earlier request reuses its KV cache and
                     generates the tokens a cold run generates
  chunked_prefill    the prompt fed in chunks (the bundle's build.prefill_chunk_len,
                     else 8 tokens) generates the one-shot prefill's tokens

Only an ordinary causal-LM runner (runtime.causal_lm.Bundle itself) runs them: a
drafting bundle's validation is about its speculation, and the inductor runner keeps
its own device loop. A feature that raises is recorded unproved, with the error; it
never changes the verdict, which the gates decide.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
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
    out = bundle.generate_with(prompts, 64, Decoding(grammar=Grammar.json_schema(SCHEMA)))
    valid = 0
    for tokens in out.tokens:
        with contextlib.suppress(ValueError):  # not JSON: not valid
            valid += int(_matches(json.loads(bundle.decode(tokens))))
    return {
        "proved": valid == len(prompts),
        "check": f"greedy output under a JSON schema parses and matches it ({family} tokenizer)",
        "metrics": {
            "outputs": float(len(prompts)),
            "valid": float(valid),
            "tokens": float(sum(len(t) for t in out.tokens)),
        },
    }


def _long_prompt(bundle: Any, prompts: list[list[int]]) -> tuple[list[int], list[int]]:
    """An earlier request (the first prompt) and a later one that extends it by its
    greedy answer and the second prompt's tokens, within the bundle's max_seq_len."""
    first = prompts[0]
    answer = bundle.generate([first], NEW_TOKENS).tokens[0]
    extra = prompts[1 % len(prompts)]
    later = first + answer + extra
    room = bundle.max_seq_len - NEW_TOKENS
    return first, later[: max(room, len(first) + 1)]


def _prefix(bundle: Any, prompts: list[list[int]]) -> dict[str, Any]:
    first, later = _long_prompt(bundle, prompts)
    cold = bundle.generate([later], NEW_TOKENS).tokens[0]
    bundle.enable_prefix_cache(entries=1)
    try:
        bundle.generate([first], NEW_TOKENS)
        warm = bundle.generate([later], NEW_TOKENS).tokens[0]
        reused = bundle.last_reused
    finally:
        bundle.prefix_cache = None
    return {
        "proved": warm == cold and reused > 0,
        "check": "a prompt extending an earlier request (its prompt and answer) prefills "
        "only the tokens after the cached ones, and generates the cold run's tokens",
        "metrics": {
            "prompt_tokens": float(len(later)),
            "reused_tokens": float(reused),
            "tokens_equal": float(warm == cold),
        },
    }


def _chunked(bundle: Any, prompts: list[list[int]]) -> dict[str, Any]:
    _, prompt = _long_prompt(bundle, prompts)
    built = bundle.prefill_chunk_len
    chunk = built or 8
    bundle.prefill_chunk_len = 0
    one_shot = bundle.generate([prompt], NEW_TOKENS).tokens[0]
    bundle.prefill_chunk_len = chunk
    try:
        chunked = bundle.generate([prompt], NEW_TOKENS).tokens[0]
    finally:
        bundle.prefill_chunk_len = built
    source = "build.prefill_chunk_len" if built else "the validation's own, 8"
    return {
        "proved": chunked == one_shot and len(prompt) > chunk,
        "check": f"a {len(prompt)}-token prompt fed in chunks of {chunk} tokens ({source}) "
        "generates the one-shot prefill's tokens",
        "metrics": {
            "chunk": float(chunk),
            "prompt_tokens": float(len(prompt)),
            "tokens_equal": float(chunked == one_shot),
        },
    }


def exercise(bundle: Any, prompts: list[list[int]]) -> dict[str, dict[str, Any]] | None:
    """Each feature's proof for an ordinary causal-LM bundle; None for other runners."""
    from runtime.causal_lm import Bundle

    if type(bundle) is not Bundle or not prompts:
        return None
    checks: dict[str, Callable[[], dict[str, Any]]] = {
        "logits_processors": lambda: _processors(bundle, prompts[0]),
        "guided_decoding": lambda: _guided(bundle, prompts[:2]),
        "prefix_reuse": lambda: _prefix(bundle, prompts),
        "chunked_prefill": lambda: _chunked(bundle, prompts),
    }
    out = {}
    for name, check in checks.items():
        try:
            out[name] = check()
        except Exception as exc:  # recorded as unproved: a feature never fails the step
            out[name] = {"proved": False, "check": f"raised {type(exc).__name__}: {exc}"}
    return out

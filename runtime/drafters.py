"""The drafters a bundle can carry, run with onnxruntime. Each proposes tokens for
runtime/speculative.py to verify; none of them decides what is committed.

  * ModelDrafter (draft): a smaller causal LM with its own KV cache; its cache is
    cut back to the longest prefix it shares with the committed tokens.
  * ChainDrafter (eagle3, mtp): one decoder layer fed with target hidden states,
    chained on its own output for later tokens. The feature at position t is paired
    with the embedding of token t+1 (spec_decoding_facts.md 1 and 4, pitfall 5).
    Positions computed from target features stay in its cache; chained ones are
    dropped after each round and recomputed from the target's features.
  * AssistantDrafter (mtp with Gemma 4's assistant): one step per token at the last
    token's position, attending to the target's own KV cache of two layers.
  * BlockDrafter (dflash, dspark): one pass over [last token, mask, ...] with the
    target's features injected as keys and values; DSpark adds its Markov head
    (sampled left to right) and its confidence cut (section 2 and 3).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.causal_lm import KEEP
from runtime.format import default_threads
from runtime.ngram import NgramDrafter
from runtime.sampling import Sampler, draw


def _session(bundle: Any, name: str) -> Any:
    """One onnxruntime session per engine per bundle: a drafter is made per prompt, and
    loading a session costs more than drafting a whole prompt on the tiny models."""
    import onnxruntime as ort

    cache: dict[str, Any] = bundle.__dict__.setdefault("_drafter_sessions", {})
    if name not in cache:
        meta = bundle.meta["engines"][name]
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # done at build
        so.intra_op_num_threads = bundle.threads or default_threads()
        cache[name] = ort.InferenceSession(
            str(bundle.path / meta["file"]), so, providers=[meta["provider"]]
        )
    return cache[name]


class Engine:
    """One onnxruntime session with an explicit KV cache (inputs past.*, outputs present.*)."""

    def __init__(self, bundle: Any, name: str) -> None:
        self.session = _session(bundle, name)
        self.outputs = [o.name for o in self.session.get_outputs()]
        inputs = {i.name: i.shape for i in self.session.get_inputs()}
        self.past_names = [n for n in inputs if n.startswith("past.")]
        # a causal-LM graph's logits_to_keep (builders/causal_lm/export.py): 0, every
        # position, unless a run asks for fewer
        self.keeps = KEEP in inputs
        self.past = [
            np.zeros(
                [1 if j == 0 else d if isinstance(d, int) else 0 for j, d in enumerate(s)],
                np.float32,
            )
            for s in (inputs[n] for n in self.past_names)
        ]

    @property
    def length(self) -> int:
        return int(self.past[0].shape[2]) if self.past else 0

    def run(self, feeds: dict[str, np.ndarray], keep: int = 0) -> dict[str, np.ndarray]:
        feeds = {**feeds, **dict(zip(self.past_names, self.past, strict=True))}
        if self.keeps:
            feeds[KEEP] = np.array(keep, np.int64)
        out = dict(zip(self.outputs, self.session.run(self.outputs, feeds), strict=True))
        self.past = [out[n.replace("past.", "present.", 1)] for n in self.past_names]
        return out

    def truncate(self, length: int) -> None:
        self.past = [t[:, :, :length] for t in self.past]


def _pick(logits: np.ndarray, sampler: Sampler) -> tuple[int, np.ndarray | None]:
    """A draft token from full-vocabulary logits [V], and its proposal distribution."""
    if sampler.greedy:
        return int(logits.argmax()), None
    q = sampler.probabilities(logits[None])[0]
    return draw(q, sampler.rng), q


def _stack(qs: list[np.ndarray]) -> np.ndarray | None:
    return np.stack(qs) if qs else None


class ModelDrafter:
    def __init__(self, bundle: Any) -> None:
        self.engine = Engine(bundle, "draft")
        self.fed: list[int] = []

    def _extend(self, ids: list[int]) -> np.ndarray:
        n = self.engine.length
        out = self.engine.run(
            {
                "input_ids": np.asarray([ids], np.int64),
                "attention_mask": np.ones((1, n + len(ids)), np.int64),
                "position_ids": np.arange(n, n + len(ids), dtype=np.int64)[None],
            },
            keep=1,
        )
        self.fed.extend(ids)
        return out["logits"][0, -1]

    def propose(
        self, tokens: list[int], feats: list[np.ndarray], k: int, sampler: Sampler
    ) -> tuple[list[int], np.ndarray | None]:
        keep = 0
        limit = min(len(self.fed), len(tokens) - 1)  # feed at least one token
        while keep < limit and self.fed[keep] == tokens[keep]:
            keep += 1
        self.engine.truncate(keep)
        self.fed = self.fed[:keep]
        logits = self._extend(tokens[keep:])
        drafts, qs = [], []
        for i in range(k):
            x, q = _pick(logits, sampler)
            drafts.append(x)
            if q is not None:
                qs.append(q)
            if i < k - 1:
                logits = self._extend([x])
        return drafts, _stack(qs)


class _VocabMap:
    """Draft-vocabulary logits -> target-vocabulary logits. d2t holds offsets:
    target_id = draft_id + d2t[draft_id] (section 1, pitfall 3)."""

    def __init__(self, bundle: Any, vocab: int) -> None:
        file = bundle.meta["drafter"].get("d2t")
        self.vocab = vocab
        self.ids = None
        if file:
            d2t = np.load(bundle.path / file)
            self.ids = np.arange(len(d2t)) + d2t

    def __call__(self, logits: np.ndarray) -> np.ndarray:
        if self.ids is None:
            return logits
        full = np.full(self.vocab, -np.inf, logits.dtype)
        full[self.ids] = logits
        return full


class ChainDrafter:
    """EAGLE-3 (fc over three target layers, then the layer) and MTP (the layer alone)."""

    def __init__(self, bundle: Any) -> None:
        self.layer = Engine(bundle, "drafter")
        self.fc = Engine(bundle, "drafter_fc") if "drafter_fc" in bundle.meta["engines"] else None
        self.vocab = _VocabMap(bundle, int(bundle.meta["io"]["outputs"][0]["shape"][-1]))
        self.valid = 0  # leading positions of the layer's cache computed from target features

    def _step(self, hidden: np.ndarray, ids: list[int], start: int) -> dict[str, np.ndarray]:
        n = len(ids)
        return self.layer.run(
            {
                "hidden": hidden[None].astype(np.float32),
                "input_ids": np.asarray([ids], np.int64),
                "position_ids": np.arange(start, start + n, dtype=np.int64)[None],
                "attention_mask": np.ones((1, start + n), np.int64),
            }
        )

    def propose(
        self, tokens: list[int], feats: list[np.ndarray], k: int, sampler: Sampler
    ) -> tuple[list[int], np.ndarray | None]:
        end = len(feats)  # positions 0..end-1 have target features; tokens[end] is last
        self.layer.truncate(self.valid)
        hidden = np.stack(feats[self.valid : end])
        if self.fc is not None:
            hidden = self.fc.run({"features": hidden[None].astype(np.float32)})["hidden"][0]
        out = self._step(hidden, tokens[self.valid + 1 : end + 1], self.valid)
        self.valid = end
        drafts, qs = [], []
        for i in range(k):
            x, q = _pick(self.vocab(out["logits"][0, -1]), sampler)
            drafts.append(x)
            if q is not None:
                qs.append(q)
            if i < k - 1:
                out = self._step(out["hidden_out"][0, -1:], [x], end + i)
        return drafts, _stack(qs)


class AssistantDrafter:
    """Gemma 4's MTP assistant, as transformers' generate runs it
    (SinglePositionMultiTokenCandidateGenerator): every step sits at the last token's
    position p, reads [that token, a hidden row] and attends to the target's own cached
    keys and values of two layers (positions 0..p-1, all committed); the first step's
    row is the target's at p-1, later ones the step's own output. No cache to roll back."""

    def __init__(self, bundle: Any) -> None:
        self.session = _session(bundle, "drafter")
        layers = bundle.meta["drafter"]["target_layers"]
        index = {
            (e["layer"], e["kind"]): i
            for i, e in enumerate(bundle.meta["io"]["kv_cache"]["entries"])
        }
        self.reads = {
            f"{short}_{kind}": index[(layers[f"{short}_attention"], kind)]
            for short in ("full", "sliding")
            for kind in ("key", "value")
        }
        self.target: Any = None

    def bind(self, target: Any) -> None:
        """The target whose cache the steps read (runtime/speculative.py Speculation)."""
        self.target = target

    def propose(
        self, tokens: list[int], feats: list[np.ndarray], k: int, sampler: Sampler
    ) -> tuple[list[int], np.ndarray | None]:
        p = len(tokens) - 1  # == the target's cache length and len(feats)
        past = self.target.past
        feeds = {name: past[i].astype(np.float32) for name, i in self.reads.items()}
        position = np.asarray([[p]], np.int64)
        hidden, last = feats[p - 1][None, None], tokens[-1]
        drafts, qs = [], []
        for _ in range(k):
            logits, hidden = self.session.run(
                ["logits", "hidden_out"],
                {
                    **feeds,
                    "input_ids": np.asarray([[last]], np.int64),
                    "hidden": hidden.astype(np.float32),
                    "position_ids": position,
                },
            )
            last, q = _pick(logits[0, -1], sampler)
            drafts.append(last)
            if q is not None:
                qs.append(q)
        return drafts, _stack(qs)


class OrtBlock:
    """BlockDrafter's two passes on the bundle's onnxruntime engines: the backbone with
    its explicit context cache (drafter), DSpark's heads (drafter_markov)."""

    def __init__(self, bundle: Any, dspark: bool) -> None:
        self.layer = Engine(bundle, "drafter")
        self.heads = Engine(bundle, "drafter_markov") if dspark else None

    def block(self, feats: list[np.ndarray], ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Logits [n, V] and hidden rows [n, H] of the block `ids` at the positions after
        `feats`, the target's features not yet in the context cache added to it first
        (context keys/values never go stale: they are committed)."""
        start, ctx, n = len(feats), self.layer.length, len(ids)
        out = self.layer.run(
            {
                "context": np.stack(feats[ctx:start])[None].astype(np.float32),
                "context_positions": np.arange(ctx, start, dtype=np.int64)[None],
                "block_ids": np.asarray([ids], np.int64),
                "block_positions": np.arange(start, start + n, dtype=np.int64)[None],
            }
        )
        return out["logits"][0], out["hidden_out"][0]

    def markov(self, hidden: Any, prev: int) -> tuple[np.ndarray, float]:
        """DSpark's Markov bias [V] and confidence for one slot's hidden row [1, H]."""
        assert self.heads is not None
        head = self.heads.run({"hidden": hidden, "prev_ids": np.asarray([prev], np.int64)})
        return head["bias"][0], float(head["confidence"][0])


class BlockDrafter:
    """DFlash: block [last, mask x k], slot j (j >= 1) proposes token start + j.
    DSpark: block [last, mask x (k-1)], slot j proposes token start + j + 1, with the
    Markov bias of the token before it and a confidence cut. `passes` runs the
    backbone and the heads: onnxruntime's engines (OrtBlock), or the inductor engine's
    programs (runtime/inductor_drafter.py)."""

    def __init__(self, bundle: Any, passes: Any = None) -> None:
        meta = bundle.meta["drafter"]
        self.dspark = meta["kind"] == "dspark"
        self.passes = passes if passes is not None else OrtBlock(bundle, self.dspark)
        self.mask = int(meta["mask_token_id"])
        self.threshold = float(bundle.spec.get("confidence_threshold", 0.0))

    def propose(
        self, tokens: list[int], feats: list[np.ndarray], k: int, sampler: Sampler
    ) -> tuple[list[int], np.ndarray | None]:
        slots = k if self.dspark else k + 1
        logits, hidden = self.passes.block(feats, [tokens[-1]] + [self.mask] * (slots - 1))
        if not self.dspark:
            picks = [_pick(logits[j], sampler) for j in range(1, slots)]
            return [x for x, _ in picks], _stack([q for _, q in picks if q is not None])
        drafts, qs = [], []
        prev = tokens[-1]
        for j in range(slots):
            bias, confidence = self.passes.markov(hidden[j : j + 1], prev)
            if confidence < self.threshold:
                break  # the drafter expects rejection from here on; verify fewer
            x, q = _pick(logits[j] + bias, sampler)
            drafts.append(x)
            if q is not None:
                qs.append(q)
            prev = x
        return drafts, _stack(qs)


def make_drafter(bundle: Any) -> Any:
    variant = bundle.meta["variant"]
    spec = bundle.spec
    if variant == "ngram":
        return NgramDrafter(int(spec["ngram_min"]), int(spec["ngram_max"]))
    if variant == "draft":
        return ModelDrafter(bundle)
    if variant == "mtp" and "target_layers" in bundle.meta["drafter"]:
        return AssistantDrafter(bundle)
    if variant in ("eagle3", "mtp"):
        return ChainDrafter(bundle)
    if variant in ("dflash", "dspark"):
        return BlockDrafter(bundle)
    raise ValueError(f"variant {variant!r} does not draft")

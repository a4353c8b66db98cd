"""Speculative decoding: a drafter proposes tokens, the target verifies them in one forward.

The rule is lossless (spec_decoding_facts.md section 5; Leviathan et al. arXiv
2211.17192, Chen et al. arXiv 2302.01318):

  * greedy: accept a drafted token iff it equals the target's argmax at its position;
    at the first mismatch commit the target's argmax instead, and when all k are
    accepted commit the target's argmax after them (the bonus token);
  * sampling: accept x_i with probability min(1, p(x_i) / q(x_i)); at the first
    rejection draw from normalize(max(0, p - q)) and stop; when all are accepted draw
    a bonus token from p at position k+1. A drafter without a distribution (n-gram)
    is a one-hot q. p and q get the same temperature / top-k / top-p transform.

The target's KV cache holds every committed token except the last one. A round feeds
[last, d_1..d_k] at once (the exported graph takes seq > 1 with a past), then the
present cache is cut back along its sequence axis to the tokens that were accepted.

Batch one: each prompt of a batch is decoded on its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from runtime.causal_lm import Bundle, Generation
from runtime.drafters import make_drafter
from runtime.format import BundleError
from runtime.sampling import Sampler, draw

SPECULATIVE = ("draft", "ngram", "mtp", "eagle3", "dflash", "dspark")


@dataclass
class Stats:
    """Acceptance diagnostics. tokens_per_forward is committed tokens per target verify
    forward (prefill excluded): 1.0 for ordinary decoding. A diagnostic, not a speed."""

    drafted: int = 0
    accepted: int = 0
    verify_forwards: int = 0
    committed: int = 0

    def add(self, other: Stats) -> None:
        self.drafted += other.drafted
        self.accepted += other.accepted
        self.verify_forwards += other.verify_forwards
        self.committed += other.committed

    def as_dict(self) -> dict[str, float]:
        return {
            "acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0,
            "tokens_per_forward": self.committed / self.verify_forwards
            if self.verify_forwards
            else 1.0,
            "drafted": float(self.drafted),
            "accepted": float(self.accepted),
            "verify_forwards": float(self.verify_forwards),
        }


def accept(
    drafts: list[int],
    q: np.ndarray | None,
    p: np.ndarray,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """The rejection-sampling rule. p: target probabilities [k+1, V]; q: the draft's
    [k, V], or None for a deterministic drafter (one-hot q). Returns (accepted, next)."""
    for i, x in enumerate(drafts):
        qx = 1.0 if q is None else float(q[i, x])
        if rng.random() * qx < float(p[i, x]):  # u < p/q, i.e. probability min(1, p/q)
            continue
        residual = p[i].copy()
        if q is None:
            residual[x] = 0.0
        else:
            residual = np.maximum(residual - q[i], 0.0)
        total = residual.sum()
        # total == 0 only when p <= q everywhere, i.e. p == q: then rejection has
        # probability 0 and this branch is unreachable except by float rounding.
        return i, draw(residual / total if total > 0 else p[i], rng)
    return len(drafts), draw(p[len(drafts)], rng)


def accept_greedy(drafts: list[int], logits: np.ndarray) -> tuple[int, int]:
    best = logits.argmax(axis=-1)
    for i, x in enumerate(drafts):
        if int(best[i]) != x:
            return i, int(best[i])
    return len(drafts), int(best[len(drafts)])


class Drafter(Protocol):
    def propose(
        self, tokens: list[int], feats: list[np.ndarray], k: int, sampler: Sampler
    ) -> tuple[list[int], np.ndarray | None]:
        """Up to k tokens to follow `tokens` (all committed; the last is not yet in the
        target's cache), and their proposal distributions [n, V] (None: one-hot).
        `feats` holds the target's hidden rows of the committed positions it has seen."""
        ...


class Target:
    """The target engine with its KV cache, batch one."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        outputs = [v["name"] for v in bundle.meta["io"]["outputs"]]
        self.hidden = "hidden" in outputs
        self.names = bundle.output_names + (["hidden"] if self.hidden else [])
        self.past = bundle._empty_cache(1)
        self.length = 0

    def extend(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray | None]:
        """Feed `ids` after the cache; logits [n, V] and hidden rows [n, H] (or None)."""
        n = len(ids)
        feeds = self.bundle.feeds(  # keep 0, every position's logits: each draft is checked
            np.asarray([ids], np.int64),
            np.ones((1, self.length + n), np.int64),
            np.arange(self.length, self.length + n, dtype=np.int64)[None],
            self.past,
        )
        out = self.bundle.session.run(self.names, feeds)
        self.past = out[1 : 1 + len(self.past)]
        self.length += n
        return out[0][0], (out[-1][0] if self.hidden else None)

    def truncate(self, length: int) -> None:
        """Roll the cache back to its first `length` positions (the seq axis is 2)."""
        self.past = [t[:, :, :length] for t in self.past]
        self.length = length


@dataclass
class Speculation:
    """One speculative generation of one prompt."""

    target: Target
    drafter: Drafter
    max_draft_len: int
    sampler: Sampler
    eos: set[int]
    stats: Stats = field(default_factory=Stats)

    def __post_init__(self) -> None:
        bind = getattr(self.drafter, "bind", None)
        if bind is not None:  # a drafter that reads the target's cache (Gemma 4's assistant)
            bind(self.target)

    def _pick(self, logits: np.ndarray) -> int:
        if self.sampler.greedy:
            return int(logits.argmax())
        return draw(self.sampler.probabilities(logits[None])[0], self.sampler.rng)

    def run(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        logits, hidden = self.target.extend(prompt)
        feats: list[np.ndarray] = list(hidden) if hidden is not None else []
        tokens = list(prompt)
        out = [self._pick(logits[-1])]
        tokens.append(out[-1])
        while out[-1] not in self.eos and len(out) < max_new_tokens:
            # The bonus token counts too: never draft past max_new_tokens.
            k = min(self.max_draft_len, max_new_tokens - len(out) - 1)
            drafts, q = self.drafter.propose(tokens, feats, k, self.sampler) if k else ([], None)
            start = self.target.length  # == len(tokens) - 1
            logits, hidden = self.target.extend([tokens[-1], *drafts])
            if self.sampler.greedy:
                n, nxt = accept_greedy(drafts, logits)
            else:
                p = self.sampler.probabilities(logits)
                n, nxt = accept(drafts, q, p, self.sampler.rng)
            self.target.truncate(start + 1 + n)
            if hidden is not None:
                feats.extend(hidden[: n + 1])
            new = [*drafts[:n], nxt]
            self.stats.drafted += len(drafts)
            self.stats.accepted += n
            self.stats.verify_forwards += 1
            self.stats.committed += len(new)
            for t in new:
                out.append(t)
                tokens.append(t)
                if t in self.eos:
                    break
        return out


class SpeculativeBundle(Bundle):
    """A bundle whose variant drafts: generate() speculates, one prompt at a time.
    `generate_plain` is the target alone (what speculation must reproduce)."""

    def __init__(self, path: Any, threads: int | None = None) -> None:
        super().__init__(path, threads)
        if not isinstance(self.meta.get("speculative"), dict):
            raise BundleError(
                f"{self.path}: a {self.meta.get('variant')} bundle without its drafting "
                'parameters (bundle.json "speculative"); rebuild the bundle'
            )
        self.spec: dict[str, Any] = dict(self.meta["speculative"])
        self.threads = threads
        self.last_stats = Stats()

    def target(self) -> Target:
        """The target with a fresh cache, for one prompt."""
        return Target(self)

    def drafter(self) -> Drafter:
        drafter: Drafter = make_drafter(self)
        return drafter

    def generate_plain(
        self, prompts: list[list[int]], max_new_tokens: int, sampler: Sampler | None = None
    ) -> Generation:
        return super().generate(prompts, max_new_tokens, sampler)

    def generate(
        self, prompts: list[list[int]], max_new_tokens: int, sampler: Sampler | None = None
    ) -> Generation:
        generation, self.last_stats = self.rounds(
            prompts, max_new_tokens, sampler or Sampler(), self.drafter, self.max_draft_len
        )
        return generation

    def rounds(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        sampler: Sampler,
        drafter: Callable[[], Drafter],
        k: int,
    ) -> tuple[Generation, Stats]:
        """Each prompt's speculation on its own, `drafter()` proposing up to k tokens a
        round (k = 0: the target alone, one token a round)."""
        if not prompts or len(prompts) > self.max_batch_size:
            raise BundleError(
                f"batch of {len(prompts)} prompts; this bundle serves 1 to {self.max_batch_size}"
            )
        if any(len(p) == 0 for p in prompts):
            raise BundleError("empty prompt: nothing to condition on")
        started, stats, out = time.perf_counter(), Stats(), []
        for prompt in prompts:
            # Rounds never draft past max_new_tokens, so this bounds every verify forward.
            self._check_length(len(prompt), max_new_tokens)
            spec = Speculation(self.target(), drafter(), k, sampler, self.eos)
            out.append(spec.run(prompt, max_new_tokens))
            stats.add(spec.stats)
        return Generation(out, stats.verify_forwards, time.perf_counter() - started), stats

    @property
    def max_draft_len(self) -> int:
        return int(self.spec["max_draft_len"])


def diagnostics(bundle: Bundle, prompts: list[list[int]], max_new_tokens: int) -> dict[str, float]:
    """For validate: greedy speculative output vs the same bundle's target-only greedy
    output, token by token, plus the acceptance diagnostics."""
    if not isinstance(bundle, SpeculativeBundle):
        return {}
    same = total = 0
    stats = Stats()
    for prompt in prompts:
        spec = bundle.generate([prompt], max_new_tokens).tokens[0]
        stats.add(bundle.last_stats)
        plain = bundle.generate_plain([prompt], max_new_tokens).tokens[0]
        agree = next((i for i, (a, b) in enumerate(zip(spec, plain, strict=False)) if a != b), None)
        same += len(plain) if agree is None and len(spec) == len(plain) else (agree or 0)
        total += len(plain)
    metrics = stats.as_dict()
    return {
        "speculative_match_rate": same / total if total else 1.0,
        "acceptance_rate": metrics["acceptance_rate"],
        "tokens_per_forward": metrics["tokens_per_forward"],
    }

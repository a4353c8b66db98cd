"""Choosing the next token: greedy, or seeded temperature / top-k / top-p sampling.

Sampling follows the usual order (as in transformers' logits warpers): scale by
temperature, keep the top k, then keep the smallest set whose probability mass
reaches top_p, renormalize and draw. One numpy Generator per call sequence makes a
seeded run repeatable. `draw` takes one token from a distribution the same way, for
speculative decoding's acceptance rule and its drafters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Sampler:
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 means no top-k filter
    top_p: float = 1.0
    seed: int = 0
    _rng: np.random.Generator | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError("temperature must be >= 0")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError("top_p must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError("top_k must be >= 0")

    @property
    def rng(self) -> np.random.Generator:
        """The seeded generator, made on first use: a greedy request never draws, and
        making one costs more than choosing a token of a small model."""
        if self._rng is None:
            self._rng = np.random.default_rng(self.seed)
        return self._rng

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """The filtered distribution for rows of logits [batch, vocab]."""
        scaled = logits.astype(np.float64) / self.temperature
        if self.top_k and self.top_k < scaled.shape[-1]:
            kth = np.partition(scaled, -self.top_k, axis=-1)[:, -self.top_k][:, None]
            scaled = np.where(scaled < kth, -np.inf, scaled)
        probs = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        if self.top_p < 1.0:
            order = np.argsort(-probs, axis=-1, kind="stable")
            sorted_probs = np.take_along_axis(probs, order, axis=-1)
            # keep a token if the mass before it is still below top_p (the top token always)
            keep_sorted = np.cumsum(sorted_probs, axis=-1) - sorted_probs < self.top_p
            keep = np.zeros_like(keep_sorted)
            np.put_along_axis(keep, order, keep_sorted, axis=-1)
            probs = np.where(keep, probs, 0.0)
            probs /= probs.sum(axis=-1, keepdims=True)
        return probs

    def __call__(self, logits: np.ndarray) -> np.ndarray:
        """Next token ids [batch] from logits [batch, vocab]."""
        if self.greedy:
            return np.asarray(logits.argmax(axis=-1), dtype=np.int64)
        probs = self.probabilities(logits)
        u = self.rng.random((probs.shape[0], 1))
        return np.minimum((probs.cumsum(axis=-1) < u).sum(axis=-1), probs.shape[-1] - 1).astype(
            np.int64
        )


def draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One token from a normalized distribution, the way Sampler draws."""
    u = rng.random()
    return int(min((np.cumsum(probs) < u).sum(), probs.shape[-1] - 1))

"""InductorBundle: a causal_lm.Bundle whose forward keeps the KV cache on the device,
in the inductor engine's own tensors (runtime/inductor.py), instead of passing it
through numpy: the prompt runs through the prefill program chunk by chunk, the rest
one token at a time through the decode program."""

from __future__ import annotations

from typing import cast

import numpy as np

from runtime.causal_lm import Bundle
from runtime.format import BundleError
from runtime.inductor import InductorEngine


class InductorBundle(Bundle):
    """A causal-LM bundle of the inductor backend (ordinary variant)."""

    def _empty_cache(self, batch: int) -> list[np.ndarray]:
        return []  # the engine's cache lives on the device; [] marks a fresh sequence

    def forward(
        self, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray, past: list[np.ndarray]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """The Bundle contract over the engine's static cache: `mask` covers every slot
        so far (its last ids.shape[1] columns are the new tokens)."""
        engine = cast(InductorEngine, self.session)
        rows, new = ids.shape
        width = mask.shape[1]
        if rows > engine.batch:
            raise BundleError(f"batch of {rows}; this bundle serves 1 to {engine.batch}")
        if not past:
            engine.reset()
        # Rows beyond the caller's batch repeat its first row: computed, never read.
        fill = [0] * (engine.batch - rows)
        ids, mask, positions = (np.concatenate([a, a[fill]]) for a in (ids, mask, positions))
        visible = np.zeros((engine.batch, engine.length), np.int64)
        visible[:, :width] = mask
        logits = []
        start = 0
        while start < new:
            take = engine.chunk if engine.chunk and new - start >= engine.chunk else 1
            slots = np.arange(width - new + start, width - new + start + take)
            out = engine.call(
                ids[:, start : start + take], positions[:, start : start + take], slots, visible
            )
            logits.append(out[:rows].float().cpu().numpy())
            start += take
        return np.concatenate(logits, axis=1), [np.zeros(0, np.float32)]

"""InductorBlock: runtime/drafters.py BlockDrafter's two passes (the DFlash/DSpark
backbone, DSpark's heads) on a drafting inductor engine's programs
(builders/causal_lm/backends/_drafter.py says what they take), its context cache on
the device. The proposal logic is BlockDrafter's, whichever engine runs it.

The target's features reach the context cache a window of C rows at a time (C: the
program's context rows, the verify length): a window starts at the first row not yet
written, or earlier where the cache ends (rewriting rows with the features they
already hold), and rows past the target's features are zeros at slots the block never
sees, written over when those positions are committed. The block's slots past the
proposal's are hidden too, so a shorter block is the block the onnxruntime drafter
runs.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class InductorBlock:
    """One prompt's drafter passes over the engine's drafter programs (runtime/
    inductor.py InductorEngine.drafting); the engine's reset empties its cache."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        meta = engine.program["drafter"]
        self.rows, self.size = int(meta["context"]), int(meta["block"])
        self.written = 0  # context slots holding the target's features

    def block(self, feats: list[np.ndarray], ids: list[int]) -> tuple[np.ndarray, Any]:
        """Logits [n, V] (host) and hidden rows [n, H] (device) of the block `ids` at the
        positions after `feats` (BlockDrafter's contract, drafters.OrtBlock)."""
        e, t = self.engine, self.engine.torch
        start, n, length = len(feats), len(ids), e.length
        if n > self.size:
            raise ValueError(f"a block of {n} slots; the draft program takes {self.size}")
        inputs = e.drafter_in["draft"][-(6 + len(e.drafter_cache)) :]
        context, ctx_pos, ctx_slots, block_ids, block_pos, visible = inputs[:6]
        block = ids + [ids[-1]] * (self.size - n)  # hidden from every slot: any id
        seen = np.zeros((1, length + self.size), np.int64)
        seen[0, :start] = 1
        seen[0, length : length + n] = 1
        with t.inference_mode():
            block_ids.copy_(t.tensor([block]))
            block_pos.copy_(t.arange(start, start + self.size)[None])
            visible.copy_(t.from_numpy(seen))
            while True:  # at least one call: the last window's gives the block
                first = min(self.written, length - self.rows)
                end = min(start, first + self.rows)
                rows = np.zeros((self.rows, context.shape[-1]), np.float32)
                if end > first:
                    rows[: end - first] = np.stack(feats[first:end])
                context.copy_(t.from_numpy(rows)[None])
                ctx_pos.copy_(t.arange(first, first + self.rows)[None])
                ctx_slots.copy_(t.arange(first, first + self.rows))
                logits, hidden = e.drafting["draft"](*e.drafter_in["draft"])
                self.written = end
                if end >= start:
                    break
            return logits[0, :n].float().cpu().numpy(), hidden[0, :n]

    def markov(self, hidden: Any, prev: int) -> tuple[np.ndarray, float]:
        """DSpark's Markov bias [V] (host) and confidence for one slot's hidden row."""
        e, t = self.engine, self.engine.torch
        row, prev_ids = e.drafter_in["markov"][-2:]
        with t.inference_mode():
            row.copy_(hidden)
            prev_ids.fill_(prev)
            bias, confidence = e.drafting["markov"](*e.drafter_in["markov"])
            return bias[0].float().cpu().numpy(), float(confidence[0])

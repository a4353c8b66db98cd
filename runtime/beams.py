"""Beam search over one input's decoder rows, in numpy, by transformers' rules (its
`GenerationMixin._beam_search`, 5.x), so the same logits pick the same sequence:

- each step scores every beam's log-softmax plus the beam's running score, and keeps
  the top K = max(2, 1 + number of EOS ids) x num_beams continuations;
- a continuation that ends in EOS, or reaches max_new_tokens, is a finished
  hypothesis if it is among the top num_beams of those K; its score is divided by
  (generated length) ** length_penalty, and the best num_beams finished ones are kept;
- the best num_beams continuations that did not finish run on (at first only beam 0
  does: the others start at -1e9, so the beams do not begin as copies);
- the search stops when no running beam can beat the worst kept hypothesis (the
  early_stopping heuristic: False checks the current length, "never" the longest
  possible one with a positive length_penalty, True stops as soon as num_beams
  hypotheses are kept), or when every continuation finished.

Scores are float32, as transformers computes them. The caller runs the decoder: it
feeds `inputs()`, passes the last position's logits to `step()`, and reorders its KV
cache by the source beams that `step` returns.
"""

from __future__ import annotations

import numpy as np

NEG = np.float32(-1.0e9)


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float32)
    shifted = x - x.max(axis=-1, keepdims=True)
    out: np.ndarray = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return out


def top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, largest first (ties: the lower index first)."""
    part = np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)
    order: np.ndarray = part[np.lexsort((part, -scores[part]))]
    return order


class BeamSearch:
    def __init__(
        self,
        num_beams: int,
        start: int,
        eos: set[int],
        max_new_tokens: int,
        length_penalty: float = 1.0,
        early_stopping: bool | str = False,
    ) -> None:
        if num_beams < 1:
            raise ValueError("num_beams must be >= 1")
        if early_stopping not in (True, False, "never"):
            raise ValueError('early_stopping is True, False or "never"')
        self.beams, self.eos, self.max_new = num_beams, eos, max_new_tokens
        self.length_penalty, self.early_stopping = length_penalty, early_stopping
        self.keep = max(2, 1 + len(eos)) * num_beams
        self.running = [[start] for _ in range(num_beams)]
        self.scores = np.full(num_beams, NEG, np.float32)
        self.scores[0] = 0.0
        self.finished: list[list[int]] = [[] for _ in range(num_beams)]
        self.finished_scores = np.full(num_beams, NEG, np.float32)
        self.is_finished = np.zeros(num_beams, bool)
        self.improvable = True
        self.generated = 0  # tokens each running beam has after the start token
        self.done = False

    def inputs(self) -> np.ndarray:
        """The decoder's next input ids [num_beams, 1]."""
        return np.asarray([[seq[-1]] for seq in self.running], np.int64)

    def step(self, logits: np.ndarray) -> np.ndarray:
        """Advance on the running beams' next-token logits [num_beams, vocab]; returns,
        for each new running beam, the row of the beam it continues."""
        vocab = logits.shape[-1]
        flat = (log_softmax(logits) + self.scores[:, None]).reshape(-1)
        picked = top(flat, self.keep)
        cand_scores = flat[picked]
        cand_beams, cand_tokens = picked // vocab, picked % vocab
        last = self.generated + 1 >= self.max_new  # max_length: every candidate stops
        hits = np.asarray([last or int(t) in self.eos for t in cand_tokens], bool)
        sequences = [
            self.running[b] + [int(t)] for b, t in zip(cand_beams, cand_tokens, strict=True)
        ]

        # e. the best continuations that did not finish run on
        running_scores = (cand_scores + hits.astype(np.float32) * NEG).astype(np.float32)
        chosen = top(running_scores, self.beams)
        sources = cand_beams[chosen]
        self.running = [sequences[i] for i in chosen]
        self.scores = running_scores[chosen]

        # f. the finished ones among the top num_beams candidates, length-penalised
        final = (cand_scores / np.float32((self.generated + 1) ** self.length_penalty)).astype(
            np.float32
        )
        if self.is_finished.all() and self.early_stopping is True:
            final = final + NEG
        if not self.improvable:
            final = final + NEG
        just = hits.copy()
        just[self.beams :] = False
        final = final + (~just).astype(np.float32) * NEG
        merged_scores = np.concatenate([self.finished_scores, final])
        merged = self.finished + sequences
        merged_done = np.concatenate([self.is_finished, just])
        kept = top(merged_scores, self.beams)
        self.finished = [merged[i] for i in kept]
        self.finished_scores = merged_scores[kept]
        self.is_finished = merged_done[kept]

        # g. can a running beam still beat the worst kept hypothesis?
        self.generated += 1
        if self.early_stopping == "never" and self.length_penalty > 0.0:
            best_length = self.max_new
        else:
            best_length = self.generated
        best_possible = self.scores[0] / np.float32(best_length**self.length_penalty)
        worst = np.where(self.is_finished, self.finished_scores.min(), NEG)
        self.improvable = self.improvable and bool((best_possible > worst).any())
        open_beam = not (self.is_finished.all() and self.early_stopping is True)
        self.done = not (self.improvable and open_beam and not hits.all())
        return np.asarray(sources, np.int64)

    def best(self) -> list[int]:
        """The best kept hypothesis, after the start token, up to and including EOS."""
        return self.finished[0][1:]

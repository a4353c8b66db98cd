"""The shipped evaluation text, cut into windows of next-token positions.

builders/data/texts/eval.txt is tokenized whole (with the reference's tokenizer) and cut
into windows of WINDOW tokens; a window of w tokens scores w - 1 next-token
positions. The first `positions` positions are scored, so the sample size a gate
assumes is exactly what the recipe asks for. Shared by reference and validate.
"""

from __future__ import annotations

from typing import Any

from builders.data import texts

TEXT = texts.path("eval")
WINDOW = 128  # well inside every bundle's max_seq_len


def windows(ids: list[int], positions: int) -> list[list[int]]:
    """Windows of at most WINDOW tokens, together scoring exactly `positions`."""
    out, start, left = [], 0, positions
    while left > 0 and start < len(ids) - 1:
        take = min(WINDOW, left + 1, len(ids) - start)
        out.append(ids[start : start + take])
        left -= take - 1
        start += take - 1  # the last token of a window is the first of the next
    if left > 0:
        raise ValueError(
            f"validation.scored_positions {positions} exceeds the "
            f"{positions - left} positions of builders/data/texts/eval.txt"
        )
    return out


def next_token_scores(logits: Any, window: list[int]) -> tuple[Any, Any]:
    """Per position: the NLL (nats) of the true next token, and the top-1 token."""
    import numpy as np

    x = logits[:-1].astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    logp = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
    target = np.asarray(window[1:])
    nll = -logp[np.arange(len(target)), target]
    return nll, logits[:-1].argmax(axis=-1)

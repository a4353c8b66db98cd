"""Model-free prompt-lookup drafting (n-gram).

As transformers' PromptLookupCandidateGenerator does (spec_decoding_facts.md section
6): try n from ngram_max down to ngram_min; take the last n tokens and look for an
earlier occurrence anywhere in the sequence (prompt plus generated); the earliest
match with a continuation wins and up to k tokens after it are proposed. No match,
no drafts: the round is an ordinary decode step. Proposals carry no distribution, so
verification treats them as one-hot (accept x with probability p(x)).
"""

from __future__ import annotations

import numpy as np

from runtime.sampling import Sampler


def lookup(tokens: list[int], k: int, ngram_min: int, ngram_max: int) -> list[int]:
    """Up to k tokens that followed the earliest earlier occurrence of the longest
    suffix n-gram (n from ngram_max down to ngram_min)."""
    arr = np.asarray(tokens, np.int64)
    length = len(tokens)
    for n in range(min(ngram_max, length - 1), ngram_min - 1, -1):
        if n <= 0:
            break
        suffix = arr[-n:]
        windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        for start in hits:  # earliest first; the suffix itself is excluded by arr[:-1]
            follow = start + n
            if follow < length:
                return [int(t) for t in arr[follow : follow + k]]
    return []


class NgramDrafter:
    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        self.ngram_min, self.ngram_max = ngram_min, ngram_max

    def propose(
        self, tokens: list[int], feats: list[np.ndarray], k: int, sampler: Sampler
    ) -> tuple[list[int], np.ndarray | None]:
        return lookup(tokens, k, self.ngram_min, self.ngram_max), None

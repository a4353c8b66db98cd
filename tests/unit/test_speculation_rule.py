"""The acceptance rule alone, on exact distributions over a tiny vocabulary: what a
speculative decoder emits must be distributed as the target's own sampling, for the
first token and jointly for the first two (chaining can be wrong while marginals are
right: spec_decoding_facts.md section 5). Also prompt-lookup drafting."""

from __future__ import annotations

import numpy as np
import pytest
from stats import chi2, chi2_critical

from runtime.ngram import lookup
from runtime.sampling import draw
from runtime.speculative import accept, accept_greedy

V = 5


def markov(seed: int, sharp: float) -> np.ndarray:
    """A context-dependent distribution table: row = previous token, column = next."""
    logits = np.random.default_rng(seed).normal(size=(V + 1, V)) * sharp
    probs = np.exp(logits)
    return probs / probs.sum(axis=1, keepdims=True)


def generate(p: np.ndarray, q: np.ndarray | None, k: int, n: int, rng: np.random.Generator):  # type: ignore[no-untyped-def]
    """Speculative decoding of n tokens with a Markov target p and drafter q (None:
    one-hot drafts of the drafter's argmax, as n-gram drafts are); start state V."""
    out: list[int] = []
    prev = V
    while len(out) < n:
        drafts, qs, state = [], [], prev
        for _ in range(k):
            if q is None:
                x = (int(np.argmax(p[state])) + state) % V  # deterministic, sometimes right
            else:
                x = draw(q[state], rng)
                qs.append(q[state])
            drafts.append(x)
            state = x
        states = [prev, *drafts]
        target = np.stack([p[s] for s in states])
        m, nxt = accept(drafts, np.stack(qs) if qs else None, target, rng)
        out.extend([*drafts[:m], nxt])
        prev = out[-1]
    return out[:n]


CASES = {
    "random p, random q": (markov(1, 1.0), markov(2, 1.0)),
    "p equals q": (markov(3, 1.0), markov(3, 1.0)),
    "q sharp, p flat": (markov(4, 0.3), markov(5, 4.0)),
    "q one-hot": (markov(6, 1.0), np.eye(V)[np.r_[np.arange(V), 0]]),
    "q zero where p is not": (markov(7, 1.0), np.tile([0.5, 0.5, 0, 0, 0], (V + 1, 1))),
    "deterministic drafts": (markov(8, 1.0), None),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("k", [1, 3])
def test_emitted_tokens_follow_the_target_jointly(case: str, k: int) -> None:
    p, q = CASES[case]
    rng = np.random.default_rng(12345)
    trials = 6000
    counts = np.zeros((V, V))
    for _ in range(trials):
        a, b = generate(p, q, k, 2, rng)
        counts[a, b] += 1
    expected = trials * p[V][:, None] * p[:V]  # p(a) p(b | a)
    stat, df = chi2(counts.ravel(), expected.ravel())
    assert stat < chi2_critical(df), (case, stat, df)
    first = counts.sum(axis=1)
    stat1, df1 = chi2(first, trials * p[V])
    assert stat1 < chi2_critical(df1), (case, stat1)


def test_the_test_can_fail_accepting_every_draft_follows_q_not_p() -> None:
    p, q = CASES["random p, random q"]
    rng = np.random.default_rng(0)
    counts = np.zeros(V)
    for _ in range(6000):
        counts[draw(q[V], rng)] += 1  # what blind acceptance of the first draft emits
    stat, df = chi2(counts, 6000 * p[V])
    assert stat > chi2_critical(df)


def test_disjoint_supports_never_accept_and_resample_from_p() -> None:
    p = np.array([[0.0, 0.0, 0.5, 0.5, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]])
    q = np.array([[1.0, 0.0, 0.0, 0.0, 0.0]])
    rng = np.random.default_rng(0)
    results = [accept([0], q, p, rng) for _ in range(2000)]
    assert all(n == 0 for n, _ in results)
    assert {t for _, t in results} == {2, 3}


def test_greedy_accepts_the_longest_agreeing_prefix_then_the_target_token() -> None:
    logits = np.log(
        np.array([[0.1, 0.9, 0, 0, 0], [0, 0, 0.8, 0.2, 0], [0.5, 0, 0, 0, 0.5]]) + 1e-9
    )
    assert accept_greedy([1, 2], logits) == (2, 0)  # all accepted, bonus = argmax (first max)
    assert accept_greedy([1, 3], logits) == (1, 2)  # second rejected, target's token instead
    assert accept_greedy([0, 2], logits) == (0, 1)


def test_acceptance_rate_equals_one_minus_total_variation() -> None:
    p, q = CASES["random p, random q"]
    rng = np.random.default_rng(3)
    trials = 20000
    accepted = sum(
        accept([draw(q[V], rng)], q[V][None], np.stack([p[V], p[V]]), rng)[0] for _ in range(trials)
    )
    alpha = np.minimum(p[V], q[V]).sum()
    assert abs(accepted / trials - alpha) < 4 * np.sqrt(alpha * (1 - alpha) / trials)


@pytest.mark.parametrize(
    ("tokens", "k", "want"),
    [
        ([5, 6, 7, 8, 5, 6], 3, [7, 8, 5]),  # longest suffix (5, 6) seen before
        ([1, 2, 3, 9, 2, 3], 2, [9, 2]),  # (2, 3) at its earliest occurrence
        ([1, 2, 3, 4], 2, []),  # no earlier occurrence of any suffix
        ([4, 4, 4], 4, [4]),  # continuation stops at the end of the sequence
        ([7, 1, 7, 2, 9, 7], 2, [1, 7]),  # n=1 fallback, earliest match wins
    ],
)
def test_prompt_lookup_copies_what_followed_the_longest_earliest_match(
    tokens: list[int], k: int, want: list[int]
) -> None:
    assert lookup(tokens, k, 1, 3) == want

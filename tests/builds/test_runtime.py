"""The runtime against transformers: same greedy tokens, left padding that changes
nothing, and sampling that follows its distribution."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import World, heavy

import runtime
from runtime import Bundle, BundleError, Sampler


@pytest.fixture(scope="module")
def bundle(built: World) -> Bundle:
    out = built.doit("plan", "recipe=tiny-qwen3", check=True).stdout
    key = re.search(r"bundle\s+([0-9a-f]{12})", out).group(1)  # type: ignore[union-attr]
    found = runtime.open(next((built.store / "objects").glob(f"*/{key}*")))
    assert type(found) is Bundle  # an ordinary causal-LM bundle: no speculation
    return found


PROMPTS = ["Hello", "The river runs past the old mill, and the miller", "def add(a, b):"]


@heavy
def test_greedy_batch_with_left_padding_equals_transformers_generate(
    bundle: Bundle, built: World
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        built.checkpoint("tiny-qwen3"), dtype=torch.float32
    ).eval()
    ids = [bundle.encode(p) for p in PROMPTS]
    batched = bundle.generate(ids, 24).tokens
    for prompt_ids, got in zip(ids, batched, strict=True):
        alone = bundle.generate([prompt_ids], 24).tokens[0]
        with torch.no_grad():
            out = model.generate(
                torch.tensor([prompt_ids]),
                max_new_tokens=24,
                do_sample=False,
                eos_token_id=2,
                pad_token_id=0,
            )
        want = out[0, len(prompt_ids) :].tolist()
        if 2 in want:
            want = want[: want.index(2) + 1]
        assert got == alone == want


@heavy
def test_teacher_forced_logits_match_the_fp32_model(bundle: Bundle, built: World) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        built.checkpoint("tiny-qwen3"), dtype=torch.float32
    )
    ids = bundle.encode(PROMPTS[1])
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(bundle.logits(ids) - want).max() < 1e-4


@heavy
def test_seeded_sampling_repeats_and_top_k_1_is_greedy(bundle: Bundle) -> None:
    ids = [bundle.encode("Once upon a time")]
    a = bundle.generate(ids, 16, Sampler(temperature=1.0, seed=7)).tokens
    b = bundle.generate(ids, 16, Sampler(temperature=1.0, seed=7)).tokens
    c = bundle.generate(ids, 16, Sampler(temperature=1.0, seed=8)).tokens
    assert a == b and a != c
    greedy = bundle.generate(ids, 16).tokens
    assert bundle.generate(ids, 16, Sampler(temperature=0.7, top_k=1, seed=3)).tokens == greedy
    assert bundle.generate(ids, 16, Sampler(temperature=1.0, top_p=1e-9, seed=3)).tokens == greedy


@heavy
def test_a_small_bundle_runs_few_token_forwards_on_one_thread(
    bundle: Bundle, tmp_path: Path
) -> None:
    """runtime/backends.py SHORT_WORK: a decode step of the tiny model runs on a second,
    one-thread session, a long prefill on the caller's pool; the tokens are those of a
    one-thread bundle, and a bundle of 64 MiB or more never opens the second session."""
    from runtime.backends import SHORT_WORK, engine_bytes

    pooled = runtime.open(bundle.path, 2, expect=Bundle)
    one = runtime.open(bundle.path, 1, expect=Bundle)
    engine: Any = pooled.session
    assert engine.threads == 2 and engine.short == SHORT_WORK // engine_bytes(bundle.path)
    assert 16 < engine.short < 400 and engine.narrow is None
    assert one.session.short == 0  # type: ignore[attr-defined]  # one thread already: no second session
    long = list(range(3, 3 + engine.short))  # a prefill at the cut: the pool
    pooled.max_seq_len = one.max_seq_len = len(long)  # the graph takes any length
    pooled_long = pooled.logits(long)
    assert engine.narrow is None
    pooled_short = pooled.logits(long[:8])  # fewer tokens: the one-thread session
    assert engine.narrow is not None
    assert np.abs(pooled_long - one.logits(long)).max() < 1e-5
    assert np.abs(pooled_short - one.logits(long[:8])).max() < 1e-5
    ids = [bundle.encode(p) for p in PROMPTS]
    assert pooled.generate(ids, 12).tokens == one.generate(ids, 12).tokens

    big = tmp_path / "big"
    big.mkdir()
    for f in bundle.path.iterdir():
        (big / f.name).symlink_to(f)
    with open(big / "padding.data", "wb") as pad:  # sparse: st_size counts, no disk used
        pad.truncate(SHORT_WORK)
    large = runtime.open(big, 2, expect=Bundle)
    big_engine: Any = large.session
    assert big_engine.short == 0
    large.generate(ids, 4)
    assert big_engine.narrow is None


@heavy
def test_limits_are_enforced_with_a_clear_error(bundle: Bundle) -> None:
    with pytest.raises(BundleError, match="max_seq_len"):
        bundle.generate([[5] * 250], 10)
    with pytest.raises(BundleError, match="serves 1 to 4"):
        bundle.generate([[5]] * 5, 1)


def test_sampling_draws_follow_the_filtered_distribution() -> None:
    logits = np.log(np.array([[0.5, 0.25, 0.15, 0.1]]))
    s = Sampler(temperature=1.0, top_k=3, seed=0)
    probs = s.probabilities(logits)[0]
    assert np.allclose(probs, [0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0.0])
    draws = np.array([s(logits)[0] for _ in range(20000)])
    counts = np.bincount(draws, minlength=4)
    expected = probs * len(draws)
    chi2 = (((counts - expected) ** 2)[:3] / expected[:3]).sum()
    assert counts[3] == 0
    assert chi2 < 13.8  # chi-square, 2 dof, p = 0.001


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    logits = np.log(np.array([[0.5, 0.25, 0.15, 0.1]]))
    probs = Sampler(temperature=1.0, top_p=0.7, seed=0).probabilities(logits)[0]
    assert np.allclose(probs, [0.5 / 0.75, 0.25 / 0.75, 0, 0])

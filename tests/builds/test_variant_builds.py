"""Every execution variant built for real (tiny checkpoints, real ONNX, onnxruntime) and
held to the rule that matters: speculation is lossless. Greedy output equals the
target's alone across prompts and draft/block lengths; seeded sampling follows the
target's distribution; drafters roll their caches back correctly; LoRA equals peft."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from conftest import SPECULATIVE, VARIANT_RECIPES, World, bundle_dir, heavy
from stats import chi2, chi2_critical

import runtime
from runtime import Sampler
from runtime.drafters import make_drafter
from runtime.speculative import SpeculativeBundle

pytestmark = heavy

PROMPTS = [
    "Hello",
    "The quick brown fox",
    "The river runs past the old mill, and the miller",
    "def add(a, b):",
    "one two three one two three one two",
    "abcabcabcabc",
    "In 1969, the first people walked on the Moon.",
    "Once upon a time",
    "the the the the",
    "Speculative decoding drafts tokens and verifies them.",
    "1, 2, 3, 4, 5,",
    "Q: What is kiln? A:",
]
# Draft lengths (block lengths for dflash/dspark) each variant is checked at.
LENGTHS = {
    "tiny-llama-draft": (1, 2, 4, 7),
    "tiny-llama-ngram": (1, 3, 6),
    "tiny-qwen3-eagle3": (1, 2, 5),
    "tiny-qwen3-dflash": (1, 2, 4, 8),
    "tiny-qwen3-dspark": (1, 3, 8),
    "tiny-deepseek-v3-mtp": (1, 2, 3),
}


@pytest.fixture(scope="module")
def bundles(variants_built: World) -> dict[str, Any]:
    found = {r: runtime.open(bundle_dir(variants_built, r)) for r in VARIANT_RECIPES}
    # runtime.open picks the runner by variant: every drafting variant speculates.
    assert all(isinstance(found[r], SpeculativeBundle) for r in SPECULATIVE)
    assert type(found["tiny-qwen3-lora"]) is runtime.Bundle
    return found


def with_length(bundle: SpeculativeBundle, length: int) -> dict[str, Any]:
    saved = dict(bundle.spec)
    bundle.spec["max_draft_len"] = length
    return saved


@pytest.mark.parametrize(("recipe", "length"), [(r, n) for r in SPECULATIVE for n in LENGTHS[r]])
def test_greedy_speculation_reproduces_the_target_alone(
    bundles: dict[str, Any], recipe: str, length: int
) -> None:
    bundle = bundles[recipe]
    saved = with_length(bundle, length)
    try:
        for prompt in PROMPTS:
            ids = bundle.encode(prompt)
            spec = bundle.generate([ids], 24).tokens[0]
            plain = bundle.generate_plain([ids], 24).tokens[0]
            assert spec == plain, (recipe, length, prompt)
            stats = bundle.last_stats
            assert stats.committed == len(spec) - 1  # every token after the first is verified
            assert stats.drafted >= stats.accepted
    finally:
        bundle.spec = saved


def expected_cells(bundle: Any, ids: list[int], sampler: Sampler, depth: int) -> dict:  # type: ignore[type-arg]
    """Exact target probabilities of every sampled continuation of `depth` tokens
    (shorter when EOS ends it), from teacher-forced logits."""
    probs = sampler.probabilities(bundle.logits(ids)[-1:])[0]
    cells = {}
    for token in np.flatnonzero(probs > 0):
        p = float(probs[token])
        if depth == 1 or int(token) in bundle.eos:
            cells[(int(token),)] = p
            continue
        for rest, q in expected_cells(bundle, [*ids, int(token)], sampler, depth - 1).items():
            cells[(int(token), *rest)] = p * q
    return cells


@pytest.mark.parametrize("recipe", SPECULATIVE)
def test_seeded_sampling_follows_the_target_distribution(
    bundles: dict[str, Any], recipe: str
) -> None:
    """Three tokens with top_k=2 at temperature 1: the first from the prefill, the next
    two from a verify round that drafted two; chi-square against the exact joint."""
    bundle = bundles[recipe]
    ids = bundle.encode("one two three one two three one")
    cells = expected_cells(bundle, ids, Sampler(temperature=1.0, top_k=2), 3)
    trials = 600
    counts = dict.fromkeys(cells, 0)
    for seed in range(trials):
        out = bundle.generate([ids], 4, Sampler(temperature=1.0, top_k=2, seed=seed)).tokens[0]
        key = next(tuple(out[:n]) for n in (1, 2, 3) if tuple(out[:n]) in cells)
        counts[key] += 1
    keys = list(cells)
    stat, df = chi2(
        np.array([counts[k] for k in keys], float), trials * np.array([cells[k] for k in keys])
    )
    assert stat < chi2_critical(max(df, 1)), (recipe, stat, df)


class CheckedDrafter:
    """Proposes with the bundle's drafter and checks every greedy proposal against a
    fresh drafter that has seen nothing: cache rollback must not change a draft."""

    def __init__(self, bundle: Any) -> None:
        self.bundle = bundle
        self.inner = make_drafter(bundle)
        self.rounds = 0

    def propose(self, tokens: list[int], feats: list[Any], k: int, sampler: Sampler) -> Any:
        got = self.inner.propose(tokens, feats, k, sampler)
        fresh = make_drafter(self.bundle).propose(tokens, feats, k, sampler)
        assert got[0] == fresh[0], (tokens, got[0], fresh[0])
        self.rounds += 1
        return got


@pytest.mark.parametrize("recipe", [r for r in SPECULATIVE if "ngram" not in r])
def test_drafter_caches_roll_back_to_what_a_fresh_drafter_proposes(
    bundles: dict[str, Any], recipe: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = bundles[recipe]
    made: list[CheckedDrafter] = []
    monkeypatch.setattr(bundle, "drafter", lambda: made.append(CheckedDrafter(bundle)) or made[-1])
    for prompt in PROMPTS[:4]:
        bundle.generate([bundle.encode(prompt)], 20)
    assert sum(d.rounds for d in made) >= 8


def test_every_variant_passes_its_gates_with_acceptance_recorded(variants_built: World) -> None:
    for recipe in VARIANT_RECIPES:
        evidence = variants_built.manifest(recipe)["evidence"][-1]
        assert evidence["verdict"] == "pass", (recipe, evidence["reason"])
        metrics = evidence["metrics"]
        if recipe in SPECULATIVE:
            assert metrics["speculative_match_rate"] == 1.0
            assert metrics["token_match_rate"] == 1.0  # and equal to the HF reference
            assert metrics["tokens_per_forward"] >= 1.0
            assert {g["metric"] for g in evidence["gates"]} >= {
                "speculative_match_rate",
                "tokens_per_forward",
            }


ENGINES = {
    "tiny-llama-draft": {"main", "draft"},
    "tiny-llama-ngram": {"main"},
    "tiny-qwen3-eagle3": {"main", "drafter", "drafter_fc"},
    "tiny-qwen3-dflash": {"main", "drafter"},
    "tiny-qwen3-dspark": {"main", "drafter", "drafter_markov"},
    "tiny-deepseek-v3-mtp": {"main", "drafter"},
    "tiny-qwen3-lora": {"main"},
}


def test_bundle_json_records_the_engines_it_holds(bundles: dict[str, Any]) -> None:
    for recipe, engines in ENGINES.items():
        meta = bundles[recipe].meta
        assert set(meta["engines"]) == engines, recipe
        for engine in meta["engines"].values():
            assert (bundles[recipe].path / engine["file"]).is_file()
        drafting = recipe in SPECULATIVE
        assert ("speculative" in meta) == drafting
        outputs = [o["name"] for o in meta["io"]["outputs"]]
        assert ("hidden" in outputs) == (meta["engines"].keys() >= {"drafter"})


def test_companions_are_locked_with_their_file_hashes(variants_built: World) -> None:
    lock = variants_built.manifest("tiny-qwen3-eagle3")["lock"]
    assert lock["companions"]["draft"]["repo"] == "kiln-tiny/qwen3-eagle3"
    assert lock["companions"]["draft"]["architecture"] == "LlamaForCausalLMEagle3"
    adapter = variants_built.manifest("tiny-qwen3-lora")["lock"]["companions"]["adapter"]
    assert {f["path"] for f in adapter["files"]} == {
        "adapter_config.json",
        "adapter_model.safetensors",
    }
    kinds = [s["kind"] for s in variants_built.manifest("tiny-llama-draft")["lock"]["steps"]]
    assert kinds.count("engine") == 2 and kinds.count("fetch") == 2  # the draft's own chain


def test_lora_bundle_computes_what_peftmodel_computes(
    bundles: dict[str, Any], variants_built: World
) -> None:
    import torch
    from huggingface_hub import snapshot_download
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    lock = variants_built.manifest("tiny-qwen3-lora")["lock"]
    base = AutoModelForCausalLM.from_pretrained(
        variants_built.checkpoint("tiny-qwen3-lora"), dtype=torch.float32
    ).eval()
    adapter = snapshot_download(
        lock["companions"]["adapter"]["repo"],
        revision=lock["companions"]["adapter"]["revision"],
        cache_dir=variants_built.hub,
        local_files_only=True,
    )
    bundle = bundles["tiny-qwen3-lora"]
    ids = bundle.encode(PROMPTS[2])
    with torch.no_grad():
        plain = base(torch.tensor([ids])).logits[0].numpy()
        peft = PeftModel.from_pretrained(base, adapter).eval()
        want = peft(torch.tensor([ids])).logits[0].numpy()
    got = bundle.logits(ids)
    assert np.abs(got - want).max() < 1e-4
    assert np.abs(got - plain).max() > 0.1  # the adapter changes the model


def test_an_adapter_pinned_to_another_base_is_refused(variants_built: World, tmp_path: Any) -> None:
    from conftest import make_world

    world = make_world(tmp_path, variants_built.hub, ("tiny-qwen3-lora",))
    data = world.recipe("tiny-qwen3-lora")
    data["model"] = variants_built.recipe("tiny-llama-draft")["model"]
    data["model"]["architecture"] = "LlamaForCausalLM"
    world.write_recipe("tiny-qwen3-lora", data)
    proc = world.doit("build", "recipe=tiny-qwen3-lora")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out
    assert "recipes/tiny-qwen3-lora.yaml:" in out
    assert "the adapter was made for kiln-tiny/qwen3@" in out
    assert "recipe's model is kiln-tiny/llama@" in out
    assert not (world.root / "manifests" / "tiny-qwen3-lora.json").exists()


def test_doit_run_works_for_every_variant_and_prints_acceptance(variants_built: World) -> None:
    for recipe in VARIANT_RECIPES:
        out = variants_built.doit(
            "run",
            f"recipe={recipe}",
            "prompt=one two one two",
            "max_new_tokens=8",
            "stats=1",
            check=True,
        ).stdout
        assert "one two one two" in out, recipe
        line = next(x for x in out.splitlines() if x.startswith("stats:"))
        if recipe in SPECULATIVE:
            assert "acceptance rate" in line and "committed tokens per target forward" in line
        else:
            assert "one per target forward" in line


def test_sampling_with_speculation_repeats_under_a_seed(bundles: dict[str, Any]) -> None:
    for recipe in SPECULATIVE:
        bundle = bundles[recipe]
        ids = bundle.encode("Once upon a time")
        runs = [
            bundle.generate([ids], 12, Sampler(temperature=0.8, seed=s)).tokens[0]
            for s in (5, 5, 6)
        ]
        assert runs[0] == runs[1], recipe
        assert len(set(itertools.chain(*runs))) > 1

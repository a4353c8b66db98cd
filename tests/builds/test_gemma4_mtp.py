"""Gemma 4's MTP assistant (Gemma4AssistantForCausalLM) built as the mtp variant's
drafter of the tiny Gemma 4 (recipes/tiny-gemma4-mtp.yaml), for real: speculation is
lossless, and every draft is the one transformers' assistant makes from the same
state (generation/candidate_generator.py SinglePositionMultiTokenCandidateGenerator:
the last token's target embedding beside a hidden row, at the last token's position,
attending to the target's keys and values of its last sliding and last global layer)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import World, bundle_dir, heavy, make_world

import runtime
from runtime import Sampler
from runtime.speculative import SpeculativeBundle, Target

pytestmark = heavy

RECIPE = "tiny-gemma4-mtp"
REPOS = ("kiln-tiny/gemma4", "kiln-tiny/gemma4-assistant")
PROMPTS = [
    "Hello",
    "The river runs past the old mill, and the miller",  # past the 8-token window
    "one two three one two three one two",
    "def add(a, b):",
    "In 1969, the first people walked on the Moon.",
    "Q: What is kiln? A:",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> World:
    """Only the two checkpoints this recipe reads, in a hub of their own (the session's
    mirror writes every tiny checkpoint)."""
    import tinyhub

    base = tmp_path_factory.mktemp("gemma4-mtp")
    hub = base / "hub"
    for repo in REPOS:
        tinyhub.write_repo(hub, repo)
    (hub / tinyhub.STAMP).write_bytes(tinyhub.generator_digest().encode())
    w = make_world(base, hub, (RECIPE,))
    w.doit("build", check=True)
    return w


@pytest.fixture(scope="module")
def bundle(built: World) -> SpeculativeBundle:
    found = runtime.open(bundle_dir(built, RECIPE))
    assert isinstance(found, SpeculativeBundle)
    return found


def test_the_recipe_passes_its_gates_with_acceptance_recorded(built: World) -> None:
    evidence = built.last(RECIPE)
    assert evidence["verdict"] == "pass", evidence["reason"]
    metrics = evidence["metrics"]
    assert metrics["token_match_rate"] == 1.0  # the target equals transformers'
    assert metrics["speculative_match_rate"] == 1.0
    assert metrics["tokens_per_forward"] >= 1.0
    assert {"speculative_match_rate", "tokens_per_forward"} <= {
        g["metric"] for g in evidence["gates"]
    }
    lock = built.manifest(RECIPE)["lock"]
    assert lock["companions"]["draft"]["architecture"] == "Gemma4AssistantForCausalLM"


def test_the_bundle_holds_the_assistant_and_the_layers_it_reads(
    bundle: SpeculativeBundle,
) -> None:
    assert set(bundle.meta["engines"]) == {"main", "drafter"}
    assert bundle.meta["drafter"]["target_layers"] == {
        "sliding_attention": 0,
        "full_attention": 1,
    }
    assert "hidden" in [o["name"] for o in bundle.meta["io"]["outputs"]]


@pytest.mark.parametrize("length", [1, 2, 4])
def test_greedy_speculation_reproduces_the_target_alone(
    bundle: SpeculativeBundle, length: int
) -> None:
    saved = dict(bundle.spec)
    bundle.spec["max_draft_len"] = length
    try:
        for prompt in PROMPTS:
            ids = bundle.encode(prompt)
            spec = bundle.generate([ids], 24).tokens[0]
            assert spec == bundle.generate_plain([ids], 24).tokens[0], (length, prompt)
            assert bundle.last_stats.committed == len(spec) - 1
    finally:
        bundle.spec = saved


@pytest.fixture(scope="module")
def transformers_pair(built: World) -> tuple[Any, Any]:
    """transformers' own target and assistant, from the hub the build read."""
    from transformers import Gemma4AssistantForCausalLM, Gemma4ForCausalLM

    snap = [
        next((built.hub / f"models--{r.replace('/', '--')}").glob("snapshots/*")) for r in REPOS
    ]
    return (
        Gemma4ForCausalLM.from_pretrained(snap[0]).eval(),
        Gemma4AssistantForCausalLM.from_pretrained(snap[1]).eval(),
    )


def _transformers_drafts(pair: tuple[Any, Any], ids: list[int], k: int) -> list[int]:
    """k drafts after `ids`, stepped as SinglePositionMultiTokenCandidateGenerator steps
    them, from a fresh forward of the committed tokens but the last (what the target's
    cache holds)."""
    import torch

    target, helper = pair
    with torch.no_grad():
        out = target(
            torch.tensor([ids[:-1]]),
            output_hidden_states=True,
            return_shared_kv_states=True,
            use_cache=False,
        )
        hidden, last = out.hidden_states[-1][:, -1:], torch.tensor([ids[-1:]])
        drafts = []
        for _ in range(k):
            step = helper(
                inputs_embeds=torch.cat([target.get_input_embeddings()(last), hidden], dim=-1),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                position_ids=torch.tensor([[len(ids) - 1]]),
                shared_kv_states=dict(out.shared_kv_states),
            )
            last, hidden = step.logits.argmax(-1), step.last_hidden_state
            drafts.append(int(last))
    return drafts


def test_every_draft_is_the_one_transformers_assistant_makes(
    transformers_pair: tuple[Any, Any], bundle: SpeculativeBundle
) -> None:
    for prompt in PROMPTS:
        ids = bundle.encode(prompt)
        target = Target(bundle)
        logits, hidden = target.extend(ids)
        assert hidden is not None
        tokens = [*ids, int(logits[-1].argmax())]
        drafter = bundle.drafter()
        drafter.bind(target)  # type: ignore[attr-defined]
        drafts, q = drafter.propose(tokens, list(hidden), 3, Sampler())
        assert q is None
        assert drafts == _transformers_drafts(transformers_pair, tokens, 3), prompt


def test_sampling_with_the_assistant_repeats_under_a_seed(bundle: SpeculativeBundle) -> None:
    ids = bundle.encode("Once upon a time")
    out = bundle.generate([ids], 16, Sampler(temperature=0.8, seed=7)).tokens[0]
    stats = bundle.last_stats
    assert bundle.generate([ids], 16, Sampler(temperature=0.8, seed=7)).tokens[0] == out
    assert stats.drafted > 0 and stats.committed == len(out) - 1

"""text-classification: the tiny BertForSequenceClassification builds to a pass, and
its bundle's class probabilities (runtime/classify.py, onnxruntime, right-padded
batches) equal transformers' fp32 eager probabilities for each text alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import World, heavy, make_world
from samples import TEXTS, shipped_plan


def test_a_classifier_generates_nothing() -> None:
    # which builders and code the task picks: tests/unit/test_toolchain.py
    bert = shipped_plan("tiny-bert-classifier")
    assert "max_new_tokens" not in bert.step("validate").options  # nothing is generated


@pytest.fixture(scope="module")
def classifier_world(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    world = make_world(tmp_path_factory.mktemp("classify"), hub, ("tiny-bert-classifier",))
    world.doit("build", check=True)
    return world


def _bundle_dir(world: World) -> Path:
    found = [
        p.parent
        for p in world.store.rglob("bundle.json")
        if json.loads(p.read_text()).get("task") == "text-classification"
    ]
    assert len(found) == 1
    return found[0]


def _transformers_probs(hub: Path, texts: list[str]) -> tuple[Any, list[list[int]]]:
    """Each text alone (no padding), transformers fp32 eager, its own tokenizer."""
    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    import tinyhub

    repo = tinyhub.repo_dir(hub, "kiln-tiny/bert-classifier")
    ckpt = repo / "snapshots" / (repo / "refs" / "main").read_text()
    tokenizer = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForSequenceClassification.from_pretrained(
        ckpt, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    probs, ids = [], []
    for text in texts:
        enc = tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            probs.append(torch.softmax(model(**enc).logits[0], -1).numpy())
        ids.append(enc["input_ids"][0].tolist())
    return np.stack(probs), ids


@heavy
def test_classifier_builds_and_passes_its_gates(classifier_world: World) -> None:
    evidence = classifier_world.manifest("tiny-bert-classifier")["evidence"][-1]
    assert evidence["verdict"] == "pass", evidence
    metrics = evidence["metrics"]
    assert metrics["max_abs_prob_diff"] < 1e-5
    assert metrics["max_abs_logit_diff"] < 1e-4
    assert metrics["class_match_rate"] == 1.0 and metrics["tokenizer_match_rate"] == 1.0
    gated = {g["metric"] for g in evidence["gates"]}
    assert {"max_abs_prob_diff", "class_match_rate"} <= gated


@heavy
def test_classifier_runtime_matches_transformers_in_a_padded_batch(
    classifier_world: World, hub: Path
) -> None:
    import numpy as np

    import runtime

    bundle = runtime.open(_bundle_dir(classifier_world))
    assert isinstance(bundle, runtime.Classifier)
    want, want_ids = _transformers_probs(hub, TEXTS)
    ids = [bundle.encode(t) for t in TEXTS]
    assert ids == want_ids
    assert len({len(i) for i in ids}) > 2  # really padded: rows of different lengths
    got = np.concatenate([bundle.probabilities(ids[:4]), bundle.probabilities(ids[4:])])
    assert got.shape == (len(TEXTS), len(bundle.labels))
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-6)
    assert np.abs(got - want).max() < 1e-5
    assert (got.argmax(-1) == want.argmax(-1)).all()
    # The comparison can fail: the texts get measurably different probabilities, and
    # a wrong mask (padding attended to) moves them by far more than the bound.
    assert np.ptp(want[:, 0]) > 1e-3
    alone = np.concatenate([bundle.probabilities([i]) for i in ids])
    assert np.abs(alone - got).max() < 1e-5
    labels = [label for label, _ in bundle.classify(TEXTS[:2])]
    assert labels == [bundle.labels[int(k)] for k in want[:2].argmax(-1)]


@heavy
def test_a_padded_row_without_its_mask_differs(classifier_world: World) -> None:
    """Guard on the guard: feeding the padding as real tokens changes the answer, so
    the padded-batch agreement above measures the mask, not luck."""
    import numpy as np

    import runtime
    from runtime.classify import softmax

    bundle = runtime.open(_bundle_dir(classifier_world))
    short, long = bundle.encode("Hello"), bundle.encode(TEXTS[2])
    width = len(long)
    padded = np.full((1, width), bundle.pad, np.int64)
    padded[0, : len(short)] = short
    feeds = {"input_ids": padded, "attention_mask": np.ones_like(padded)}
    if "token_type_ids" in bundle.input_names:
        feeds["token_type_ids"] = np.zeros_like(padded)
    unmasked = softmax(bundle.session.run(["logits"], feeds)[0])
    assert np.abs(unmasked - bundle.probabilities([short])).max() > 1e-4


@heavy
def test_classifier_runtime_refuses_what_it_cannot_serve(classifier_world: World) -> None:
    import runtime
    from runtime import BundleError

    bundle = runtime.open(_bundle_dir(classifier_world))
    with pytest.raises(BundleError, match="serves 1 to 4"):
        bundle.probabilities([[5]] * 5)
    with pytest.raises(BundleError, match="empty input"):
        bundle.probabilities([[]])
    with pytest.raises(BundleError, match="max_seq_len of 256"):
        bundle.probabilities([[5] * 257])


@heavy
def test_doit_run_classifies_with_the_classifier_runtime(classifier_world: World) -> None:
    import runtime

    out = classifier_world.doit("run", "recipe=tiny-bert-classifier", "prompt=Hello", check=True)
    label, prob = runtime.open(_bundle_dir(classifier_world)).classify(["Hello"])[0]
    assert f"{label} ({prob:.4f})" in out.stdout

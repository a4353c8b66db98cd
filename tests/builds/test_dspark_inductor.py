"""DSpark on the inductor backend as a user builds it on CPU (issue 39's headline, at the
tiny scale): the target's programs also return the hidden states the drafter reads,
the drafter's backbone and Markov heads are programs of the same engine, and the
runtime's BlockDrafter runs on them through the device-resident verify loop. The
bundle drafts losslessly, and its acceptance is the onnxruntime dspark bundle's
(the same drafter, the same greedy tokens)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any, cast

import pytest
from conftest import ROOT, World, heavy, make_world, nightly

# Nightly (`make nightly`): its engine's target, verify and drafter programs are CI's
# longest single build (2.5 minutes on 2 loaded cores).
pytestmark = [heavy, nightly]

BUILT = "tiny-qwen3-dspark-inductor"
ONNXRUNTIME = "tiny-qwen3-dspark"  # its committed manifest: the same drafter's acceptance


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    w = make_world(tmp_path_factory.mktemp("dspark-inductor"), hub, (BUILT,))
    w.doit("build", f"recipe={BUILT}", check=True)
    return w


def stored(w: World, kind: str, role: str = "model") -> Path:
    """The artifact of the step the build ran (its manifest's lock): a plan made here
    would re-key with any builder edit made since the build."""
    from kiln.store import Store

    steps = w.manifest(BUILT)["lock"]["steps"]
    step = next(s for s in steps if s["kind"] == kind and s["role"] == role)
    return Store(w.store).get(step["key"]).path


@pytest.fixture(scope="module")
def spec(built: World) -> Any:
    """The bundle, opened (and compiled from its carried kernels) once."""
    import runtime
    from runtime.inductor_lm import InductorSpeculativeBundle

    return runtime.open(stored(built, "bundle"), expect=InductorSpeculativeBundle)


def test_it_drafts_losslessly_and_records_the_onnxruntime_bundles_acceptance(
    built: World,
) -> None:
    e = built.last(BUILT)
    assert e["verdict"] == "pass", e["reason"]
    assert e["backend"]["name"] == "inductor"
    m = e["metrics"]
    assert m["token_match_rate"] == 1.0 and m["speculative_match_rate"] == 1.0
    theirs = json.loads((ROOT / "manifests" / f"{ONNXRUNTIME}.json").read_text())
    other = theirs["evidence"][-1]["metrics"]
    assert set(m) == set(other)  # recorded as the onnxruntime validation records it
    for metric in ("acceptance_rate", "tokens_per_forward"):
        assert m[metric] == pytest.approx(other[metric], abs=1e-9), metric
    kinds = [s["kind"] for s in built.manifest(BUILT)["lock"]["steps"]]
    assert "drafter" not in kinds and "onnx" not in kinds  # the engine holds the drafter


def test_the_engine_holds_the_drafter_programs_beside_the_targets(built: World) -> None:
    import torch

    bundle = stored(built, "bundle")
    meta = json.loads((bundle / "bundle.json").read_text())
    assert set(meta["engines"]) == {"main"}
    assert meta["drafter"] == {"kind": "dspark", "mask_token_id": 0, "d2t": None}
    with zipfile.ZipFile(bundle / "engine.zip") as archive:
        names = set(archive.namelist())
        program = json.loads(archive.read("program.json"))
        draft = torch.export.load(io.BytesIO(archive.read("draft.pt2")))
        graphs = json.loads(archive.read("graphs.json"))
    assert {"decode.pt2", "prefill.pt2", "verify.pt2", "draft.pt2", "markov.pt2"} <= names
    assert set(graphs["programs"]) == {"decode", "prefill", "verify", "draft", "markov"}
    drafter = program["drafter"]
    assert (drafter["kind"], drafter["context"], drafter["block"]) == ("dspark", 5, 4)
    assert not any(w.startswith("drafter.") for w in program["weights"])  # the target's own
    assert len(draft.state_dict) == 0 and draft.example_inputs is None  # weights are inputs


def test_speculative_greedy_equals_the_bundles_own_greedy_and_the_reference(
    built: World, spec: Any
) -> None:
    reference = json.loads((stored(built, "reference") / "reference.json").read_text())
    assert sorted(spec.session.steps) == [1, 5, 16] and set(spec.session.drafting) == {
        "draft",
        "markov",
    }
    drafted = 0
    for record in reference["records"]:
        new = len(record["tokens"])
        out = spec.generate([record["prompt_ids"]], new).tokens[0]
        drafted += spec.last_stats.drafted
        assert out == spec.generate_plain([record["prompt_ids"]], new).tokens[0]
        assert out == record["tokens"]
    assert drafted > 0


def test_the_drafter_programs_compute_what_the_torch_drafter_does(built: World, spec: Any) -> None:
    """InductorBlock's passes against builders/causal_lm/_drafters.py's modules over an
    explicit cache: a long context written in windows, then a round's few rows, and a
    block of fewer slots than the program's (its other slots hidden)."""
    import numpy as np
    import torch

    from builders.causal_lm.drafter import block_modules, read_tensors
    from runtime.inductor_drafter import InductorBlock

    checkpoint = stored(built, "fetch", "draft") / "checkpoint"
    config = json.loads((checkpoint / "config.json").read_text())
    state = read_tensors(checkpoint)
    module, markov, mask = block_modules(cast(Any, None), "dspark", config, state, {}, {})
    reference = json.loads((stored(built, "reference") / "reference.json").read_text())
    ids = reference["records"][1]["prompt_ids"] + reference["records"][1]["tokens"]
    target = spec.target()
    _, feats = target.extend(ids[:-1])
    passes = InductorBlock(spec.engine)
    layers = config["num_hidden_layers"]
    heads, dim = config["num_key_value_heads"], config["head_dim"]
    for end, slots in ((12, 4), (len(ids) - 1, 2), (len(ids) - 1, 4)):
        block = [ids[end]] + [mask] * (slots - 1)
        got, hidden = passes.block(list(feats[:end]), block)
        empty = [torch.zeros(1, heads, 0, dim) for _ in range(2 * layers)]
        with torch.no_grad():
            want, want_hidden, *_ = module(
                torch.from_numpy(feats[:end])[None],
                torch.arange(end)[None],
                torch.tensor([block]),
                torch.arange(end, end + slots)[None],
                *empty,
            )
            bias, confidence = passes.markov(hidden[1:2], block[0])
            want_bias, want_confidence = markov(want_hidden[0, 1:2], torch.tensor([block[0]]))
        assert got.shape == (slots, config["vocab_size"])
        assert np.abs(got - want[0].numpy()).max() < 1e-4, (end, slots)
        assert np.abs(bias - want_bias[0].numpy()).max() < 1e-4
        assert abs(confidence - float(want_confidence[0])) < 1e-5

"""image-text-to-text: tiny LLaVA built through `doit build`, to a pass against
transformers' own processor and generate, and its bundle run as users run it.

The bundle's decoder merges the vision program's features at the image tokens inside
its graph (builders/causal_lm/export.py), so what the text path does (batches, chunked
prefill, the prefix cache) must keep each row's image where it belongs: each is
checked against the same bundle's plain single-prompt answer, and that answer against
the reference by the build itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, World, bundle_dir, heavy, make_world

pytestmark = heavy

RECIPE = "tiny-llava"
IMAGES = ROOT / "builders" / "data" / "images"
CIRCLE, SQUARE, STRIPES = (
    IMAGES / n for n in ("circle_64x48.png", "square_200x120.jpg", "stripes_37x91.png")
)


INT8 = "tiny-llava-int8-wo"


@pytest.fixture(scope="module")
def llava(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    world = make_world(tmp_path_factory.mktemp("vlm"), hub, (RECIPE, INT8))
    world.doit("build", f"recipe={RECIPE},{INT8}", "publish=1", check=True)
    return world


@pytest.fixture(scope="module")
def bundle(llava: World) -> Any:
    import runtime
    from runtime.vlm import VisionBundle

    return runtime.open(bundle_dir(llava, RECIPE), expect=VisionBundle)


def test_tiny_llava_passes_every_gate_with_its_image_read(llava: World) -> None:
    record = llava.manifest(RECIPE)["evidence"][-1]
    assert record["verdict"] == "pass"
    metrics = record["metrics"]
    assert metrics["token_match_rate"] == 1.0 and metrics["tokenizer_match_rate"] == 1.0
    assert metrics["max_abs_pixel_diff"] <= 1e-6
    assert metrics["reference_image_sensitivity"] > 0.1  # the fixture's answer moves
    assert 0.99 < metrics["image_sensitivity_ratio"] < 1.01  # and the bundle's as far
    assert {g["metric"] for g in record["gates"]} >= {"image_sensitivity_ratio"}


def test_int8_quantizes_the_language_model_alone_and_keeps_the_image(llava: World) -> None:
    record = llava.manifest(INT8)["evidence"][-1]
    assert record["verdict"] == "pass"
    metrics = record["metrics"]
    assert metrics["scored_positions"] == 512 and metrics["image_sensitivity_ratio"] > 0.9
    assert metrics["max_abs_logit_diff"] > 1e-3  # int8 weights: not the fp32 graph
    done = next(
        json.loads(p.read_text())
        for p in llava.store.rglob("quantize.json")
        if json.loads(p.read_text())["weights"] == "int8-wo"
    )
    names = done["quantizers"]
    assert names and all(n.startswith("model.language_model.") for n in names), names
    int8 = bundle_dir(llava, INT8)
    fp32 = bundle_dir(llava, RECIPE)
    assert (int8 / "vision.onnx").read_bytes() == (fp32 / "vision.onnx").read_bytes()


def test_the_bundle_runs_without_torch(llava: World) -> None:
    code = (
        "import sys, runtime\n"
        f"b = runtime.open({str(bundle_dir(llava, RECIPE))!r})\n"
        f"ids, feats = b.ask('What is in the picture?', [{str(CIRCLE)!r}])\n"
        "out = b.generate_images([(ids, feats)], 4)\n"
        "print(len(out.tokens[0]), feats.shape, 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["4", "(16,", "64)", "False"]


def test_swapping_the_image_moves_the_logits_and_the_same_image_does_not(bundle: Any) -> None:
    ids, circle = bundle.ask("What is in the picture?", [CIRCLE])
    square = bundle.image_features([SQUARE])
    base = bundle.logits(ids, circle)
    assert np.abs(bundle.logits(ids, square)[-1] - base[-1]).max() > 0.5
    assert np.array_equal(bundle.logits(ids, circle.copy()), base)
    text_rows = ids.index(bundle.image_token)  # positions before the first image token
    assert np.abs(bundle.logits(ids, square)[:text_rows] - base[:text_rows]).max() < 1e-6


def _alone(bundle: Any, prompt: tuple[list[int], np.ndarray], new: int = 12) -> list[int]:
    return list(bundle.generate_images([prompt], new).tokens[0])


def test_a_batch_keeps_each_rows_image(bundle: Any) -> None:
    short = bundle.ask("Colour?", [SQUARE])
    long = bundle.ask("Which way do the stripes run, and how many are there?", [STRIPES])
    together = bundle.generate_images([short, long], 12).tokens
    assert [list(t) for t in together] == [_alone(bundle, short), _alone(bundle, long)]


def test_chunked_prefill_feeds_each_chunk_its_own_image_rows(bundle: Any) -> None:
    two = bundle.encode_chat(
        [
            {
                "role": "user",
                "content": [
                    {"type": "image"},
                    {"type": "image"},
                    {"type": "text", "text": "Compare them."},
                ],
            }
        ]
    )
    feats = bundle.image_features([CIRCLE, SQUARE])
    assert two.count(bundle.image_token) == 32 and feats.shape[0] == 32
    whole = _alone(bundle, (two, feats))
    bundle.prefill_chunk_len = 5  # chunks that cut through both images' rows
    try:
        assert _alone(bundle, (two, feats)) == whole
    finally:
        bundle.prefill_chunk_len = 0
    swapped = bundle.image_features([SQUARE, CIRCLE])
    assert np.abs(bundle.logits(two, swapped)[-1] - bundle.logits(two, feats)[-1]).max() > 0


def test_the_prefix_cache_never_reuses_another_images_prompt(bundle: Any) -> None:
    circle = bundle.ask("What is in the picture?", [CIRCLE])
    square = (circle[0], bundle.image_features([SQUARE]))
    cold = _alone(bundle, square)
    bundle.enable_prefix_cache(entries=2)
    try:
        _alone(bundle, circle)
        assert _alone(bundle, square) == cold and bundle.last_reused == 0
    finally:
        bundle.prefix_cache = None


def test_image_rows_that_do_not_match_the_image_tokens_are_refused(bundle: Any) -> None:
    from runtime import BundleError

    ids, feats = bundle.ask("What is in the picture?", [CIRCLE])
    with pytest.raises(BundleError, match="16 image tokens but 32 image feature rows"):
        bundle.generate_images([(ids, np.concatenate([feats, feats]))], 2)
    with pytest.raises(BundleError, match="16 image tokens but 0 image feature rows"):
        bundle.logits(ids)


def test_a_broken_image_is_a_clear_error(bundle: Any, tmp_path: Path) -> None:
    from runtime import BundleError

    cut = tmp_path / "cut.png"
    cut.write_bytes(CIRCLE.read_bytes()[:60])
    with pytest.raises(BundleError, match=r"cut\.png"):
        bundle.ask("What is in the picture?", [cut])


def test_doit_run_answers_about_an_image_and_refuses_what_it_cannot_use(llava: World) -> None:
    out = llava.doit(
        "run",
        f"recipe={RECIPE}",
        f"image={CIRCLE}",
        "prompt=What is in the picture?",
        "max_new_tokens=6",
        "stats=1",
    )
    assert out.returncode == 0, out.stderr
    assert "stats: ordinary: 6 tokens" in out.stdout and "time to first token" in out.stdout
    turns = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "And this?"}]}
    ]
    messages = llava.root / "turns.json"
    messages.write_text(json.dumps(turns))
    two = llava.doit("run", f"recipe={RECIPE}", f"messages={messages}", f"image={CIRCLE},{SQUARE}")
    assert (
        two.returncode == 1
        and "1 image parts and image= gives 2 files" in two.stderr
        and not two.stdout
    )
    one = llava.doit(
        "run", f"recipe={RECIPE}", f"messages={messages}", f"image={SQUARE}", "max_new_tokens=3"
    )
    assert one.returncode == 0, one.stderr
    plain = llava.doit("run", f"recipe={RECIPE}", f"image={CIRCLE}", "prompt=x", "chat=0")
    assert plain.returncode == 1 and "answers chat turns only" in plain.stderr and not plain.stdout

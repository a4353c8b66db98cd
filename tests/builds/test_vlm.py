"""image-text-to-text: tiny LLaVA and tiny Gemma 3 built through `doit build`, to a
pass against transformers' own processor and generate, and their bundles run as users
run them. Gemma 3's image tokens attend to each other both ways (its own mask), so its
bundle is also checked against the causal mask it must not have, and its chunked
prefill must keep each image whole.

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
from conftest import ROOT, World, bundle_dir, heavy, make_world, two_images

pytestmark = heavy

RECIPE = "tiny-llava"
IMAGES = ROOT / "builders" / "data" / "images"
CIRCLE, SQUARE, STRIPES = (
    IMAGES / n for n in ("circle_64x48.png", "square_200x120.jpg", "stripes_37x91.png")
)


INT8 = "tiny-llava-int8-wo"


def built(factory: pytest.TempPathFactory, hub: Path, *recipes: str) -> World:
    """A world with `recipes` built and their manifests published."""
    world = make_world(factory.mktemp(recipes[0]), hub, recipes)
    world.doit("build", f"recipe={','.join(recipes)}", "publish=1", check=True)
    return world


def opened(world: World, recipe: str) -> Any:
    import runtime
    from runtime.vlm import VisionBundle

    return runtime.open(bundle_dir(world, recipe), expect=VisionBundle)


@pytest.fixture(scope="module")
def llava(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    return built(tmp_path_factory, hub, RECIPE, INT8)


@pytest.fixture(scope="module")
def bundle(llava: World) -> Any:
    return opened(llava, RECIPE)


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
    two = two_images(bundle, "Compare them.")
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


GEMMA = "tiny-gemma3-vlm"
GEMMA_INT8 = "tiny-gemma3-vlm-int8-wo"


@pytest.fixture(scope="module")
def gemma(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    return built(tmp_path_factory, hub, GEMMA, GEMMA_INT8)


@pytest.fixture(scope="module")
def gemma_bundle(gemma: World) -> Any:
    return opened(gemma, GEMMA)


def test_tiny_gemma3_passes_fp32_and_int8_with_its_image_read(gemma: World) -> None:
    fp32 = gemma.manifest(GEMMA)["evidence"][-1]
    assert fp32["verdict"] == "pass", fp32["gates"]
    assert fp32["metrics"]["token_match_rate"] == 1.0
    assert fp32["metrics"]["max_abs_pixel_diff"] <= 1e-6
    assert 0.99 < fp32["metrics"]["image_sensitivity_ratio"] < 1.01
    int8 = gemma.manifest(GEMMA_INT8)["evidence"][-1]
    assert int8["verdict"] == "pass", int8["gates"]
    assert int8["metrics"]["max_abs_logit_diff"] > 1e-3  # int8 weights: not the fp32 graph
    assert int8["metrics"]["image_sensitivity_ratio"] > 0.9


def _checkpoint(world: World) -> Path:
    return next(p.parent for p in world.store.rglob("checkpoint/config.json"))


def test_gemma3_expands_each_image_as_its_processor_does(gemma: World, gemma_bundle: Any) -> None:
    """The chat's <start_of_image> becomes blank lines, <start_of_image>, 4 soft tokens,
    <end_of_image>, blank lines: the processor's ids, byte for byte."""
    from PIL import Image
    from transformers import AutoProcessor

    ids, feats = gemma_bundle.ask("What is in the picture?", [CIRCLE])
    assert gemma_bundle.meta["vision"]["image_attention"] == "bidirectional"
    processor = AutoProcessor.from_pretrained(_checkpoint(gemma), backend="pil")
    turn = [
        {
            "role": "user",
            "content": [{"type": "image"}, {"type": "text", "text": "What is in the picture?"}],
        }
    ]
    text = processor.apply_chat_template(turn, add_generation_prompt=True)
    theirs = processor(images=[Image.open(CIRCLE).convert("RGB")], text=text)["input_ids"][0]
    assert ids == list(theirs)
    assert ids.count(gemma_bundle.image_token) == 4 == feats.shape[0]


def test_gemma3_image_tokens_see_each_other_both_ways(gemma: World, gemma_bundle: Any) -> None:
    """The bundle's logits are transformers' with the processor's token_type_ids, and
    measurably not transformers' causal-only ones: a bundle with a causal mask over
    the image would fail the fp32 logit gate."""
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    checkpoint = _checkpoint(gemma)
    processor = AutoProcessor.from_pretrained(checkpoint, backend="pil")
    model = AutoModelForImageTextToText.from_pretrained(checkpoint, attn_implementation="eager")
    turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Colour?"}]}]
    text = processor.apply_chat_template(turn, add_generation_prompt=True)
    encoded = processor(images=[Image.open(SQUARE).convert("RGB")], text=text, return_tensors="pt")
    with torch.no_grad():
        both = model(**encoded).logits[0].numpy()
        causal = (
            model(**{k: v for k, v in encoded.items() if k != "token_type_ids"}).logits[0].numpy()
        )
    ids, feats = gemma_bundle.ask("Colour?", [SQUARE])
    ours = gemma_bundle.logits(ids, feats)
    assert np.abs(ours - both).max() < 1e-4
    assert np.abs(ours - causal).max() > 1e-2


def test_gemma3_chunks_never_split_an_image(gemma_bundle: Any) -> None:
    from runtime.causal_lm import chunk_bounds

    two = two_images(gemma_bundle, "Compare.")
    feats = gemma_bundle.image_features([CIRCLE, SQUARE])
    token = gemma_bundle.image_token
    for chunk in (2, 3, 5):
        for _, end in chunk_bounds(np.array([two]), chunk, token):
            assert not (0 < end < len(two) and two[end - 1] == token == two[end]), (chunk, end)
    whole = _alone(gemma_bundle, (two, feats))
    gemma_bundle.prefill_chunk_len = 3  # narrower than an image's 4 tokens
    try:
        assert _alone(gemma_bundle, (two, feats)) == whole
    finally:
        gemma_bundle.prefill_chunk_len = 0


def test_a_placeholder_written_in_the_text_is_refused(gemma_bundle: Any) -> None:
    from runtime import BundleError

    with pytest.raises(BundleError, match="image placeholder '<start_of_image>'"):
        gemma_bundle.encode_chat([{"role": "user", "content": "look: <start_of_image>"}])

"""image-text-to-text with pictures of their own size and 3-D positions: tiny Qwen2.5-VL
and tiny Qwen2-VL built through `doit build` (one build of both) to a pass against
transformers' own processor and generate, and their bundles run as users run them,
with no torch. Qwen2-VL differs in its tower alone (no windows: every block attends
over its picture), so it is checked where that shows: two pictures' logits. Qwen2.5-VL's
decoder on the inductor backend (tiny-qwen2.5-vl-inductor, built in the same call: its
programs take the [batch, tokens, 3] positions) passes the same gates and gives the
onnxruntime bundle's logits and tokens where pictures of two grids span prefill windows.

Each picture is resized to its own patch grid (4 to 16 image tokens here), the vision
program takes any patch count, and the decoder rotates by (t, h, w) positions that the
runtime computes (runtime/mrope.py). So on top of what test_vlm.py checks for LLaVA,
this checks the parts a fixed-size model never exercises: two pictures of different
grids in one prompt expand and place as transformers' processor and get_rope_index
place them (the logits agree with transformers', and 1-D positions would not), decode
steps continue from the largest position + 1 (the logits of every step agree with
transformers'), and chunked prefill, batches and the prefix cache slice those
positions as the 1-D ones.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import (
    CIRCLE,
    ROOT,
    SQUARE,
    STRIPES,
    World,
    alone,
    bundle_dir,
    check_fp32_vlm_record,
    check_pictures_survive_batches_and_chunks,
    heavy,
    make_world,
    two_images,
)

pytestmark = heavy

RECIPE = "tiny-qwen2.5-vl"
QWEN2 = "tiny-qwen2-vl"
INDUCTOR = "tiny-qwen2.5-vl-inductor"
QUESTION = "What is in the picture?"


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    world = make_world(tmp_path_factory.mktemp(RECIPE), hub, [RECIPE, QWEN2, INDUCTOR])
    world.doit("build", f"recipe={RECIPE},{QWEN2},{INDUCTOR}", "publish=1", check=True)
    return world


def _opened(world: World, recipe: str) -> Any:
    import runtime
    from runtime.grid_vlm import GridVisionBundle

    return runtime.open(bundle_dir(world, recipe), expect=GridVisionBundle)


def _transformers(world: World, model_type: str) -> tuple[Any, Any]:
    """transformers' processor and model of the built checkpoint of `model_type`."""
    from transformers import AutoModelForImageTextToText

    from builders.common.hf import load_processor

    checkpoint = next(
        p.parent
        for p in world.store.rglob("checkpoint/config.json")
        if f'"model_type": "{model_type}"' in p.read_text()
    )
    model = AutoModelForImageTextToText.from_pretrained(checkpoint, attn_implementation="eager")
    return load_processor(checkpoint), model.eval()


@pytest.fixture(scope="module")
def bundle(qwen: World) -> Any:
    return _opened(qwen, RECIPE)


@pytest.fixture(scope="module")
def hf(qwen: World) -> tuple[Any, Any]:
    """transformers' processor and model of the Qwen2.5-VL checkpoint (eager, fp32)."""
    return _transformers(qwen, "qwen2_5_vl")


def _encoded(hf: tuple[Any, Any], pictures: list[Path], text: str) -> Any:
    from PIL import Image

    processor, _ = hf
    parts = [{"type": "image"} for _ in pictures] + [{"type": "text", "text": text}]
    chat = processor.apply_chat_template(
        [{"role": "user", "content": parts}], add_generation_prompt=True
    )
    loaded = [Image.open(p).convert("RGB") for p in pictures]
    return processor(images=loaded, text=chat, return_tensors="pt")


@pytest.mark.parametrize("recipe", [RECIPE, QWEN2, INDUCTOR])
def test_each_passes_every_gate_with_its_images_read(qwen: World, recipe: str) -> None:
    record = qwen.manifest(recipe)["evidence"][-1]
    check_fp32_vlm_record(record)


def test_the_bundle_runs_without_torch_or_transformers_models(qwen: World) -> None:
    """onnxruntime, numpy, Pillow, tokenizers (and transformers' chat template renderer,
    as every chat bundle: runtime/chat.py), no torch and no model code."""
    code = (
        "import sys, runtime\n"
        f"b = runtime.open({str(bundle_dir(qwen, RECIPE))!r})\n"
        f"ids, feats = b.ask({QUESTION!r}, [{str(CIRCLE)!r}, {str(SQUARE)!r}])\n"
        "out = b.generate_images([(ids, feats)], 4)\n"
        "models = [m for m in sys.modules if m.startswith('transformers.models.')]\n"
        "print(len(out.tokens[0]), feats.shape, feats.grids, 'torch' in sys.modules, models)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    # 64 x 48 -> 56 x 56 pixels: 4 x 4 patches, 4 tokens; 200 x 120 -> 140 x 84: 10 x 6, 15
    assert done.stdout.split()[:3] == ["4", "(19,", "64)"]
    assert done.stdout.split()[3:] == ["[(1,", "4,", "4),", "(1,", "6,", "10)]", "False", "[]"]


def test_two_pictures_of_different_grids_are_placed_as_transformers_places_them(
    bundle: Any, hf: tuple[Any, Any]
) -> None:
    """The ids are the processor's, the positions get_rope_index's, and the logits at
    every position transformers' own; with 1-D positions they would not be."""
    import torch

    from runtime.mrope import rope_positions

    _, model = hf
    encoded = _encoded(hf, [SQUARE, STRIPES], "Compare them.")
    features = bundle.image_features([SQUARE, STRIPES])
    ids = bundle.encode_chat(
        [
            {
                "role": "user",
                "content": [
                    {"type": "image"},
                    {"type": "image"},
                    {"type": "text", "text": "Compare them."},
                ],
            }
        ],
        images=features,
    )
    assert ids == encoded["input_ids"][0].tolist()
    assert features.grids == [tuple(g) for g in encoded["image_grid_thw"].tolist()]
    theirs_positions, _ = model.model.get_rope_index(
        encoded["input_ids"], encoded["mm_token_type_ids"], encoded["image_grid_thw"]
    )
    ours_positions = rope_positions(ids, bundle.image_token, features.grids, bundle.merge)
    assert np.array_equal(ours_positions, theirs_positions[:, 0].numpy())
    with torch.no_grad():
        theirs = model(**encoded).logits[0].numpy()
    ours = bundle.logits(ids, features)
    assert np.abs(ours - theirs).max() < 1e-4
    flat = np.arange(len(ids))[None, :, None].repeat(3, -1)  # every token a text position
    one_d, _ = bundle.forward(
        np.array([ids]),
        np.ones((1, len(ids)), np.int64),
        flat,
        bundle._empty_cache(1),
        images=features,
    )
    assert np.abs(one_d[0] - theirs).max() > 1e-2  # M-RoPE's positions are what matched


def test_qwen2_vls_windowless_tower_places_two_pictures_as_transformers(qwen: World) -> None:
    import torch

    bundle = _opened(qwen, QWEN2)
    assert bundle.vision_inputs == {"pixel_values", "patch_positions", "image_segments"}
    hf2 = _transformers(qwen, "qwen2_vl")
    encoded = _encoded(hf2, [SQUARE, STRIPES], "Compare them.")
    ids, features = bundle.ask("Compare them.", [SQUARE, STRIPES])
    assert ids == encoded["input_ids"][0].tolist()
    with torch.no_grad():
        theirs = hf2[1](**encoded).logits[0].numpy()
    assert np.abs(bundle.logits(ids, features) - theirs).max() < 1e-4


def test_decode_steps_continue_from_the_largest_position(bundle: Any, hf: tuple[Any, Any]) -> None:
    """The logits of every decode step are transformers' at that position of prompt +
    generated tokens: a step fed at the prompt's length instead of its largest position
    + 1 (the rope delta: the 4 + 15 image tokens span 2 + 5 positions, 12 fewer) would
    not be."""
    import torch

    from runtime import Decoding, Row, Sampler

    _, model = hf
    seen: list[np.ndarray] = []

    def keep(tokens: Any, logits: np.ndarray) -> np.ndarray:
        seen.append(np.array(logits))
        return logits

    ids, features = bundle.ask(QUESTION, [CIRCLE, SQUARE])
    row = Row(ids, 6, Decoding(processors=[keep]), Sampler(), features)
    new = bundle.generate_rows([row]).tokens[0]
    encoded = _encoded(hf, [CIRCLE, SQUARE], QUESTION)
    full = torch.tensor([ids + new[:-1]])
    marks = torch.nn.functional.pad(encoded["mm_token_type_ids"], (0, len(new) - 1))
    with torch.no_grad():
        theirs = (
            model(
                input_ids=full,
                pixel_values=encoded["pixel_values"],
                image_grid_thw=encoded["image_grid_thw"],
                mm_token_type_ids=marks,
            )
            .logits[0, len(ids) - 1 :]
            .numpy()
        )
    assert len(seen) == len(new) >= 2
    assert np.abs(np.stack(seen).reshape(theirs.shape) - theirs).max() < 1e-4
    assert new == theirs.argmax(-1).tolist()
    # teacher forcing (validate's) steps the generated ids' positions on the same way
    forced = bundle.logits(ids + new[:-1], features, generated=len(new) - 1)
    assert np.abs(forced[len(ids) - 1 :] - theirs).max() < 1e-4


def test_batches_and_chunked_prefill_keep_each_rows_pictures_and_positions(bundle: Any) -> None:
    check_pictures_survive_batches_and_chunks(bundle)


def test_the_prefix_cache_reuses_text_and_never_another_pictures_prompt(bundle: Any) -> None:
    text = bundle.encode_chat([{"role": "user", "content": "Tell me about the sea."}])
    cold = list(bundle.generate([text], 8).tokens[0])
    circle = bundle.ask(QUESTION, [CIRCLE])
    other = bundle.ask(QUESTION, [STRIPES])  # another grid: other ids as well
    pictured = alone(bundle, other)
    bundle.enable_prefix_cache(entries=2)
    try:
        bundle.generate([text], 8)
        assert list(bundle.generate([text], 8).tokens[0]) == cold and bundle.last_reused > 0
        alone(bundle, circle)
        assert alone(bundle, other) == pictured and bundle.last_reused == 0
    finally:
        bundle.prefix_cache = None


def test_doit_run_answers_about_two_pictures_of_different_grids(qwen: World) -> None:
    out = qwen.doit(
        "run", f"recipe={RECIPE}", f"image={CIRCLE},{SQUARE}", "prompt=Compare.", "max_new_tokens=4"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()


def test_pictures_without_their_grids_are_refused(bundle: Any) -> None:
    from runtime import BundleError

    with pytest.raises(BundleError, match="give encode_chat the features of its pictures"):
        two_images(bundle, "Compare.")
    ids, features = bundle.ask(QUESTION, [CIRCLE])
    with pytest.raises(BundleError, match="no image grid left"):
        bundle.logits(ids, np.array(features))  # the rows alone, without their grids


@pytest.fixture(scope="module")
def compiled(qwen: World) -> Any:
    """The inductor bundle of the same checkpoint."""
    import runtime
    from runtime.inductor_vlm import InductorGridVisionBundle

    return runtime.open(bundle_dir(qwen, INDUCTOR), expect=InductorGridVisionBundle)


def test_the_inductor_programs_take_3d_positions_and_give_the_onnxruntime_logits(
    compiled: Any, bundle: Any
) -> None:
    """Two pictures of different grids (4 and 15 tokens) across 8-token prefill windows:
    the logits at every position are the onnxruntime bundle's (itself transformers' at
    every position, above), and so are the greedy tokens the device's decode steps
    choose from the largest position + 1 on."""
    program = compiled.engine.program
    assert program["position_axes"] == 3 and program["image_features"] == [2 * 8, 64]
    assert compiled.engine.positions.shape == (2, 1, 3)
    ids, features = compiled.ask(QUESTION, [CIRCLE, SQUARE])
    ids_o, features_o = bundle.ask(QUESTION, [CIRCLE, SQUARE])
    assert ids == ids_o and features.grids == features_o.grids == [(1, 4, 4), (1, 6, 10)]
    assert len(ids) > 2 * compiled.engine.chunk
    ours = compiled.logits(ids, features)
    assert np.abs(ours - bundle.logits(ids, features)).max() < 1e-4
    assert alone(compiled, (ids, features)) == alone(bundle, (ids, features))


def test_the_inductor_bundle_keeps_each_rows_pictures_and_positions(compiled: Any) -> None:
    check_pictures_survive_batches_and_chunks(compiled)

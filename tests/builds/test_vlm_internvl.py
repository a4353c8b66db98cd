"""image-text-to-text with pictures cut into tiles: tiny InternVL (InternVL3-1B-hf's
architecture) built through `doit build` to a pass against transformers' own
InternVLProcessor and generate, and its bundle run as users run it, with no torch.

Each picture is resized to the grid of at most 6 tiles of 32 x 32 whose aspect ratio is
nearest its own and cut row by row, plus a thumbnail (2 x 3 + 1 tiles for the square
picture, 3 x 1 + 1 for the tall stripes), the vision program takes any tile count, and
each <IMG_CONTEXT> of the chat becomes that picture's tiles' image tokens in one run
between <img> and </img>. What test_vlm_idefics3.py checks for crops, this checks for
InternVL's tiles: two pictures of different tile counts in one prompt are the
processor's pixel values and ids and give transformers' logits, and batches, chunked
prefill and `doit run` keep each row's pictures. Its decoder on the inductor backend
(tiny-internvl-inductor, built in the same world) gives the onnxruntime bundle's logits
and tokens for the same two pictures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import (
    SQUARE,
    STRIPES,
    World,
    built_world,
    bundle_dir,
    bundle_without_torch,
    check_fp32_vlm_record,
    check_inductor_gives_onnxruntime_outputs,
    check_pictures_survive_batches_and_chunks,
    heavy,
    picture_turn,
    run_on_picture,
)

pytestmark = heavy

RECIPE = "tiny-internvl"
INDUCTOR = "tiny-internvl-inductor"
QUESTION = "What is in the picture?"


@pytest.fixture(scope="module")
def internvl(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    return built_world(tmp_path_factory, hub, RECIPE, INDUCTOR)


@pytest.fixture(scope="module")
def bundle(internvl: World) -> Any:
    import runtime
    from runtime.crops_vlm import CropsVisionBundle

    return runtime.open(bundle_dir(internvl, RECIPE), expect=CropsVisionBundle)


def test_tiny_internvl_passes_every_gate_with_its_tiles_read(internvl: World) -> None:
    record = internvl.manifest(RECIPE)["evidence"][-1]
    check_fp32_vlm_record(record)


def test_two_pictures_of_different_tile_counts_are_the_processors_pixels_ids_and_logits(
    internvl: World, bundle: Any
) -> None:
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from builders.common.hf import load_processor

    checkpoint = next(p.parent for p in internvl.store.rglob("checkpoint/config.json"))
    processor = load_processor(checkpoint)
    assert type(processor).__mro__[1].__name__ == "InternVLProcessor"
    model = AutoModelForImageTextToText.from_pretrained(checkpoint, attn_implementation="eager")
    text = processor.apply_chat_template(
        picture_turn(2, "Compare them."), add_generation_prompt=True
    )
    pictures = [Image.open(p).convert("RGB") for p in (STRIPES, SQUARE)]
    encoded = processor(images=pictures, text=text, return_tensors="pt")
    # 4 tiles of the stripes then 7 of the square, on transformers' one tile axis
    made = bundle.crops([STRIPES, SQUARE])
    assert made["rows_cols"].tolist() == [[3, 1], [2, 3]]
    ours = np.concatenate([made["pixel_values"][0, :4], made["pixel_values"][1, :7]])
    assert np.abs(ours - encoded["pixel_values"].numpy()).max() <= 1e-6
    features = bundle.image_features([STRIPES, SQUARE])
    ids = bundle.encode_chat(picture_turn(2, "Compare them."), images=features)
    assert ids == encoded["input_ids"][0].tolist()
    assert ids.count(bundle.image_token) == len(features) == (4 + 7) * 4
    said = bundle.tokenizer.decode(ids, skip_special_tokens=False)
    assert said.count("<img>") == said.count("</img>") == 2
    with torch.no_grad():
        theirs = model.eval()(**encoded).logits[0].numpy()
    assert np.abs(bundle.logits(ids, features) - theirs).max() < 1e-4


def test_batches_and_chunked_prefill_keep_each_rows_pictures(bundle: Any) -> None:
    check_pictures_survive_batches_and_chunks(bundle)


def test_the_bundle_runs_without_torch_or_transformers_models(internvl: World) -> None:
    words = bundle_without_torch(bundle_dir(internvl, RECIPE), QUESTION, (STRIPES,))
    # the stripes' 3 x 1 tiles and thumbnail, 4 tokens each
    assert words == ["4", "(16,", "64)", "[(3,", "1)]", "False", "[]"]


def test_doit_run_answers_about_a_picture_of_its_own_tile_count(internvl: World) -> None:
    run_on_picture(internvl, RECIPE, STRIPES, 5)


@pytest.fixture(scope="module")
def compiled(internvl: World) -> Any:
    """The inductor bundle of the same checkpoint."""
    import runtime
    from runtime.inductor_vlm import InductorCropsVisionBundle

    return runtime.open(bundle_dir(internvl, INDUCTOR), expect=InductorCropsVisionBundle)


def test_the_inductor_bundle_passes_every_gate(internvl: World) -> None:
    check_fp32_vlm_record(internvl.last(INDUCTOR))


def test_the_inductor_bundle_gives_the_onnxruntime_outputs_for_each_rows_tiles(
    compiled: Any, bundle: Any
) -> None:
    """Two pictures of different tile counts (3 x 1 + 1 and 2 x 3 + 1 tiles of 4
    tokens) across 8-token prefill windows give the onnxruntime bundle's ids, logits
    and greedy tokens; batches and 5-token chunks keep each row's pictures."""
    check_inductor_gives_onnxruntime_outputs(compiled, bundle)
    check_pictures_survive_batches_and_chunks(compiled)

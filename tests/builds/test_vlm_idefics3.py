"""image-text-to-text with pictures cut into crops: tiny Idefics3 (SmolVLM's
architecture) built through `doit build` to a pass against transformers' own processor
and generate, and its bundle run as users run it, with no torch.

Each picture is resized and cut into as many 32 x 32 crops as its aspect ratio asks,
plus a global view (2 x 2 + 1 for the circle, 2 x 1 + 1 for the tall stripes), the
vision program takes any crop count, and each <image> of the chat becomes that
picture's own sequence of markers, crop positions and image tokens. So on top of what
test_vlm.py checks for LLaVA, this checks what a fixed-size model never exercises: two
pictures of different crop counts in one prompt expand to the processor's ids and give
transformers' logits, and batches, chunked prefill and `doit run` keep each row's
pictures. Its decoder on the inductor backend (tiny-idefics3-inductor, built nightly in
the module's store) passes the same gates and gives the onnxruntime bundle's logits and
tokens where the pictures' crops span its 8-token prefill windows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import (
    CIRCLE,
    SQUARE,
    STRIPES,
    World,
    build_later,
    built_world,
    bundle_dir,
    bundle_without_torch,
    check_fp32_vlm_record,
    check_inductor_gives_onnxruntime_outputs,
    check_pictures_survive_batches_and_chunks,
    heavy,
    nightly,
    picture_turn,
    run_on_picture,
    two_images,
)

pytestmark = heavy

RECIPE = "tiny-idefics3"
INDUCTOR = "tiny-idefics3-inductor"
QUESTION = "What is in the picture?"


@pytest.fixture(scope="module")
def idefics3(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    return built_world(tmp_path_factory, hub, RECIPE, later=(INDUCTOR,))


@pytest.fixture(scope="module")
def bundle(idefics3: World) -> Any:
    import runtime
    from runtime.crops_vlm import CropsVisionBundle

    return runtime.open(bundle_dir(idefics3, RECIPE), expect=CropsVisionBundle)


def test_it_passes_every_gate_with_its_crops_read(idefics3: World) -> None:
    check_fp32_vlm_record(idefics3.last(RECIPE))


def test_the_bundle_runs_without_torch_or_transformers_models(idefics3: World) -> None:
    words = bundle_without_torch(bundle_dir(idefics3, RECIPE), QUESTION, (CIRCLE, STRIPES))
    # 5 crops of 4 tokens for the circle (2 x 2 + the global view), 3 for the stripes
    assert words == ["4", "(32,", "64)", "[(2,", "2),", "(2,", "1)]", "False", "[]"]


def test_two_pictures_of_different_crop_counts_are_the_processors_ids_and_logits(
    idefics3: World, bundle: Any
) -> None:
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText, AutoProcessor

    checkpoint = next(p.parent for p in idefics3.store.rglob("checkpoint/config.json"))
    processor = AutoProcessor.from_pretrained(checkpoint, backend="pil")
    model = AutoModelForImageTextToText.from_pretrained(checkpoint, attn_implementation="eager")
    text = processor.apply_chat_template(
        picture_turn(2, "Compare them."), add_generation_prompt=True
    )
    pictures = [Image.open(p).convert("RGB") for p in (STRIPES, SQUARE)]
    encoded = processor(images=pictures, text=text, return_tensors="pt")
    features = bundle.image_features([STRIPES, SQUARE])
    ids = bundle.encode_chat(picture_turn(2, "Compare them."), images=features)
    assert ids == encoded["input_ids"][0].tolist()
    assert ids.count(bundle.image_token) == len(features) == 12 + 20
    assert "<row_2_col_1>" in bundle.tokenizer.decode(ids, skip_special_tokens=False)
    with torch.no_grad():
        theirs = model.eval()(**encoded).logits[0].numpy()
    assert np.abs(bundle.logits(ids, features) - theirs).max() < 1e-4


def test_batches_and_chunked_prefill_keep_each_rows_pictures(bundle: Any) -> None:
    check_pictures_survive_batches_and_chunks(bundle)


def test_pictures_without_their_grids_are_refused(bundle: Any) -> None:
    from runtime import BundleError

    with pytest.raises(BundleError, match="give encode_chat the features of its pictures"):
        two_images(bundle, "Compare.")
    with pytest.raises(BundleError, match="image placeholder '<image>'"):
        bundle.encode_chat([{"role": "user", "content": "look: <image>"}])


def test_doit_run_answers_about_pictures_of_their_own_crop_counts(idefics3: World) -> None:
    run_on_picture(idefics3, RECIPE, STRIPES, 5)


@pytest.fixture(scope="module")
def compiled(idefics3: World) -> Any:
    """The inductor bundle of the same checkpoint, built in the module's store (nightly:
    CI builds tiny-internvl-inductor, the same crops runner over tiles); it passes every
    gate."""
    import runtime
    from runtime.inductor_vlm import InductorCropsVisionBundle

    check_fp32_vlm_record(build_later(idefics3, INDUCTOR).last(INDUCTOR))
    return runtime.open(bundle_dir(idefics3, INDUCTOR), expect=InductorCropsVisionBundle)


@nightly
def test_the_inductor_bundle_gives_the_onnxruntime_logits_and_tokens(
    compiled: Any, bundle: Any
) -> None:
    """Two pictures of different crop counts (3 and 5 crops of 4 tokens) across
    8-token prefill windows: the onnxruntime bundle's ids, logits and greedy tokens."""
    check_inductor_gives_onnxruntime_outputs(compiled, bundle)


@nightly
def test_the_inductor_bundle_keeps_each_rows_pictures(compiled: Any) -> None:
    check_pictures_survive_batches_and_chunks(compiled)

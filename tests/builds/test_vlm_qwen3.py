"""image-text-to-text with DeepStack: tiny Qwen3-VL built through `doit build` to a pass
against transformers' own processor and generate, and its bundle run as users run it.

Qwen3-VL is Qwen2.5-VL's grid pattern (test_vlm_qwen.py) plus two things this checks
where they show: its tower adds learned position embeddings resampled bilinearly to each
picture's grid (taps and weights computed in numpy, runtime/mrope.py position_taps), and
DeepStack: the rows of the tower's intermediate mergers, which its decoder adds at the
image tokens after its first layers (Qwen3VLTextModel._deepstack_process; here after
layers 0 and 1 of 3). Two pictures of different grids give transformers' pixel values,
ids and logits, and zeroed DeepStack rows would not; decode steps and text-only prefill
chunks, which feed no rows, still give transformers' logits and tokens. Its decoder on
the inductor backend (tiny-qwen3-vl-inductor, built in the same call: its prefill
program takes each picture token's merged and DeepStack rows side by side) passes the
same gates and gives the onnxruntime bundle's logits and tokens where pictures span
prefill windows.
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
    built_world,
    bundle_dir,
    bundle_without_torch,
    check_fp32_vlm_record,
    check_inductor_gives_onnxruntime_outputs,
    check_pictures_survive_batches_and_chunks,
    heavy,
)

pytestmark = heavy

RECIPE = "tiny-qwen3-vl"
INDUCTOR = "tiny-qwen3-vl-inductor"
QUESTION = "What is in the picture?"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    return built_world(tmp_path_factory, hub, RECIPE, INDUCTOR)


@pytest.fixture(scope="module")
def bundle(world: World) -> Any:
    import runtime
    from runtime.grid_vlm import GridVisionBundle

    return runtime.open(bundle_dir(world, RECIPE), expect=GridVisionBundle)


@pytest.fixture(scope="module")
def hf(world: World) -> tuple[Any, Any]:
    """transformers' processor and model of the built checkpoint (eager, fp32)."""
    from transformers import AutoModelForImageTextToText

    from builders.common.hf import load_processor

    checkpoint = next(
        p.parent
        for p in world.store.rglob("checkpoint/config.json")
        if '"model_type": "qwen3_vl"' in p.read_text()
    )
    model = AutoModelForImageTextToText.from_pretrained(checkpoint, attn_implementation="eager")
    return load_processor(checkpoint), model.eval()


def _encoded(hf: tuple[Any, Any], pictures: list[Path], text: str) -> Any:
    from PIL import Image

    processor, _ = hf
    parts = [{"type": "image"} for _ in pictures] + [{"type": "text", "text": text}]
    chat = processor.apply_chat_template(
        [{"role": "user", "content": parts}], add_generation_prompt=True
    )
    loaded = [Image.open(p).convert("RGB") for p in pictures]
    return processor(images=loaded, text=chat, return_tensors="pt")


def test_it_passes_every_gate_with_its_images_read(world: World) -> None:
    record = world.manifest(RECIPE)["evidence"][-1]
    check_fp32_vlm_record(record)
    assert (
        world.manifest(RECIPE)["lock"]["model"]["architecture"] == "Qwen3VLForConditionalGeneration"
    )


def test_two_pictures_give_transformers_pixels_ids_and_logits_through_deepstack(
    bundle: Any, hf: tuple[Any, Any]
) -> None:
    """The patches and grids are the processor's, the expanded ids its ids, and the
    logits at every position transformers' own; with the DeepStack rows zeroed (the
    decoder's text path at the image tokens) they would not be."""
    import torch

    _, model = hf
    encoded = _encoded(hf, [SQUARE, STRIPES], "Compare them.")
    patches, grids = bundle.patches([SQUARE, STRIPES])
    assert grids == [tuple(g) for g in encoded["image_grid_thw"].tolist()]
    assert np.abs(patches - encoded["pixel_values"].numpy()).max() <= 1e-6
    ids, features = bundle.ask("Compare them.", [SQUARE, STRIPES])
    assert ids == encoded["input_ids"][0].tolist()
    tokens = int((encoded["input_ids"] == bundle.image_token).sum())
    assert features.shape == (tokens, 3 * 64)  # merged rows, then 2 DeepStack levels'
    with torch.no_grad():
        theirs = model(**encoded).logits[0].numpy()
    assert np.abs(bundle.logits(ids, features) - theirs).max() < 1e-4
    flat = features.copy()
    flat[:, 64:] = 0.0  # the merged features alone
    assert np.abs(bundle.logits(ids, flat) - theirs).max() > 1e-2


def test_decode_steps_and_text_chunks_feed_no_deepstack_rows(
    bundle: Any, hf: tuple[Any, Any]
) -> None:
    """Every decode step's logits are transformers' at that position of prompt +
    generated tokens (a step feeds no image rows, so nothing is added after the first
    layers), and a prompt fed in chunks of 3, some of them text alone, generates the
    one-shot prefill's tokens."""
    import torch

    from runtime import Decoding, Row, Sampler

    _, model = hf
    seen: list[np.ndarray] = []

    def keep(tokens: Any, logits: np.ndarray) -> np.ndarray:
        seen.append(np.array(logits))
        return logits

    ids, features = bundle.ask(QUESTION, [CIRCLE, SQUARE])
    new = bundle.generate_rows([Row(ids, 6, Decoding(processors=[keep]), Sampler(), features)])
    new = new.tokens[0]
    encoded = _encoded(hf, [CIRCLE, SQUARE], QUESTION)
    full = torch.tensor([ids + new[:-1]])
    marks = torch.nn.functional.pad(encoded["mm_token_type_ids"], (0, len(new) - 1))
    with torch.no_grad():
        theirs = model(
            input_ids=full,
            pixel_values=encoded["pixel_values"],
            image_grid_thw=encoded["image_grid_thw"],
            mm_token_type_ids=marks,
        ).logits[0, len(ids) - 1 :]
    assert len(seen) == len(new) >= 2
    assert np.abs(np.stack(seen).reshape(theirs.shape) - theirs.numpy()).max() < 1e-4
    assert new == theirs.argmax(-1).tolist()
    bundle.prefill_chunk_len = 3
    try:
        assert list(bundle.generate_images([(ids, features)], 6).tokens[0]) == new
    finally:
        bundle.prefill_chunk_len = 0


def test_batches_and_chunked_prefill_keep_each_rows_pictures_and_deepstack(bundle: Any) -> None:
    check_pictures_survive_batches_and_chunks(bundle)


def test_the_bundle_runs_without_torch_or_transformers_models(world: World) -> None:
    """onnxruntime, numpy, Pillow, tokenizers (and transformers' chat template renderer,
    as every chat bundle: runtime/chat.py), no torch and no model code."""
    words = bundle_without_torch(bundle_dir(world, RECIPE), QUESTION)
    # 64 x 48 -> 64 x 64 pixels: 4 x 4 patches, 4 tokens; 200 x 120 -> 160 x 96: 10 x 6, 15;
    # each token's row is its merged features and its 2 DeepStack levels' (3 x 64)
    assert words == [
        "4",
        "(19,",
        "192)",
        "[(1,",
        "4,",
        "4),",
        "(1,",
        "6,",
        "10)]",
        "False",
        "[]",
    ]


def test_a_video_is_refused_with_what_qwen3_vl_would_need(bundle: Any) -> None:
    """Qwen3-VL's processor writes each frame group's timestamp into the text (and its
    video processor samples frames by fps): not reproduced, so refused, not guessed."""
    from runtime import BundleError

    with pytest.raises(BundleError, match="Qwen3-VL's processor writes each frame group"):
        bundle.video_features([[CIRCLE, CIRCLE]])


@pytest.fixture(scope="module")
def compiled(world: World) -> Any:
    """The inductor bundle of the same checkpoint."""
    import runtime
    from runtime.inductor_vlm import InductorGridVisionBundle

    return runtime.open(bundle_dir(world, INDUCTOR), expect=InductorGridVisionBundle)


def test_the_inductor_programs_add_the_deepstack_rows_and_give_the_onnxruntime_outputs(
    world: World, compiled: Any, bundle: Any
) -> None:
    """The inductor bundle passes the fp32 VLM gates; two pictures of different grids
    across its 8-token prefill windows give the onnxruntime bundle's ids, logits and
    greedy tokens, and batches and 5-token chunks keep each row's pictures; its prefill
    reads the DeepStack rows (zeroed, its logits move as the onnxruntime bundle's do)."""
    check_fp32_vlm_record(world.last(INDUCTOR))
    check_inductor_gives_onnxruntime_outputs(compiled, bundle)
    check_pictures_survive_batches_and_chunks(compiled)
    ids, features = compiled.ask("Compare them.", [SQUARE, STRIPES])
    flat = features.copy()
    flat[:, 64:] = 0.0  # the merged features alone
    moved = compiled.logits(ids, flat)
    assert np.abs(moved - bundle.logits(ids, flat)).max() < 1e-4
    assert np.abs(moved - compiled.logits(ids, features)).max() > 1e-2

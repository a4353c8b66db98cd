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

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import (
    PICTURES,
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


# ---------------------------------------------------------------- video as frames

# 5 frames of 100 x 60, each a shipped picture turned by its own angle: InternVL's video
# processor resizes every frame to one tile (32 x 32 here) and keeps them all.
VIDEO_SOURCES = ("circle_64x48.png", "square_200x120.jpg", "stripes_37x91.png", "gray_50x70.png")


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    from PIL import Image

    folder = tmp_path_factory.mktemp("frames")
    made = []
    for i in range(5):
        picture = Image.open(PICTURES / VIDEO_SOURCES[i % 4]).convert("RGB")
        path = folder / f"frame_{i}.png"
        picture.resize((100, 60)).rotate(9 * i).save(path)
        made.append(path)
    return made


def _video_encoded(checkpoint: Path, frames: list[Path], text: str) -> Any:
    """InternVLProcessor's input_ids and pixel_values for one user turn of a video and
    `text`: its chat template and its <video> expansion ("FrameN: <img>...</img>" a
    frame), fed InternVLVideoProcessor's steps. Its module imports torchvision, which is
    not installed here (no CPU build of it for torch 2.13), so its steps are replayed
    with the torch calls torchvision makes for uint8 frames on a CPU: every frame kept
    (do_sample_frames off), F.interpolate to its size (bicubic, antialiased), the fused
    (x - mean * 255) / (std * 255)."""
    import torch
    from PIL import Image
    from transformers import BatchFeature

    from builders.common.hf import load_processor

    processor = load_processor(checkpoint)
    config = json.loads((checkpoint / "preprocessor_config.json").read_text())
    size = [config["size"]["height"], config["size"]["width"]]

    class Frames:  # InternVLVideoProcessor's output, as InternVLProcessor reads it
        model_input_names = ("pixel_values_videos",)

        def __call__(self, videos: Any, **kwargs: Any) -> Any:
            made = []
            for video in videos:
                pixels = np.stack([np.asarray(p) for p in video])
                clip = torch.from_numpy(pixels).permute(0, 3, 1, 2).contiguous()
                clip = torch.nn.functional.interpolate(
                    clip, size=size, mode="bicubic", antialias=True
                )
                mean = torch.tensor(config["image_mean"]) * (1.0 / config["rescale_factor"])
                std = torch.tensor(config["image_std"]) * (1.0 / config["rescale_factor"])
                clip = clip.to(torch.float32).sub_(mean.view(-1, 1, 1)).div_(std.view(-1, 1, 1))
                made.append(clip)
            return BatchFeature({"pixel_values_videos": torch.stack(made)})

    processor.video_processor = Frames()
    processor.video_token = "<video>"  # InternVLProcessor.__init__'s, not run
    parts = [{"type": "video"}, {"type": "text", "text": text}]
    chat = processor.apply_chat_template(
        [{"role": "user", "content": parts}], add_generation_prompt=True
    )
    pictures = [Image.open(f).convert("RGB") for f in frames]
    return processor(text=chat, videos=[pictures], return_tensors="pt")


def test_a_video_of_frames_gives_transformers_pixels_ids_and_logits(
    internvl: World, bundle: Any, frames: list[Path]
) -> None:
    """Each frame one tile, pixels bit for bit the replayed processor's, the ids its
    "Frame1: <img>...</img>" lines, and transformers' logits at every position; a
    picture and the video in one turn keep the parts' order."""
    import torch
    from transformers import AutoModelForImageTextToText

    from runtime import images

    checkpoint = next(p.parent for p in internvl.store.rglob("checkpoint/config.json"))
    model = AutoModelForImageTextToText.from_pretrained(checkpoint, attn_implementation="eager")
    encoded = _video_encoded(checkpoint, frames, "What happens?")
    tiles = images.frame_tiles([frames], bundle.processor, bundle.video_processor)
    assert tiles[0].shape == (5, 3, 32, 32)
    assert np.abs(tiles[0] - encoded["pixel_values"].numpy()).max() <= 1e-6
    ids, features = bundle.ask("What happens?", videos=[frames])
    assert ids == encoded["input_ids"][0].tolist()
    text = bundle.tokenizer.decode(ids, skip_special_tokens=False)
    assert [f"Frame{i}: <img>" in text for i in range(1, 7)] == [True] * 5 + [False]
    assert features.frames == [5] and len(features) == 5 * bundle.tokens_per_image
    with torch.no_grad():
        theirs = model(**encoded).logits[0].numpy()
    assert np.abs(bundle.logits(ids, features) - theirs).max() < 1e-4
    both, joined = bundle.ask("What happens?", [SQUARE], [frames])
    assert joined.frames == [0, 5] and joined.grids[0] == (2, 3)
    assert bundle.generate_images([(both, joined)], 3).tokens[0]


def test_doit_run_answers_about_a_video_of_frames(internvl: World, frames: list[Path]) -> None:
    video = "video=" + ",".join(str(f) for f in frames)
    out = internvl.doit("run", f"recipe={RECIPE}", video, "prompt=What happens?")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()


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

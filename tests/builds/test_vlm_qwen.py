"""image-text-to-text with pictures of their own size and 3-D positions: tiny Qwen2.5-VL
and tiny Qwen2-VL built through `doit build` (one build of both) to a pass against
transformers' own processor and generate, and their bundles run as users run them,
with no torch. Qwen2-VL differs in its tower alone (no windows: every block attends
over its picture), so it is checked where that shows: two pictures' logits. Qwen2.5-VL's
decoder on the inductor backend (tiny-qwen2.5-vl-inductor, built in the same call: its
programs take the [batch, tokens, 3] positions) passes the same gates and gives the
onnxruntime bundle's logits and tokens where pictures of two grids span prefill windows
(nightly: CI builds tiny-qwen3-vl-inductor, whose programs take the same positions and
DeepStack rows besides, tests/builds/test_vlm_qwen3.py).

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

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import (
    CIRCLE,
    PICTURES,
    ROOT,
    SQUARE,
    STRIPES,
    World,
    alone,
    build_later,
    built_world,
    bundle_dir,
    bundle_without_torch,
    check_fp32_vlm_record,
    check_pictures_survive_batches_and_chunks,
    check_video_positions_and_logits,
    heavy,
    nightly,
    two_images,
)

pytestmark = heavy

RECIPE = "tiny-qwen2.5-vl"
QWEN2 = "tiny-qwen2-vl"
INDUCTOR = "tiny-qwen2.5-vl-inductor"
QUESTION = "What is in the picture?"


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    return built_world(tmp_path_factory, hub, RECIPE, QWEN2, later=(INDUCTOR,))


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


@pytest.mark.parametrize("recipe", [RECIPE, QWEN2])
def test_each_passes_every_gate_with_its_images_read(qwen: World, recipe: str) -> None:
    record = qwen.manifest(recipe)["evidence"][-1]
    check_fp32_vlm_record(record)


def test_the_bundle_runs_without_torch_or_transformers_models(qwen: World) -> None:
    """onnxruntime, numpy, Pillow, tokenizers (and transformers' chat template renderer,
    as every chat bundle: runtime/chat.py), no torch and no model code."""
    words = bundle_without_torch(bundle_dir(qwen, RECIPE), QUESTION)
    # 64 x 48 -> 56 x 56 pixels: 4 x 4 patches, 4 tokens; 200 x 120 -> 140 x 84: 10 x 6, 15
    assert words[:3] == ["4", "(19,", "64)"]
    assert words[3:] == ["[(1,", "4,", "4),", "(1,", "6,", "10)]", "False", "[]"]


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
    """The inductor bundle of the same checkpoint, built in the module's store; it
    passes every gate."""
    import runtime
    from runtime.inductor_vlm import InductorGridVisionBundle

    check_fp32_vlm_record(build_later(qwen, INDUCTOR).last(INDUCTOR))
    return runtime.open(bundle_dir(qwen, INDUCTOR), expect=InductorGridVisionBundle)


@nightly
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


@nightly
def test_the_inductor_bundle_keeps_each_rows_pictures_and_positions(compiled: Any) -> None:
    check_pictures_survive_batches_and_chunks(compiled)


# ---------------------------------------------------------------- video as frames

# A 4-frame video of shipped pictures, each made 100 x 60 (PNG): the video processor
# resizes frames to 112 x 56 (4 x 8 patches), groups them in twos (t = 2): 16 tokens.
VIDEO_SOURCES = ("circle_64x48.png", "square_200x120.jpg", "stripes_37x91.png", "gray_50x70.png")


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    from PIL import Image

    folder = tmp_path_factory.mktemp("frames")
    made = []
    for i, name in enumerate(VIDEO_SOURCES):
        path = folder / f"frame_{i}.png"
        Image.open(PICTURES / name).convert("RGB").resize((100, 60)).save(path)
        made.append(path)
    return made


def _video_reference(processor: Any, frames: list[Path]) -> dict[str, Any]:
    """transformers' Qwen2VLVideoProcessor's pixel_values_videos and video_grid_thw for
    the frames given as pictures. Where torchvision is missing (transformers' video
    processors import it, and no CPU build of it for torch 2.13 installs here), the
    processor's own steps replayed with the torch calls it makes: smart_resize,
    torchvision's resize of uint8 bicubic on a CPU (its F.interpolate, antialiased),
    the fused (x - mean * 255) / (std * 255), and patchify's view and permute."""
    import importlib.util

    import torch
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    pictures = [Image.open(f).convert("RGB") for f in frames]
    if importlib.util.find_spec("torchvision") and getattr(processor, "video_processor", None):
        out = processor.video_processor(videos=[pictures], return_tensors="pt")
        return {k: out[k] for k in ("pixel_values_videos", "video_grid_thw")}
    config = processor.image_processor  # the video processor reads the same settings
    patch, merge, group = config.patch_size, config.merge_size, config.temporal_patch_size
    video = torch.from_numpy(np.stack([np.asarray(p) for p in pictures])).permute(0, 3, 1, 2)
    size = config.size  # min_pixels and max_pixels, as the video processor reads them
    height, width = smart_resize(
        video.shape[2], video.shape[3], patch * merge, size["shortest_edge"], size["longest_edge"]
    )
    video = torch.nn.functional.interpolate(
        video.contiguous(), size=[height, width], mode="bicubic", antialias=True
    )
    mean = torch.tensor(config.image_mean) * (1.0 / config.rescale_factor)
    std = torch.tensor(config.image_std) * (1.0 / config.rescale_factor)
    video = video.to(torch.float32).sub_(mean.view(-1, 1, 1)).div_(std.view(-1, 1, 1))[None]
    b, t, c = video.shape[:3]
    gt, gh, gw = t // group, height // patch, width // patch
    patches = video.view(b, gt, group, c, gh // merge, merge, patch, gw // merge, merge, patch)
    patches = patches.permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9)
    flat = patches.reshape(b, gt * gh * gw, c * group * patch * patch)
    return {"pixel_values_videos": flat[0], "video_grid_thw": torch.tensor([[gt, gh, gw]])}


def _video_encoded(hf: tuple[Any, Any], frames: list[Path], text: str) -> Any:
    """The processor's input_ids, mm_token_type_ids and second_per_grid_ts for one user
    turn of a video and `text`: its own chat template and its own <|video_pad|>
    expansion, fed the video processor's output (_video_reference)."""
    from PIL import Image
    from transformers import BatchFeature
    from transformers.video_utils import VideoMetadata

    processor, _ = hf
    reference = _video_reference(processor, frames)

    class Frames:  # the video processor's output, as Qwen2_5_VLProcessor reads it
        merge_size = processor.image_processor.merge_size
        temporal_patch_size = processor.image_processor.temporal_patch_size
        model_input_names = ("pixel_values_videos", "video_grid_thw")

        def __call__(self, videos: Any, **kwargs: Any) -> Any:
            metadata = [VideoMetadata(total_num_frames=len(frames))]  # no fps: 24
            return BatchFeature({**reference, "video_metadata": metadata})

    parts = [{"type": "video"}, {"type": "text", "text": text}]
    chat = processor.apply_chat_template(
        [{"role": "user", "content": parts}], add_generation_prompt=True
    )
    before = getattr(processor, "video_processor", None)
    processor.video_processor = Frames()
    try:
        pictures = [Image.open(f).convert("RGB") for f in frames]
        return processor(text=chat, videos=[pictures], return_tensors="pt"), reference
    finally:
        processor.video_processor = before


def test_a_video_of_frames_gives_transformers_pixels_ids_positions_and_logits(
    bundle: Any, hf: tuple[Any, Any], frames: list[Path]
) -> None:
    """Four frames: pixels within 1e-6 (bit for bit) of the video processor's, ids the
    processor's (16 <|video_pad|>), positions get_rope_index's with the video's
    second_per_grid_ts, and the logits at every position transformers' (so the vision
    program takes t = 2 grids as the tower does)."""

    from runtime import images

    _, model = hf
    encoded, reference = _video_encoded(hf, frames, "What happens?")
    made = images.video_pixel_values([frames], bundle.processor)
    assert made["video_grid_thw"].tolist() == reference["video_grid_thw"].tolist() == [[2, 4, 8]]
    pixels = made["pixel_values_videos"] - reference["pixel_values_videos"].numpy()
    assert np.abs(pixels).max() < 1e-6
    ids, features = bundle.ask("What happens?", videos=[frames])
    assert ids == encoded["input_ids"][0].tolist()
    assert ids.count(bundle.video_token) == 16 and features.grids == [(2, 4, 8)]
    rope = {"second_per_grid_ts": encoded["second_per_grid_ts"]}
    check_video_positions_and_logits(bundle, model, encoded, ids, features, **rope)
    # a picture and a video in one turn: the features follow the parts' order
    both, joined = bundle.ask("What happens?", [CIRCLE], [frames])
    assert joined.videos == [False, True] and len(joined) == 4 + 16
    assert bundle.generate_images([(both, joined)], 3).tokens[0]


def test_a_video_is_refused_where_it_cannot_be_read(bundle: Any, frames: list[Path]) -> None:
    from runtime import BundleError

    for given, said in (
        ([frames[0]], "at least 2 frames"),
        ([frames[0], CIRCLE], "of one size"),
        ([frames[0], ROOT / "README.md"], "is not a PNG, JPEG"),
        ([frames[0], frames[0].with_name("clip.mp4")], "kiln decodes no video containers"),
    ):
        with pytest.raises(BundleError, match=said):
            bundle.video_features([given])


def test_doit_run_answers_about_a_video_of_frames(qwen: World, frames: list[Path]) -> None:
    video = "video=" + ",".join(str(f) for f in frames)
    out = qwen.doit("run", f"recipe={RECIPE}", video, "prompt=What happens?", "max_new_tokens=4")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
    for given, said in (
        (f"video={frames[0]}", "a video needs at least 2 frames"),
        (f"video={frames[0]},clip.mp4", "kiln decodes no video containers"),
        (f"video={frames[0]},{frames[0].with_name('gone.png')}", "gone.png"),
    ):
        out = qwen.doit("run", f"recipe={RECIPE}", given, "prompt=What happens?")
        assert out.returncode != 0 and said in out.stdout + out.stderr, out.stdout + out.stderr
        assert "Traceback" not in out.stdout + out.stderr


def test_qwen2_vls_video_steps_t_by_one_and_gives_transformers_logits(
    qwen: World, frames: list[Path]
) -> None:
    """Qwen2-VL's windowless tower on the t = 2 grid, and its video t positions stepping
    by 1 (it has no tokens_per_second): the processor's ids, transformers' logits."""
    import torch

    bundle = _opened(qwen, QWEN2)
    hf2 = _transformers(qwen, "qwen2_vl")
    encoded, _ = _video_encoded(hf2, frames, "What happens?")
    ids, features = bundle.ask("What happens?", videos=[frames])
    assert ids == encoded["input_ids"][0].tolist() and features.intervals == [1.0]
    with torch.no_grad():
        theirs = hf2[1](**encoded).logits[0].numpy()
    assert np.abs(bundle.logits(ids, features) - theirs).max() < 1e-4

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

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import (
    CIRCLE,
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
    check_video_positions_and_logits,
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


# ---------------------------------------------------------------- video as frames

# 12 frames of 100 x 60, each a shipped picture turned by its own angle, so that a
# wrong frame kept shows in the pixels. At transformers' 24 fps (frames without their
# clip) the processor keeps 4 of them (its 2 a second, at least min_frames): 2 frame
# groups, each 32 x 64 pixels (1 x 2 tokens) within the tiny's 16,384-pixel budget for
# all frames; at fps=2 it keeps all 12: 6 frame groups, 1 token each.
VIDEO_SOURCES = ("circle_64x48.png", "square_200x120.jpg", "stripes_37x91.png", "gray_50x70.png")


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    from PIL import Image

    folder = tmp_path_factory.mktemp("frames")
    made = []
    for i in range(12):
        picture = Image.open(PICTURES / VIDEO_SOURCES[i % 4]).convert("RGB")
        path = folder / f"frame_{i:02d}.png"
        picture.resize((100, 60)).rotate(9 * i).save(path)
        made.append(path)
    return made


def _video_encoded(hf: tuple[Any, Any], frames: list[Path], text: str, fps: float | None) -> Any:
    """Qwen3VLProcessor's input_ids, mm_token_type_ids, pixel_values_videos and
    video_grid_thw for one user turn of a video and `text`: its chat template, its frame
    sampling, its timestamps and its <|video_pad|> expansion, by transformers' own
    Qwen3VLVideoProcessor. transformers' video processors resize and normalize through
    torchvision, which is not installed here (no CPU build of it for torch 2.13): those
    two calls are replayed with the torch calls torchvision makes for uint8 frames on a
    CPU (F.interpolate bicubic, antialiased; sub_ then div_ by mean and std), and the
    frames come in RGB already (its convert_to_rgb is torchvision's too)."""
    import importlib.util

    import torch
    from PIL import Image
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import (
        Qwen3VLVideoProcessor,
        smart_resize,
    )
    from transformers.video_utils import VideoMetadata

    processor, _ = hf

    class Frames(Qwen3VLVideoProcessor):
        def resize(self, videos: Any, size: Any, resample: Any, factor: int, **kw: Any) -> Any:
            if importlib.util.find_spec("torchvision"):
                return super().resize(videos, size, resample, factor, **kw)
            height, width = smart_resize(
                num_frames=videos.shape[1],
                height=videos.shape[-2],
                width=videos.shape[-1],
                temporal_factor=kw["temporal_factor"],
                factor=factor,
                min_pixels=size.shortest_edge,
                max_pixels=size.longest_edge,
            )
            b, t, c = videos.shape[:3]
            flat = videos.reshape(b * t, c, *videos.shape[-2:]).contiguous()
            made = torch.nn.functional.interpolate(
                flat, size=[height, width], mode="bicubic", antialias=True
            )
            return made.reshape(b, t, c, height, width)

        def normalize(self, image: Any, mean: Any, std: Any, inplace: bool = False, **kw: Any):
            if importlib.util.find_spec("torchvision"):
                return super().normalize(image, mean, std, inplace=inplace)
            mean = torch.as_tensor(mean, dtype=image.dtype).view(-1, 1, 1)
            std = torch.as_tensor(std, dtype=image.dtype).view(-1, 1, 1)
            return (image if inplace else image.clone()).sub_(mean).div_(std)

    checkpoint = Path(hf[1].name_or_path)
    config = json.loads((checkpoint / "preprocessor_config.json").read_text())
    skip = ("image_processor_type", "processor_class")  # no video processor settings
    settings = {k: v for k, v in config.items() if k not in skip}
    before = getattr(processor, "video_processor", None)
    processor.video_processor = Frames(**{**settings, "do_convert_rgb": False})
    for name in ("vision_start", "vision_end"):  # Qwen3VLProcessor.__init__'s, not run
        setattr(processor, f"{name}_token", f"<|{name}|>")
        setattr(
            processor, f"{name}_token_id", processor.tokenizer.convert_tokens_to_ids(f"<|{name}|>")
        )
    parts = [{"type": "video"}, {"type": "text", "text": text}]
    chat = processor.apply_chat_template(
        [{"role": "user", "content": parts}], add_generation_prompt=True
    )
    pictures = [Image.open(f).convert("RGB") for f in frames]
    extra = {}
    if fps is not None:
        extra["video_metadata"] = [VideoMetadata(total_num_frames=len(frames), fps=fps)]
    try:
        return processor(text=chat, videos=[pictures], return_tensors="pt", **extra)
    finally:
        processor.video_processor = before


@pytest.mark.parametrize("fps", [None, 2.0])
def test_a_video_of_frames_gives_transformers_pixels_ids_times_positions_and_logits(
    bundle: Any, hf: tuple[Any, Any], frames: list[Path], fps: float | None
) -> None:
    """The processor's frames kept (by the clip's fps), its patches within 1e-6, its
    ids with each frame group's "<T seconds>" and vision_start/end, get_rope_index's
    positions (each frame group a (1, h, w) picture) and transformers' logits at every
    position, DeepStack rows added at the video's tokens."""

    _, model = hf
    encoded = _video_encoded(hf, frames, "What happens?", fps)
    ids, features = bundle.ask("What happens?", videos=[frames], fps=fps)
    groups = 2 if fps is None else 6
    assert encoded["video_grid_thw"].tolist() == [[groups, 2, 4] if fps is None else [6, 2, 2]]
    patches, meta = bundle.video_patches([frames], fps)
    assert np.abs(patches - encoded["pixel_values_videos"].numpy()).max() <= 1e-6
    assert meta.grids == [(1, 2, 4) if fps is None else (1, 2, 2)] * groups
    assert ids == encoded["input_ids"][0].tolist()
    text = bundle.tokenizer.decode(ids, skip_special_tokens=False)
    # kept frames 0, 4, 7, 11 of 12 at 24 fps: groups at (0 + 4) / 48 and (7 + 11) / 48 s;
    # at 2 fps all 12: (2k + 2k + 1) / 4 = k + 0.25 s, which .1f writes as k.2
    times = [f"<{t:.1f} seconds>" for t in meta.stamps]
    wanted = [0.1, 0.4] if fps is None else [0.2, 1.2, 2.2, 3.2, 4.2, 5.2]
    assert times == [f"<{t} seconds>" for t in wanted]
    assert text.count("<|vision_start|>") == groups + 1  # the part's own, then one a group
    assert all(t in text for t in times)
    theirs = check_video_positions_and_logits(bundle, model, encoded, ids, features)
    flat = features.copy()
    flat[:, 64:] = 0.0  # DeepStack's rows matter at video tokens too
    assert np.abs(bundle.logits(ids, flat) - theirs).max() > 1e-2


def test_doit_run_answers_about_a_video_at_the_rate_its_frames_were_taken(
    world: World, frames: list[Path]
) -> None:
    video = "video=" + ",".join(str(f) for f in frames)
    out = world.doit("run", f"recipe={RECIPE}", video, "fps=2", "prompt=What happens?")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip()
    for given, said in (
        ((video, "fps=0"), "fps=0: a video's frames are taken a number of times a second"),
        ((video, "fps=-1"), "-1 is below 0"),
        ((video, "fps=fast"), "'fast' is not a number"),
        (("fps=2",), "fps applies to a video's frames"),
    ):
        out = world.doit("run", f"recipe={RECIPE}", *given, "prompt=What happens?")
        text = out.stdout + out.stderr
        assert out.returncode != 0 and said in text, text
        assert "Traceback" not in text


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

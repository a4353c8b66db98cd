"""runtime/images.py: the shipped test images give exactly transformers' pixel values,
and hostile files are refused, each with its name in the message, before decoding.

The reference is transformers' own processor, PIL backend (`backend="pil"`), built
from a preprocessor_config.json written here with the values of real checkpoints
(llava-hf/llava-1.5-7b-hf's CLIP, google/siglip-so400m-patch14-384's SigLIP, google/gemma-3-4b-it's,
Qwen/Qwen2.5-VL-7B-Instruct's, and that one with max_pixels small enough that the
200x120 image is shrunk). It is given each image as transformers' load_image opens a
file, upright by its EXIF, but with the alpha kept for the processor to composite.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import threading
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, heavy

from runtime import images
from runtime.format import BundleError
from tinyhub.vlm import clip_processor

pytestmark = heavy

FOLDER = ROOT / "builders" / "data" / "images"
PICTURES = sorted(p for p in FOLDER.iterdir() if p.suffix != ".py")
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
QWEN = {
    "image_processor_type": "Qwen2VLImageProcessor",
    "min_pixels": 3136,
    "max_pixels": 12845056,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "image_mean": CLIP_MEAN,
    "image_std": CLIP_STD,
}
CONFIGS: dict[str, dict[str, Any]] = {
    "llava-clip": clip_processor(336),  # llava-1.5's, as the tiny LLaVA ships it at 32
    "siglip": {
        "image_processor_type": "SiglipImageProcessor",
        "do_normalize": True,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "resample": 3,
        "rescale_factor": 0.00392156862745098,
        "size": {"height": 384, "width": 384},
    },
    "gemma-3": {  # google/gemma-3-4b-it's: SigLIP's steps at 896, bilinear, no pan-and-scan
        "image_processor_type": "Gemma3ImageProcessor",
        # gemma-3-4b-it writes null here, which transformers passes on as "do not
        # convert" (its processor then fails on a grey or RGBA picture); the tiny
        # Gemma 3 writes true, as the class default is
        "do_convert_rgb": True,
        "do_normalize": True,
        "do_pan_and_scan": None,
        "do_rescale": True,
        "do_resize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "pan_and_scan_max_num_crops": None,
        "pan_and_scan_min_crop_size": None,
        "pan_and_scan_min_ratio_to_activate": None,
        "resample": 2,
        "rescale_factor": 0.00392156862745098,
        "size": {"height": 896, "width": 896},
    },
    "qwen2.5-vl": QWEN,
    "qwen2.5-vl-shrinking": {**QWEN, "max_pixels": 28 * 28 * 16},
}


def reference(config: dict[str, Any], folder: Path) -> Any:
    from transformers import AutoImageProcessor

    (folder / "preprocessor_config.json").write_text(json.dumps(config))
    processor = AutoImageProcessor.from_pretrained(folder, backend="pil")
    assert type(processor).__name__ == config["image_processor_type"] + "Pil"
    return processor


def opened(path: Path) -> Any:
    from PIL import Image, ImageOps

    return ImageOps.exif_transpose(Image.open(path))


def test_every_format_and_case_is_shipped() -> None:
    from PIL import Image

    seen = {(im.format, im.mode) for im in map(Image.open, PICTURES)}
    assert {f for f, _ in seen} == set(images.FORMATS)
    assert {"RGB", "RGBA", "L", "P"} <= {m for _, m in seen}
    assert all(p.stat().st_size < 20_000 for p in PICTURES)


def test_the_script_rewrites_the_images_byte_for_byte(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_images", FOLDER / "make_images.py")
    assert spec is not None and spec.loader is not None
    script: ModuleType = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    written = script.write(tmp_path)
    assert sorted(p.name for p in written) == [p.name for p in PICTURES]
    for path in PICTURES:
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.parametrize("name", CONFIGS)
def test_pixel_values_equal_transformers_for_each_image(name: str, tmp_path: Path) -> None:
    config = CONFIGS[name]
    processor = reference(config, tmp_path)
    for path in PICTURES:
        theirs = processor(images=[opened(path)], return_tensors="np")
        ours = images.pixel_values([path], config)
        # Gemma 3's processor also counts its pan-and-scan crops: none, as configured
        extra = set(theirs) - set(ours)
        assert set(ours) <= set(theirs) and extra <= {"num_crops"}, path.name
        assert all(np.asarray(theirs[k]).sum() == 0 for k in extra), path.name
        for key, value in ours.items():
            expected = np.asarray(theirs[key])
            assert value.shape == expected.shape, (path.name, key)
            assert value.dtype == expected.dtype, (path.name, key)
            assert np.abs(value - expected).max() <= 1e-6, (path.name, key)


@pytest.mark.parametrize("name", CONFIGS)
def test_a_batch_of_every_image_equals_transformers(name: str, tmp_path: Path) -> None:
    config = CONFIGS[name]
    theirs = reference(config, tmp_path)(images=list(map(opened, PICTURES)), return_tensors="np")
    ours = images.pixel_values(PICTURES, config)
    np.testing.assert_allclose(ours["pixel_values"], theirs["pixel_values"], rtol=0, atol=1e-6)
    if "image_grid_thw" in theirs:
        assert ours["image_grid_thw"].tolist() == theirs["image_grid_thw"].tolist()
        assert len(ours["pixel_values"]) == ours["image_grid_thw"].prod(axis=1).sum()


def test_qwen_grids_cover_each_branch_of_smart_resize() -> None:
    """37x91 is grown to min_pixels, 200x120 kept near its size or shrunk to
    max_pixels; the EXIF-rotated arrow is portrait."""
    shrinking = CONFIGS["qwen2.5-vl-shrinking"]
    grids = {
        p.name: images.pixel_values([p], shrinking)["image_grid_thw"].tolist()[0] for p in PICTURES
    }
    big = images.pixel_values([FOLDER / "square_200x120.jpg"], QWEN)["image_grid_thw"]
    assert big.tolist() == [[1, 8, 14]]
    assert grids["square_200x120.jpg"] == [1, 6, 10]
    assert grids["stripes_37x91.png"] == [1, 8, 4]
    assert grids["arrow_48x32_exif6.jpg"] == [1, 6, 4]


# HuggingFaceTB/SmolVLM-Instruct's preprocessor_config.json, and the tiny Idefics3's
# (tinyhub/vlm.py: SmolVLM's at 32-pixel crops and a longest edge of 2 crops), also
# without splitting
SMOLVLM = {
    "image_processor_type": "Idefics3ImageProcessor",
    "do_convert_rgb": True,
    "do_image_splitting": True,
    "do_normalize": True,
    "do_pad": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "max_image_size": {"longest_edge": 384},
    "resample": 1,
    "rescale_factor": 0.00392156862745098,
    "size": {"longest_edge": 1536},
}
TINY_IDEFICS3 = {**SMOLVLM, "max_image_size": {"longest_edge": 32}, "size": {"longest_edge": 64}}
IDEFICS3 = {
    "smolvlm": SMOLVLM,
    "tiny": TINY_IDEFICS3,
    "unsplit": {**TINY_IDEFICS3, "do_image_splitting": False},
}


@pytest.mark.parametrize("name", IDEFICS3)
def test_idefics3_crops_grids_and_masks_equal_transformers(name: str, tmp_path: Path) -> None:
    """Each image alone and all of them as one batch (padded to the most crops, as
    the processor pads): pixel values within 1e-6 (they are equal), the pixel masks and
    each image's split grid equal."""
    config = IDEFICS3[name]
    processor = reference(config, tmp_path)
    # SmolVLM's own sizes make up to 17 crops of 384 x 384 an image (seconds each on
    # a loaded 2-core host): the tall stripes alone, 4 x 2 crops and the global view
    smol = [p for p in PICTURES if p.name == "stripes_37x91.png"]
    pictures = smol if name == "smolvlm" else PICTURES
    for path in pictures if name != "smolvlm" else ():
        theirs = processor(images=[opened(path)], return_tensors="np", return_row_col_info=True)
        ours = images.pixel_values([path], config)
        assert ours["pixel_values"].shape == theirs["pixel_values"].shape, path.name
        assert np.abs(ours["pixel_values"] - theirs["pixel_values"]).max() <= 1e-6, path.name
        assert np.array_equal(ours["pixel_attention_mask"], theirs["pixel_attention_mask"])
        rows_cols = [theirs["rows"][0][0], theirs["cols"][0][0]]
        assert ours["rows_cols"].tolist() == [rows_cols], path.name
    batch = [[opened(p)] for p in pictures]
    theirs = processor(images=batch, return_tensors="np", return_row_col_info=True)
    ours = images.pixel_values(pictures, config)
    np.testing.assert_allclose(ours["pixel_values"], theirs["pixel_values"], rtol=0, atol=1e-6)
    assert np.array_equal(ours["pixel_attention_mask"], theirs["pixel_attention_mask"])
    assert ours["rows_cols"].tolist() == [
        [r[0], c[0]] for r, c in zip(theirs["rows"], theirs["cols"], strict=True)
    ]
    grids = {p.name: g for p, g in zip(pictures, ours["rows_cols"].tolist(), strict=True)}
    if name == "tiny":  # the tall stripes split 2 x 1, the others 2 x 2: crops vary
        assert grids["stripes_37x91.png"] == [2, 1] and grids["circle_64x48.png"] == [2, 2]
    if name == "smolvlm":
        assert grids["stripes_37x91.png"] == [4, 2]


def test_load_is_transformers_load_image_but_composites_alpha_on_white() -> None:
    from transformers.image_utils import load_image

    for path in PICTURES:
        ours = np.asarray(images.load(path))
        plain = np.asarray(load_image(str(path)))
        if path.name.startswith("translucent"):
            # the clear corner is black under its alpha: load_image keeps the black
            assert ours[59, 0].tolist() == [255, 255, 255]
            assert plain[59, 0].tolist() == [0, 0, 0]
        else:
            assert np.array_equal(ours, plain), path.name
    assert images.load(FOLDER / "arrow_48x32_exif6.jpg").size == (32, 48)


def test_an_animation_gives_its_first_frame() -> None:
    picture = np.asarray(images.load(FOLDER / "blink_32x24.gif"))
    assert picture[12, 16].tolist() == [255, 255, 255]  # frame 0: a white dot on purple
    assert picture[0, 0].tolist() == [90, 30, 140]


# ------------------------------------------------------------------ hostile files


def png_header(width: int, height: int) -> bytes:
    """A PNG of only its signature, IHDR (8-bit RGB) and IEND: a size claim, no pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def refused(path: Path) -> str:
    with pytest.raises(BundleError) as caught:
        images.load(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message
    return message


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "camera.png"
    os.mkfifo(fifo)
    messages: list[str] = []
    worker = threading.Thread(target=lambda: messages.append(refused(fifo)), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "load() blocked on a FIFO"
    assert messages == [f"image {fifo} is not a regular file"]


def test_a_directory_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "album.png"
    folder.mkdir()
    assert refused(folder) == f"image {folder} is not a regular file"


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    assert "No such file" in refused(tmp_path / "gone.png")


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    assert refused(empty) == f"image {empty} is empty"


def test_text_named_png_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "notes.png"
    text.write_text("these are not pixels\n" * 20)
    assert "is not a PNG, JPEG, WEBP, GIF, BMP file" in refused(text)


def test_a_format_outside_the_five_is_refused(tmp_path: Path) -> None:
    from PIL import Image

    tiff = tmp_path / "scan.png"
    Image.new("RGB", (8, 8)).save(tiff, format="TIFF")
    assert "is not a PNG, JPEG, WEBP, GIF, BMP file" in refused(tiff)


@pytest.mark.parametrize("name", ["circle_64x48.png", "square_200x120.jpg"])
def test_a_truncated_file_is_refused(name: str, tmp_path: Path) -> None:
    whole = (FOLDER / name).read_bytes()
    cut = tmp_path / name
    cut.write_bytes(whole[: len(whole) // 2])
    assert "is truncated or corrupt" in refused(cut)


def test_a_header_claiming_ten_gigapixels_is_refused_undecoded(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_header(100_000, 100_000))
    assert bomb.stat().st_size < 100
    assert "claims more than 40,000,000 pixels" in refused(bomb)


def test_a_gif_whose_first_frame_grows_the_canvas_is_refused_undecoded(tmp_path: Path) -> None:
    """A 10x10 screen, then a 60000x60000 frame descriptor: the size appears only as
    PIL reads the first frame's header, inside Image.open."""
    screen = b"GIF89a" + struct.pack("<HHBBB", 10, 10, 0, 0, 0)
    frame = b"," + struct.pack("<HHHHB", 0, 0, 60_000, 60_000, 0) + b"\x02\x02\x4c\x01\x00;"
    bomb = tmp_path / "grows.gif"
    bomb.write_bytes(screen + frame)
    assert "claims more than 40,000,000 pixels" in refused(bomb)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_a_header_just_over_the_cap_is_refused_by_its_size(tmp_path: Path) -> None:
    """48 megapixels: past MAX_PIXELS but under PIL's own error (twice its limit), so
    the refusal is the size check's, made before load()."""
    big = tmp_path / "big.png"
    big.write_bytes(png_header(8000, 6000))
    assert refused(big) == f"image {big} is 8000x6000 pixels; at most 40,000,000 are decoded"


def test_an_unknown_processor_is_refused_by_name() -> None:
    with pytest.raises(BundleError, match="'LlavaNextImageProcessor'; this runtime preprocesses"):
        images.pixel_values(PICTURES[:1], {"image_processor_type": "LlavaNextImageProcessor"})


def test_qwen_refuses_an_image_narrower_than_1_to_200(tmp_path: Path) -> None:
    from PIL import Image

    thread = tmp_path / "thread.png"
    Image.new("RGB", (402, 2), "white").save(thread)
    with pytest.raises(BundleError, match="402x2 image is too narrow"):
        images.pixel_values([thread], QWEN)


# OpenGVLab/InternVL3-1B-hf's preprocessor_config.json (GotOcr2ImageProcessor at 448-px
# tiles, saved with crop_to_patches false, which InternVLProcessor turns on), the tiny
# InternVL's (tinyhub/vlm.py: 32-px tiles, at most 6), and a processor of another class,
# for which the saved false holds: one tile a picture
INTERNVL3 = {
    "image_processor_type": "GotOcr2ImageProcessor",
    "processor_class": "InternVLProcessor",
    "crop_to_patches": False,
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.485, 0.456, 0.406],
    "image_std": [0.229, 0.224, 0.225],
    "max_patches": 12,
    "min_patches": 1,
    "resample": 3,
    "rescale_factor": 0.00392156862745098,
    "size": {"height": 448, "width": 448},
}
TINY_INTERNVL = {**INTERNVL3, "max_patches": 6, "size": {"height": 32, "width": 32}}
GOT_OCR2 = {
    "internvl3": INTERNVL3,
    "tiny": TINY_INTERNVL,
    "uncropped": {**TINY_INTERNVL, "processor_class": "GotOcr2Processor"},
}


@pytest.mark.parametrize("name", GOT_OCR2)
def test_internvl_tiles_and_grids_equal_transformers(name: str, tmp_path: Path) -> None:
    """Each image alone, and all of them as one batch (transformers concatenates every
    image's tiles; the runtime pads each image's to the most): pixel values within 1e-6
    (they are equal) and each image's tile count."""
    config = GOT_OCR2[name]
    processor = reference(config, tmp_path)
    cropped = config["processor_class"] == "InternVLProcessor"
    # InternVL3's own sizes make up to 13 tiles of 448 x 448 (seconds an image on a
    # loaded 2-core host): the tall stripes alone, 5 x 2 tiles and the thumbnail
    real = [p for p in PICTURES if p.name == "stripes_37x91.png"]
    pictures = real if name == "internvl3" else PICTURES
    theirs = processor(images=[opened(p) for p in pictures], crop_to_patches=cropped)
    ours = images.pixel_values(pictures, config)
    counts = [int(n) for n in theirs["num_patches"]]
    rows_cols = ours["rows_cols"].tolist()
    assert [r * c + 1 if r * c else 1 for r, c in rows_cols] == counts
    ends = np.cumsum([0, *counts])
    for i, path in enumerate(pictures):
        tiles = np.stack(theirs["pixel_values"][ends[i] : ends[i + 1]])
        assert np.abs(ours["pixel_values"][i, : counts[i]] - tiles).max() <= 1e-6, path.name
        assert not ours["pixel_values"][i, counts[i] :].any()  # the batch's padding tiles
        alone = images.pixel_values([path], config)["pixel_values"][0]
        assert np.array_equal(alone, ours["pixel_values"][i, : counts[i]]), path.name
    grids = {p.name: g for p, g in zip(pictures, rows_cols, strict=True)}
    if name == "tiny":  # the tall stripes 3 x 1, the circle 2 x 3, the square checker alone
        assert grids["stripes_37x91.png"] == [3, 1] and grids["circle_64x48.png"] == [2, 3]
        assert grids["checker_40x40.bmp"] == [0, 0]
    if name == "internvl3":
        assert grids == {"stripes_37x91.png": [5, 2]}
    if name == "uncropped":
        assert set(counts) == {1}

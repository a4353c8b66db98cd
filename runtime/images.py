"""Images for vision-language bundles: an image file read without trusting it, and the
pixel values the checkpoint's own image processor would make of it, in numpy.

`load` decodes nothing before it knows what it decodes. The path must be a regular
file (stat first, so a FIFO is never opened and waited on), non-empty, one of five
formats by PIL's header sniffing (`Image.open` reads the header only), and at most
MAX_PIXELS by the size the header claims; only then are the pixels decoded, and a
truncated or corrupt file is a BundleError, not a traceback. An animated GIF or WebP
gives its first frame. The picture comes back upright (the EXIF orientation applied,
as transformers' `load_image` does) and RGB, transparency composited onto white as
the processors' `do_convert_rgb` does (`load_image` instead drops the alpha: the
processors' rule is the one a model was trained with, for PIL inputs).

`preprocess` reproduces transformers 5.24's PIL-backend processors (`backend="pil"`,
not the torchvision one, whose resize filter differs) step for step, for the
`preprocessor_config.json` of four families; tests/builds/test_images.py compares
every shipped test image with transformers' output:

  CLIPImageProcessor     (LLaVA) shortest edge to `size`, center crop, rescale, normalize
  SiglipImageProcessor   resize to height x width, rescale, normalize
  Gemma3ImageProcessor   (Gemma 3) SigLIP's steps, bilinear; pan-and-scan crops refused
  Qwen2VLImageProcessor  (Qwen2-VL, Qwen2.5-VL) smart_resize to a multiple of
                         patch_size * merge_size within min/max pixels, rescale,
                         normalize, then flattened patches [n, C * T * P * P]
  Idefics3ImageProcessor (Idefics3, SmolVLM) longest edge to `size`, up to multiples of
                         the crop size, split into crops of max_image_size row by row
                         plus the whole picture resized to one crop (the global view),
                         rescale, normalize; images padded with zero crops to the most
                         crops of any image, and a pixel mask (1: a real pixel)
  GotOcr2ImageProcessor  (InternVL) with crop_to_patches (which InternVLProcessor turns
                         on), the picture resized once to the grid of at most
                         max_patches tiles whose aspect ratio is nearest its own, cut
                         into tiles row by row, plus the whole picture resized to one
                         tile (the thumbnail) when there are several; rescale, normalize

The resize is PIL's own `Image.resize` on the uint8 picture, as transformers does;
rescaling multiplies in float64 and rounds to float32 once, and normalizing is float32
arithmetic, so the values are bit-identical, not merely close.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.format import BundleError

if TYPE_CHECKING:
    from PIL import Image

# A 40-megapixel RGB picture decodes to 120 MB, well past what a vision encoder sees
# (Qwen2.5-VL's own ceiling is 12.8 megapixels) and small enough to hold.
MAX_PIXELS = 40_000_000
FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP")

OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
BICUBIC = 3  # PIL.Image.Resampling.BICUBIC, every family's default

# Each family's class defaults (transformers' models/*/image_processing_pil_*.py): what
# a preprocessor_config.json that leaves a key out gets.
DEFAULTS: dict[str, dict[str, Any]] = {
    "CLIPImageProcessor": {
        "size": {"shortest_edge": 224},
        "crop_size": {"height": 224, "width": 224},
        "do_center_crop": True,
        "image_mean": OPENAI_CLIP_MEAN,
        "image_std": OPENAI_CLIP_STD,
    },
    "SiglipImageProcessor": {
        "size": {"height": 224, "width": 224},
        "do_center_crop": False,
        "image_mean": (0.5, 0.5, 0.5),
        "image_std": (0.5, 0.5, 0.5),
    },
    "Gemma3ImageProcessor": {
        "size": {"height": 224, "width": 224},
        "resample": 2,  # PIL.Image.Resampling.BILINEAR
        "do_center_crop": False,
        "image_mean": (0.5, 0.5, 0.5),
        "image_std": (0.5, 0.5, 0.5),
    },
    "Qwen2VLImageProcessor": {
        "size": {"shortest_edge": 56 * 56, "longest_edge": 28 * 28 * 1280},
        "image_mean": OPENAI_CLIP_MEAN,
        "image_std": OPENAI_CLIP_STD,
        "patch_size": 14,
        "temporal_patch_size": 2,
        "merge_size": 2,
    },
    "Idefics3ImageProcessor": {
        "size": {"longest_edge": 4 * 364},
        "max_image_size": {"longest_edge": 364},
        "resample": 1,  # PIL.Image.Resampling.LANCZOS
        "image_mean": (0.5, 0.5, 0.5),
        "image_std": (0.5, 0.5, 0.5),
        "do_image_splitting": True,
        "do_pad": True,
    },
    "GotOcr2ImageProcessor": {
        "size": {"height": 384, "width": 384},
        "image_mean": OPENAI_CLIP_MEAN,
        "image_std": OPENAI_CLIP_STD,
        "crop_to_patches": False,
        "min_patches": 1,
        "max_patches": 12,
    },
}
# Processors whose own defaults turn the image processor's crop_to_patches on, whatever
# its preprocessor_config.json saved (InternVL3-1B-hf saves false): their images_kwargs.
CROPS_TO_PATCHES = ("InternVLProcessor",)
# Idefics3's ceiling on either side after the first resize (its MAX_IMAGE_SIZE).
IDEFICS3_MAX_SIDE = 4096
COMMON = {
    "do_resize": True,
    "resample": BICUBIC,
    "do_rescale": True,
    "rescale_factor": 1 / 255,
    "do_normalize": True,
    "do_convert_rgb": True,
}


def load(path: Path | str) -> Image.Image:
    """The RGB picture in the file at `path`, or a BundleError naming the file and
    what is wrong with it, raised before any pixel is decoded where the header
    suffices to tell."""
    from PIL import Image, ImageOps

    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as exc:
        raise BundleError(f"cannot read image {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise BundleError(f"image {path} is not a regular file")
    if st.st_size == 0:
        raise BundleError(f"image {path} is empty")
    # PIL's own check runs inside Image.open, on the header's size and on a GIF's first
    # frame where it grows the canvas; past twice this limit it raises, between once and
    # twice it warns and the size check below refuses. Its default is 89 megapixels.
    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    try:
        # O_NONBLOCK: were the path swapped for a FIFO since the stat, opening it
        # still returns at once, and the fstat below refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise BundleError(f"cannot read image {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BundleError(f"image {path} is not a regular file")
        try:
            image = Image.open(file, formats=FORMATS)
        except Image.DecompressionBombError:
            raise BundleError(
                f"image {path} claims more than {MAX_PIXELS:,} pixels; refused undecoded"
            ) from None
        except (OSError, SyntaxError, ValueError):
            raise BundleError(
                f"image {path} is not a {', '.join(FORMATS)} file (its header is none of them)"
            ) from None
        width, height = image.size
        if width * height > MAX_PIXELS:
            raise BundleError(
                f"image {path} is {width}x{height} pixels; at most {MAX_PIXELS:,} are decoded"
            )
        try:
            image.load()  # the first frame of an animation: a fresh open is at frame 0
            upright = ImageOps.exif_transpose(image)
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise BundleError(f"image {path} is truncated or corrupt: {exc}") from None
    return rgb(upright)


def rgb(image: Image.Image) -> Image.Image:
    """`image` as RGB, transparency composited onto white: transformers'
    `convert_to_rgb`, which every processor here applies first (`do_convert_rgb`)."""
    from PIL import Image

    transparent = image.info.get("transparency") is not None
    if image.mode == "RGB" and not transparent:  # load's pictures already are
        return image
    if "A" in image.getbands() or transparent:
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")


def pixel_values(paths: Sequence[Path], config: dict[str, Any]) -> dict[str, np.ndarray]:
    """The model inputs for the images at `paths`, as the processor `config`
    (a preprocessor_config.json) describes: `pixel_values` [n, 3, H, W] float32, or
    for Qwen2-VL the patches of all images [sum of patches, C * T * P * P] and
    `image_grid_thw` [n, 3] int64."""
    pictures = [load(p) for p in paths]
    if family(config) == "Idefics3ImageProcessor":
        return idefics3_pixel_values(pictures, settings(config))
    if family(config) == "GotOcr2ImageProcessor":
        return tiled_pixel_values(pictures, settings(config))
    if family(config) == "Qwen2VLImageProcessor":
        opts = settings(config)
        found = [_qwen2_vl(p, opts) for p in pictures]
        return {
            "pixel_values": np.concatenate([patches for patches, _ in found]),
            "image_grid_thw": np.array([grid for _, grid in found], dtype=np.int64),
        }
    return {"pixel_values": np.stack([preprocess(p, config) for p in pictures])}


def family(config: dict[str, Any]) -> str:
    """The processor family `config` names; a BundleError for one this runtime lacks.
    A "...Fast" or "...Pil" class saves the same settings, and is read the same way."""
    named = config.get("image_processor_type")
    base = named.removesuffix("Fast").removesuffix("Pil") if isinstance(named, str) else ""
    if base not in DEFAULTS:
        raise BundleError(
            f"preprocessor_config.json names image_processor_type {named!r}; this runtime "
            f"preprocesses for {', '.join(DEFAULTS)}"
        )
    return base


def settings(config: dict[str, Any]) -> dict[str, Any]:
    """`config` over its family's defaults, sizes in dict form; a BundleError for an
    option this runtime does not reproduce."""
    kind = family(config)
    merged = {**COMMON, **DEFAULTS[kind], **{k: v for k, v in config.items() if v is not None}}
    if isinstance(merged["size"], int):  # an old config's int: CLIP's and SigLIP's short edge
        merged["size"] = {"shortest_edge": merged["size"]}
    if isinstance(merged.get("crop_size"), int):
        merged["crop_size"] = {"height": merged["crop_size"], "width": merged["crop_size"]}
    if kind == "GotOcr2ImageProcessor" and merged.get("processor_class") in CROPS_TO_PATCHES:
        merged["crop_to_patches"] = True
    if kind == "Qwen2VLImageProcessor":  # min/max_pixels override size, as its __init__ does
        size = dict(merged["size"])
        if "min_pixels" in merged:
            size["shortest_edge"] = merged["min_pixels"]
        if "max_pixels" in merged:
            size["longest_edge"] = merged["max_pixels"]
        merged["size"] = size
        if not merged["do_resize"]:  # patches need sides that are multiples of patch * merge
            raise BundleError("preprocessor_config.json: Qwen2-VL needs do_resize")
    # Idefics3 pads images to one crop count, which its pixel mask marks (reproduced)
    padded = ("do_pad",) if kind == "Idefics3ImageProcessor" else ()
    for option in ("do_pad", "do_reduce_labels", "use_square_size", "do_pan_and_scan"):
        if merged.get(option) and option not in padded:
            raise BundleError(f"preprocessor_config.json sets {option}; this runtime lacks it")
    if not merged["do_convert_rgb"]:
        raise BundleError(
            "preprocessor_config.json sets do_convert_rgb to false; this runtime reads every "
            "image as RGB"
        )
    if merged["resample"] not in range(6):
        raise BundleError(f"preprocessor_config.json: resample {merged['resample']!r} is not 0-5")
    return merged


def preprocess(image: Image.Image, config: dict[str, Any]) -> np.ndarray:
    """One picture's pixel values as the processor `config` describes: float32
    [3, H, W] for CLIP and SigLIP, the flattened patches [n, C * T * P * P] for
    Qwen2-VL (its grid is `pixel_values`' image_grid_thw)."""
    opts = settings(config)
    if family(config) == "Qwen2VLImageProcessor":
        return _qwen2_vl(image, opts)[0]
    if family(config) == "Idefics3ImageProcessor":
        return idefics3_crops(image, opts)[0]
    if family(config) == "GotOcr2ImageProcessor":
        return got_ocr2_tiles(image, opts)[0]
    picture = rgb(image)
    if opts["do_resize"]:
        picture = picture.resize(_target(picture.size, opts["size"]), resample=opts["resample"])
    pixels = np.moveaxis(np.asarray(picture), -1, 0)
    if opts["do_center_crop"]:
        pixels = _center_crop(pixels, opts["crop_size"])
    return _rescale_normalize(pixels, opts)


def _target(size: tuple[int, int], wanted: dict[str, int]) -> tuple[int, int]:
    """PIL's (width, height) to resize a `size` (width, height) picture to:
    transformers' get_resize_output_image_size for a shortest edge (the long edge
    truncated, not rounded), or height x width as given."""
    width, height = size
    if set(wanted) == {"shortest_edge"}:
        short, long = sorted((width, height))
        edge = wanted["shortest_edge"]
        grown = int(edge * long / short)
        return (edge, grown) if width <= height else (grown, edge)
    if set(wanted) == {"height", "width"}:
        return wanted["width"], wanted["height"]
    raise BundleError(
        f"preprocessor_config.json: size {wanted} is not {{shortest_edge}} or {{height, width}}"
    )


def _center_crop(pixels: np.ndarray, crop: dict[str, int]) -> np.ndarray:
    """The centred crop_size window of [C, H, W] pixels, the offset floored."""
    _, height, width = pixels.shape
    top, left = (height - crop["height"]) // 2, (width - crop["width"]) // 2
    if top < 0 or left < 0:  # transformers pads with zeros here; no real config needs it
        raise BundleError(
            f"preprocessor_config.json: crop_size {crop} exceeds the resized {height}x{width}"
        )
    return pixels[:, top : top + crop["height"], left : left + crop["width"]]


def _rescale_normalize(pixels: np.ndarray, opts: dict[str, Any]) -> np.ndarray:
    """transformers' rescale (float64 product, one rounding to float32) then normalize
    (float32 arithmetic, per channel), each when the config asks."""
    if opts["do_rescale"]:
        values = (pixels.astype(np.float64) * opts["rescale_factor"]).astype(np.float32)
    else:
        values = pixels.astype(np.float32)
    if opts["do_normalize"]:
        mean = np.asarray(opts["image_mean"], dtype=np.float32).reshape(-1, 1, 1)
        std = np.asarray(opts["image_std"], dtype=np.float32).reshape(-1, 1, 1)
        values = (values - mean) / std
    return values


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    """Qwen2-VL's (height, width): each a multiple of `factor`, their product within
    [min_pixels, max_pixels], the aspect ratio kept as nearly as that allows. Python's
    round (half to even), as transformers uses."""
    if max(height, width) / min(height, width) > 200:
        raise BundleError(
            f"a {width}x{height} image is too narrow for Qwen2-VL: its aspect ratio is over 200"
        )
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _qwen2_vl(image: Image.Image, opts: dict[str, Any]) -> tuple[np.ndarray, tuple[int, int, int]]:
    """Qwen2VLImageProcessor's patches and (t, h, w) grid for one picture. A still
    image fills its temporal_patch_size frames with copies of itself."""
    patch, merge, frames = opts["patch_size"], opts["merge_size"], opts["temporal_patch_size"]
    picture = rgb(image)
    size = opts["size"]
    height, width = smart_resize(
        picture.height, picture.width, patch * merge, size["shortest_edge"], size["longest_edge"]
    )
    picture = picture.resize((width, height), resample=opts["resample"])
    values = _rescale_normalize(np.moveaxis(np.asarray(picture), -1, 0), opts)
    channels, height, width = values.shape
    grid_h, grid_w = height // patch, width // patch
    blocks = values.reshape(
        channels, grid_h // merge, merge, patch, grid_w // merge, merge, patch
    ).transpose(1, 4, 2, 5, 0, 3, 6)  # (gh, gw, mh, mw, C, ph, pw): merge windows together
    repeated = np.broadcast_to(
        blocks[:, :, :, :, :, None], (*blocks.shape[:5], frames, patch, patch)
    )
    flat = repeated.reshape(grid_h * grid_w, channels * frames * patch * patch)
    return np.ascontiguousarray(flat), (1, grid_h, grid_w)


def idefics3_pixel_values(
    pictures: Sequence[Image.Image], opts: dict[str, Any]
) -> dict[str, np.ndarray]:
    """Idefics3ImageProcessor's inputs for one image per prompt: `pixel_values` [n,
    crops, 3, S, S] float32 (each image's crops, then zero crops up to the most any image
    has, as its do_pad pads a batch), `pixel_attention_mask` [n, crops, S, S] int64 (1 on
    a real crop's pixels) and `rows_cols` [n, 2] int64, each image's split grid (0, 0:
    not split), which its processor's prompt expansion reads."""
    found = [idefics3_crops(p, opts) for p in pictures]
    most = max(len(crops) for crops, _ in found)
    side = found[0][0].shape[-1]
    values = np.zeros((len(found), most, 3, side, side), np.float32)
    mask = np.zeros((len(found), most, side, side), np.int64)
    for i, (crops, _) in enumerate(found):
        values[i, : len(crops)] = crops
        mask[i, : len(crops)] = 1  # every crop is S x S: no pixel of a real crop is padding
    grid = np.array([rows_cols for _, rows_cols in found], dtype=np.int64)
    return {"pixel_values": values, "pixel_attention_mask": mask, "rows_cols": grid}


def idefics3_crops(image: Image.Image, opts: dict[str, Any]) -> tuple[np.ndarray, tuple[int, int]]:
    """One picture's crops [k, 3, S, S] and its (rows, cols) grid, as
    Idefics3ImageProcessorPil makes them: the longest edge resized to size's (the other
    side by the aspect ratio, truncated, then made even), then with splitting each side
    up to a multiple of S = max_image_size, cut into S x S crops row by row, and the
    picture resized to S x S last; without splitting, the picture resized to S x S. Each
    resize is PIL's on the uint8 picture of the step before."""
    side = opts["max_image_size"]["longest_edge"]
    picture = rgb(image)
    if opts["do_resize"]:
        picture = picture.resize(_idefics3_size(picture, opts["size"]), resample=opts["resample"])
    rows = cols = 0
    if opts["do_image_splitting"]:
        picture = picture.resize(_crop_multiple(picture, side), resample=opts["resample"])
        frames = [np.moveaxis(np.asarray(picture), -1, 0)]
        if picture.height > side or picture.width > side:
            rows, cols = picture.height // side, picture.width // side
            whole = frames[0]
            frames = [
                whole[:, r * side : (r + 1) * side, c * side : (c + 1) * side]
                for r in range(rows)
                for c in range(cols)
            ]
            frames.append(_chw(picture.resize((side, side), resample=opts["resample"])))
    else:
        frames = [_chw(picture.resize((side, side), resample=opts["resample"]))]
    crops = np.stack([_rescale_normalize(f, opts) for f in frames])
    return crops, (rows, cols)


def _chw(picture: Image.Image) -> np.ndarray:
    return np.moveaxis(np.asarray(picture), -1, 0)


def _idefics3_size(picture: Image.Image, size: dict[str, int]) -> tuple[int, int]:
    """PIL's (width, height) for Idefics3's first resize: the longest edge to
    size["longest_edge"] (up or down), the other by the aspect ratio, truncated and made
    even; then both kept within IDEFICS3_MAX_SIDE. A {height, width} size is taken as
    given."""
    if set(size) == {"height", "width"}:
        return size["width"], size["height"]
    if "longest_edge" not in size:
        raise BundleError(f"preprocessor_config.json: size {size} has no longest_edge")
    width, height = picture.size
    aspect = width / height
    if width >= height:
        width = size["longest_edge"]
        height = int(width / aspect)
        height += height % 2
    else:
        height = size["longest_edge"]
        width = int(height * aspect)
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    aspect = width / height
    if width >= height and width > IDEFICS3_MAX_SIDE:
        width, height = IDEFICS3_MAX_SIDE, int(IDEFICS3_MAX_SIDE / aspect)
    elif height > width and height > IDEFICS3_MAX_SIDE:
        height, width = IDEFICS3_MAX_SIDE, int(IDEFICS3_MAX_SIDE * aspect)
    return max(width, 1), max(height, 1)


def _crop_multiple(picture: Image.Image, side: int) -> tuple[int, int]:
    """PIL's (width, height) for Idefics3's resize_for_vision_encoder: the longer side
    up to a multiple of `side`, the other from it by the aspect ratio (truncated), then
    up to a multiple too."""
    width, height = picture.size
    aspect = width / height
    if width >= height:
        width = math.ceil(width / side) * side
        height = math.ceil(int(width / aspect) / side) * side
    else:
        height = math.ceil(height / side) * side
        width = math.ceil(int(height * aspect) / side) * side
    return width, height


def tiled_pixel_values(
    pictures: Sequence[Image.Image], opts: dict[str, Any]
) -> dict[str, np.ndarray]:
    """GotOcr2ImageProcessor's tiles for one image per prompt, laid out as
    idefics3_pixel_values lays crops out: `pixel_values` [n, tiles, 3, S, S] float32 (each
    image's tiles, then zero tiles up to the most any image has; transformers instead
    concatenates every image's tiles, [sum of tiles, 3, S, S]) and `rows_cols` [n, 2]
    int64, each image's tile grid, (0, 0) for a picture that is one tile."""
    found = [got_ocr2_tiles(p, opts) for p in pictures]
    most = max(len(tiles) for tiles, _ in found)
    height, width = found[0][0].shape[-2:]
    values = np.zeros((len(found), most, 3, height, width), np.float32)
    for i, (tiles, _) in enumerate(found):
        values[i, : len(tiles)] = tiles
    grid = np.array([rows_cols for _, rows_cols in found], dtype=np.int64)
    return {"pixel_values": values, "rows_cols": grid}


def got_ocr2_tiles(image: Image.Image, opts: dict[str, Any]) -> tuple[np.ndarray, tuple[int, int]]:
    """One picture's tiles [k, 3, H, W] and its (rows, cols) tile grid, as
    GotOcr2ImageProcessorPil makes them: with crop_to_patches (and max_patches > 1) the
    picture resized to cols x rows tiles (tiled_canvas) and cut row by row, then, when
    that is more than one tile, the picture resized to one tile appended (a thumbnail,
    from the picture itself); otherwise the picture resized to one tile. A one-tile
    picture's grid is (0, 0), as an unsplit Idefics3 picture's is."""
    size = opts["size"]
    height, width = size["height"], size["width"]
    picture = rgb(image)
    if not (opts["crop_to_patches"] and opts["max_patches"] > 1):
        if opts["do_resize"]:
            picture = picture.resize((width, height), resample=opts["resample"])
        return np.stack([_rescale_normalize(_chw(picture), opts)]), (0, 0)
    cols, rows = tiled_canvas(
        (picture.height, picture.width), (height, width), opts["min_patches"], opts["max_patches"]
    )
    whole = _chw(picture.resize((width * cols, height * rows), resample=opts["resample"]))
    frames = [
        whole[:, r * height : (r + 1) * height, c * width : (c + 1) * width]
        for r in range(rows)
        for c in range(cols)
    ]
    if len(frames) == 1:
        return np.stack([_rescale_normalize(frames[0], opts)]), (0, 0)
    frames.append(_chw(picture.resize((width, height), resample=opts["resample"])))
    return np.stack([_rescale_normalize(f, opts) for f in frames]), (rows, cols)


def tiled_canvas(
    size: tuple[int, int], tile: tuple[int, int], least: int, most: int
) -> tuple[int, int]:
    """GotOcr2's get_optimal_tiled_canvas: the (cols, rows) grid of `least` to `most`
    tiles (fewest first) whose aspect ratio is nearest the (height, width) picture's; on
    a tie, the later grid while the picture's area exceeds half the tiles' area."""
    height, width = size
    grids = sorted(
        (
            (cols, rows)
            for cols in range(1, most + 1)
            for rows in range(1, most + 1)
            if least <= cols * rows <= most
        ),
        key=lambda grid: grid[0] * grid[1],
    )
    aspect, area = width / height, width * height
    best, best_diff = (1, 1), float("inf")
    for cols, rows in grids:
        diff = abs(aspect - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and area > 0.5 * tile[0] * tile[1] * cols * rows:
            best = (cols, rows)
    return best


# ---------------------------------------------------------------- video frames

# Qwen2VLVideoProcessor's class defaults (transformers' video_processing_qwen2_vl.py):
# what a checkpoint without video_preprocessor_config.json gets under the keys of its
# preprocessor_config.json, which transformers' AutoVideoProcessor then reads.
VIDEO_DEFAULTS: dict[str, Any] = {
    **COMMON,
    "size": {"shortest_edge": 128 * 28 * 28, "longest_edge": 28 * 28 * 768},
    "image_mean": OPENAI_CLIP_MEAN,
    "image_std": OPENAI_CLIP_STD,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "merge_size": 2,
}
# Qwen3VLVideoProcessor's (video_processing_qwen3_vl.py): it also samples frames at `fps`
# a second of the clip (between min_frames and max_frames), and Qwen3VLProcessor writes
# each frame group's time into the text (stamped: video_pixel_values).
QWEN3_VIDEO_DEFAULTS: dict[str, Any] = {
    **COMMON,
    "size": {"shortest_edge": 128 * 32 * 32, "longest_edge": 32 * 32 * 768},
    "image_mean": (0.5, 0.5, 0.5),
    "image_std": (0.5, 0.5, 0.5),
    "patch_size": 16,
    "temporal_patch_size": 2,
    "merge_size": 2,
    "do_sample_frames": True,
    "fps": 2,
    "num_frames": None,
    "min_frames": 4,
    "max_frames": 768,
    "cap_pixels_per_frame": False,  # None warns and means False in transformers 5.24
    "max_video_tokens": 768,
}
# InternVLVideoProcessor's (video_processing_internvl.py): each frame resized to `size`,
# one tile a frame (InternVLProcessor writes "FrameN: <img>...</img>" a frame).
INTERNVL_VIDEO_DEFAULTS: dict[str, Any] = {
    **COMMON,
    "size": {"height": 384, "width": 384},
    "image_mean": OPENAI_CLIP_MEAN,
    "image_std": OPENAI_CLIP_STD,
    "do_sample_frames": False,
    "do_center_crop": None,
}
QWEN2_VIDEO = (None, "Qwen2VLProcessor", "Qwen2_5_VLProcessor")
QWEN3_VIDEO = "Qwen3VLProcessor"
INTERNVL_VIDEO = "InternVLProcessor"
# which image processor each video processor goes with (the bundle's vision program)
VIDEO_FAMILIES = {
    **dict.fromkeys(QWEN2_VIDEO, "Qwen2VLImageProcessor"),
    QWEN3_VIDEO: "Qwen2VLImageProcessor",
    INTERNVL_VIDEO: "GotOcr2ImageProcessor",
}
# Video containers: kiln decodes none (no codec library at run time); frames come as
# image files, which a user extracts first (ffmpeg -i clip.mp4 -vf fps=2 frame_%03d.png).
CONTAINERS = (".mp4", ".mov", ".mkv", ".webm", ".avi", ".m4v", ".mpg", ".mpeg", ".flv", ".wmv")
# A video's frames without their clip's timing are taken at transformers' default
# (VideoMetadata.sampled_fps without an fps): what second_per_grid_ts (Qwen2.5-VL) and
# the frame groups' times (Qwen3-VL) are computed from.
DEFAULT_FPS = 24.0


def video_pixel_values(
    videos: Sequence[Sequence[Path]],
    config: dict[str, Any],
    video_config: dict[str, Any] | None = None,
    fps: float = DEFAULT_FPS,
) -> dict[str, Any]:
    """The model inputs for videos given as their frames' image files, taken `fps` frames
    a second, as transformers 5.24's video processor makes them of the same frames (a
    list of pictures a video; its settings from `video_config`, the checkpoint's
    video_preprocessor_config.json, else from `config`, as AutoVideoProcessor falls back
    to preprocessor_config.json): each video's `pixel_values_videos` patches [t * h * w,
    C * T * P * P] concatenated, and `video_grid_thw` [videos, 3] int64. Its steps, which
    are torchvision's, not the image processor's PIL ones:

      Qwen3-VL only: frames sampled at the processor's fps (sample_frames: uniformly
      over the clip, between min_frames and max_frames), and each frame group's time,
      the mean of its frames' (Qwen3VLProcessor._calculate_timestamps), in
      `video_timestamps` (a list of t seconds a video);
      smart_resize of the frames' (shared) size within the pixel budget (Qwen3-VL's
      counts the frames in it), then torch.nn.functional.interpolate(uint8, bicubic,
      antialias=True): PIL's kernel (a = -0.5) with torch's int16 fixed-point weights,
      width first, each pass rounded and clamped to uint8 (resize_uint8; no pass where a
      side is unchanged);
      rescale and normalize fused as (x - mean * 255) / (std * 255) in float32;
      frames grouped by temporal_patch_size, the last frame repeated to fill a group.
    """
    opts = video_settings(config, video_config)
    if opts["tiles"]:
        raise BundleError("InternVL's video frames are tiles (frame_tiles), not patches")
    patches, grids, stamps = [], [], []
    for frames in videos:
        made, grid, times = _video(frames, opts, fps)
        patches.append(made)
        grids.append(grid)
        stamps.append(times)
    out: dict[str, Any] = {
        "pixel_values_videos": np.concatenate(patches),
        "video_grid_thw": np.array(grids, dtype=np.int64),
    }
    if opts["stamped"]:
        out["video_timestamps"] = stamps
    return out


def video_settings(
    config: dict[str, Any], video_config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A checkpoint's video processor settings: its video processor config (else its
    image processor's, as AutoVideoProcessor falls back to it) over the video processor
    class's defaults, with `stamped` (Qwen3-VL's, which samples frames and stamps their
    times in the text) and `tiles` (InternVL's, a resized frame a tile). Qwen2-VL's
    __init__ reads min/max_pixels over size. A BundleError for other processors and for
    settings not reproduced."""
    source = video_config if video_config is not None else config
    kind = config.get("processor_class") or source.get("processor_class")
    wanted = VIDEO_FAMILIES.get(kind)
    named = family(config)
    if wanted != named:
        raise BundleError(
            "video input applies to Qwen2-VL, Qwen2.5-VL, Qwen3-VL and InternVL bundles; "
            f"this one's processor is {kind or named!r}"
        )
    stamped, tiles = kind == QWEN3_VIDEO, kind == INTERNVL_VIDEO
    defaults = (
        QWEN3_VIDEO_DEFAULTS if stamped else INTERNVL_VIDEO_DEFAULTS if tiles else VIDEO_DEFAULTS
    )
    # fps and num_frames set to null mean "not by fps", "not a count" (sample_frames)
    kept = ("fps", "num_frames") if stamped else ()
    merged = {**defaults, **{k: v for k, v in source.items() if v is not None or k in kept}}
    size = dict(merged["size"])
    if kind in QWEN2_VIDEO and "min_pixels" in merged:
        size["shortest_edge"] = merged["min_pixels"]
    if kind in QWEN2_VIDEO and "max_pixels" in merged:
        size["longest_edge"] = merged["max_pixels"]
    merged["size"] = size
    merged["stamped"], merged["tiles"] = stamped, tiles
    if merged["resample"] != BICUBIC or not (merged["do_rescale"] and merged["do_normalize"]):
        raise BundleError(
            "the video processor config: video frames are reproduced for bicubic resizing "
            "with rescale and normalize on (the Qwen-VL and InternVL processors' settings)"
        )
    if stamped and merged["num_frames"] is not None and merged["fps"] is not None:
        raise BundleError(
            "the video processor config sets both num_frames and fps, which "
            "Qwen3VLVideoProcessor refuses as mutually exclusive"
        )
    if tiles and (merged["do_sample_frames"] or merged["do_center_crop"]):
        raise BundleError(
            "the video processor config sets do_sample_frames or do_center_crop, which "
            "this runtime does not reproduce for InternVL: every frame is kept and resized"
        )
    return merged


def frame_tiles(
    videos: Sequence[Sequence[Path]], config: dict[str, Any], video_config: dict[str, Any] | None
) -> list[np.ndarray]:
    """InternVLVideoProcessor's pixel_values_videos for videos given as their frames'
    image files: each video's frames [frames, 3, H, W] float32, every frame kept,
    resized to the video processor's size as torchvision resizes uint8 (resize_uint8)
    and rescaled and normalized in one step (the fused float32 arithmetic)."""
    opts = video_settings(config, video_config)
    if not opts["tiles"]:
        raise BundleError("frame tiles are InternVL's video input")
    size = opts["size"]
    made = []
    for paths in videos:
        frames = np.stack([np.moveaxis(np.asarray(f), -1, 0) for f in video_frames(paths)])
        made.append(_fused_normalize(resize_uint8(frames, size["height"], size["width"]), opts))
    return made


def _fused_normalize(frames: np.ndarray, opts: dict[str, Any]) -> np.ndarray:
    """[..., C, H, W] uint8 frames rescaled and normalized as the video processors'
    torchvision path does it: (x - mean * 255) / (std * 255) in float32."""
    mean = np.asarray(opts["image_mean"], np.float32) * np.float32(1 / opts["rescale_factor"])
    std = np.asarray(opts["image_std"], np.float32) * np.float32(1 / opts["rescale_factor"])
    return (frames.astype(np.float32) - mean.reshape(-1, 1, 1)) / std.reshape(-1, 1, 1)


def sampled_frames(total: int, opts: dict[str, Any], fps: float) -> np.ndarray:
    """The indices of the frames Qwen3VLVideoProcessor.sample_frames keeps of a clip of
    `total` frames taken `fps` a second: opts' fps a second of it (at least min_frames,
    at most max_frames and all of them), or num_frames, spread evenly from the first to
    the last; all of them where do_sample_frames is off."""
    if not opts["do_sample_frames"]:
        return np.arange(total)
    wanted = opts["num_frames"]
    if wanted is None and opts["fps"] is not None:
        wanted = int(total / fps * opts["fps"])
        wanted = min(max(wanted, opts["min_frames"]), opts["max_frames"], total)
    if wanted is None:
        wanted = min(max(total, opts["min_frames"]), opts["max_frames"])
    return np.linspace(0, total - 1, wanted).round().astype(int)


def frame_group_times(indices: Sequence[int], fps: float, group: int) -> list[float]:
    """Each frame group's time in seconds, the mean of its first and last frame's, the
    last index repeated to fill the last group (Qwen3VLProcessor._calculate_timestamps)."""
    kept = [int(i) for i in indices]
    if len(kept) % group:
        kept.extend(kept[-1] for _ in range(group - len(kept) % group))
    seconds = [i / fps for i in kept]
    return [(seconds[i] + seconds[i + group - 1]) / 2 for i in range(0, len(seconds), group)]


def frames_resize(
    frames: int, height: int, width: int, temporal: int, factor: int, low: int, high: int
) -> tuple[int, int]:
    """Qwen3VLVideoProcessor's smart_resize: (height, width) multiples of `factor` whose
    product with the frames (rounded to `temporal`) is within [low, high] pixels."""
    if height < factor or width < factor:
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > 200:
        raise BundleError(
            f"a {width}x{height} video is too narrow for Qwen3-VL: its aspect ratio is over 200"
        )
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    t_bar = round(frames / temporal) * temporal
    if t_bar * h_bar * w_bar > high:
        beta = math.sqrt(frames * height * width / high)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < low:
        beta = math.sqrt(low / (frames * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def video_frames(paths: Sequence[Path]) -> list[Image.Image]:
    """A video's frames from their image files: at least two, each an image file (not a
    video container: kiln decodes none), all of one size."""
    containers = [p for p in paths if Path(p).suffix.lower() in CONTAINERS]
    if containers:
        raise BundleError(
            f"{containers[0]} is a video container; kiln decodes no video containers: give "
            "the video as its frames' image files (e.g. ffmpeg -i clip.mp4 -vf fps=2 "
            "frame_%03d.png, then video=frame_001.png,frame_002.png,...)"
        )
    if len(paths) < 2:
        raise BundleError(
            f"a video needs at least 2 frames and {len(paths)} was given; a single picture "
            "is an image (image=FILE)"
        )
    frames = [load(p) for p in paths]
    sizes = {f.size for f in frames}
    if len(sizes) > 1:
        first = frames[0].size
        other = next(i for i, f in enumerate(frames) if f.size != first)
        raise BundleError(
            f"a video's frames are of one size: {paths[0]} is {first[0]}x{first[1]} but "
            f"{paths[other]} is {frames[other].size[0]}x{frames[other].size[1]}"
        )
    return frames


def _video(
    paths: Sequence[Path], opts: dict[str, Any], fps: float
) -> tuple[np.ndarray, tuple[int, int, int], list[float]]:
    """One video's patches, (t, h, w) grid and frame group times (video_pixel_values;
    no times unless the processor stamps them)."""
    patch, merge, group = opts["patch_size"], opts["merge_size"], opts["temporal_patch_size"]
    pictures = video_frames(paths)
    times: list[float] = []
    if opts["stamped"]:
        kept = sampled_frames(len(pictures), opts, fps)
        if len(kept) < group:  # transformers' smart_resize refuses it too
            raise BundleError(
                f"the video processor keeps {len(kept)} of these {len(pictures)} frames "
                f"({opts['fps']} a second of a clip of {len(pictures) / fps:.2f} s at "
                f"fps={fps:g}); Qwen3-VL takes at least {group}: give more frames or the "
                "rate they were taken at"
            )
        pictures = [pictures[i] for i in kept]
        times = frame_group_times(kept.tolist(), fps, group)
    frames = np.stack([np.moveaxis(np.asarray(f), -1, 0) for f in pictures])
    size = opts["size"]
    if opts["stamped"]:
        high = size["longest_edge"]
        if opts["cap_pixels_per_frame"]:  # qwen-vl-utils' per-frame cap
            cap = opts["max_video_tokens"] * (patch * merge) ** 2
            each = max(min(cap, high // len(frames)), int(size["shortest_edge"] * 1.05))
            high = each * len(frames)
        height, width = frames_resize(
            len(frames),
            frames.shape[2],
            frames.shape[3],
            group,
            patch * merge,
            size["shortest_edge"],
            high,
        )
    else:
        height, width = smart_resize(
            frames.shape[2],
            frames.shape[3],
            patch * merge,
            size["shortest_edge"],
            size["longest_edge"],
        )
    values = _fused_normalize(resize_uint8(frames, height, width), opts)
    if pad := -len(values) % group:
        values = np.concatenate([values, np.repeat(values[-1:], pad, 0)])
    channels = values.shape[1]
    grid_t, grid_h, grid_w = len(values) // group, height // patch, width // patch
    blocks = values.reshape(
        grid_t, group, channels, grid_h // merge, merge, patch, grid_w // merge, merge, patch
    ).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)  # the video processors' patchify permute
    flat = blocks.reshape(grid_t * grid_h * grid_w, channels * group * patch * patch)
    return np.ascontiguousarray(flat), (grid_t, grid_h, grid_w), times


def resize_uint8(pixels: np.ndarray, height: int, width: int) -> np.ndarray:
    """[..., H, W] uint8 pixels resized as torch.nn.functional.interpolate resizes uint8
    (mode bicubic, antialias, corners unaligned; what torchvision's resize calls for
    uint8 bicubic on a CPU): the width pass, then the height pass, each skipped where
    that side is unchanged."""
    if pixels.shape[-1] != width:
        pixels = _resize_axis(pixels, -1, width)
    if pixels.shape[-2] != height:
        pixels = _resize_axis(pixels, -2, height)
    return pixels


def _resize_axis(pixels: np.ndarray, axis: int, size: int) -> np.ndarray:
    """One antialiased bicubic pass along `axis`: PIL's taps and normalized weights (in
    float64), quantized to int16 at the largest precision whose largest weight fits
    (torch's _compute_index_ranges_int16_weights), summed in integers from half a unit,
    shifted back and clamped."""
    moved = np.moveaxis(pixels, axis, -1).astype(np.int64)
    taps, precision = _int16_taps(moved.shape[-1], size)
    out = np.empty((*moved.shape[:-1], size), np.int64)
    for i, (start, weights) in enumerate(taps):
        out[..., i] = (moved[..., start : start + len(weights)] * weights).sum(-1)
    out = np.clip((out + (1 << (precision - 1))) >> precision, 0, 255).astype(np.uint8)
    return np.moveaxis(out, -1, axis)


def _int16_taps(source: int, size: int) -> tuple[list[tuple[int, np.ndarray]], int]:
    """Each output pixel's first source index and int16 weights, and their precision."""
    scale = source / size
    support = 2.0 * scale if scale >= 1 else 2.0  # bicubic's 4 taps, widened to antialias
    inverse = 1 / scale if scale >= 1 else 1.0
    found, largest = [], 0.0
    for i in range(size):
        center = scale * (i + 0.5)
        start = max(int(center - support + 0.5), 0)
        stop = min(int(center + support + 0.5), source)
        weights = _cubic((np.arange(start, stop) - center + 0.5) * inverse)
        weights = weights / weights.sum()
        found.append((start, weights))
        largest = max(largest, float(weights.max()))
    precision = 0
    while precision < 22 and int(0.5 + largest * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    taps = []
    for start, weights in found:
        scaled = weights * (1 << precision)
        taps.append((start, np.trunc(scaled + np.where(scaled < 0, -0.5, 0.5)).astype(np.int64)))
    return taps, precision


def _cubic(x: np.ndarray, a: float = -0.5) -> np.ndarray:
    """The bicubic kernel PIL and torch's antialiased resize use (a = -0.5)."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))

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

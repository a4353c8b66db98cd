"""The test images beside this script, drawn by PIL from the shapes below (no photo,
no licence question), and committed so a reader can open them.

Regenerate them with `python builders/data/images/make_images.py`: it rewrites every
file byte for byte (tests/builds/test_images.py checks), given the pinned Pillow,
since nothing written carries a timestamp and every encoder's settings are fixed here
(JPEG quality 90, no optimizing pass; lossless WebP). Each image covers a case of
runtime/images.py: a format, an odd size, a mode other than RGB, an animation, an
EXIF orientation, a picture wider or taller than the crop.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

HERE = Path(__file__).parent
ORIENTATION = 0x0112  # the EXIF tag; 6 means "rotate 90 degrees clockwise to view"


def circle() -> Image.Image:
    """64x48 RGB: a red circle on white."""
    image = Image.new("RGB", (64, 48), "white")
    ImageDraw.Draw(image).ellipse((12, 4, 52, 44), fill=(220, 20, 30))
    return image


def square() -> Image.Image:
    """200x120 RGB: a blue square on black, off centre."""
    image = Image.new("RGB", (200, 120), "black")
    ImageDraw.Draw(image).rectangle((30, 20, 110, 100), fill=(20, 60, 230))
    return image


def stripes() -> Image.Image:
    """37x91 RGB, both sides odd: green and yellow diagonal stripes."""
    image = Image.new("RGB", (37, 91), (40, 170, 60))
    draw = ImageDraw.Draw(image)
    for start in range(-91, 37, 10):
        draw.line((start, 0, start + 91, 91), fill=(240, 220, 30), width=4)
    return image


def gradient() -> Image.Image:
    """96x64 RGB: red rising left to right, blue top to bottom, green their mix."""
    image = Image.new("RGB", (96, 64))
    image.putdata(
        [(x * 255 // 95, (x + y) * 255 // 158, y * 255 // 63) for y in range(64) for x in range(96)]
    )
    return image


def translucent() -> Image.Image:
    """80x60 RGBA: a half-transparent magenta disc, opaque teal corner, clear elsewhere
    (the clear pixels' RGB is black, so compositing onto white shows)."""
    image = Image.new("RGBA", (80, 60), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    draw.ellipse((10, 5, 60, 55), fill=(200, 0, 200, 128))
    draw.rectangle((60, 0, 79, 20), fill=(0, 128, 128, 255))
    return image


def gray() -> Image.Image:
    """50x70 grayscale (mode L): concentric rings."""
    image = Image.new("L", (50, 70), 30)
    draw = ImageDraw.Draw(image)
    for i, radius in enumerate(range(34, 0, -6)):
        draw.ellipse((25 - radius, 35 - radius, 25 + radius, 35 + radius), fill=60 + 35 * i)
    return image


def checker() -> Image.Image:
    """40x40 RGB: an 8-pixel orange and navy checkerboard."""
    image = Image.new("RGB", (40, 40), (250, 140, 0))
    draw = ImageDraw.Draw(image)
    for y in range(5):
        for x in range(y % 2, 5, 2):
            draw.rectangle((x * 8, y * 8, x * 8 + 7, y * 8 + 7), fill=(10, 20, 90))
    return image


def blink() -> list[Image.Image]:
    """32x24, two frames: a white dot on purple, then a purple dot on white."""
    frames = []
    for back, dot in (((90, 30, 140), (255, 255, 255)), ((255, 255, 255), (90, 30, 140))):
        frame = Image.new("RGB", (32, 24), back)
        ImageDraw.Draw(frame).ellipse((8, 4, 24, 20), fill=dot)
        frames.append(frame)
    return frames


def arrow() -> Image.Image:
    """Stored 48x32, an arrow pointing right, tagged EXIF orientation 6: a viewer
    shows it 32x48, pointing down."""
    image = Image.new("RGB", (48, 32), (245, 245, 220))
    ImageDraw.Draw(image).polygon(
        [(4, 12), (30, 12), (30, 4), (44, 16), (30, 28), (30, 20), (4, 20)], fill=(160, 30, 30)
    )
    return image


def _orientation(value: int) -> bytes:
    exif = Image.Exif()
    exif[ORIENTATION] = value
    return exif.tobytes()


JPEG: dict[str, Any] = {"quality": 90, "optimize": False}
# name -> (drawing, encoder options); a drawing that is a list of frames is animated.
IMAGES: dict[str, tuple[Callable[[], Image.Image | list[Image.Image]], dict[str, Any]]] = {
    "circle_64x48.png": (circle, {}),
    "square_200x120.jpg": (square, JPEG),
    "stripes_37x91.png": (stripes, {}),
    "gradient_96x64.webp": (gradient, {"lossless": True}),
    "translucent_80x60.png": (translucent, {}),
    "gray_50x70.png": (gray, {}),
    "checker_40x40.bmp": (checker, {}),
    "blink_32x24.gif": (blink, {"duration": 500, "loop": 0}),
    "arrow_48x32_exif6.jpg": (arrow, {**JPEG, "exif": _orientation(6)}),
}


def write(folder: Path = HERE) -> list[Path]:
    """Every image of IMAGES, written into `folder`; their paths."""
    written = []
    for name, (draw, options) in IMAGES.items():
        drawn = draw()
        first, *rest = drawn if isinstance(drawn, list) else [drawn]
        animation: dict[str, Any] = {"save_all": True, "append_images": rest} if rest else {}
        first.save(folder / name, **options, **animation)
        written.append(folder / name)
    return written


if __name__ == "__main__":
    write()

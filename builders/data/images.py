"""The images vision-language recipes validate on: small synthetic pictures (shapes,
colours, sizes, one JPEG with an EXIF rotation) made by images/make_images.py and
committed beside this file. Builders reach them through `path()`, so the import puts
images/ into their steps' code digests (kiln.plan.toolchain: a module's data is the
folder of its name): changing a picture rebuilds the steps that read them."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent / "images"


def path(name: str) -> Path:
    found = HERE / name
    if not found.is_file():
        raise FileNotFoundError(f"builders/data/images/{name}: no such validation image")
    return found

"""InternVL's tiling and prompt text in the runtime, numpy alone, against golden values
taken from transformers 5.24 (GotOcr2's get_optimal_tiled_canvas, InternVLProcessor's
replace_image_token; tests/builds/test_images.py and tests/builds/test_vlm_internvl.py
compare with transformers live)."""

from __future__ import annotations

import pytest

from runtime.crops_vlm import crops_of, image_sequence, tiles_sequence
from runtime.images import tiled_canvas

# ((height, width), (tile height, tile width), min tiles, max tiles) -> (cols, rows)
CANVASES = [
    (((48, 64), (32, 32), 1, 6), (3, 2)),  # the circle at the tiny InternVL's tiles
    (((91, 37), (32, 32), 1, 6), (1, 3)),  # the tall stripes
    (((40, 40), (32, 32), 1, 6), (1, 1)),  # square and small: (2, 2) ties, area too small
    (((64, 64), (32, 32), 2, 6), (2, 2)),  # at least two tiles
    (((91, 37), (448, 448), 1, 12), (2, 5)),  # InternVL3's own tiles
    (((900, 1800), (448, 448), 1, 12), (4, 2)),  # the tie goes to more tiles (2:1 at 8)
    (((1000, 1000), (448, 448), 1, 12), (3, 3)),
    (((30, 3000), (448, 448), 1, 12), (12, 1)),
]


@pytest.mark.parametrize(("asked", "grid"), CANVASES)
def test_the_grid_is_get_optimal_tiled_canvas(
    asked: tuple[tuple[int, int], tuple[int, int], int, int], grid: tuple[int, int]
) -> None:
    assert tiled_canvas(*asked) == grid


def test_a_pictures_tiles_are_one_run_between_its_markers() -> None:
    unsplit = "<img>" + "<IMG_CONTEXT>" * 4 + "</img>"
    # a 2 x 3 grid and its thumbnail: 7 tiles of 4 tokens
    assert tiles_sequence(unsplit, "<IMG_CONTEXT>", 4, crops_of(2, 3)) == (
        "<img>" + "<IMG_CONTEXT>" * 28 + "</img>"
    )
    assert tiles_sequence(unsplit, "<IMG_CONTEXT>", 4, crops_of(0, 0)) == unsplit
    # Idefics3's crops each keep their own markers (the other crops sequence)
    assert image_sequence(1, 2, "<image>", 1).count("<fake_token_around_image>") == 4

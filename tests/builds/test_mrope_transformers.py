"""runtime/mrope.py against transformers 5.24 itself: the decoder's 3-D positions
against Qwen2_5_VLModel.get_rope_index (and its rope delta), and the vision program's
index inputs against transformers/vision_utils.py, on grids of several shapes, several
pictures per prompt, frames, left-padded batches and windows of more than one unit.
(tests/unit/test_mrope.py holds the same functions to golden values taken from
transformers, without the build extra.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import heavy

pytestmark = heavy

IMAGE, START, END = 516, 514, 515  # the tiny Qwen2.5-VL's <|image_pad|>, vision start and end
MERGE = 2


def _model() -> Any:
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLModel

    config = Qwen2_5_VLConfig(
        text_config={"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2},
        vision_config={"depth": 1, "hidden_size": 16, "num_heads": 2, "out_hidden_size": 16},
        image_token_id=IMAGE,
        vision_start_token_id=START,
    )
    return Qwen2_5_VLModel(config).eval()


def _prompt(text: list[int], grids: list[tuple[int, int, int]]) -> list[int]:
    """`text`, then each picture as the processor writes it, with text between them."""
    ids = list(text)
    for i, (t, h, w) in enumerate(grids):
        ids += [START] + [IMAGE] * (t * h * w // MERGE**2) + [END] + [7 + i] * (i + 1)
    return [*ids, 9, 10]


CASES = {
    "one square": [(1, 4, 4)],
    "tall and wide": [(1, 8, 4), (1, 2, 8)],
    "three of every shape": [(1, 6, 4), (1, 4, 6), (1, 8, 8)],
    "two frames": [(2, 4, 6)],
}


@pytest.mark.parametrize("grids", CASES.values(), ids=CASES.keys())
def test_positions_and_delta_are_get_rope_index(grids: list[tuple[int, int, int]]) -> None:
    import torch

    from runtime.mrope import rope_positions

    ids = _prompt([3, 4, 5], grids)
    theirs, delta = _model().get_rope_index(
        torch.tensor([ids]),
        torch.tensor([[int(t == IMAGE) for t in ids]]),
        image_grid_thw=torch.tensor(grids),
    )
    ours = rope_positions(ids, IMAGE, grids, MERGE)
    assert np.array_equal(ours, theirs[:, 0].numpy())
    # decoding resumes at the largest position + 1 on all three axes: the prompt's last
    # token is text, so that is its own position + 1, as the runtime steps it
    assert ours[:, -1].tolist() == [ours.max()] * 3
    assert ours.max() + 1 - len(ids) == int(delta[0, 0])


def test_a_left_padded_batch_is_get_rope_index_with_its_attention_mask() -> None:
    import torch

    from runtime.mrope import batch_positions

    rows = [
        _prompt([3], [(1, 4, 6), (1, 4, 4)]),
        _prompt([3, 4, 5, 6], []),
        _prompt([], [(1, 8, 8)]),
    ]
    grids = [[(1, 4, 6), (1, 4, 4)], [], [(1, 8, 8)]]
    width = max(map(len, rows))
    ids = np.zeros((3, width), np.int64)
    mask = np.zeros((3, width), np.int64)
    for r, row in enumerate(rows):
        ids[r, width - len(row) :], mask[r, width - len(row) :] = row, 1
    images = [g for gs in grids for g in gs]
    theirs, _ = _model().get_rope_index(
        torch.from_numpy(ids),
        torch.from_numpy((ids == IMAGE).astype(np.int64)),
        image_grid_thw=torch.tensor(images),
        attention_mask=torch.from_numpy(mask),
    )
    ours = batch_positions(ids, mask, IMAGE, grids, MERGE)
    real = mask.astype(bool)
    assert np.array_equal(ours[real], theirs.permute(1, 2, 0).numpy()[real])
    assert (ours[~real] == 0).all()  # padding: hidden by the mask


def test_a_run_of_image_tokens_that_is_not_its_grid_is_refused() -> None:
    from runtime.mrope import rope_positions

    with pytest.raises(ValueError, match="are 4, but the grid"):
        rope_positions(_prompt([3], [(1, 4, 4)]), IMAGE, [(1, 4, 6)], MERGE)
    with pytest.raises(ValueError, match="no image grid left"):
        rope_positions(_prompt([3], [(1, 4, 4)]), IMAGE, [], MERGE)
    with pytest.raises(ValueError, match="left with no image tokens"):
        rope_positions([3, 4], IMAGE, [(1, 4, 4)], MERGE)


@pytest.mark.parametrize("window", [28, 112], ids=["unit windows", "4x4-unit windows"])
def test_vision_inputs_are_transformers_precomputable_tensors(window: int) -> None:
    import torch
    from transformers import vision_utils

    from runtime.mrope import vision_inputs

    grids = [(1, 6, 4), (2, 4, 6), (1, 16, 10)]
    thw = torch.tensor(grids)
    ours = vision_inputs(grids, MERGE, window, 14)
    positions = vision_utils.get_vision_position_ids(thw, MERGE)
    order, cu_windows = vision_utils.get_vision_window_index(thw, MERGE, window, 14)
    cu_images = vision_utils.get_vision_cu_seqlens(thw)
    assert np.array_equal(ours["patch_positions"], positions.numpy())
    assert np.array_equal(ours["window_index"], order.numpy())
    spans = np.diff(cu_windows.numpy())
    assert np.array_equal(np.bincount(ours["window_segments"]), spans[spans > 0])
    assert np.array_equal(np.bincount(ours["image_segments"]), np.diff(cu_images.numpy()))
    assert (np.diff(ours["window_segments"]) >= 0).all()  # each span is one run
    assert (np.diff(ours["image_segments"]) >= 0).all()

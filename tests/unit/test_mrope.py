"""runtime/mrope.py, numpy alone, against golden values taken from transformers 5.24
(Qwen2_5_VLModel.get_rope_index, vision_utils.get_vision_position_ids and
get_vision_window_index; tests/builds/test_mrope.py compares with transformers live)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.mrope import batch_positions, rope_positions, tokens_of, vision_inputs

IMAGE = 516  # the tiny Qwen2.5-VL's <|image_pad|>; 514 and 515 open and close a picture
# two words, a 4 x 6 patch picture (6 tokens), a word, a 2 x 4 one (2 tokens), words
IDS = [3, 4, 514, *[IMAGE] * 6, 515, 7, 514, IMAGE, IMAGE, 515, 8, 8, 9, 10]
GRIDS = [(1, 4, 6), (1, 2, 4)]
# get_rope_index's positions for IDS (t, h, w rows) and its rope delta
GOLDEN = [
    [0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7, 8, 9, 9, 11, 12, 13, 14, 15],
    [0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7, 8, 9, 9, 11, 12, 13, 14, 15],
    [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
]
DELTA = -3


def test_positions_are_get_rope_index_and_decoding_resumes_past_the_largest() -> None:
    ours = rope_positions(IDS, IMAGE, GRIDS, 2)
    assert ours.tolist() == GOLDEN
    assert ours.max() + 1 - len(IDS) == DELTA  # the next token's position, less its index
    assert ours[:, -1].tolist() == [ours.max()] * 3  # the last token is text: the largest
    assert [tokens_of(g, 2) for g in GRIDS] == [6, 2]


def test_a_left_padded_row_is_its_unpadded_self_and_a_text_row_counts_on() -> None:
    width = len(IDS) + 3
    ids = np.zeros((2, width), np.int64)
    mask = np.zeros((2, width), np.int64)
    ids[0, 3:], mask[0, 3:] = IDS, 1
    ids[1, :], mask[1, :] = 5, 1
    ours = batch_positions(ids, mask, IMAGE, [GRIDS, []], 2)
    assert ours.shape == (2, width, 3)
    assert ours[0, 3:].T.tolist() == GOLDEN and (ours[0, :3] == 0).all()
    assert (ours[1] == np.arange(width)[:, None]).all()


def test_runs_that_do_not_match_their_grids_are_refused() -> None:
    with pytest.raises(ValueError, match="are 6, but the grid"):
        rope_positions(IDS, IMAGE, [(1, 4, 4), (1, 2, 4)], 2)
    with pytest.raises(ValueError, match="no image grid left"):
        rope_positions(IDS, IMAGE, GRIDS[:1], 2)
    with pytest.raises(ValueError, match="left with no image tokens"):
        rope_positions([3, 4], IMAGE, GRIDS[:1], 2)


def test_vision_inputs_are_vision_utils_tensors() -> None:
    two_frames = vision_inputs([(2, 4, 4)], 2, 28, 14)
    # get_vision_position_ids: (h, w) per patch, merge-block-major, once per frame
    block = [[0, 0], [0, 1], [1, 0], [1, 1], [0, 2], [0, 3], [1, 2], [1, 3]]
    block += [[2, 0], [2, 1], [3, 0], [3, 1], [2, 2], [2, 3], [3, 2], [3, 3]]
    assert two_frames["patch_positions"].tolist() == block * 2
    assert np.bincount(two_frames["image_segments"]).tolist() == [16, 16]  # a span a frame
    # get_vision_window_index with 56-pixel windows (2 x 2 merged units) on a 4 x 6 grid:
    # window order [0, 1, 3, 4, 2, 5], cu_window_seqlens [0, 16, 24]
    windows = vision_inputs([(1, 4, 6)], 2, 56, 14)
    assert windows["window_index"].tolist() == [0, 1, 3, 4, 2, 5]
    assert np.bincount(windows["window_segments"]).tolist() == [16, 8]


VIDEO = 517  # the tiny Qwen2.5-VL's <|video_pad|>
# words, a 2 x 4 picture (2 tokens), a word, a video of 4 frame groups of 4 x 4 patches
# (4 * 2 * 2 = 16 tokens), words
MEDIA = [3, 4, 514, IMAGE, IMAGE, 515, 7, 514, *[VIDEO] * 16, 515, 8, 9]
MEDIA_GRIDS = [(1, 2, 4), (4, 4, 4)]
# get_rope_index's positions for MEDIA with second_per_grid_ts 2 / 24 (frames without a
# clip's fps: transformers' 24) and tokens_per_second 4: the t step is float32(4 * 1/12)
# = 0.333..., the video's t indices truncate to 0, 0, 0, 1
VIDEO_GOLDEN = [
    [0, 1, 2, 3, 3, 5, 6, 7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 10, 11, 12],
    [0, 1, 2, 3, 3, 5, 6, 7, 8, 8, 9, 9, 8, 8, 9, 9, 8, 8, 9, 9, 8, 8, 9, 9, 10, 11, 12],
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 12],
]


def test_a_videos_t_positions_step_by_its_interval_truncated() -> None:
    step = float(np.float32(4) * np.float32(2 / 24))
    ours = rope_positions(MEDIA, [IMAGE, VIDEO], MEDIA_GRIDS, 2, [1.0, step])
    assert ours.tolist() == VIDEO_GOLDEN
    # at 2 s a group (step 2.0) the t indices run to 14, past the last token's 12, as
    # get_rope_index's too: the bundle refuses such a prompt (runtime/grid_vlm.py)
    wide = rope_positions(MEDIA, [IMAGE, VIDEO], MEDIA_GRIDS, 2, [1.0, 2.0])
    assert wide[0, 8:24].tolist() == [8] * 4 + [10] * 4 + [12] * 4 + [14] * 4
    assert wide.max() == 14 > wide[:, -1].max() == 12

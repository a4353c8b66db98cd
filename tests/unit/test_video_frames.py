"""runtime/images.py's Qwen3-VL video steps in numpy against transformers 5.24's own
functions, over many clips: which frames Qwen3VLVideoProcessor.sample_frames keeps, the
frame group times Qwen3VLProcessor writes into the text, and the frame size its
smart_resize picks. These three need no torchvision (its resize and normalize do; the
pixels are compared in tests/builds/test_vlm_qwen3.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import BundleError, images

QWEN3 = {"processor_class": "Qwen3VLProcessor", "image_processor_type": "Qwen2VLImageProcessor"}
RATES = st.sampled_from([1.0, 2.0, 10.0, 23.976, 24.0, 25.0, 29.97, 30.0, 60.0])


@pytest.fixture(scope="module")
def theirs() -> Any:
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import (
        Qwen3VLVideoProcessor,
        smart_resize,
    )

    return Qwen3VLVideoProcessor, Qwen3VLProcessor._calculate_timestamps, smart_resize


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(2, 3000),
    rate=RATES,
    wanted=st.sampled_from([None, 0.5, 1, 2, 4]),
    low=st.integers(1, 8),
    high=st.integers(8, 900),
)
def test_the_frames_kept_and_their_times_are_transformers(
    theirs: Any, total: int, rate: float, wanted: float | None, low: int, high: int
) -> None:
    from transformers.video_utils import VideoMetadata

    processor, stamps, _ = theirs
    config = {**QWEN3, "fps": wanted, "min_frames": low, "max_frames": high}
    opts = images.video_settings(config)
    kept = images.sampled_frames(total, opts, rate)
    made = processor(fps=wanted, min_frames=low, max_frames=high)
    meta = VideoMetadata(total_num_frames=total, fps=rate)
    assert kept.tolist() == made.sample_frames(meta, fps=wanted).tolist()
    ours = images.frame_group_times(kept.tolist(), rate, 2)
    assert ours == stamps(None, kept, rate, 2)
    assert [f"{t:.1f}" for t in ours] == [f"{t:.1f}" for t in stamps(None, kept, rate, 2)]


@settings(max_examples=300, deadline=None)
@given(
    frames=st.integers(2, 64),
    height=st.integers(8, 2000),
    width=st.integers(8, 2000),
    low=st.sampled_from([1024, 4096, 128 * 32 * 32]),
    high=st.sampled_from([16384, 32 * 32 * 768, 25165824]),
)
def test_the_frame_size_is_transformers_smart_resize(
    theirs: Any, frames: int, height: int, width: int, low: int, high: int
) -> None:
    _, _, smart_resize = theirs
    try:
        expected = smart_resize(frames, height, width, 2, 32, low, high)
    except ValueError:  # an aspect ratio over 200: refused by both
        with pytest.raises(BundleError, match="aspect ratio is over 200"):
            images.frames_resize(frames, height, width, 2, 32, low, high)
        return
    assert images.frames_resize(frames, height, width, 2, 32, low, high) == expected


def test_the_settings_are_the_video_processors_and_bad_ones_are_refused() -> None:
    opts = images.video_settings(QWEN3)
    assert opts["stamped"] and opts["fps"] == 2 and opts["min_frames"] == 4
    assert opts["size"] == {"shortest_edge": 128 * 32 * 32, "longest_edge": 32 * 32 * 768}
    # a checkpoint's video_preprocessor_config.json wins over its image processor's
    video = {"size": {"shortest_edge": 4096, "longest_edge": 25165824}, "fps": 1}
    opts = images.video_settings(QWEN3, video)
    assert opts["size"]["longest_edge"] == 25165824 and opts["fps"] == 1
    assert not images.video_settings({**QWEN3, "processor_class": None})["stamped"]
    with pytest.raises(BundleError, match="mutually exclusive"):
        images.video_settings({**QWEN3, "num_frames": 8})
    with pytest.raises(BundleError, match="InternVL bundles; this one's processor is 'Other'"):
        images.video_settings({**QWEN3, "processor_class": "Other"})
    kept = images.sampled_frames(
        10, {**images.video_settings(QWEN3), "do_sample_frames": False}, 24
    )
    assert np.array_equal(kept, np.arange(10))


def test_a_clip_that_keeps_fewer_frames_than_a_group_is_refused_as_transformers_does() -> None:
    """With min_frames 1, 2 frames at 10 a second are 0.2 s, of which 2 a second keeps
    one frame: transformers' smart_resize raises on it; kiln says why."""
    from pathlib import Path

    circle = Path(__file__).resolve().parents[2] / "builders/data/images/circle_64x48.png"
    config = {**QWEN3, "min_frames": 1}
    with pytest.raises(BundleError, match="keeps 1 of these 2 frames"):
        images.video_pixel_values([[circle, circle]], config, fps=10)
    made = images.video_pixel_values([[circle, circle]], config, fps=1)  # 2 s: both kept
    assert made["video_grid_thw"].tolist() == [[1, 14, 20]]  # grown to 128 x 32 x 32 pixels
    assert made["video_timestamps"] == [[0.5]]

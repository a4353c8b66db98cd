"""Qwen2-VL-style vision-language models in numpy: the decoder's 3-D rotary positions
(M-RoPE) and the index tensors their vision program takes, from each image's patch
grid, so a bundle runs them without torch.

Both are data-dependent on the grid (loops, repeat_interleave, .tolist() in
transformers), which neither exporter traces into a graph that holds for every grid:
transformers 5.24 itself lets them be precomputed (transformers/vision_utils.py), and
kiln computes them here, at run time, for the grids the processor makes.

  rope_positions   one prompt's (t, h, w) positions, as Qwen2_5_VLModel.get_rope_index
                   gives them: text tokens count on in all three, an image's tokens take
                   its merged grid's (t, h, w) indices offset by where the image starts
                   (a video's t index scaled by its time interval, then truncated),
                   and the text after it resumes at that offset + max(h, w) / merge.
                   Decoding continues from the largest position + 1 (get_rope_index's
                   rope delta): the prompt's last token is text, so its position is that
                   largest one, and each step adds 1 to all three (runtime/causal_lm.py)
  batch_positions  a left-padded batch's positions [batch, seq, 3] (the decoder graph's
                   position_ids, builders/causal_lm/export.py: the (t, h, w) axis last,
                   so every slice along seq the runtime makes is the 1-D one)
  vision_inputs    the vision program's index inputs for a list of grids (transformers'
                   get_vision_position_ids, get_vision_window_index, the per-image spans
                   of get_vision_cu_seqlens), as segment ids its masks compare
  position_taps    Qwen3-VL's learned position grid resampled to each picture's grid:
                   get_vision_interpolation_indices_and_weights (bilinear, corners
                   aligned), 4 taps and weights a patch, in float32 as transformers
                   computes them
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Grid = tuple[int, int, int]  # (t, h, w) in patches, as image_grid_thw holds it


def tokens_of(grid: Grid, merge: int) -> int:
    """The image tokens of a picture of patch grid `grid`: t * h * w / merge^2."""
    t, h, w = grid
    return t * (h // merge) * (w // merge)


def rope_positions(
    ids: Sequence[int],
    token: int | Sequence[int],
    grids: Sequence[Grid],
    merge: int,
    intervals: Sequence[float] | None = None,
) -> np.ndarray:
    """[3, len(ids)] positions of one unpadded prompt whose runs of `token` (or of any of
    several: an image's and a video's) are the pictures and videos of `grids`, in order
    (ValueError where a run's length is not its grid's tokens). `intervals`: each one's
    temporal step (get_rope_index's time_interval: 1 for a picture; for a Qwen2.5-VL
    video tokens_per_second * second_per_grid_t), float32 products truncated as
    transformers' .long() truncates them; all 1 when not given."""
    row = np.asarray(ids, np.int64)
    out = np.empty((3, len(row)), np.int64)
    pending = list(grids)
    steps = list(intervals) if intervals is not None else [1.0] * len(pending)
    vision = np.isin(row, np.asarray(token, np.int64).reshape(-1))
    current, i = 0, 0
    while i < len(row):
        j = i
        image = bool(vision[i])
        while j < len(row) and vision[j] == image and (not image or row[j] == row[i]):
            j += 1
        if not image:
            out[:, i:j] = np.arange(current, current + j - i)
            current += j - i
        else:
            if not pending:
                raise ValueError(f"image tokens at {i}:{j} but no image grid left for them")
            t, h, w = pending.pop(0)
            step = np.float32(steps.pop(0))
            lt, lh, lw = t, h // merge, w // merge
            if j - i != lt * lh * lw:
                raise ValueError(
                    f"the image tokens at {i}:{j} are {j - i}, but the grid {(t, h, w)} "
                    f"makes {lt * lh * lw}"
                )
            times = (np.arange(lt, dtype=np.float32) * step).astype(np.int64)
            tt, hh, ww = np.meshgrid(times, np.arange(lh), np.arange(lw), indexing="ij")
            out[:, i:j] = np.stack([tt, hh, ww]).reshape(3, -1) + current
            current += max(h, w) // merge
        i = j
    if pending:
        raise ValueError(f"{len(pending)} image grid(s) left with no image tokens for them")
    return out


def batch_positions(
    ids: np.ndarray,
    mask: np.ndarray,
    token: int | Sequence[int],
    grids: Sequence[Sequence[Grid]],
    merge: int,
    intervals: Sequence[Sequence[float] | None] | None = None,
) -> np.ndarray:
    """[batch, seq, 3] positions of a left-padded batch (`mask` 1 at real tokens; a
    padding position is 0, which its mask hides), row r's images of grids[r] (and their
    temporal steps intervals[r], rope_positions)."""
    out = np.zeros((*ids.shape, 3), np.int64)
    for row in range(ids.shape[0]):
        real = mask[row, -ids.shape[1] :].astype(bool)
        steps = intervals[row] if intervals is not None else None
        out[row, real] = rope_positions(ids[row, real], token, grids[row], merge, steps).T
    return out


def vision_inputs(
    grids: Sequence[Grid], merge: int, window: int, patch: int, side: int = 0
) -> dict[str, np.ndarray]:
    """The vision program's index inputs for pictures of `grids` (their patches in one
    pixel_values, in order): patch_positions [patches, 2] (each patch's (h, w) row and
    column, merge-block-major, as get_vision_position_ids lays them out); window_index
    [patches / merge^2] (the merged units in window order, get_vision_window_index);
    and, for the patches in that window order, window_segments (which window) and
    image_segments (which frame of which picture: the full-attention blocks' spans).
    With `side`, the side of a learned position grid (Qwen3-VL's), position_taps and
    position_weights too (position_taps)."""
    positions, order, windows, images = [], [], [], []
    unit, units, n_windows, n_frames = merge * merge, 0, 0, 0
    per_window = window // merge // patch  # merged units along a window's side
    for t, h, w in grids:
        hh, ww = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        block = (h // merge, merge, w // merge, merge)
        hw = [a.reshape(block).transpose(0, 2, 1, 3).reshape(-1) for a in (hh, ww)]
        positions.append(np.tile(np.stack(hw, -1), (t, 1)))
        lh, lw = h // merge, w // merge
        index = np.arange(t * lh * lw).reshape(t, lh, lw)
        pad_h, pad_w = per_window - lh % per_window, per_window - lw % per_window
        padded = np.pad(index, ((0, 0), (0, pad_h), (0, pad_w)), constant_values=-100)
        nh, nw = (lh + pad_h) // per_window, (lw + pad_w) // per_window
        padded = padded.reshape(t, nh, per_window, nw, per_window).transpose(0, 1, 3, 2, 4)
        padded = padded.reshape(t, nh * nw, per_window * per_window)
        sizes = (padded != -100).sum(-1).reshape(-1)
        kept = padded.reshape(-1)
        order.append(kept[kept != -100] + units)
        for size in sizes[sizes > 0]:  # an empty window is no span (unique_consecutive)
            windows.append(np.full(size * unit, n_windows))
            n_windows += 1
        # a frame's units stay together in window order: spans per frame, as cu_seqlens
        images.append(np.repeat(np.arange(n_frames, n_frames + t), lh * lw * unit))
        n_frames += t
        units += t * lh * lw
    made = {
        "patch_positions": np.concatenate(positions).astype(np.int64),
        "window_index": np.concatenate(order).astype(np.int64),
        "window_segments": np.concatenate(windows).astype(np.int64),
        "image_segments": np.concatenate(images).astype(np.int64),
    }
    if side:
        made["position_taps"], made["position_weights"] = position_taps(grids, merge, side)
    return made


def position_taps(grids: Sequence[Grid], merge: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """Each patch's 4 bilinear taps into a `side` x `side` grid of learned position
    embeddings (flat indices [patches, 4] int64) and their weights [patches, 4] float32,
    the grid resampled to the picture's (h, w) with corners aligned, patches in
    merge-block order: get_vision_interpolation_indices_and_weights, whose float32
    arithmetic this repeats step for step (so the weights are its bits)."""
    taps, weights = [], []
    for t, h, w in grids:
        hh, ww = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
        block = (h // merge, merge, w // merge, merge)
        row, col = (a.reshape(block).transpose(0, 2, 1, 3).reshape(-1) for a in (hh, ww))
        (rt, rw), (ct, cw) = _axis_taps(row, h, side), _axis_taps(col, w, side)
        taps.append(np.tile((rt[:, :, None] * side + ct[:, None, :]).reshape(-1, 4), (t, 1)))
        weights.append(np.tile((rw[:, :, None] * cw[:, None, :]).reshape(-1, 4), (t, 1)))
    return np.concatenate(taps).astype(np.int64), np.concatenate(weights).astype(np.float32)


def _axis_taps(index: np.ndarray, size: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    """One axis' 2 taps (floor, floor + 1, clamped to the grid) and hat weights."""
    src = index.astype(np.float32) * np.float32(side - 1) / np.float32(max(size - 1, 1))
    floor = np.floor(src)
    offsets = np.arange(2)
    taps = np.clip(floor.astype(np.int64)[:, None] + offsets, 0, side - 1)
    distance = np.abs(src[:, None] - floor[:, None] - offsets.astype(np.float32))
    return taps, np.maximum(np.float32(1) - distance, np.float32(0))

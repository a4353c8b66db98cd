"""runtime/pages.py: an engine's weights on transparent huge pages. Real memory, real
madvise: the kernel's own accounting (/proc/self/smaps AnonHugePages) says whether
the pages became huge."""

from __future__ import annotations

import numpy as np
import pytest

from runtime import pages

MB = 1 << 20


def region_of(array: np.ndarray) -> dict[int, int]:
    """The anonymous mappings that hold `array`'s data (madvise splits a mapping at the
    2 MiB boundaries it advises)."""
    start = array.__array_interface__["data"][0]
    end = start + array.nbytes
    return {s: e for s, e in pages.anonymous_regions().items() if s < end and start < e}


@pytest.mark.skipif(not pages.enabled(), reason="no transparent huge pages on this host")
def test_memory_allocated_while_opening_is_collapsed_into_huge_pages() -> None:
    array, collapsed = pages.opened_on_huge_pages(lambda: np.ones(32 * MB // 8))
    region = region_of(array)
    assert sum(e - s for s, e in region.items()) >= 32 * MB
    assert collapsed >= 28 * MB, collapsed  # all of it but a partial 2 MiB at each end
    assert pages.huge_bytes(region) >= 28 * MB
    assert float(array.sum()) == 32 * MB // 8  # the data survived the move


@pytest.mark.skipif(not pages.enabled(), reason="no transparent huge pages on this host")
def test_memory_that_existed_before_is_left_alone() -> None:
    before = np.ones(32 * MB // 8)
    huge = pages.huge_bytes(region_of(before))
    _, collapsed = pages.opened_on_huge_pages(lambda: None)
    assert collapsed == 0
    assert pages.huge_bytes(region_of(before)) == huge


def test_kiln_huge_pages_0_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_HUGE_PAGES", "0")
    assert not pages.enabled()
    array, collapsed = pages.opened_on_huge_pages(lambda: np.ones(32 * MB // 8))
    assert collapsed == 0 and array.size == 32 * MB // 8

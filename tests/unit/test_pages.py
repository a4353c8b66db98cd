"""runtime/pages.py: an engine's weights on transparent huge pages. Real memory, real
madvise: the kernel's own accounting (/proc/self/smaps AnonHugePages) says whether
the pages became huge."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runtime import pages

MB = 1 << 20
ROOT = Path(__file__).resolve().parents[2]


def region_of(array: np.ndarray) -> dict[int, int]:
    """The anonymous mappings that hold `array`'s data (madvise splits a mapping at the
    2 MiB boundaries it advises)."""
    start = array.__array_interface__["data"][0]
    end = start + array.nbytes
    return {s: e for s, e in pages.anonymous_regions().items() if s < end and start < e}


# In a fresh process, as a runtime opens its bundle: in a test worker that has run other
# tests, freed heap chunks (the heap's mapping unchanged) can hold the new array, and
# memory that existed before is left alone by design (the next test).
FRESH = """
import json, numpy as np
from runtime import pages
from tests.unit.test_pages import MB, region_of
array, collapsed = pages.opened_on_huge_pages(lambda: np.ones(32 * MB // 8))
region = region_of(array)
print(json.dumps({"mapped": sum(e - s for s, e in region.items()), "collapsed": collapsed,
                  "huge": pages.huge_bytes(region), "sum": float(array.sum())}))
"""


@pytest.mark.skipif(not pages.enabled(), reason="no transparent huge pages on this host")
def test_memory_allocated_while_opening_is_collapsed_into_huge_pages() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FRESH], capture_output=True, text=True, cwd=ROOT, check=True
    )
    found = json.loads(done.stdout)
    assert found["mapped"] >= 32 * MB
    assert found["collapsed"] >= 28 * MB, found  # all of it but a partial 2 MiB at each end
    assert found["huge"] >= 28 * MB, found
    assert found["sum"] == 32 * MB // 8  # the data survived the move


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

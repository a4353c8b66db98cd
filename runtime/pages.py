"""Huge pages for an engine's weights: after an onnxruntime session is opened, the
memory it allocated (its weights, prepacked) is collapsed into 2 MiB transparent huge
pages with madvise(MADV_COLLAPSE).

A decode step streams every weight once, so its speed is the memory's: with 4 KiB
pages each step walks ~130,000 page-table entries for SmolLM2-135M's 520 MB, and under
a hypervisor every TLB miss is a two-level walk. onnxruntime allocates with plain
malloc, which on a host whose THP mode is `madvise` (Ubuntu's default, and this
project's hosts') never gets a huge page; a host in mode `always` mostly gets them
anyway, and there this changes little. PyTorch, Paddle and MXNet advise their own
large CPU buffers the same way. Measured through the runtime
(`bench/probes/decode_ab.py huge=B small=B --env small:KILN_HUGE_PAGES=0`,
bench/results/huge_pages_2026-12-05.txt), SmolLM2's fp32 bundle decodes 37.4 tokens/s
against 29.2, its int4-awq-head4-outliers 131.3 against 121.2 (one thread, a fresh
process per run). Opening costs ~3 ms per MB collapsed on this
VM (1.4 s for SmolLM2 fp32, 0.2 s for int4).

Before the session opens, glibc's mmap threshold is set to its 32 MiB ceiling
(mallopt; it stays there, where glibc's dynamic threshold ends up as a process frees
large blocks), so the many smaller buffers (an int4 layer's prepacked weights are 0.2-1
MB) come from the heap, one region that collapses whole, rather than a mapping each in
which no 2 MiB page fits: SmolLM2 int4's collapsed memory went from 56 to 112 MB and
its decode from 182.6 to 190.8 tokens/s at two threads (fp32: 444 to 526 MB, 34.6 to
36.0 at one thread; a scratch A/B against the commit before, fresh processes
alternating, 4 rounds each).

Linux 6.1+ only (MADV_COLLAPSE); anywhere else, or with THP `never`, or with
KILN_HUGE_PAGES=0 in the environment, nothing is done. Only whole 2 MiB spans of
writable anonymous regions (and the heap) that appeared or grew while the session
opened are touched: no file mapping, and no other mapping of the caller's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

HUGE = 2 << 20
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
MAPS = Path("/proc/self/maps")
T = TypeVar("T")


def enabled() -> bool:
    """Whether collapsing can work here and is wanted."""
    if os.environ.get("KILN_HUGE_PAGES", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    try:
        return "[never]" not in mode.read_text() and MAPS.is_file()
    except OSError:
        return False


def anonymous_regions() -> dict[int, int]:
    """start -> end of this process's writable anonymous mappings."""
    regions = {}
    for line in MAPS.read_text().splitlines():
        fields = line.split()
        named = len(fields) > 5 and fields[5] != "[heap]"
        if named or "w" not in fields[1]:  # a file or special mapping, or read-only
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        regions[start] = end
    return regions


def collapse_new(before: dict[int, int]) -> int:
    """Collapse the whole 2 MiB spans of the anonymous regions that are not in `before`
    (or have grown since) into huge pages. Returns the bytes collapsed; a span the
    kernel refuses (no THP support, memory too fragmented) stays as it was."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    done = 0
    for start, end in anonymous_regions().items():
        if before.get(start) == end:
            continue
        lo, hi = -(-start // HUGE) * HUGE, end // HUGE * HUGE
        if hi - lo < HUGE:
            continue
        libc.madvise(lo, hi - lo, MADV_HUGEPAGE)  # keep them huge if they are ever split
        if libc.madvise(lo, hi - lo, MADV_COLLAPSE) == 0:
            done += hi - lo
    return done


def opened_on_huge_pages(open_: Callable[[], T]) -> tuple[T, int]:
    """`open_()`'s result, with the memory it allocated collapsed into huge pages where
    enabled(); and the bytes collapsed."""
    if not enabled():
        return open_(), 0
    before = anonymous_regions()
    _heap_below(MMAP_THRESHOLD_MAX)
    result = open_()
    return result, collapse_new(before)


MMAP_THRESHOLD_MAX = 32 << 20  # glibc's ceiling on 64-bit hosts
M_MMAP_THRESHOLD = -3


def _heap_below(size: int) -> None:
    """glibc's mmap threshold (mallopt) at `size`: allocations below it come from the
    heap, one growing region that collapses whole, rather than a mapping each (an int4
    layer's prepacked weights are 0.2-1 MB, and in mappings of their own no 2 MiB page
    fits). glibc's dynamic threshold rises to 32 MiB anyway as a process frees large
    blocks; this fixes it there from the start."""
    import ctypes

    libc = ctypes.CDLL(None)
    if hasattr(libc, "mallopt"):
        libc.mallopt(M_MMAP_THRESHOLD, size)


def huge_bytes(regions: dict[int, int] | None = None) -> int:
    """AnonHugePages of this process (of `regions` only, if given), in bytes."""
    total, keep = 0, True
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            start = int(head[0].split("-")[0], 16)
            keep = regions is None or start in regions
        elif keep and line.startswith("AnonHugePages:"):
            total += int(head[1]) * 1024
    return total

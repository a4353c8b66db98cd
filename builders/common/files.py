"""A large file placed into an artifact: linked where its bytes cannot change, else copied.

The store keeps one copy of a large file that several artifacts hold, but only once
the second is sealed: until then the bundle step's copy of its engine, or the fetch
step's copy of a local checkpoint, is a second copy on the disk. At an 8B model's
16 GB of bf16 weights that is the difference between fitting the GPU machine's 64 GiB
disk and not (issue 39: checkpoint 16.4 GB, fetch 16.4, engine 16.4, bundle 16.4 while
it is built). A read-only file (a published artifact, or a local checkpoint its owner
made read-only, as bench/shape.py writes its own) is linked instead: nobody writes
its bytes, and the seal would have linked a duplicate anyway. A writable file, a small
one (below what the store dedups, so no file is linked that would not have been), or
one on another filesystem is copied.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

LARGE = 1 << 20  # kiln/store's BLOB_MIN: the files it stores once by content


def place(src: Path, dst: Path) -> None:
    """`src`'s bytes at `dst` (which must not exist)."""
    info = src.stat()
    if info.st_size >= LARGE and not info.st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        try:
            os.link(src, dst)
            return
        except OSError:  # another filesystem, or links refused: the copy below
            pass
    shutil.copyfile(src, dst)

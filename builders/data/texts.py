"""The shipped texts: calibration.txt (quantization calibration) and eval.txt (scored
for perplexity and next-token agreement). Builders reach them through `path()`, so
the import puts texts/ into their steps' code digests (kiln.plan.toolchain)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent / "texts"


def path(name: str) -> Path:
    return HERE / f"{name}.txt"

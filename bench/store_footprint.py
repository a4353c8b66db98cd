"""The store footprint of one recipe: the bytes its lock's artifacts hold on disk, each
file counted once however many artifacts hardlink it, against the checkpoint's size.

    .venv/bin/python bench/store_footprint.py [RECIPE ...]   (default: smollm2-135m-instruct)

Reads manifests/<recipe>.json and the store (KILN_STORE, default .kiln/store); builds
nothing. The checkpoint is the last checkpoint step's `checkpoint/` folder (the import
step's for a GGUF source, else fetch's). Issue 15's target: at most 1.5x.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from kiln.paths import Paths  # noqa: E402  (the repo root, put on sys.path above)


def files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]


def main(recipes: list[str]) -> None:
    store = Paths(ROOT).store
    for name in recipes:
        steps = json.loads((ROOT / "manifests" / f"{name}.json").read_text())["lock"]["steps"]
        seen: set[tuple[int, int]] = set()
        total = 0
        checkpoint = 0
        print(f"{name}: store {store}")
        print(f"  {'step':10s} {'files':>6s} {'bytes':>14s} {'new bytes':>14s}")
        for step in steps:
            folder = store / "objects" / step["key"][:2] / step["key"]
            if not folder.is_dir():
                print(f"  {step['kind']:10s} not in this store (build the recipe first)")
                continue
            own = new = 0
            listed = files(folder)
            for path in listed:
                st = path.stat()
                own += st.st_size
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    new += st.st_size
            total += new
            if step["kind"] in ("fetch", "import") and (folder / "checkpoint").is_dir():
                checkpoint = sum(p.stat().st_size for p in files(folder / "checkpoint"))
            print(f"  {step['kind']:10s} {len(listed):6d} {own:14,d} {new:14,d}")
        ratio = total / checkpoint if checkpoint else float("nan")
        print(f"  total {total:,d} bytes on disk; checkpoint {checkpoint:,d}; {ratio:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:] or ["smollm2-135m-instruct"])

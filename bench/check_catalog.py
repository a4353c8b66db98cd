"""`doit check` on a generated 1,000-recipe catalog vs raw CSafeLoader parsing.

    .venv/bin/python bench/check_catalog.py [--recipes 1000]

Writes the catalog into a temp dir (variations of the shipped recipes, a third
of them using `extends`), then measures in this one run:
  * raw: yaml.load(CSafeLoader) of every recipe file (parsing only);
  * kiln: catalog.load + rules (what `doit check` does, in-process);
  * `doit check` as a subprocess, wall time (adds interpreter and doit start-up).
Prints the times and the ratio kiln / raw (goal: <= 2x, and under 1 s).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def generate(root: Path, n: int) -> None:
    import shutil

    for folder in ("thresholds", "prompts"):
        shutil.copytree(ROOT / folder, root / folder)
    (root / "recipes").mkdir()
    (root / "manifests").mkdir()
    base = (ROOT / "recipes" / "tiny-llama.yaml").read_text()
    for i in range(n):
        if i % 3 == 2:
            text = (
                f"schema_version: 1\nextends: r{i - 1:04d}\nbuild:\n  max_batch_size: {1 + i % 8}\n"
            )
        else:
            text = base.replace("max_seq_len: 256", f"max_seq_len: {64 + i % 192}")
            text = text.replace("description: >-", f"tags: [bench, b{i % 10}]\ndescription: >-")
        (root / "recipes" / f"r{i:04d}.yaml").write_text(text)


def best(fn, repeat: int = 5) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipes", type=int, default=1000)
    args = parser.parse_args()
    from kiln import catalog

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generate(root, args.recipes)
        files = sorted((root / "recipes").glob("*.yaml"))

        def raw() -> None:
            for f in files:
                yaml.load(f.read_bytes(), Loader=yaml.CSafeLoader)

        def kiln() -> None:
            cat = catalog.load(catalog.Paths(root))
            assert len(cat.recipes) == args.recipes, cat.all_problems()[:3]

        t_raw, t_kiln = best(raw), best(kiln)
        env = dict(os.environ, KILN_ROOT=str(root))
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "doit", "check"],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
        )
        t_doit = time.perf_counter() - start
    print(f"{args.recipes} recipes ({len(files) // 3} with extends)")
    print(f"raw CSafeLoader parse:     {t_raw * 1000:7.0f} ms")
    ratio = t_kiln / t_raw
    print(f"kiln catalog load + rules: {t_kiln * 1000:7.0f} ms   ratio {ratio:.2f}x (goal <= 2x)")
    print(f"doit check (subprocess):   {t_doit * 1000:7.0f} ms   (goal < 1 s)")


if __name__ == "__main__":
    main()

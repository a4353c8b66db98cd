"""How long the Models & Recipes site takes to build, for this catalog and a big one.

    .venv/bin/python bench/site_build.py [--recipes 1000]

* the current catalog: `doit site` cold and no-op (wall time, subprocess, as a user
  runs it), and sitegen.build in-process (best of 3);
* a generated catalog of N recipes, in a temp dir that is deleted afterwards: the
  repository's tiny recipes copied N times with different build limits, two thirds
  of them with a copy of the committed manifest of the recipe they copy (renamed to
  match; kept in the temp dir only, never committed, so no evidence is fabricated),
  one third without any (not built).

Timings on shared machines are noisy; they are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kiln import catalog, sitegen  # noqa: E402


def scratch(base: Path) -> Path:
    root = base / "catalog"
    for folder in ("recipes", "thresholds", "prompts", "manifests"):
        shutil.copytree(ROOT / folder, root / folder)
    return root


def generate(base: Path, n: int) -> Path:
    """N recipes from the tiny ones; two in three with a renamed copy of a real manifest."""
    root = base / "big"
    for folder in ("thresholds", "prompts"):
        shutil.copytree(ROOT / folder, root / folder)
    (root / "recipes").mkdir(parents=True)
    (root / "manifests").mkdir()
    sources = sorted((ROOT / "recipes").glob("*.yaml"))
    for i in range(n):
        src = sources[i % len(sources)]
        data = yaml.safe_load(src.read_text())
        data["build"]["max_seq_len"] = 64 * (1 + i % 16)
        data["build"]["max_batch_size"] = 1 + i % 8
        data["description"] = f"Generated bench recipe {i} from {src.stem}. {data['description']}"
        name = f"{src.stem}-{i:04d}"
        (root / "recipes" / f"{name}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        if i % 3:
            found = json.loads((ROOT / "manifests" / f"{src.stem}.json").read_text())
            found["recipe"] = name
            (root / "manifests" / f"{name}.json").write_text(json.dumps(found))
    return root


def timed_build(root: Path, out: Path) -> tuple[float, float, int]:
    start = time.perf_counter()
    cat = catalog.load(catalog.Paths(root))
    loaded = time.perf_counter()
    pages = sitegen.build(cat, out)
    return loaded - start, time.perf_counter() - loaded, len(pages)


def doit_site(root: Path, site: Path) -> float:
    env = dict(os.environ, KILN_ROOT=str(root), KILN_SITE=str(site))
    cmd = [sys.executable, "-m", "doit", "-f", str(ROOT / "dodo.py"), "-d", str(root), "site"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"doit site failed:\n{proc.stdout}\n{proc.stderr}")
    return time.perf_counter() - start


def size(folder: Path) -> str:
    files = [p for p in folder.rglob("*") if p.is_file()]
    return f"{len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root = scratch(base)
        cold = doit_site(root, base / "site-doit")
        noop = min(doit_site(root, base / "site-doit") for _ in range(3))
        runs = [timed_build(root, base / "site-now") for _ in range(3)]
        load, render, pages = min(runs, key=lambda r: r[0] + r[1])
        print(f"current catalog ({len(catalog.load(catalog.Paths(root)).recipes)} recipes):")
        print(f"  doit site, cold:          {cold:6.2f} s")
        print(f"  doit site, no-op:         {noop:6.2f} s")
        print(f"  in-process: load {load:.3f} s + render {render:.3f} s, {pages} pages")
        big = generate(base, args.recipes)
        load, render, pages = timed_build(big, base / "site-big")
        built = sum(1 for _ in (big / "manifests").glob("*.json"))
        print(f"generated catalog ({args.recipes} recipes, {built} with manifests):")
        print(f"  in-process: load {load:.2f} s + render {render:.2f} s = {load + render:.2f} s")
        print(f"  {pages} pages; site {size(base / 'site-big')}")
        cold_big = doit_site(big, base / "site-big-doit")
        print(f"  doit site, cold:          {cold_big:6.2f} s")


if __name__ == "__main__":
    main()

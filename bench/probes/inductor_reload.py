"""Does a second load of an inductor bundle recompile? Issue 18: Inductor's compiled
artifacts were cached beside the bundle (.inductor-cache/<torch>-<device>/). Superseded
by issue 39: an engine carries its kernels (runtime/kernels.py), so no load compiles;
bench/probes/kernels_cpu.py measured why it carries the cache folder.

    python bench/probes/inductor_reload.py RECIPE [--copies DIR]

Copies the recipe's built bundle (the store seals its own, so the runtime caches
elsewhere for it) to a writable folder, then opens it with runtime.open in two fresh
processes, one after the other, and prints each load's seconds (the torch import
included) and Inductor's FX-graph cache hits and misses from torch's own counters.
"""

from __future__ import annotations

import argparse
import json
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CHILD = """
import json, sys, time
start = time.perf_counter()
import runtime
runtime.open(sys.argv[1])
seconds = time.perf_counter() - start
from torch._dynamo.utils import counters
print(json.dumps({"seconds": seconds, **{k: v for k, v in counters["inductor"].items()
                                         if k.startswith("fxgraph_cache")}}))
"""


def bundle_of(recipe: str) -> Path:
    from kiln import catalog
    from kiln.paths import Paths
    from kiln.plan import plan
    from kiln.plan.toolchain import current
    from kiln.store import Store

    cat = catalog.load()
    r = cat.recipe(recipe)
    steps = plan(recipe, r, cat.prompts[r.validation.prompts], current())
    return Store(Paths.from_env().store).get(steps.step("bundle").key).path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe")
    parser.add_argument("--copies", type=Path, help="the copy's folder (default: a temp dir)")
    args = parser.parse_args()
    base = args.copies or Path(tempfile.mkdtemp())
    copy = base / "bundle"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(bundle_of(args.recipe), copy)
    for p in [copy, *copy.rglob("*")]:
        p.chmod(p.stat().st_mode | stat.S_IWUSR)
    for label in ("first load", "second load"):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(copy)],
            capture_output=True, text=True, check=True, cwd=ROOT,
        )  # fmt: skip
        got = json.loads(out.stdout.strip().splitlines()[-1])
        seconds = got.pop("seconds")
        print(f"{args.recipe} {label}: {seconds:.1f} s; Inductor FX-graph cache {got}")
    print("cache:", ", ".join(p.name for p in (copy / ".inductor-cache").iterdir()))


if __name__ == "__main__":
    main()

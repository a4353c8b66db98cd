"""Quantize and engine-build time per precision, and bundle size per precision.

    .venv/bin/python bench/precisions.py [--recipes tiny-llama,tiny-llama-fp8,...]

Builds each recipe into a fresh store (the hub mirror is shared) and reads the
seconds each step reports ("<kind>: done in S s"), then sums the bundle's files.
Timings on the shared 2-core machines are noisy: read ratios, not absolutes.
Each build is a real validation run, so it appends an evidence record to
manifests/<recipe>.json; drop those with `git checkout manifests/` if unwanted.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT = (
    "tiny-llama,tiny-llama-int8-wo,tiny-llama-int8-sq,tiny-llama-fp8,tiny-llama-fp8-kv,"
    "tiny-llama-int4-awq,tiny-llama-w4a8-awq,tiny-llama-aoti"
)
DONE = re.compile(r"^\s+(\w+): done in ([0-9.]+) s", re.MULTILINE)


def bundle_bytes(store: Path, name: str) -> int:
    from kiln import catalog, plan
    from kiln.plan import toolchain
    from kiln.store import Store

    cat = catalog.load()
    recipe = cat.recipe(name)
    p = plan.plan(name, recipe, cat.prompts[recipe.validation.prompts], toolchain.current())
    folder = Store(store).get(p.step("bundle").key).path
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipes", default=DEFAULT)
    args = parser.parse_args()
    print(
        f"{'recipe':24} {'quantize s':>10} {'export+onnx s':>13} {'engine s':>9} {'bundle MB':>10}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "KILN_STORE": tmp}
        for name in args.recipes.split(","):
            out = subprocess.run(
                [sys.executable, "-m", "doit", "build", f"recipe={name}"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            took = {k: float(s) for k, s in DONE.findall(out.stderr + out.stdout)}
            size = bundle_bytes(Path(tmp), name) / 1e6
            export = took.get("export", 0.0) + took.get("onnx", 0.0)
            print(
                f"{name:24} {took.get('quantize', 0.0):10.1f} {export:13.1f} "
                f"{took.get('engine', 0.0):9.1f} {size:10.3f}"
            )


if __name__ == "__main__":
    main()

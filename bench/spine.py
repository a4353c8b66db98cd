"""The spine's numbers, measured in one run on this machine.

    .venv/bin/python bench/spine.py [--recipe tiny-llama]

* cold `doit build recipe=NAME`: a fresh store and a fresh hub mirror (pip
  install excluded), wall time;
* no-op rebuild: the same command again, wall time (best of 3);
* `python -c "import kiln"`: wall time (best of 5), and `doit list` for scale.

Timings on shared machines are noisy; these are printed, never asserted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="tiny-llama")
    args = parser.parse_args()
    doit = [sys.executable, "-m", "doit"]
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, KILN_STORE=f"{tmp}/store", KILN_HUB_CACHE=f"{tmp}/hub")
        # Evidence from benchmark builds must not land in the committed manifests.
        env["KILN_ROOT"] = str(_scratch_catalog(Path(tmp)))
        cold = timed([*doit, "build", f"recipe={args.recipe}"], env)
        noop = min(timed([*doit, "build", f"recipe={args.recipe}"], env) for _ in range(3))
        imp = min(timed([sys.executable, "-c", "import kiln"], env) for _ in range(5))
        listing = min(timed([*doit, "list"], env) for _ in range(3))
    print(f"cold doit build recipe={args.recipe}: {cold:6.2f} s   (target <= 45 s)")
    print(f"no-op rebuild:                     {noop:6.2f} s   (target < 1.5 s)")
    print(f"python -c 'import kiln':           {imp * 1000:6.0f} ms")
    print(f"doit list:                         {listing * 1000:6.0f} ms")
    print(f"cold / no-op ratio:                {cold / noop:6.1f}x")


def _scratch_catalog(tmp: Path) -> Path:
    import shutil

    root = tmp / "catalog"
    for folder in ("recipes", "thresholds", "prompts"):
        shutil.copytree(ROOT / folder, root / folder)
    (root / "manifests").mkdir()
    return root


if __name__ == "__main__":
    main()

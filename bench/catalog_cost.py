"""Per-recipe build cost of the tiny catalog: `doit build recipe=NAME` one at a
time, wall seconds each, then the CI subset's total against the full catalog's.

Run it on a cold store to measure cold builds (KILN_STORE=/tmp/x); on a warm one it
measures no-op rebuilds. It builds in the current catalog, so it also leaves the
manifests that the coverage table reads.

    .venv/bin/python bench/catalog_cost.py            # every tiny recipe
    .venv/bin/python bench/catalog_cost.py tiny-gemma3 tiny-mixtral
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kiln import catalog  # noqa: E402
from kiln.catalog import architectures  # noqa: E402


def build(name: str) -> tuple[float, str]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "doit", "-f", str(ROOT / "dodo.py"), "build", f"recipe={name}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    verdict = next(
        (
            line.split(":", 1)[1].split("->")[0].strip()
            for line in proc.stdout.splitlines()
            if line.strip().startswith(f"{name}:")
        ),
        "failed" if proc.returncode else "up to date",
    )
    return seconds, verdict


def main() -> None:
    cat = catalog.load()
    names = sys.argv[1:] or sorted(n for n in cat.recipes if n.startswith("tiny-"))
    subset = set(architectures.ci_subset(cat))
    cost: dict[str, float] = {}
    print(f"{'recipe':<26} {'seconds':>8}  subset  verdict")
    for name in names:
        seconds, verdict = build(name)
        cost[name] = seconds
        print(f"{name:<26} {seconds:8.1f}  {'yes' if name in subset else '   '}     {verdict[:70]}")
    total = sum(cost.values())
    in_subset = sum(s for n, s in cost.items() if n in subset)
    print(
        f"total {total:.0f} s for {len(cost)} recipes; CI subset {in_subset:.0f} s "
        f"({len(subset & set(cost))} recipes), {in_subset / total:.0%} of the catalog"
    )


if __name__ == "__main__":
    main()

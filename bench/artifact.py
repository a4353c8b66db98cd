"""The store folder of one step of a built recipe, for scripts on the GPU machine.

    python bench/artifact.py RECIPE KIND      e.g. smollm2-135m-instruct import

(KILN_ROOT and KILN_STORE as for doit.) Exit 1, with the reason, where the step is not
in the recipe's plan or not built.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def artifact(recipe: str, kind: str) -> Path:
    from kiln import catalog
    from kiln.paths import Paths
    from kiln.plan import plan
    from kiln.plan.toolchain import current
    from kiln.store import Store

    cat = catalog.load()
    r = cat.recipe(recipe)
    steps = plan(recipe, r, cat.prompts[r.validation.prompts], current())
    return Store(Paths.from_env().store).get(steps.step(kind).key).path


if __name__ == "__main__":
    try:
        print(artifact(sys.argv[1], sys.argv[2]))
    except Exception as exc:
        sys.exit(f"{sys.argv[1]} {sys.argv[2]}: {exc}")

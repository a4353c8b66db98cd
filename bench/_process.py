"""What the benchmarks share: timing one command, a catalog copy, a built recipe's
bundle folder, and a process's own peak memory.

Imported by bench/chat_peers.py, check_catalog.py, noop_build.py, parallel_build.py
runtime_features.py and tp_cpu.py (run as scripts, so this folder is on sys.path),
and as bench._process by bench/probes/quantized_decode.py, determinism_gpu.py and
determinism_paths.py.
"""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall, cpu, stdout) of one process run in the repository; a failure stops the bench."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args[:4])} failed:\n{proc.stdout}\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def peak_rss() -> int:
    """This process's peak resident set, in bytes: Linux's VmHWM, which starts afresh
    at exec. getrusage's ru_maxrss does not: a process started by fork and exec keeps
    its parent's peak if that was higher (a worker of a 360 MB benchmark parent read
    363 MB whatever it held itself), so it is used only where /proc is missing."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        status = ""
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def catalog_copy(base: Path, names: list[str]) -> Path:
    """A catalog of its own under `base`: the shipped thresholds and prompts, the named
    recipes, and an empty manifests/."""
    root = base / "catalog"
    for folder in ("thresholds", "prompts"):
        shutil.copytree(ROOT / folder, root / folder)
    (root / "recipes").mkdir(parents=True)
    (root / "manifests").mkdir()
    for name in names:
        shutil.copy(ROOT / "recipes" / f"{name}.yaml", root / "recipes")
    return root


def bundle_path(recipe: str) -> Path:
    """The store folder of `recipe`'s bundle as the catalog plans it now; exits with
    the build command when it is not built."""
    sys.path.insert(0, str(ROOT))
    from kiln import catalog
    from kiln.plan import plan
    from kiln.plan.toolchain import current
    from kiln.store import Store

    cat = catalog.load()
    r = cat.recipe(recipe)
    step = plan(recipe, r, cat.prompts[r.validation.prompts], current()).step("bundle")
    store = Store(cat.paths.store)
    if not store.has(step.key):
        sys.exit(f"{recipe} is not built: run `doit build recipe={recipe}` first")
    return Path(store.get(step.key).path)


def child_json(code: str, args: list[str], env: dict[str, str]) -> dict[str, object]:
    """The last stdout line of `python -c code args...` as JSON, run in the repository
    with `env` and an Inductor cache of its own (a fresh process's load); a failure is
    {"error": its last stderr lines}, for a probe to report among the others."""
    import json
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as cache:
        full = {**os.environ, **env, "TORCHINDUCTOR_CACHE_DIR": cache}
        done = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True, text=True, env=full, cwd=ROOT, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-3:]}
    got: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return got

"""Where an inductor bundle's load goes, phase by phase (issue 39: a SmolLM2-size
bundle should load in 3 s warm-disk; a 22 s GPU load was 11 s of torch.export.load,
~6 s of kernel modules and ~8 s of Dynamo, bench/results/gpu_determinism_2026-12-06.txt).

    python bench/probes/load_profile.py BUNDLE|--recipe NAME [--runs 2]
        [--env NAME=VALUE ...] [--cprofile 25]

(--recipe: the recipe's built bundle in $KILN_ROOT's catalog and $KILN_STORE's store.)

Opens the bundle with runtime.open in RUNS fresh processes, one after the other (the
disk warm after the first), each with the environment's NAME=VALUE added (for example
TORCHINDUCTOR_COMPILE_THREADS=1), and prints per process:

  import     `import torch` and `import runtime`
  engine     the engine's own phases (runtime/inductor.py InductorEngine.timings): zip
             read, kernel install, weights, each program's deserialization, each
             program's first call (Dynamo, AOTAutograd, Inductor's cache hit, the kernel
             modules), on CUDA the two more warm calls and the CUDA-graph capture
  torch      Dynamo's own timers inside those first calls (torch._dynamo.utils
             compile_times: bytecode_tracing, OutputGraph.call_user_compiler,
             AOTAutogradCache.inductor_load, PyCodeCache.load_by_key_path, async_compile
             ...; nested, so they overlap)
  open       runtime.open's seconds in all (the tokenizer and bundle checks besides),
             and the CPU seconds this process spent in it (steadier than the wall time
             on a shared host)

With --cprofile N, the first process runs under cProfile too (slower) and prints its N
heaviest functions by own time and the N by cumulative time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import runtime
t2 = time.perf_counter()
c2 = time.process_time()
top = int(sys.argv[2])
if top:
    import cProfile, io, pstats
    prof = cProfile.Profile()
    prof.enable()
b = runtime.open(sys.argv[1])
t3 = time.perf_counter()
c3 = time.process_time()
listing = ""
if top:
    prof.disable()
    out = io.StringIO()
    for key in ("tottime", "cumulative"):
        pstats.Stats(prof, stream=out).sort_stats(key).print_stats(top)
    listing = out.getvalue()
from torch._dynamo.utils import compilation_time_metrics, counters
e = b.engine
print(json.dumps({
    "import torch": t1 - t0, "import runtime": t2 - t1, "open": t3 - t2, "open_cpu": c3 - c2,
    "engine": getattr(e, "timings", {}), "kernels": getattr(e, "kernels", {}),
    "torch": {k: sum(v) for k, v in compilation_time_metrics.items()},
    "counters": {k: dict(v) for k, v in counters.items() if k in ("inductor", "aot_autograd")},
    "device": str(getattr(e, "device", "?")), "torch_version": torch.__version__,
    "cprofile": listing,
}))
"""


def run(bundle: Path, env: dict[str, str], top: int) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(bundle), str(top)],
        cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"the load failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def show(got: dict) -> None:
    print(
        f"import torch {got['import torch']:.2f} s, runtime {got['import runtime']:.2f} s; "
        f"runtime.open {got['open']:.2f} s (CPU {got['open_cpu']:.2f} s of this process; "
        f"{got['device']}, torch {got['torch_version']}); "
        f"kernels {got['kernels']}"
    )
    print("  engine: " + ", ".join(f"{k} {v:.2f}" for k, v in got["engine"].items()))
    heavy = sorted(got["torch"].items(), key=lambda kv: -kv[1])
    print("  torch (nested): " + ", ".join(f"{k} {v:.2f}" for k, v in heavy if v >= 0.05))
    hits = {k: v for c in got["counters"].values() for k, v in c.items() if "cache" in k}
    print(f"  caches: {hits}")
    if got["cprofile"]:
        print(got["cprofile"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path, nargs="?")
    parser.add_argument("--recipe", help="the built bundle of this recipe instead of BUNDLE")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the loads")
    parser.add_argument("--cprofile", type=int, default=0, help="N functions; 0: no profile")
    args = parser.parse_args()
    if args.recipe:
        sys.path.insert(0, str(ROOT))
        from bench.probes.inductor_reload import bundle_of

        args.bundle = bundle_of(args.recipe)
    if args.bundle is None:
        parser.error("BUNDLE or --recipe NAME")
    print(f"bundle {args.bundle}")
    env = dict(e.split("=", 1) for e in args.env)
    if env:
        print("with", " ".join(args.env))
    for i in range(args.runs):
        show(run(args.bundle, env, args.cprofile if i == 0 else 0))


if __name__ == "__main__":
    main()

"""Which of torch's portable compile caches lets a CPU inductor bundle load without
compiling (issue 39)? torch.compiler.save_cache_artifacts in one process, then in fresh
processes load_cache_artifacts before runtime.open, each with an empty Inductor cache;
prints each load's seconds and Inductor's/AOTAutograd's cache counters.

    .venv/bin/python bench/probes/kernels_cpu.py RECIPE      (a built inductor recipe)

Answer (results/kernels_2026-12-05.txt): the artifacts hit every graph, but their load
still compiled Inductor's generated C++ (15 of 20 s): they carry the source, not the
built libraries. The engine therefore carries the whole cache folder of its compile
(runtime/kernels.py), .so files included: a fresh process then loads in about 7 s,
torch's import and Dynamo's trace included, compiling nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, sys, time
start = time.perf_counter()
import torch
t_import = time.perf_counter() - start
mode, bundle, blob = sys.argv[1:4]
t_art = 0.0
if mode == "load":
    t0 = time.perf_counter()
    torch.compiler.load_cache_artifacts(open(blob, "rb").read())
    t_art = time.perf_counter() - t0
import runtime
t0 = time.perf_counter()
runtime.open(bundle)
t_open = time.perf_counter() - t0
if mode == "save":
    data, info = torch.compiler.save_cache_artifacts()
    open(blob, "wb").write(data)
from torch._dynamo.utils import counters
print(json.dumps({"import": t_import, "artifacts": t_art, "open": t_open,
  "inductor": dict(counters["inductor"]), "aot": dict(counters["aot_autograd"])}))
"""


def main() -> None:
    from bench.probes.inductor_reload import bundle_of

    src = bundle_of(sys.argv[1])
    blob = Path(tempfile.gettempdir()) / "kiln-artifacts.bin"
    for mode in ("save", "load", "load"):
        base = Path(tempfile.mkdtemp())
        copy = base / "bundle"
        shutil.copytree(src, copy)
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(base / "cache"), "KILN_RECOMPILE": "1"}
        out = subprocess.run(
            [sys.executable, "-c", CHILD, mode, str(copy), str(blob)],
            capture_output=True, text=True, env=env, cwd=ROOT, check=False,
        )  # fmt: skip
        lines = out.stdout.strip().splitlines()
        print(mode, lines[-1] if lines else out.stderr[-3000:])


if __name__ == "__main__":
    main()

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
import json, os, sys, time, tempfile, subprocess, shutil, stat
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
CHILD = r'''
import json, os, sys, time
start = time.perf_counter()
import torch
t_import = time.perf_counter() - start
mode, bundle, blob = sys.argv[1:4]
if mode == "load":
    t0 = time.perf_counter()
    info = torch.compiler.load_cache_artifacts(open(blob, "rb").read())
    t_art = time.perf_counter() - t0
else:
    t_art = 0
import runtime
t0 = time.perf_counter()
r = runtime.open(bundle)
t_open = time.perf_counter() - t0
if mode == "save":
    data, info = torch.compiler.save_cache_artifacts()
    open(blob, "wb").write(data)
    print("artifacts", len(data), info, file=sys.stderr)
from torch._dynamo.utils import counters
print(json.dumps({"import": t_import, "artifacts": t_art, "open": t_open,
  "inductor": dict(counters["inductor"]), "aot": dict(counters["aot_autograd"])}))
'''
from bench.probes.inductor_reload import bundle_of
src = bundle_of(sys.argv[1])
for mode in ("save", "load", "load"):
    base = tempfile.mkdtemp()
    copy = os.path.join(base, "bundle"); shutil.copytree(src, copy)
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(base, "cache"))
    out = subprocess.run([sys.executable, "-c", CHILD, mode, copy, str(__import__("pathlib").Path(tempfile.gettempdir()) / "kiln-artifacts.bin")], capture_output=True, text=True, env=env, cwd=sys.path[0])
    print(mode, out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr[-3000:])
    print(out.stderr[-600:])

"""Can an inductor engine load its decode step without torch.export.load and Dynamo
(issue 39's load time)? A 22 s GPU load of the SmolLM2 bundle was 11 s of
torch.export's deserializer, ~6 s compiling ~1,500 kernel modules from source and
~8 s of Dynamo and custom-op registration (bench/results/gpu_determinism_2026-12-06.txt).
torch._inductor.standalone_compile compiles an FX graph (no Dynamo) into a
CompiledArtifact that saves to one file and loads without retracing (vLLM's path).

This probe takes a built inductor bundle, re-exports its decode step with the greedy
bookkeeping (runtime/inductor.py _greedy_step) into one FX graph, compiles it with
standalone_compile, saves the artifact, and then in fresh processes compares:

  engine   runtime.open(bundle): export.load + torch.compile + the carried cache
  artifact CompiledArtifact.load + the first call

timing each load (torch's import apart), and checks the artifact's step gives the
engine's logits and tokens bit for bit over STEPS greedy steps from the same state.

    python bench/probes/artifact_load.py BUNDLE [--steps 16] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench._process import child_json  # noqa: E402  (the repository root is on sys.path above)

ENGINE = """
import time, sys, json
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
import runtime
b = runtime.open(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": round(t1 - t0, 2), "load_s": round(t2 - t1, 2)}))
"""

ARTIFACT = """
import time, sys, json, hashlib
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
art = torch._inductor.CompiledArtifact.load(path=sys.argv[1], format="binary")
state = torch.load(sys.argv[2])
with torch.inference_mode():
    out = art(*state)
t2 = time.perf_counter()
first = out[0] if isinstance(out, (list, tuple)) else out
digest = hashlib.sha256(first.float().numpy().tobytes()).hexdigest()[:12]
print(json.dumps({"import_s": round(t1 - t0, 2), "load_s": round(t2 - t1, 2), "first": digest}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    import hashlib
    import io
    import time
    import zipfile

    import torch

    import runtime
    from runtime import inductor

    b = runtime.open(args.bundle)
    e = b.engine
    if e.device != "cpu":
        print("(the probe's artifact path runs on the engine's device:", e.device, ")")
    file = b.path / b.meta["engines"]["main"]["file"]
    with zipfile.ZipFile(file) as archive:
        module = torch.export.load(io.BytesIO(archive.read("decode.pt2"))).module()
    count = len(e.weights)

    class Greedy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.step = inductor._greedy_step(module, count)

        def forward(self, *args: object) -> object:
            return self.step(*args)

    state = [*e.weights, *e.state, *e.cache]
    # a state to start from: one greedy step after a short prompt, through the engine
    ids = b.encode("The quick brown fox")
    b.generate([ids], 2)
    start = [t.clone() for t in state]
    started = time.perf_counter()
    # the inference IR (export's set_grad_enabled regions inlined), as a plain
    # GraphModule of its graph and constants: export's module() carries input-check
    # hooks, a guards submodule and wrapped train/eval that the artifact's cache key
    # cannot pickle (save then finds no artifact)
    unlifted = torch.export.export(Greedy(), tuple(start), strict=False).run_decompositions()
    plain = unlifted.module(check_guards=False)
    attrs = {n.target: getattr(plain, n.target) for n in plain.graph.nodes if n.op == "get_attr"}
    gm = torch.fx.GraphModule(attrs, plain.graph)
    exported = time.perf_counter() - started
    started = time.perf_counter()
    art = torch._inductor.standalone_compile(gm, list(start), dynamic_shapes="from_example_inputs")
    compiled = time.perf_counter() - started
    folder = Path(tempfile.mkdtemp(prefix="kiln-artifact-"))
    art.save(path=str(folder / "decode.bin"), format="binary")
    size = (folder / "decode.bin").stat().st_size
    print(
        f"export of the greedy step {exported:.1f} s; standalone_compile {compiled:.1f} s; "
        f"artifact {size:,d} bytes"
    )

    def digest(t: torch.Tensor) -> str:
        return hashlib.sha256(t.float().cpu().numpy().tobytes()).hexdigest()[:12]

    # bit-for-bit: STEPS greedy steps from `start`, the engine's compiled step and the artifact
    paths = {}
    for name, run in (("engine", lambda: e._step()), ("artifact", lambda: art(*state))):
        for x, y in zip(state, start, strict=True):
            x.copy_(y)
        got = []
        with torch.inference_mode():
            for _ in range(args.steps):
                out = run()
                logits = out[0] if isinstance(out, (list, tuple)) else out
                got.append(digest(logits))
        paths[name] = (got, e.history.clone())
    same = paths["engine"][0] == paths["artifact"][0]
    tokens = torch.equal(paths["engine"][1], paths["artifact"][1])
    print(f"{args.steps} steps: logits equal at every step {same}; tokens equal {tokens}")

    for x, y in zip(state, start, strict=True):
        x.copy_(y)
    torch.save([t.clone() for t in state], folder / "state.pt")
    rows = {"engine": [], "artifact": []}
    for _ in range(args.runs):
        rows["engine"].append(child_json(ENGINE, [str(args.bundle)], {}))
        rows["artifact"].append(
            child_json(ARTIFACT, [str(folder / "decode.bin"), str(folder / "state.pt")], {})
        )
    for name, got in rows.items():
        print(name, json.dumps(got))


if __name__ == "__main__":
    main()

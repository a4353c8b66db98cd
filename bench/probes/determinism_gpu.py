"""Why did the same inductor bundle answer differently from one process to the next
(issue 39), and where does a load's time go? Runs fresh processes over one built
bundle and prints, per process:

- the load: seconds (torch's import apart), and the engine's `kernels` counts: files
  installed, graphs compiled, kernels timed on the device (runtime.kernels.Tuning);
- the chat prompt's first generated position through the prefill chunk: a digest of
  its logits, the top-2 tokens and their margin (how narrow a flip would be);
- the same position fed token by token through the decode program (`chunk` 0): digest;
- the greedy answer (48 tokens), a digest of it generated a second time in the same
  process, and a third time with the CUDA graphs off (the compiled programs called
  directly): a race in the runner would part these within one process, a choice made
  at load only across processes.

    python bench/probes/determinism_gpu.py BUNDLE [--runs 5] [--recompile 0]
        [--profile] [--env NAME=VALUE ...]

`--recompile N` first runs N processes with KILN_RECOMPILE=1 and an empty Inductor
cache each (every load compiles and autotunes for itself: the engines before issue
39); `--profile` runs one more process whose load is under cProfile and prints the
functions that took its time; `--env` sets a variable in every process. Name the card
with the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench._process import child_json  # noqa: E402  (the repository root is on sys.path above)

PROMPT = "What is the capital of France?"

CHILD = """
import cProfile, hashlib, io, json, pstats, sys, time
start = time.perf_counter()
import numpy as np
import torch
imported = time.perf_counter() - start
import runtime
profile = cProfile.Profile() if sys.argv[3] == "1" else None
start = time.perf_counter()
if profile:
    profile.enable()
b = runtime.open(sys.argv[1])
if profile:
    profile.disable()
load = time.perf_counter() - start
digest = lambda a: hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:12]
try:
    ids = b.encode_chat([{"role": "user", "content": sys.argv[2]}])
except runtime.BundleError:  # a base model: the prompt as plain text
    ids = b.encode(sys.argv[2])
logits = b.logits(ids)[-1].astype(np.float32)
order = np.argsort(logits)[::-1][:2]
engine = b.engine
chunk, engine.chunk = engine.chunk, 0  # token by token through the decode program
stepped = b.logits(ids)[-1].astype(np.float32)
engine.chunk = chunk
answer = b.generate([ids], 48).tokens[0]
again = b.generate([ids], 48).tokens[0]
graphs, engine.graphs = engine.graphs, {}
eager = b.generate([ids], 48).tokens[0]
engine.graphs = graphs
out = {"import_s": round(imported, 2), "load_s": round(load, 2), "kernels": engine.kernels,
  "first_logits": digest(logits), "first_top2": [int(t) for t in order],
  "first_margin": round(float(logits[order[0]] - logits[order[1]]), 5),
  "stepped_logits": digest(stepped),
  "answer_digest": digest(np.asarray(answer)), "again_same": again == answer,
  "graphs_off_same": eager == answer, "answer": b.decode(answer)}
if profile:
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(45)
    out["profile"] = text.getvalue()
print(json.dumps(out))
"""


def run(bundle: str, recompile: bool, extra: dict[str, str], profile: bool) -> dict[str, object]:
    env = {**extra, **({"KILN_RECOMPILE": "1"} if recompile else {})}
    return child_json(CHILD, [bundle, PROMPT, "1" if profile else "0"], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--recompile", type=int, default=0)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for every process")
    args = parser.parse_args()
    extra = dict(e.split("=", 1) for e in args.env)
    for label, recompile, n in (
        ("compiled at load", True, args.recompile),
        ("the engine's kernels", False, args.runs),
    ):
        if not n:
            continue
        rows = [run(args.bundle, recompile, extra, False) for _ in range(n)]
        for row in rows:
            print(label, json.dumps(row), flush=True)
        rows = [r for r in rows if "error" not in r]
        answers = {str(r.get("answer_digest")) for r in rows}
        first = {str(r.get("first_logits")) for r in rows}
        stepped = {str(r.get("stepped_logits")) for r in rows}
        print(
            f"{label}: {len(rows)} of {n} processes ran, {len(answers)} distinct answers, "
            f"{len(first)} distinct first-position logits (prefill chunk), "
            f"{len(stepped)} (token by token)",
            flush=True,
        )
    if args.profile:
        row = run(args.bundle, False, extra, True)
        print(row.pop("profile", row.get("error")))
        print("profiled", json.dumps(row))


if __name__ == "__main__":
    main()

"""Why did the same inductor bundle answer differently from one process to the next
(issue 39)? Runs fresh processes over one built bundle, each feeding the chat prompt
token by token through the decode program (as a bundle without a prefill chunk does,
the configuration of the divergent runs) and decoding greedily, and prints per process:
a digest of the first generated position's logits, its top-2 margin, and the answer.

    python bench/probes/determinism_gpu.py BUNDLE [--runs 5] [--recompile 4]
        [--env NAME=VALUE ...]

First `--recompile` processes with KILN_RECOMPILE=1 and an empty Inductor cache each
(every load compiles and autotunes for itself: the engines before issue 39), then
`--runs` processes loading the kernels the engine carries. Name the card with its
figures.

--env sets a variable in every process, to bisect the half-precision divergence the H100
run found with the engine's kernels (bench/results/gpu_real_2026-12-05.txt), e.g.
--env CUBLAS_WORKSPACE_CONFIG=:4096:8 (cuBLAS used from several streams: warm-up on a
side stream, capture on the graph's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "What is the capital of France?"

CHILD = """
import hashlib, json, sys, time
import numpy as np
import runtime
start = time.perf_counter()
b = runtime.open(sys.argv[1])
load = time.perf_counter() - start
ids = b.encode_chat([{"role": "user", "content": sys.argv[2]}])
b.engine.chunk = 0  # token by token through the decode program
logits = b.logits(ids)[-1].astype(np.float32)
top = np.sort(logits)[-2:]
out = b.generate([ids], 48).tokens[0]
print(json.dumps({"load_s": round(load, 2), "kernels": b.engine.kernels,
  "first_logits_sha": hashlib.sha256(logits.tobytes()).hexdigest()[:12],
  "first_margin": float(top[1] - top[0]), "first_token": int(np.argmax(logits)),
  "answer": b.decode(out)}))
"""


def run(bundle: str, recompile: bool, extra: dict[str, str]) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, **extra, "TORCHINDUCTOR_CACHE_DIR": cache}
        if recompile:
            env["KILN_RECOMPILE"] = "1"
        done = subprocess.run(
            [sys.executable, "-c", CHILD, bundle, PROMPT],
            capture_output=True, text=True, env=env, cwd=ROOT, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1:]}
    got: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--recompile", type=int, default=4)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for every process")
    args = parser.parse_args()
    extra = dict(e.split("=", 1) for e in args.env)
    for label, recompile, n in (
        ("compiled at load", True, args.recompile),
        ("the engine's kernels", False, args.runs),
    ):
        rows = [run(args.bundle, recompile, extra) for _ in range(n)]
        for row in rows:
            print(label, json.dumps(row), flush=True)
        answers = {str(r.get("answer")) for r in rows}
        digests = {str(r.get("first_logits_sha")) for r in rows}
        print(f"{label}: {len(answers)} distinct answers, {len(digests)} distinct first logits")


if __name__ == "__main__":
    main()

"""Decode tokens/s of an fp32 bundle and its weight-only quantized bundles, one run.

    PYTHONPATH=$PWD .venv/bin/python bench/probes/quantized_decode.py \\
        [--recipes tiny-llama,tiny-llama-int8-wo,tiny-llama-int4-awq] \\
        [--new-tokens 64] [--rounds 3] [--threads 1]

Each bundle is opened through kiln's runtime (`runtime.open`) at `--threads` intra-op
threads and decodes the prompts of prompts/default.yaml greedily at batch 1. The
recipes run interleaved, one full pass each per round, so a change in the machine's
load hits all of them alike; each gets `--rounds` timed rounds after one warm-up, and
the median round is reported, with its ratio to the first recipe (the fp32 one).
EOS is turned off (`bundle.eos = set()`) so every prompt decodes exactly
`--new-tokens` tokens: this measures speed, not agreement (EOS is not masked, so the
tokens after an argmax EOS are not HF's). CPU seconds (user+sys of this process) are
printed too, for a loaded host. Needs the recipes built (`doit build recipe=...`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench._process import bundle_path  # noqa: E402  (the repository root is on sys.path above)


def one_pass(bundle: Any, prompts: list[list[int]], new_tokens: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) to decode every prompt."""
    cpu, wall = time.process_time(), time.perf_counter()
    for ids in prompts:
        bundle.generate([ids], new_tokens)
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    import runtime
    from kiln import catalog

    parser = argparse.ArgumentParser()
    parser.add_argument("--recipes", default="tiny-llama,tiny-llama-int8-wo,tiny-llama-int4-awq")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    names = args.recipes.split(",")
    bundles = {}
    for name in names:
        bundles[name] = runtime.open(bundle_path(name), threads=args.threads)
        bundles[name].eos = set()  # exactly --new-tokens per prompt
    texts = catalog.load().prompts["default"].prompts
    prompts = {n: [b.encode(t) for t in texts] for n, b in bundles.items()}
    for n, b in bundles.items():  # warm-up pass
        one_pass(b, prompts[n], args.new_tokens)
    walls: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.rounds):
        for n, b in bundles.items():
            wall, cpu = one_pass(b, prompts[n], args.new_tokens)
            walls[n].append(wall)
            cpus[n].append(cpu)
    tokens = len(texts) * args.new_tokens
    load = os.getloadavg()[0]
    print(
        f"{len(texts)} prompts x {args.new_tokens} new tokens, batch 1, {args.threads} "
        f"thread(s), median of {args.rounds} interleaved rounds, load {load:.2f} on "
        f"{os.cpu_count()} CPUs"
    )
    base_wall = statistics.median(walls[names[0]])
    base_cpu = statistics.median(cpus[names[0]])
    for n in names:
        wall, cpu = statistics.median(walls[n]), statistics.median(cpus[n])
        print(
            f"{n:28s} {tokens / wall:9.1f} tokens/s  x{base_wall / wall:5.2f}   "
            f"{tokens / cpu:9.1f} tokens/CPU-s  x{base_cpu / cpu:5.2f}"
        )


if __name__ == "__main__":
    main()

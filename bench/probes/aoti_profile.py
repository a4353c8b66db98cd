"""Where an aoti bundle's per-token decode time goes, and before/after in one run.

    .venv/bin/python bench/probes/aoti_profile.py [--recipe tiny-llama-aoti] [--threads 2] \\
        [--rounds 5]

In one process, interleaved round by round so a shared machine's load hits every
variant alike: HF `generate`, the bundle through the runtime's AotiEngine as it is
now ("runtime"), and through the AotiEngine.run of kiln before this change ("before":
numpy -> torch per input, `runner(*args)` under no_grad at the caller's thread count).
Then one decode step split into its parts. Prints median and min per variant; read
ratios, not absolutes (the machine is 2 cores shared with others).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the hub mirror is local: no network retries
sys.path.insert(0, str(ROOT))

from bench.decode_vs_hf import hf_seconds, setup  # noqa: E402


def before_run(engine: Any) -> Any:
    """kiln's AotiEngine.run before this change, bound to a loaded engine."""

    def run(output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        t = engine.torch
        args = [t.from_numpy(np.ascontiguousarray(v)).to(engine.device) for v in feeds.values()]
        with t.no_grad():
            outs = engine.runner(*args)
        return [o.cpu().numpy() for o in outs]

    return run


def per_call(label: str, fn: Any, n: int = 200) -> None:
    fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    print(f"  {label:44} {best * 1e6:8.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", default="tiny-llama-aoti")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()

    import torch

    bundle, ids, model = setup(args.recipe, args.threads)
    engine = bundle.session
    variants = {"runtime": engine.run, "before": before_run(engine)}

    def bundle_rate(run: Any) -> float:
        engine.run = run
        start = time.perf_counter()
        for p in ids:
            bundle.generate([p], args.new_tokens)
        return len(ids) * args.new_tokens / (time.perf_counter() - start)

    def hf_rate() -> float:
        torch.set_num_threads(args.threads)
        return len(ids) * args.new_tokens / hf_seconds(model, ids, args.new_tokens)[0]

    rates: dict[str, list[float]] = {"hf": [], **{k: [] for k in variants}}
    hf_rate(), [bundle_rate(run) for run in variants.values()]  # warm up
    for _ in range(args.rounds):
        rates["hf"].append(hf_rate())
        for name, run in variants.items():
            rates[name].append(bundle_rate(run))
    engine.run = variants["runtime"]
    print(
        f"{args.recipe}: {len(ids)} prompts x {args.new_tokens} tokens, batch 1, "
        f"{args.threads} threads, {args.rounds} interleaved rounds"
    )
    for name, r in rates.items():
        ratio = [x / h for x, h in zip(r, rates["hf"], strict=True)]
        print(
            f"  {name:8} tokens/s median {statistics.median(r):7.0f} (min {min(r):6.0f}, "
            f"max {max(r):6.0f})   vs HF median {statistics.median(ratio):5.2f}x "
            f"(range {min(ratio):.2f}-{max(ratio):.2f})"
        )
    split(bundle, engine, ids[0], args.threads)


def split(bundle: Any, engine: Any, prompt: list[int], threads: int) -> None:
    """One decode step at the prompt's length, taken apart."""
    import torch

    _, past = bundle.forward(
        np.asarray([prompt]),
        np.ones((1, len(prompt)), np.int64),
        np.arange(len(prompt))[None],
        bundle._empty_cache(1),
    )
    feeds = {
        "input_ids": np.array([[5]]),
        "attention_mask": np.ones((1, len(prompt) + 1), np.int64),
        "position_ids": np.array([[len(prompt)]]),
        **dict(zip(bundle.past_names, past, strict=True)),
    }
    tensors = [torch.from_numpy(np.ascontiguousarray(v)) for v in feeds.values()]
    outs = engine.runner(*tensors)
    print("one decode step:")
    per_call("runtime engine.run", lambda: engine.run(bundle.output_names, feeds))
    per_call("before: engine.run", lambda: before_run(engine)(bundle.output_names, feeds))
    per_call("numpy -> torch, all inputs", lambda: [torch.from_numpy(v) for v in feeds.values()])
    per_call("torch -> numpy, all outputs", lambda: [o.numpy() for o in outs])
    with torch.no_grad():
        per_call("runner(*args) (pytree specs parsed per call)", lambda: engine.runner(*tensors))
        per_call(
            "runner.loader.boxed_run(args)", lambda: engine.runner.loader.boxed_run(list(tensors))
        )
        for n in (1, threads):
            torch.set_num_threads(n)
            per_call(
                f"boxed_run at {n} thread(s)", lambda: engine.runner.loader.boxed_run(list(tensors))
            )
    torch.set_num_threads(threads)


if __name__ == "__main__":
    main()

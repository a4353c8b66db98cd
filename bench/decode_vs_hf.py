"""Bundle greedy decode vs HF `generate`, same model, same prompts, one run.

    .venv/bin/python bench/decode_vs_hf.py [--recipe tiny-llama] [--new-tokens 128]

Both sides decode greedily at batch 1 with EOS disabled, so each produces exactly
`--new-tokens` tokens per prompt; both use the same number of CPU threads. Prints
tokens/s for each and the ratio. Needs the recipe built (`doit build`).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def bundle_dir(recipe: str) -> tuple[Path, str, str]:
    from kiln import catalog

    out = subprocess.run(
        [sys.executable, "-m", "doit", "plan", f"recipe={recipe}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    key = re.search(r"bundle\s+([0-9a-f]{12})\s+up to date", out)
    if not key:
        sys.exit(f"{recipe} is not built: run `doit build recipe={recipe}` first")
    cat = catalog.load()
    store = cat.paths.store / "objects"
    model = cat.recipe(recipe).model
    return next(store.glob(f"*/{key.group(1)}*")), model.repo, model.revision


def setup(recipe: str, threads: int) -> tuple[Any, list[list[int]], Any]:
    """The recipe's built bundle (EOS off), the default prompts' ids, and the same
    checkpoint in transformers (fp32), both at `threads` CPU threads."""
    import torch
    from transformers import AutoModelForCausalLM

    import runtime
    from kiln import catalog

    torch.set_num_threads(threads)
    path, repo, revision = bundle_dir(recipe)
    bundle = runtime.open(path, threads=threads)
    bundle.eos = set()  # decode exactly the asked number of tokens
    cat = catalog.load()
    ids = [bundle.encode(p) for p in cat.prompts["default"].prompts]
    model = AutoModelForCausalLM.from_pretrained(
        repo, revision=revision, cache_dir=cat.paths.hub, dtype=torch.float32
    ).eval()
    return bundle, ids, model


def hf_seconds(model: Any, ids: list[list[int]], new_tokens: int) -> float:
    """Seconds for HF greedy `generate` of exactly `new_tokens` per prompt, batch 1."""
    import torch

    start = time.perf_counter()
    with torch.no_grad():
        for p in ids:
            model.generate(
                torch.tensor([p]),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", default="tiny-llama")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    bundle, ids, model = setup(args.recipe, args.threads)

    def run_bundle() -> float:
        start = time.perf_counter()
        for p in ids:
            bundle.generate([p], args.new_tokens)
        return time.perf_counter() - start

    def run_hf() -> float:
        return hf_seconds(model, ids, args.new_tokens)

    run_bundle(), run_hf()  # warm up both
    tokens = len(ids) * args.new_tokens
    ours = tokens / min(run_bundle() for _ in range(3))
    theirs = tokens / min(run_hf() for _ in range(3))
    shape = f"{len(ids)} prompts x {args.new_tokens} new tokens, batch 1"
    print(f"{args.recipe}: {shape}, {args.threads} threads")
    engine = bundle.meta["engines"]["main"]
    print(f"bundle ({engine['backend']} {engine['provider']}): {ours:8.0f} tokens/s")
    print(f"HF generate (torch CPU):  {theirs:8.0f} tokens/s")
    print(f"ratio:                    {ours / theirs:8.2f}x   (target >= 3x)")


if __name__ == "__main__":
    main()

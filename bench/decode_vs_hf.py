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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", default="tiny-llama")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from kiln import catalog
    from runtime import load

    torch.set_num_threads(args.threads)
    path, repo, revision = bundle_dir(args.recipe)
    bundle = load(path, threads=args.threads)
    bundle.eos = set()  # decode exactly --new-tokens tokens
    cat = catalog.load()
    prompts = cat.prompts["default"].prompts
    ids = [bundle.encode(p) for p in prompts]
    model = AutoModelForCausalLM.from_pretrained(
        repo, revision=revision, cache_dir=cat.paths.hub, dtype=torch.float32
    ).eval()

    def run_bundle() -> float:
        start = time.perf_counter()
        for p in ids:
            bundle.generate([p], args.new_tokens)
        return time.perf_counter() - start

    def run_hf() -> float:
        start = time.perf_counter()
        with torch.no_grad():
            for p in ids:
                model.generate(
                    torch.tensor([p]),
                    max_new_tokens=args.new_tokens,
                    min_new_tokens=args.new_tokens,
                    do_sample=False,
                    pad_token_id=0,
                )
        return time.perf_counter() - start

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

"""Bundle greedy decode vs HF `generate`, same model, same prompts, one run.

    .venv/bin/python bench/decode_vs_hf.py [--recipe tiny-llama] [--new-tokens 128]
        [--hf DIR]      # the checkpoint folder, for a recipe whose model is not a Hub repo
        [--bundle DIR]  # a bundle folder, instead of the recipe's built one

Both sides decode greedily at batch 1 with EOS masked as HF's `min_new_tokens` masks
it (never emitted: bench/_eos.py's sampler sets its logits to -inf inside the bundle's
own generate loop), so each produces exactly `--new-tokens` tokens per prompt, the
same tokens where the logits agree; both use the same number of CPU threads. Prints
tokens/s for each, the ratio and how many prompts' tokens are equal. Needs the recipe
built (`doit build`).
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


def bundle_dir(recipe: str) -> tuple[Path, str | None, str | None]:
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


def setup(
    recipe: str, threads: int, hf: Path | None = None, folder: Path | None = None
) -> tuple[Any, list[list[int]], Any]:
    """The recipe's built bundle, the default prompts' ids, and the same checkpoint in
    transformers (fp32, from the recipe's Hub repo or from `hf`), both at `threads`
    CPU threads."""
    import torch
    from transformers import AutoModelForCausalLM

    import runtime
    from kiln import catalog

    torch.set_num_threads(threads)
    path, repo, revision = (folder, None, None) if folder else bundle_dir(recipe)
    bundle = runtime.open(path, threads=threads)
    cat = catalog.load()
    ids = [bundle.encode(p) for p in cat.prompts["default"].prompts]
    if hf is not None:
        model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    elif repo is None:
        sys.exit(f"{recipe}'s model is not a Hub repo: give its checkpoint folder with --hf")
    else:
        model = AutoModelForCausalLM.from_pretrained(
            repo, revision=revision, cache_dir=cat.paths.hub, dtype=torch.float32
        ).eval()
    return bundle, ids, model


def hf_seconds(model: Any, ids: list[list[int]], new_tokens: int) -> tuple[float, list[list[int]]]:
    """Seconds for HF greedy `generate` of exactly `new_tokens` per prompt, batch 1
    (`min_new_tokens` masks EOS), and the tokens."""
    import torch

    tokens = []
    start = time.perf_counter()
    with torch.no_grad():
        for p in ids:
            out = model.generate(
                torch.tensor([p]),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
            tokens.append(out[0, len(p) :].tolist())
    return time.perf_counter() - start, tokens


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", default="tiny-llama")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hf", type=Path, help="checkpoint folder (default: the recipe's repo)")
    parser.add_argument("--bundle", type=Path, help="bundle folder (default: the recipe's)")
    args = parser.parse_args()

    from _eos import NoEos

    bundle, ids, model = setup(args.recipe, args.threads, args.hf, args.bundle)
    eos = frozenset(bundle.eos) | frozenset(_ids(model.generation_config.eos_token_id))

    def run_bundle() -> tuple[float, list[list[int]]]:
        tokens = []
        start = time.perf_counter()
        for p in ids:
            tokens += bundle.generate([p], args.new_tokens, NoEos(eos=eos)).tokens
        return time.perf_counter() - start, tokens

    def run_hf() -> tuple[float, list[list[int]]]:
        return hf_seconds(model, ids, args.new_tokens)

    (_, ours_tokens), (_, hf_tokens) = run_bundle(), run_hf()  # warm up both
    tokens = len(ids) * args.new_tokens
    ours = tokens / min(run_bundle()[0] for _ in range(3))
    theirs = tokens / min(run_hf()[0] for _ in range(3))
    shape = f"{len(ids)} prompts x {args.new_tokens} new tokens, batch 1"
    print(f"{args.recipe}: {shape}, {args.threads} threads")
    engine = bundle.meta["engines"]["main"]
    print(f"bundle ({engine['backend']} {engine['provider']}): {ours:8.0f} tokens/s")
    print(f"HF generate (torch CPU):  {theirs:8.0f} tokens/s")
    print(f"ratio:                    {ours / theirs:8.2f}x   (target >= 3x)")
    same = sum(a == b for a, b in zip(ours_tokens, hf_tokens, strict=True))
    print(f"greedy tokens equal to HF's on {same}/{len(ids)} prompts (EOS masked on both)")


def _ids(value: int | list[int] | None) -> list[int]:
    """generation_config.eos_token_id as a list (it may be one id, a list or None)."""
    return [] if value is None else [value] if isinstance(value, int) else list(value)


if __name__ == "__main__":
    main()

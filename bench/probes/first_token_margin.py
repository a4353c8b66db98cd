"""How narrow is the first token of the capital question (issue 39)? SmolLM2-135M-
Instruct's bf16 inductor bundle answers "What is the capital of France?" with
"L'Étoile, ..." in every process on the H100 while the fp32 and fp8 bundles, and HF
`generate` in bf16 there, answer "The capital of France is Paris."

Prints the top-k next-token logits after the chat prompt: transformers' model in fp32
and bf16 (sdpa and eager attention) on this host, and, given bundles, each bundle's
(runtime.open, Bundle.logits: the prefill program's logits, which choose the first
token), with the margin between the first two.

    python bench/probes/first_token_margin.py GGUF_OR_CHECKPOINT [--bundle PATH ...]
        [--device cpu|cuda] [--top 4]

Name the card with GPU figures.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def ranked(logits: Any, decode: Any, k: int) -> str:
    import numpy as np

    row = np.asarray(logits, dtype=np.float64)
    order = np.argsort(-row)[:k]
    shown = ", ".join(f"{decode(int(t))!r} {row[t]:.3f}" for t in order)
    return f"{shown}; margin {row[order[0]] - row[order[1]]:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint", type=Path, help="a GGUF file or a checkpoint folder")
    parser.add_argument("--bundle", type=Path, action="append", default=[])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--top", type=int, default=4)
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    where = args.checkpoint
    kw = {"gguf_file": where.name} if where.suffix == ".gguf" else {}
    folder = where.parent if where.suffix == ".gguf" else where
    tok = AutoTokenizer.from_pretrained(folder, **kw)
    ids = tok.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    print(f"{len(ids)} prompt tokens; torch {torch.__version__}; {args.device}", end="")
    print(f" ({torch.cuda.get_device_name()})" if args.device == "cuda" else "")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kw)
    model = model.eval().to(args.device)
    batch = torch.tensor([ids], device=args.device)
    for dtype in (torch.float32, torch.bfloat16):
        model = model.to(dtype)
        for impl in ("sdpa", "eager"):
            model.set_attn_implementation(impl)
            with torch.no_grad():
                last = model(batch).logits[0, -1].float().cpu().numpy()
            name = f"transformers {str(dtype).removeprefix('torch.')} {impl}"
            print(f"{name:28s} {ranked(last, tok.decode, args.top)}")
    del model
    import runtime

    for path in args.bundle:
        bundle: Any = runtime.open(path)
        mine = bundle.encode_chat(QUESTION) if hasattr(bundle, "encode_chat") else None
        if mine is not None and list(mine) != ids:
            print(f"{path.name}: its chat ids differ from the tokenizer's: {mine} vs {ids}")
        last = bundle.logits(ids)[-1]
        print(f"{'bundle ' + path.name:28s} {ranked(last, tok.decode, args.top)}")


if __name__ == "__main__":
    main()

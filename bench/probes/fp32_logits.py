"""Does a half-precision engine's fp32-logits output projection export, compile and
run on this host, what does it cost, and how close is it to fp32 (issue 39)?

builders/causal_lm/backends/inductor.py `fp32_logits` replaces a CUDA engine's output
projection's forward by one bf16 matmul with fp32 output (torch.mm out_dtype, which
CPU kernels lack). This probe applies it to a Linear of SmolLM2's and Gemma 3 270M's
head shapes (CUDA only), and, for comparison, the form a CPU would need (input and
weight cast to fp32 first), exports each as the engine does (torch.export, then
torch.compile of the module, the decode step's mode), and prints, at 1 and 128 rows:
the largest difference from the exact product of the same bf16 values, and the median
time per call against the plain bf16 Linear compiled the same way.

    python bench/probes/fp32_logits.py [--device cuda] [--mode max-autotune-no-cudagraphs]

Name the card with the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def cast_forward(head: Any) -> Any:
    """The fp32 product by casts: the input and the weight to fp32 first."""
    import torch

    def forward(hidden: Any) -> Any:
        return torch.nn.functional.linear(hidden.float(), head.weight.float())

    return forward


class Model:
    def __init__(self, head: Any) -> None:
        self.head = head

    def get_output_embeddings(self) -> Any:
        return self.head


def timed(fn: Any, x: Any, sync: Any, runs: int = 50) -> float:
    for _ in range(5):
        fn(x)
    sync()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(x)
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--mode", default="max-autotune-no-cudagraphs")
    parser.add_argument("--rows", default="1,128", help="comma-separated row counts")
    parser.add_argument("--heads", default="smollm2,gemma3")
    args = parser.parse_args()
    import torch

    from builders.causal_lm.backends.inductor import fp32_logits

    dev = args.device
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {name}, mode {args.mode}")
    torch.manual_seed(0)
    heads = {"smollm2": ("SmolLM2 head", 576, 49152), "gemma3": ("Gemma 3 270M head", 640, 262144)}
    for label, hidden, vocab in (heads[h] for h in args.heads.split(",")):
        plain = torch.nn.Linear(hidden, vocab, bias=False).to(dev, torch.bfloat16).eval()
        kinds: dict[str, Any] = {"bf16 Linear": plain}
        if dev == "cuda":
            fp32 = torch.nn.Linear(hidden, vocab, bias=False).to(dev, torch.bfloat16).eval()
            fp32.weight.data.copy_(plain.weight.data)
            fp32_logits(Model(fp32))
            kinds["fp32 logits"] = fp32
        cast = torch.nn.Linear(hidden, vocab, bias=False).to(dev, torch.bfloat16).eval()
        cast.weight.data.copy_(plain.weight.data)
        cast.forward = cast_forward(cast)  # type: ignore[method-assign]
        kinds["fp32 casts"] = cast
        for rows in (int(r) for r in args.rows.split(",")):
            x = torch.randn(1, rows, hidden, device=dev, dtype=torch.bfloat16)
            exact = x.double() @ plain.weight.double().T
            out = {}
            for kind, module in kinds.items():
                program = torch.export.export(module, (x,))
                step = torch.compile(program.module(), mode=args.mode, fullgraph=True)
                with torch.inference_mode():
                    y = step(x)
                    us = timed(step, x, sync)
                err = (y.double() - exact).abs().max().item()
                out[kind] = us
                print(
                    f"{label} {vocab} x {hidden}, {rows:3d} rows, {kind:11s}: out {y.dtype}, "
                    f"max |diff| from the exact product {err:.2e}, {us:8.1f} us a call"
                )
            for kind in kinds:
                print(f"  {kind} / bf16 Linear: {out[kind] / out['bf16 Linear']:.2f}x time")


if __name__ == "__main__":
    main()

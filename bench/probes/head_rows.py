"""The output projection of a one-row decode step at Qwen3-8B's geometry (hidden 4096,
vocabulary 151,936, bf16 weights, fp32 logits), compiled as the engine compiles the decode
program (max-autotune-no-cudagraphs; the weight a graph input, as the programs take it;
--engine-options: with runtime/inductor.py's CUDA_OPTIONS too), timed on the GPU: the
casts to fp32 before the product (fp32_logits' former one-row form), and mm's out_dtype
over the row repeated to M rows (bench/results/head_rows_2026-12-07.txt).

    python bench/probes/head_rows.py [--vocab 151936] [--hidden 4096] [--engine-options]
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument(
        "--engine-options",
        action="store_true",
        help="compile under runtime/inductor.py's CUDA_OPTIONS too (no coordinate-descent "
        "tuning, no dynamic R0_BLOCK scaling), as the engine does",
    )
    args = parser.parse_args()
    options = dict(torch._inductor.list_mode_options("max-autotune-no-cudagraphs"))
    if args.engine_options:
        options |= {"coordinate_descent_tuning": False, "dynamic_scale_rblock": False}
    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(args.vocab, args.hidden, device="cuda", dtype=torch.bfloat16, generator=g)
    x = torch.randn(1, args.hidden, device="cuda", dtype=torch.bfloat16, generator=g)
    exact = x.double() @ w.double().t()

    def casts(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x.float(), w.float())

    def casts_argmax(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = torch.nn.functional.linear(x.float(), w.float())
        return out, out.argmax(-1)

    def rows(m: int):
        def head(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return torch.mm(x.expand(m, -1), w.t(), out_dtype=torch.float32)[:1]

        return head

    variants = {
        "casts (fp32 linear)": casts,
        "casts, then argmax": casts_argmax,
        **{f"mm out_dtype, {m} rows": rows(m) for m in (1, 2, 8)},
    }
    print(torch.cuda.get_device_name(), torch.__version__, f"weight {w.numel() * 2 / 1e9:.2f} GB")
    for label, fn in variants.items():
        start = time.perf_counter()
        compiled = torch.compile(fn, options=options)
        with torch.inference_mode():
            out = compiled(x, w)
            torch.cuda.synchronize()
            built = time.perf_counter() - start
            for _ in range(5):
                compiled(x, w)
            torch.cuda.synchronize()
            n = 50
            begin = time.perf_counter()
            for _ in range(n):
                compiled(x, w)
            torch.cuda.synchronize()
            us = (time.perf_counter() - begin) / n * 1e6
        out = out[0] if isinstance(out, tuple) else out
        err = (out.double() - exact).abs().max().item()
        gbs = w.numel() * 2 / (us * 1e-6) / 1e9
        print(
            f"{label:24} {us:8.1f} us ({gbs:5.0f} GB/s of the weight) out {out.dtype} "
            f"max |err| {err:.2e}; compile {built:.0f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Is each of torch's sdpa backends deterministic at a decode step's shapes (issue 39)?

bench/probes/determinism_paths.py found the real SmolLM2 bf16 inductor bundle decoding
one prompt differently twice in one process, from the same state, while its prefill
program gave the same bits everywhere. The decode step is the one program whose
attention runs on cuDNN's (runtime/inductor.py DECODE_ATTENTION: bf16 tries
CUDNN_ATTENTION first). This probe calls scaled_dot_product_attention with the same
inputs many times per backend, eagerly and replayed in a CUDA graph, at the decode
step's shapes (kiln's folded form: a KV head's query heads as rows of one head; and
sdpa's own enable_gqa form for one query, which the bf16 engines used; an additive mask
over every slot of the static cache, the first `visible` real), and
counts the distinct outputs (1: deterministic) and the time per call.

    python bench/probes/sdpa_determinism.py [--calls 500] [--length 2048] [--visible 300]

Defaults are SmolLM2-135M's attention (9 query heads, 3 KV heads, head_dim 64).
Name the card with the figures.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.float().cpu().numpy().tobytes()).hexdigest()[:12]


def inputs(
    args: argparse.Namespace, rows: int, dtype: torch.dtype, heads: int | None = None
) -> tuple[torch.Tensor, ...]:
    """q [B, heads (default: the KV heads, kiln's folded form), rows, D], k/v over the
    whole static cache, an additive mask with the first `visible` slots real."""
    g = torch.Generator(device="cuda").manual_seed(0)
    kv, d, length = args.kv_heads, args.head_dim, args.length
    q = torch.randn(args.batch, heads or kv, rows, d, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(args.batch, kv, length, d, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(args.batch, kv, length, d, device="cuda", dtype=dtype, generator=g)
    mask = torch.full(
        (args.batch, 1, rows, length), torch.finfo(dtype).min, device="cuda", dtype=dtype
    )
    mask[..., : args.visible] = 0
    return q, k, v, mask


def trial(backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor,
          calls: int, gqa: bool = False) -> str:  # fmt: skip
    F = functools.partial(torch.nn.functional.scaled_dot_product_attention, enable_gqa=gqa)
    with sdpa_kernel([getattr(SDPBackend, backend)]):
        try:
            first = F(q, k, v, attn_mask=mask)
        except RuntimeError as exc:
            return f"{backend}: does not take these inputs ({str(exc).splitlines()[0][:90]})"
        eager = {digest(F(q, k, v, attn_mask=mask)) for _ in range(calls)}
        static = torch.empty_like(first)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                static.copy_(F(q, k, v, attn_mask=mask))
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static.copy_(F(q, k, v, attn_mask=mask))
        replayed = set()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            graph.replay()
            replayed.add(digest(static))
        torch.cuda.synchronize()
        graph_t = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(calls):
            graph.replay()
        torch.cuda.synchronize()
        us = (time.perf_counter() - start) / calls * 1e6
    same = digest(first) in eager
    return (
        f"{backend}: {len(eager)} distinct outputs in {calls} eager calls, {len(replayed)} in "
        f"{calls} graph replays (first call among them: {same}); {us:.1f} us a replay "
        f"(with digests {graph_t / calls * 1e6:.0f} us)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=9)
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--visible", type=int, default=300)
    args = parser.parse_args()
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN "
        f"{torch.backends.cudnn.version()}"
    )
    group = args.heads // args.kv_heads
    for dtype in (torch.bfloat16, torch.float16):
        shapes = (
            ("decode step, folded", group, None, False),
            # what the bf16 engines ran before 15c02fa: sdpa's own grouped-query form for
            # one query, which cuDNN serves with its split-KV decode kernel
            ("decode step, enable_gqa", 1, args.heads, True),
            ("prefill chunk of 64, folded", 64 * group, None, False),
        )
        for label, rows, heads, gqa in shapes:
            q, k, v, mask = inputs(args, rows, dtype, heads)
            print(f"== {str(dtype)[6:]} {label}: q {list(q.shape)}, k/v {list(k.shape)}, "
                  f"mask {list(mask.shape)} ({args.visible} visible)")  # fmt: skip
            for backend in ("CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "FLASH_ATTENTION", "MATH"):
                print("  ", trial(backend, q, k, v, mask, args.calls, gqa), flush=True)


if __name__ == "__main__":
    main()

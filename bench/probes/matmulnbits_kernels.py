"""onnxruntime CPU kernels for one decode step's linear layers, at a real model's shapes.

    PYTHONPATH=$PWD .venv/bin/python bench/probes/matmulnbits_kernels.py [--threads 1]

For each linear layer shape of SmolLM2-135M (hidden 576, intermediate 1536, 9 query
and 3 KV heads of 64; 30 layers; the tied lm_head stays fp32 in every precision and
is left out), one row of activations (batch 1 decode) through:

  fp32         MatMul with an fp32 weight
  dq-int8      DequantizeLinear(int8, per channel) -> Transpose -> MatMul, as kiln's
               int8-wo engines ran before MatMulNBits (the engine step's Q/DQ
               transformers disabled, so ConstantFolding skips the DequantizeLinear)
  nbits{4,8}   com.microsoft MatMulNBits, block 64 (576 = 9 x 64; 1536 = 24 x 64), at
               accuracy_level 1 (fp32 A) and 4 (A in int8 per block)

and prints microseconds per layer and per token (the 30 layers' linears summed), with
the ratio to fp32. It times kernels only: attention, norms and the lm_head are the
same in every precision, so a bundle's decode speedup is smaller. Random weights:
kernel time does not depend on the values.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

HIDDEN, INTER, KV = 576, 1536, 192
# (name, K, N, count per layer)
SHAPES = [
    ("q/o", HIDDEN, HIDDEN, 2),
    ("k/v", HIDDEN, KV, 2),
    ("gate/up", HIDDEN, INTER, 2),
    ("down", INTER, HIDDEN, 1),
]
LAYERS, BLOCK = 30, 64


def session(nodes: list[Any], inits: list[Any], k: int, n: int, threads: int, fold: bool) -> Any:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, n])],
        inits,
    )
    ops = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    from builders.causal_lm.backends.onnxruntime import QDQ_TRANSFORMERS

    off = [] if fold else list(QDQ_TRANSFORMERS)
    return ort.InferenceSession(
        helper.make_model(graph, opset_imports=ops).SerializeToString(),
        so,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=off,
    )


def cases(k: int, n: int, threads: int) -> dict[str, Any]:
    import numpy as np
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    out = {
        "fp32": session(
            [helper.make_node("MatMul", ["A", "W"], ["Y"])],
            [numpy_helper.from_array(rng.standard_normal((k, n)).astype("f4"), "W")],
            k,
            n,
            threads,
            True,
        ),
        "dq-int8": session(
            [
                helper.make_node("DequantizeLinear", ["q", "s"], ["Wt"], axis=0),
                helper.make_node("Transpose", ["Wt"], ["W"], perm=[1, 0]),
                helper.make_node("MatMul", ["A", "W"], ["Y"]),
            ],
            [
                numpy_helper.from_array(rng.integers(-127, 128, (n, k)).astype("i1"), "q"),
                numpy_helper.from_array(rng.random(n).astype("f4"), "s"),
            ],
            k,
            n,
            threads,
            False,
        ),
    }
    blocks = k // BLOCK
    for bits in (4, 8):
        packed = rng.integers(0, 256, (n, blocks, BLOCK * bits // 8)).astype("u1")
        scales = rng.random((n, blocks)).astype("f4")
        for level in (1, 4):
            node = helper.make_node(
                "MatMulNBits",
                ["A", "B", "S"],
                ["Y"],
                domain="com.microsoft",
                K=k,
                N=n,
                bits=bits,
                block_size=BLOCK,
                accuracy_level=level,
            )
            inits = [numpy_helper.from_array(packed, "B"), numpy_helper.from_array(scales, "S")]
            out[f"nbits{bits}-L{level}"] = session([node], inits, k, n, threads, True)
    return out


def micros(sess: Any, k: int, budget: float = 0.3) -> float:
    """Median microseconds of one run over 5 rounds of about `budget` seconds each."""
    import numpy as np

    a = {"A": np.random.default_rng(1).standard_normal((1, k)).astype("f4")}
    start = time.perf_counter()
    sess.run(None, a)
    reps = max(1, int(budget / max(time.perf_counter() - start, 1e-6)))
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            sess.run(None, a)
        rounds.append((time.perf_counter() - start) / reps * 1e6)
    return statistics.median(rounds)


def main() -> None:
    import os

    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    print(f"{args.threads} thread(s), load {os.getloadavg()[0]:.2f}; microseconds per layer")
    total: dict[str, float] = {}
    for name, k, n, count in SHAPES:
        row = {c: micros(s, k) for c, s in cases(k, n, args.threads).items()}
        for c, us in row.items():
            total[c] = total.get(c, 0.0) + count * LAYERS * us
        cells = "  ".join(f"{c} {us:8.1f}" for c, us in row.items())
        print(f"{name:8s} K={k:5d} N={n:5d} {cells}")
    print("per token (30 layers' linears):")
    for c, us in total.items():
        print(f"  {c:12s} {us / 1000:8.2f} ms   x{total['fp32'] / us:5.2f} vs fp32")


if __name__ == "__main__":
    main()

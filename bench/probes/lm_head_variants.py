"""What an int4 output projection costs SmolLM2's int4-awq bundle on kiln's int4 gates.

    PYTHONPATH=. .venv/bin/python bench/probes/lm_head_variants.py --bundle INT4_AWQ_BUNDLE \\
        --hf HF_DIR [--positions 512]

kiln's int4-awq recipe keeps the output projection (lm_head, 49,152 x 576) in int8;
onnxruntime-genai's int4 models and the recipe smollm2-135m-instruct-int4-awq-head4 put
it in int4 and decode faster. This takes the bundle's engine, replaces its lm_head with
each variant below (everything else unchanged), and scores every copy the way the
validate step scores (builders/causal_lm/scoring.py: teacher-forced log-perplexity ratio
and next-token agreement against HF fp32 over the first --positions positions of the
shipped evaluation text):

- int8 / int4 blocks of 64, 32, 16: symmetric, rounded to nearest by onnxruntime's own
  MatMulNBits quantizer (what precision.lm_head does);
- int4 asymmetric, and HQQ (onnxruntime's data-free half-quadratic quantizer), blocks 32;
- int4 AWQ-style: each input channel scaled by mean|x|^alpha over the calibration
  text's final-norm outputs (builders/data/texts/calibration.txt, never the evaluation
  text), the inverse folded into the final norm's weight, then rounded to nearest;
- int4 with the input channels of largest mean|x| (same calibration text) kept in an
  fp32 product beside it (quantize_lm_head, as precision.lm_head_outliers builds it):
  the int4 weight has those rows zeroed, a Gather + MatMul +
  Add adds them back (mixed-precision decomposition, as LLM.int8() does for outliers).

Each copy lives in a temporary folder; the bundle is not changed. Decode speed is
bench/chat_peers.py's business (pass it a copy with --keep DIR). No asserts.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# name: (bits, block, method, alpha or outlier channels)
VARIANTS: dict[str, tuple[int, int, str, float]] = {
    "fp32 (no quantization)": (32, 0, "fp32", 0),
    "int8, blocks of 64 (the recipe's)": (8, 64, "rtn", 0),
    "int4, blocks of 64": (4, 64, "rtn", 0),
    "int4, blocks of 32 (head4, onnxruntime-genai's)": (4, 32, "rtn", 0),
    "int4, blocks of 16": (4, 16, "rtn", 0),
    "int4 asymmetric, blocks of 32": (4, 32, "asym", 0),
    "int4 HQQ, blocks of 32": (4, 32, "hqq", 0),
    "int4 AWQ-style alpha 0.25, blocks of 32": (4, 32, "awq", 0.25),
    "int4 AWQ-style alpha 0.5, blocks of 32": (4, 32, "awq", 0.5),
    "int4 + 8 fp32 outlier channels": (4, 32, "outliers", 8),
    "int4 + 32 fp32 outlier channels": (4, 32, "outliers", 32),
}


def reference(hf: Path, positions: int) -> dict[str, Any]:
    """HF fp32's per-position NLL and top-1 over the validate windows, its lm_head
    weight, and the final-norm outputs over the calibration text."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from builders.causal_lm.scoring import TEXT, next_token_scores, windows
    from builders.data import texts

    tokenizer = AutoTokenizer.from_pretrained(hf)
    model = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32).eval()
    chunks = windows(tokenizer(TEXT.read_text())["input_ids"], positions)
    nll: list[float] = []
    top: list[int] = []
    with torch.inference_mode():
        for window in chunks:
            a, b = next_token_scores(model(torch.tensor([window])).logits[0].numpy(), window)
            nll += a.tolist()
            top += b.tolist()
        calibration = tokenizer(texts.path("calibration").read_text())["input_ids"][:512]
        out = model(torch.tensor([calibration]), output_hidden_states=True)
    return {
        "windows": chunks,
        "nll": np.asarray(nll),
        "top": np.asarray(top),
        "weight": model.lm_head.weight.detach().numpy().T.copy(),  # [K, N], MatMul's B
        "activations": out.hidden_states[-1][0].numpy(),  # after the final norm
    }


def variant(
    bundle: Path, folder: Path, ref: dict[str, Any], spec: tuple[int, int, str, float]
) -> None:
    """A copy of `bundle` in `folder` whose engine's lm_head is `spec`."""
    import onnx
    from onnx import helper, numpy_helper

    bits, block, method, extra = spec
    for f in bundle.iterdir():
        if not f.name.startswith("."):
            shutil.copy(f, folder / f.name)
    model = onnx.load(str(folder / "engine.onnx"), load_external_data=False)
    graph = model.graph
    head = next(n for n in graph.node if "logits" in n.output)
    weight = ref["weight"].copy()
    mean = np.abs(ref["activations"]).mean(0)
    if method == "awq":
        scale = mean**extra
        scale = scale / np.sqrt(scale.max() * scale.min())
        weight *= scale[:, None]
        producer = {o: n for n in graph.node for o in n.output}
        norm = producer[head.input[0]]
        while "LayerNormalization" not in norm.op_type:
            norm = producer[norm.input[0]]
        gamma = norm.input[2] if norm.op_type.startswith("Skip") else norm.input[1]
        tensor = next(t for t in graph.initializer if t.name == gamma)
        value = numpy_helper.to_array(tensor, base_dir=str(folder))
        tensor.CopyFrom(numpy_helper.from_array((value / scale).astype(np.float32), gamma))
    name = "lm_head_variant_weight"
    graph.initializer.append(numpy_helper.from_array(weight.astype(np.float32), name))
    plain = helper.make_node("MatMul", [head.input[0], name], list(head.output), "lm_head/MatMul")
    index = list(graph.node).index(head)
    graph.node.remove(head)
    graph.node.insert(index, plain)
    if method == "outliers":  # the product's own rewrite (precision.lm_head_outliers)
        from builders.causal_lm._nbits import quantize_lm_head

        channels = [int(c) for c in np.argsort(-mean)[: int(extra)]]
        model, _ = quantize_lm_head(model, bits, block, channels)
    elif method != "fp32":
        model = quantize(model, bits, block, method)
    onnx.save(model, str(folder / "engine.onnx"))


def quantize(model: Any, bits: int, block: int, method: str) -> Any:
    import logging

    from onnxruntime.quantization import matmul_nbits_quantizer as mnq

    from builders.causal_lm._nbits import ACCURACY_LEVEL

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    symmetric = method not in ("asym", "hqq")
    config: Any
    if method == "hqq":
        config = mnq.HQQWeightOnlyQuantConfig(block_size=block, bits=bits)
    else:
        config = mnq.DefaultWeightOnlyQuantConfig(
            block_size=block, is_symmetric=symmetric, accuracy_level=ACCURACY_LEVEL, bits=bits
        )
    quantizer = mnq.MatMulNBitsQuantizer(
        model,
        bits=bits,
        block_size=block,
        is_symmetric=symmetric,
        accuracy_level=ACCURACY_LEVEL,
        nodes_to_include=["lm_head/MatMul"],
        algo_config=config,
    )
    quantizer.process()
    out = quantizer.model.model
    for node in out.graph.node:  # HQQ's config has no accuracy level of its own
        if node.op_type == "MatMulNBits" and node.name.startswith("lm_head"):
            for a in node.attribute:
                if a.name == "accuracy_level":
                    a.i = ACCURACY_LEVEL
    return out


def score(folder: Path, ref: dict[str, Any]) -> tuple[float, float]:
    import runtime
    from builders.causal_lm.scoring import next_token_scores

    bundle = runtime.open(folder, threads=2, expect=runtime.Bundle)
    nll: list[float] = []
    top: list[int] = []
    for window in ref["windows"]:
        a, b = next_token_scores(bundle.logits(window), window)
        nll += a.tolist()
        top += b.tolist()
    return float(np.mean(nll) - ref["nll"].mean()), float(np.mean(np.asarray(top) == ref["top"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True, help="an int4-awq bundle folder")
    parser.add_argument("--hf", type=Path, required=True, help="the HF fp32 checkpoint folder")
    parser.add_argument("--positions", type=int, default=512)
    parser.add_argument("--keep", type=Path, help="keep the copies under this folder")
    parser.add_argument(
        "--out", type=Path, help="default bench/probes/results/lm_head_variants_<date>.txt"
    )
    args = parser.parse_args()
    from kiln.catalog.yaml import load_yaml_model
    from kiln.evidence.gates import bound
    from kiln.schema import Thresholds

    gates = load_yaml_model(Thresholds, ROOT / "thresholds" / "quantized-int4.yaml")
    found = {g.metric: bound(g, gates).threshold for g in gates.gates if g.statistical}
    ppl, agree = found["log_perplexity_ratio"], found["next_token_agreement"]
    ref = reference(args.hf, args.positions)
    lines = [
        f"lm_head variants {time.strftime('%Y-%m-%d %H:%M')}: {args.bundle}",
        f"command: python bench/probes/lm_head_variants.py --bundle {args.bundle} --hf {args.hf}",
        f"against HF fp32 over {args.positions} positions; int4 gates: log-ppl ratio <= "
        f"{ppl:.4f}, agreement >= {agree:.4f}",
        f"{'lm_head':<48} {'log-ppl ratio':>13} {'agreement':>10}  gates",
    ]
    work = Path(args.keep or tempfile.mkdtemp(prefix="lm_head_variants-"))
    for name, spec in VARIANTS.items():
        folder = work / name.split(" (")[0].replace(",", "").replace(" ", "-")
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        variant(args.bundle, folder, ref, spec)
        ratio, agreement = score(folder, ref)
        verdict = "pass" if ratio <= ppl and agreement >= agree else "fail"
        lines.append(f"{name:<48} {ratio:>13.4f} {agreement:>10.4f}  {verdict}")
        print(lines[-1], flush=True)
        if args.keep is None:
            shutil.rmtree(folder)
    if args.keep is None:
        shutil.rmtree(work)
    text = "\n".join(lines) + "\n"
    dated = f"lm_head_variants_{time.strftime('%Y-%m-%d')}.txt"
    out = args.out or ROOT / "bench" / "probes" / "results" / dated
    out.write_text(text)
    print(text + f"written to {out}")


if __name__ == "__main__":
    main()

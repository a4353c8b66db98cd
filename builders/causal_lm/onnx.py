"""onnx: turn the exported graph into the one the engine builds from.

It folds constants and removes dead nodes (onnxscript's optimizer roughly halves
the node count of a legacy export), checks the model with full shape inference
(both: builders/common/graph.py), checks the I/O contract the runtime relies on,
and records that contract in io.json. (The export step has fused the MatMuls that
share an input: q/k/v, gate/up.)

Quantized graphs (modelopt's Q/DQ) come in two forms (`qdq`): `standard`, where the
TensorRT-only ops are rewritten to standard ONNX and weights are stored quantized
(builders/causal_lm/_qdq.py), for onnxruntime; and `tensorrt`, modelopt's own ops kept as they
are, for TensorRT's ONNX parser, which registers them by name (api_facts 1).

Weight-only graphs (int8-wo, int4-awq) in the standard form then run each quantized
MatMul as onnxruntime's fused MatMulNBits over the same integers and scales
(builders/causal_lm/_nbits.py); io.json's `nbits` records how many and which layers
keep DequantizeLinear -> MatMul, and why. precision.lm_head int8|int4 makes the output
projection MatMulNBits too (onnxruntime's round-to-nearest quantizer; io.json's
`nbits.lm_head`), with precision.lm_head_outliers its input channels of largest mean
|x| (ranked by the quantize step) in an fp32 product beside it.

Then the per-layer shape computations that symbolic shape inference proves equal
are computed once (graph.share_shapes): a 30-layer Llama's decode step runs about
1,600 fewer nodes. Last, in an unquantized graph each MatMul that reads its weight
as Transpose(the checkpoint's matrix) becomes FusedMatMul(transB=1) over it, and the
saved graph's weights that are the export's bytes are read from copies of the
export's files, so the store holds them once (builders/common/weights.py).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer


# precisions whose quantized MatMuls become MatMulNBits (activations stay fp32)
WEIGHT_ONLY = ("int8-wo", "int4-awq")


class LmHead(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bits: int = Field(ge=4, le=8)
    block_size: int | None = None
    outliers: int = Field(0, ge=0, description="Input channels kept in fp32 beside it.")


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    optimize: bool = Field(True, description="Run onnxscript's graph optimizer.")
    qdq: str = Field(
        pattern="^(none|standard|tensorrt)$",
        description="How a quantized graph writes Q/DQ: standard ONNX, or TensorRT's own "
        "ops; 'none' for an fp32 graph.",
    )
    task: str = Field(
        pattern="^(text-generation|image-text-to-text)$", description="The recipe's task."
    )
    lm_head: LmHead | None = Field(None, description="precision.lm_head's rewrite.")


def build(request: Request, writer: Writer) -> None:
    from builders.causal_lm.export import io_names
    from builders.common import graph, weights

    opts = Options.model_validate(request.options)
    source = request.inputs["export"]
    exported = json.loads((source / "export.json").read_text())
    model = graph.load(source / "model.onnx")
    before = len(model.graph.node)
    request.log(f"optimizing {before} nodes: constant folding, dead nodes, common subexpressions")
    if opts.optimize:  # quantized graphs: fold the weight subgraphs around the Q/DQ ops too
        model = graph.tidy(model, fold_weights=opts.qdq != "none")
    if opts.qdq == "standard":
        quantized = exported.get("quantization", {}).get("weights")
        ranked = exported.get("quantization", {}).get("lm_head_outliers", {})
        model, nbits = _standard(
            request, model, quantized in WEIGHT_ONLY, opts.lm_head, ranked.get("channels", [])
        )
        if nbits is not None:
            exported["nbits"] = nbits
    if opts.optimize and opts.qdq != "tensorrt":  # TensorRT's own ops: nothing to infer
        shared, why = graph.share_shapes(model)
        request.log(f"{shared} Shape nodes share an equal one" + (f" ({why})" if why else ""))
        if shared:
            model = graph.tidy(model)
    if opts.qdq == "none":  # weights read as the checkpoint stores them (export.py)
        model, fused = weights.fuse_transposed(model)
        request.log(f"{fused} MatMuls read their weight as stored (FusedMatMul transB)")
    saved = writer.path("model.onnx")
    graph.save(model, saved)
    shared, new = weights.share_data(saved, weights.graph_starts(source / "model.onnx"))
    request.log(f"weights: {shared:,d} bytes are the export's, {new:,d} new")
    # TensorRT's own ops have no ONNX schema; the checker cannot infer through them
    inputs, outputs = graph.check(model, full=opts.qdq != "tensorrt", saved=saved)
    entries = exported["kv_cache"]["entries"]
    expected_in, _ = io_names(
        entries,
        exported.get("logits_to_keep", False),
        "image_token_id" in exported,
        "deepstack_levels" in exported,  # Qwen3-VL's DeepStack rows
    )
    names = [v["name"] for v in inputs]
    if names != expected_in:
        raise request.error(
            f"the exported graph's inputs {names} break the KV-cache contract",
            "this is a kiln bug in builders/causal_lm/export.py; please report it",
        )
    if opts.qdq != "none":
        from builders.causal_lm._qdq import trt_ops

        exported["qdq"] = {"form": opts.qdq, "trt_ops": trt_ops(model)}
    writer.write_json("io.json", {**exported, "inputs": inputs, "outputs": outputs})
    matmuls = sum(n.op_type == "MatMul" for n in model.graph.node)
    request.log(f"{before} -> {len(model.graph.node)} nodes ({matmuls} MatMul), checked")


def _standard(
    request: Request,
    model: Any,
    weight_only: bool,
    lm_head: LmHead | None,
    ranked: list[int],
) -> tuple[Any, dict[str, Any] | None]:
    from builders.causal_lm._nbits import ACCURACY_LEVEL, quantize_lm_head, to_matmul_nbits
    from builders.causal_lm._qdq import NoStandardForm, fold_weight_quantization, to_standard
    from builders.common import graph

    try:
        model, rewritten = to_standard(model)
    except NoStandardForm as exc:
        raise request.unsupported(
            f"onnxruntime cannot run this precision: {exc}; it needs TensorRT "
            "(build.backend: tensorrt)"
        ) from None
    folded = fold_weight_quantization(model)
    request.log(f"rewrote {rewritten or 'no'} TensorRT ops; {folded} weights stored quantized")
    if not weight_only:
        return graph.tidy(model), None
    converted, kept = to_matmul_nbits(model)
    for layer, why in kept.items():
        request.log(f"{layer} keeps DequantizeLinear -> MatMul: {why}")
    request.log(f"{converted} MatMuls -> MatMulNBits (accuracy_level {ACCURACY_LEVEL})")
    nbits: dict[str, Any] = {
        "matmul_nbits": converted,
        "accuracy_level": ACCURACY_LEVEL,
        "kept_dq": kept,
    }
    if lm_head is not None:
        if len(ranked) < lm_head.outliers:
            raise request.error(
                f"precision.lm_head_outliers asks for {lm_head.outliers} channels; the "
                f"quantize step ranked {len(ranked)}",
                "this is a kiln bug in kiln/plan (the quantize step's options); please report it",
            )
        try:
            model, nbits["lm_head"] = quantize_lm_head(
                model, lm_head.bits, lm_head.block_size, ranked[: lm_head.outliers]
            )
        except ValueError as exc:
            raise request.error(f"precision.lm_head: {exc}", "remove precision.lm_head") from None
        request.log(f"lm_head -> MatMulNBits {nbits['lm_head']}")
    return graph.tidy(model), nbits

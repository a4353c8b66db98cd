"""Weight-only quantized MatMuls as onnxruntime's fused com.microsoft MatMulNBits.

A weight-only graph (int8-wo, int4-awq) leaves the standard rewrite (_qdq.py) as

    DequantizeLinear(q: int8|int4 initializer, scale, zero) -> data movement -> MatMul(x, .)

where the data movement is what modelopt's export and the optimizer left between
the weight and the MatMul: Transpose (a Linear's [N, K] weight used as [K, N]), and
for blocked int4, Reshape + Slice that undo the padding of K to a whole block. On
onnxruntime's CPU provider that DequantizeLinear runs at every step and writes the
whole fp32 weight before the MatMul reads it (issue 15: 1.29 tokens/s int8-wo
against 17.1 fp32 on a 135M model).

Each such MatMul becomes MatMulNBits (onnxruntime 1.32 contrib op: A, B uint8
[N, ceil(K/block), block*bits/8] with element k of column n at block k // block,
low nibble first for 4 bits, scales [N, ceil(K/block)], zero point 2^(bits-1) when
absent) holding the SAME integers and scales modelopt calibrated: the data movement
is replayed on the integers and on the scales broadcast to the weight's shape
(onnx's reference evaluator runs the graph's own nodes), so nothing is re-quantized.
modelopt's int8 and int4 quantizers are symmetric (zero point 0), so the unsigned
codes are q + 2^(bits-1) and no zero-point input is written. int8's per-channel
scale is one value per column; it is repeated per block. onnx_ir packs the 4-bit
codes (ONNX's own nibble order, which is MatMulNBits').

A layer keeps its DequantizeLinear -> MatMul when MatMulNBits cannot express it:
a weight that is not 2-D, a non-zero zero point, a dtype other than int8/int4, a
block size that is not a power of two >= 16, or scales that are not constant over
each block of K after the data movement (for example a blocked axis that is not K,
or a K offset that breaks blocks). Each such layer is returned with its reason.

With precision.lm_head int8 or int4 the output projection, which modelopt leaves in
fp32, becomes MatMulNBits as well (quantize_lm_head): rounded to nearest by
onnxruntime's own MatMulNBits quantizer, as onnxruntime-genai's model builder does;
with precision.lm_head_outliers, its input channels of largest mean |x| stay fp32.

`accuracy_level` is MatMulNBits' "minimum precision of A": 1 computes in fp32 (the
fake-quant arithmetic up to summation order); 4 quantizes A to int8 per block of K
at run time (scale max|a|/127) and uses integer dot products. On the project's
AVX2 CPU (onnxruntime 1.32, K 576, N 1536, batch 1, 1 thread) level 1 is *slower*
than the fp32 MatMul for 4 bits (165 vs 87 us) and 20x slower for 8 bits (MLAS has
no 8-bit fp32 kernel and dequantizes per call), while level 4 is 50-55 us for both:
so the engines use level 4, the level onnxruntime-genai's model builder uses on
CPU. tests/builds/test_nbits.py bounds both levels per layer.
"""

from __future__ import annotations

from typing import Any

MOVES = ("Transpose", "Reshape", "Slice", "Squeeze", "Unsqueeze", "Identity")
BITS = {3: 8, 22: 4}  # onnx.TensorProto.INT8, INT4
ACCURACY_LEVEL = 4  # int8 activations per block (see the docstring's measurement)
PER_CHANNEL_BLOCK = 128  # int8 per-channel scales: any block works; MLAS's common size


def per_channel_block(k: int) -> int:
    """A block for a per-channel scale: the largest of 128, 64, 32, 16 dividing K (no
    padding), else 128 (the last block padded)."""
    return next((b for b in (128, 64, 32, 16) if k % b == 0), PER_CHANNEL_BLOCK)


def to_matmul_nbits(model: Any, accuracy_level: int = ACCURACY_LEVEL) -> tuple[int, dict[str, str]]:
    """Rewrite `model` in place; returns how many MatMuls became MatMulNBits and, for
    each MatMul fed by a quantized weight that stays DequantizeLinear -> MatMul, why.
    The weights' DequantizeLinear and data movement are left dead for the optimizer."""
    from onnx import helper

    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    converted, kept, nodes = 0, {}, []
    for node in graph.node:
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        chain, dq = _weight_chain(producer, node.input[1])
        if dq is None:
            nodes.append(node)
            continue
        try:
            packed, scales, attrs = _pack(graph, dq, chain)
        except _Keep as why:
            kept[node.name] = str(why)
            nodes.append(node)
            continue
        b_name, s_name = f"{node.name}_nbits_B", f"{node.name}_nbits_scales"
        graph.initializer.extend([_tensor(packed, b_name), _tensor(scales, s_name)])
        nodes.append(
            helper.make_node(
                "MatMulNBits",
                [node.input[0], b_name, s_name],
                list(node.output),
                f"{node.name}_nbits",
                domain="com.microsoft",
                accuracy_level=accuracy_level,
                **attrs,
            )
        )
        converted += 1
    del graph.node[:]
    graph.node.extend(nodes)
    if converted and not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return converted, kept


def quantize_lm_head(
    model: Any,
    bits: int,
    block_size: int | None = None,
    outliers: list[int] | None = None,
    accuracy_level: int = ACCURACY_LEVEL,
) -> tuple[Any, dict[str, Any]]:
    """precision.lm_head int8|int4: the MatMul that writes `logits` from an fp32 weight
    becomes MatMulNBits, rounded to nearest by onnxruntime's own quantizer (symmetric,
    `bits` wide, in blocks of `block_size` or per_channel_block(K)). modelopt left this
    layer unquantized, so there are no calibrated integers to keep.

    `outliers` (precision.lm_head_outliers: input channels, the quantize step's ranking
    by mean |x|) stay fp32, as LLM.int8() keeps outlier features: their rows of the
    weight are zeroed before rounding (so they widen no block's scale either) and

        logits = MatMulNBits(x) + MatMul(Gather(x, outliers, axis=-1), W[outliers])

    Returns the model and io.json's record of it; ValueError says why a graph has no
    such MatMul."""
    import logging

    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    root.handlers[:], root.level = handlers, level  # its import calls logging.basicConfig

    graph = model.graph
    node = next((n for n in graph.node if "logits" in n.output), None)
    if node is None or node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
        raise ValueError(f"logits come from {node.op_type if node else 'no node'}, not a MatMul")
    weight = next((t for t in graph.initializer if t.name == node.input[1]), None)
    if weight is None or len(weight.dims) != 2 or weight.data_type != TensorProto.FLOAT:
        raise ValueError("the lm_head MatMul's weight is not a 2-D fp32 initializer")
    k, n = (int(d) for d in weight.dims)
    block = block_size or per_channel_block(k)
    node.name = node.name or "lm_head/MatMul"
    record: dict[str, Any] = {"K": k, "N": n, "bits": bits, "block_size": block}
    if outliers:
        if len(set(outliers)) != len(outliers) or not all(0 <= c < k for c in outliers):
            raise ValueError(f"outlier channels {outliers} are not distinct channels of {k}")
        if sum(x == weight.name for m in graph.node for x in m.input) > 1:
            raise ValueError("the lm_head MatMul's weight is read by another node too")
        full = numpy_helper.to_array(weight).copy()
        channels = np.asarray(outliers, np.int64)
        kept = full[channels].copy()
        full[channels] = 0.0
        weight.CopyFrom(numpy_helper.from_array(full, weight.name))
    settings = {"block_size": block, "is_symmetric": True, "accuracy_level": accuracy_level}
    quantizer = MatMulNBitsQuantizer(
        model,
        bits=bits,
        nodes_to_include=[node.name],
        algo_config=DefaultWeightOnlyQuantConfig(bits=bits, **settings),
        **settings,
    )
    quantizer.process()
    model = quantizer.model.model
    if outliers:
        graph = model.graph
        head = next(m for m in graph.node if "logits" in m.output)
        x, base = head.input[0], "lm_head/outliers"
        head.output[list(head.output).index("logits")] = f"{base}/quantized"
        graph.initializer.extend(
            [
                numpy_helper.from_array(channels, f"{base}/channels"),
                numpy_helper.from_array(kept, f"{base}/weight"),
            ]
        )
        index = list(graph.node).index(head) + 1
        added = [
            helper.make_node(
                "Gather", [x, f"{base}/channels"], [f"{base}/x"], f"{base}/gather", axis=-1
            ),
            helper.make_node(
                "MatMul", [f"{base}/x", f"{base}/weight"], [f"{base}/product"], f"{base}/matmul"
            ),
            helper.make_node(
                "Add", [f"{base}/quantized", f"{base}/product"], ["logits"], f"{base}/add"
            ),
        ]
        for offset, extra in enumerate(added):
            graph.node.insert(index + offset, extra)
        record["outliers"] = [int(c) for c in outliers]
    record["method"] = "round-to-nearest" + (f", {len(outliers)} fp32 channels" if outliers else "")
    return model, {"node": node.name, **record}


class _Keep(Exception):
    """MatMulNBits cannot express this layer; the message says why."""


def _weight_chain(producer: dict[str, Any], name: str) -> tuple[list[Any], Any]:
    """The data-movement nodes between a MatMul's B and a DequantizeLinear (in graph
    order), and that DequantizeLinear; ([], None) when B is not a dequantized weight."""
    chain = []
    node = producer.get(name)
    while node is not None and node.op_type in MOVES and node.domain in ("", "ai.onnx"):
        chain.append(node)
        node = producer.get(node.input[0])
    if node is None or node.op_type != "DequantizeLinear":
        return [], None
    return chain[::-1], node


def _pack(graph: Any, dq: Any, chain: list[Any]) -> tuple[Any, Any, dict[str, int]]:
    import ml_dtypes
    import numpy as np
    import onnx_ir as ir
    from onnx import helper

    from builders.causal_lm._qdq import constant_value

    consts = {t.name: t for t in graph.initializer}
    if dq.input[0] not in consts:
        raise _Keep("the DequantizeLinear's input is not a weight initializer")
    bits = BITS.get(consts[dq.input[0]].data_type)
    if bits is None:
        raise _Keep(f"weight dtype {consts[dq.input[0]].data_type} is not int8 or int4")
    q = constant_value(graph, dq.input[0]).astype(np.int32)
    scale = constant_value(graph, dq.input[1])
    zero = constant_value(graph, dq.input[2]) if len(dq.input) > 2 and dq.input[2] else None
    if scale is None or (len(dq.input) > 2 and dq.input[2] and zero is None):
        raise _Keep("the scale or zero point is not a constant")
    if zero is not None and np.any(zero.astype(np.int32) != 0):
        raise _Keep("non-zero zero points (modelopt's quantizers are symmetric)")
    attrs = {a.name: helper.get_attribute_value(a) for a in dq.attribute}
    full_scale = _broadcast(scale.astype(np.float32), q.shape, attrs)
    weight, scales = (_replay(graph, chain, dq.output[0], x) for x in (q, full_scale))
    if weight.ndim != 2:
        raise _Keep(f"the MatMul's weight has shape {list(weight.shape)}, not [K, N]")
    k, n = weight.shape
    block = int(attrs["block_size"]) if attrs.get("block_size") else per_channel_block(k)
    if block < 16 or block & (block - 1):
        raise _Keep(f"block size {block} is not a power of two >= 16")
    blocks = -(-k // block)
    first = scales[::block]  # [blocks, N]: each block's scale, from its first row of K
    if not np.array_equal(np.repeat(first, block, axis=0)[:k], scales):
        raise _Keep(f"the scales are not constant over blocks of {block} along K={k}")
    offset = 1 << (bits - 1)
    codes = np.full((n, blocks * block), offset, np.int32)  # padding dequantizes to 0
    codes[:, :k] = weight.T + offset
    if bits == 8:
        packed = codes.astype(np.uint8).reshape(n, blocks, block)
    else:  # onnx_ir packs uint4 two per byte, low nibble first (ONNX's layout)
        raw = ir.Tensor(codes.astype(ml_dtypes.uint4)).tobytes()
        packed = np.frombuffer(raw, np.uint8).reshape(n, blocks, block // 2)
    out = {"K": k, "N": n, "bits": bits, "block_size": block}
    return packed, np.ascontiguousarray(first.T, np.float32), out


def _broadcast(scale: Any, shape: tuple[int, ...], attrs: dict[str, Any]) -> Any:
    """The DequantizeLinear's scale at every element of the weight (ONNX semantics:
    per-tensor, per-axis, or blocked along `axis` by `block_size`)."""
    import numpy as np

    if scale.ndim == 0 or scale.size == 1:
        return np.full(shape, scale.reshape(()), np.float32)
    axis = int(attrs.get("axis", 1)) % len(shape)
    if not attrs.get("block_size"):
        view = [1] * len(shape)
        view[axis] = shape[axis]
        return np.broadcast_to(scale.reshape(view), shape).copy()
    repeated = np.repeat(scale, int(attrs["block_size"]), axis=axis)
    return np.take(repeated, np.arange(shape[axis]), axis=axis)


def _replay(graph: Any, chain: list[Any], source: str, value: Any) -> Any:
    """`chain` (the graph's own data-movement nodes) applied to `value` in place of
    the DequantizeLinear's output `source`, by onnx's reference evaluator."""
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    from builders.causal_lm._qdq import constant_value

    if not chain:
        return value
    params = []
    for node in chain:
        for name in node.input[1:]:
            if not name:
                continue
            const = constant_value(graph, name)
            if const is None:
                raise _Keep(f"{node.op_type} {node.name} has a non-constant input {name}")
            params.append(numpy_helper.from_array(const, name))
    sub = onnx.helper.make_graph(
        chain,
        "replay",
        [onnx.helper.make_value_info(source, onnx.TypeProto())],
        [onnx.helper.make_value_info(chain[-1].output[0], onnx.TypeProto())],
        params,
    )
    model = onnx.helper.make_model(sub, opset_imports=[onnx.helper.make_opsetid("", 21)])
    return ReferenceEvaluator(model).run(None, {source: value})[0]


def _tensor(array: Any, name: str) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(array, name)

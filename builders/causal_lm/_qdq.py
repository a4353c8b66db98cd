"""Rewrite modelopt's TensorRT-only quantization ops into standard ONNX.

modelopt's torch export (api_facts 2) writes:
  * int8: standard QuantizeLinear/DequantizeLinear already;
  * fp8: trt::TRT_FP8QuantizeLinear(x, scale) -> trt::TRT_FP8DequantizeLinear(q, scale);
  * int4 (AWQ): trt::DequantizeLinear(w, scale; axis, block_size) over the *float*
    weight, which TensorRT quantizes at build time;
  * nvfp4: trt::TRT_FP4DynamicQuantize / TRT_FP4QDQ, which have no standard op.

onnxruntime runs none of the trt:: ops. The standard forms, which onnxruntime 1.32
runs on CPU (api_facts 2, measured), are:
  * fp8: QuantizeLinear(x, scale, zero_point: float8e4m3fn 0, saturate=1) and
    DequantizeLinear (opset >= 19), as modelopt's own FP8QuantExporter writes them;
  * int4: QuantizeLinear -> DequantizeLinear with block_size and an int4 zero point
    (opset 21), the weight's Q folded offline so the graph stores int4 weights.

Every QuantizeLinear whose input is a constant (a weight) is then folded: the graph
stores int8, float8 or packed int4 weights and dequantizes them at run time. The
arithmetic is ONNX's (round half to even, saturate), which is modelopt's fake-quant
arithmetic; tests/test_quantize.py compares the two on logits.
"""

from __future__ import annotations

from typing import Any

FP8_OPS = {"TRT_FP8QuantizeLinear": "QuantizeLinear", "TRT_FP8DequantizeLinear": "DequantizeLinear"}
NO_STANDARD_FORM = {
    "TRT_FP4DynamicQuantize": "dynamic FP4 quantization has no standard ONNX op "
    "(DynamicQuantizeLinear is uint8 only)",
    "TRT_FP4QDQ": "FP4 DequantizeLinear (opset 23) is NOT_IMPLEMENTED in onnxruntime's "
    "CPU provider (measured with 1.32)",
    "TRT_MXFP8DynamicQuantize": "dynamic MXFP8 quantization has no standard ONNX op",
}
STANDARD_OPSET = 21  # blocked int4 DequantizeLinear


class NoStandardForm(Exception):
    """The graph holds a TensorRT-only op that standard ONNX cannot express."""


def trt_ops(model: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.graph.node:
        if node.domain == "trt":
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def to_standard(model: Any) -> tuple[Any, dict[str, int]]:
    """The same computation with standard ops only; returns it and what was rewritten."""
    import onnx
    from onnx import helper

    found = trt_ops(model)
    blocked = sorted(set(found) & set(NO_STANDARD_FORM))
    if blocked:
        raise NoStandardForm("; ".join(f"{op}: {NO_STANDARD_FORM[op]}" for op in blocked))
    model = onnx.version_converter.convert_version(_without_trt(model), STANDARD_OPSET)
    model = _with_trt_restored(model)
    graph = model.graph
    zero_fp8 = _zero(graph, "kiln_fp8_zero", onnx.TensorProto.FLOAT8E4M3FN)
    nodes = []
    for node in graph.node:
        if node.domain != "trt":
            nodes.append(node)
        elif node.op_type in FP8_OPS:
            op = FP8_OPS[node.op_type]
            extra = {"saturate": 1} if op == "QuantizeLinear" else {}
            nodes.append(
                helper.make_node(
                    op, [*node.input[:2], zero_fp8], list(node.output), node.name, **extra
                )
            )
        elif node.op_type == "DequantizeLinear":
            nodes.extend(_int4_qdq(node, graph))
        else:
            raise NoStandardForm(f"{node.op_type}: kiln has no standard form for it")
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]  # types changed (uint8 -> float8); shape inference redoes them
    _drop_trt_domain(model)
    return model, found


def _int4_qdq(node: Any, graph: Any) -> list[Any]:
    """trt::DequantizeLinear(w_float, scale; axis, block_size) -> standard Q then DQ.

    The weight reaches the op through Pad/Reshape of the initializer; it is evaluated
    here so Q can be folded. The blocked axis is read from the shapes: TensorRT's
    `axis` names the scale's per-channel axis, ONNX's names the blocked one."""
    from onnx import helper, numpy_helper

    weight = constant_value(graph, node.input[0])
    scale = constant_value(graph, node.input[1])
    if weight is None or scale is None or weight.ndim != scale.ndim:
        raise NoStandardForm(f"{node.name}: int4 weights are not constants of matching rank")
    differ = [d for d in range(weight.ndim) if weight.shape[d] != scale.shape[d]]
    if len(differ) != 1:
        raise NoStandardForm(f"{node.name}: cannot tell the blocked axis of {weight.shape}")
    axis = differ[0]
    block = -(-weight.shape[axis] // scale.shape[axis])
    import numpy as np
    from onnx import TensorProto

    w_name, s_name, zero = f"{node.name}_weight", f"{node.name}_scale", f"{node.name}_zero"
    graph.initializer.extend(
        [
            numpy_helper.from_array(weight, w_name),
            numpy_helper.from_array(scale, s_name),
            # a blocked zero point has the input's rank (ONNX DequantizeLinear-21)
            helper.make_tensor(zero, TensorProto.INT4, scale.shape, np.zeros(scale.size, int)),
        ]
    )
    attrs = {"axis": axis, "block_size": block}
    q_out = f"{node.output[0]}_int4"
    return [
        helper.make_node(
            "QuantizeLinear", [w_name, s_name, zero], [q_out], f"{node.name}_q", **attrs
        ),
        helper.make_node(
            "DequantizeLinear", [q_out, s_name, zero], list(node.output), node.name, **attrs
        ),
    ]


def constant_value(graph: Any, name: str) -> Any:
    """The value of `name` if it depends on initializers and Constant nodes only."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    consts = {t.name: t for t in graph.initializer}
    if name in consts:
        from onnx import numpy_helper

        return numpy_helper.to_array(consts[name])
    producer = {o: n for n in graph.node for o in n.output}
    needed, todo, leaves = [], [name], set()
    while todo:
        out = todo.pop()
        if out in consts:
            leaves.add(out)
            continue
        if out not in producer or producer[out].domain == "trt":
            return None
        node = producer[out]
        if node not in needed:
            needed.append(node)
            todo.extend(i for i in node.input if i)
    order = [n for n in graph.node if n in needed]
    sub = onnx.helper.make_graph(
        order,
        "const",
        [],
        [onnx.helper.make_value_info(name, onnx.TypeProto())],
        [consts[c] for c in sorted(leaves)],
    )
    model = onnx.helper.make_model(sub, opset_imports=[onnx.helper.make_opsetid("", 21)])
    return ReferenceEvaluator(model).run(None, {})[0]


def _zero(graph: Any, name: str, dtype: int) -> str:
    from onnx import helper

    graph.initializer.append(helper.make_tensor(name, dtype, [], [0]))
    return name


# The version converter knows no trt domain: set those nodes aside while it runs.
_HIDDEN = "kiln.hidden"


def _without_trt(model: Any) -> Any:
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        if node.domain == "trt":
            node.doc_string = f"{_HIDDEN}:{node.op_type}"
            node.domain = ""
            node.op_type = "Identity" if len(node.input) == 1 else "Add"
    _drop_trt_domain(copy)
    return copy


def _with_trt_restored(model: Any) -> Any:
    for node in model.graph.node:
        if node.doc_string.startswith(_HIDDEN + ":"):
            node.op_type = node.doc_string.split(":", 1)[1]
            node.domain = "trt"
            node.doc_string = ""
    return model


def _drop_trt_domain(model: Any) -> None:
    keep = [o for o in model.opset_import if o.domain != "trt"]
    del model.opset_import[:]
    model.opset_import.extend(keep)


def fold_weight_quantization(model: Any) -> int:
    """Replace QuantizeLinear of constants by the quantized constant; returns how many."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    graph = model.graph
    consts = {t.name: t for t in graph.initializer}
    keep, folded = [], 0
    for node in graph.node:
        if node.op_type != "QuantizeLinear" or not all(i in consts for i in node.input):
            keep.append(node)
            continue
        single = onnx.helper.make_model(
            onnx.helper.make_graph(
                [node],
                "fold",
                [],
                [
                    onnx.helper.make_tensor_value_info(
                        node.output[0], onnx.TensorProto.UNDEFINED, None
                    )
                ],
                [consts[i] for i in node.input],
            ),
            opset_imports=list(model.opset_import),
        )
        (value,) = ReferenceEvaluator(single).run(None, {})
        tensor = numpy_helper.from_array(np.asarray(value), node.output[0])
        graph.initializer.append(tensor)
        folded += 1
    del graph.node[:]
    graph.node.extend(keep)
    return folded

"""ONNX graph tidy and check, the half of every family's onnx step they share, and
fuse_siblings (the causal-LM export) and share_shapes (its onnx step).

tidy: onnxscript's optimizer passes fold constants, remove dead nodes and merge
common subexpressions (that roughly halves the node count of a legacy TorchScript
export). Its pattern rewriter is left out: on a 30-layer Llama export (6,895 nodes)
it took 33 s of an 82 s optimize per iteration, twice, and removed 8 nodes;
onnxruntime's own optimizer, which every onnxruntime engine step runs, does those
rewrites (no-op casts, slices) at the engine. check: onnx's checker, with
full shape inference unless a graph holds ops without an ONNX schema, and the
graph's inputs and outputs as io.json records them (name, dtype, shape with the
dynamic axes' names).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from pathlib import Path
from typing import Any

DTYPES = {1: "float32", 7: "int64", 10: "float16", 16: "bfloat16"}
# Tensors of this many bytes and more are stored as external data beside the graph.
EXTERNAL_MIN = 1024
# The optimizer folds constants up to these sizes; weights are larger than its defaults.
FOLD_LIMIT = 1 << 28


def value_info(values: Any) -> list[dict[str, Any]]:
    """name, dtype and shape of each graph input or output (a dim's name, else its size)."""
    out = []
    for v in values:
        t = v.type.tensor_type
        shape = [d.dim_param or d.dim_value for d in t.shape.dim]
        out.append(
            {"name": v.name, "dtype": DTYPES.get(t.elem_type, str(t.elem_type)), "shape": shape}
        )
    return out


def save(model: Any, path: Any) -> None:
    """Save with every tensor of 1 KiB or more in one external-data file beside the
    graph (<name>.data): a single protobuf cannot pass 2 GiB."""
    import onnx

    onnx.save_model(
        model,
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=f"{path.name}.data",
        size_threshold=EXTERNAL_MIN,
    )


def load(path: Any) -> Any:
    """A graph with its external data read in. onnx's own loader refuses a data file
    with more than one hardlink (a guard against a link planted in a downloaded
    model's folder); in kiln's store a large file that two artifacts hold is linked
    on purpose (kiln/store), and each artifact's files are verified against its
    sealed record before a builder sees them. So the bytes are read here, from files
    beside the graph only."""
    import onnx

    folder = Path(path).parent
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        name = info["location"]
        if "/" in name or "\\" in name or name in ("", ".", ".."):
            raise ValueError(f"{path}: external data {name!r} is not a file beside the graph")
        with (folder / name).open("rb") as fh:
            fh.seek(int(info.get("offset", 0)))
            length = info.get("length")
            tensor.raw_data = fh.read(int(length)) if length is not None else fh.read()
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT
    return model


def external_files(model: Any) -> list[str]:
    """The external-data files a loaded graph's initializers refer to, sorted."""
    from builders.common.weights import external_tensors

    return sorted({info["location"] for _, info in external_tensors(model)})


def tidy(model: Any, fold_weights: bool = False) -> Any:
    """The graph after onnxscript's optimizer passes, less its pattern rewriter (the
    module's docstring says why). `fold_weights`: fold the weight subgraphs too (a
    quantized graph's Q/DQ around every weight), up to FOLD_LIMIT."""
    import onnx_ir as ir
    import onnxscript.optimizer
    from onnx_ir.passes import common

    from builders.common.weights import keep_transpose

    limits = {"input_size_limit": FOLD_LIMIT, "output_size_limit": FOLD_LIMIT}
    ir_model = ir.serde.deserialize_model(model)
    common.InlinePass()(ir_model)
    for _ in range(2):  # as onnxscript's optimize: until nothing changes, twice at most
        folded = onnxscript.optimizer.fold_constants_ir(
            ir_model,
            onnx_shape_inference=True,
            should_fold=keep_transpose,
            **(limits if fold_weights else {}),
        )
        pruned = ir.passes.Sequential(
            common.RemoveUnusedNodesPass(),
            common.RemoveUnusedFunctionsPass(),
            common.RemoveUnusedOpsetsPass(),
        )(ir_model)
        if not (folded.modified or pruned.modified):
            break
    ir.passes.Sequential(
        common.RemoveUnusedNodesPass(),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.LiftSubgraphInitializersToMainGraphPass(),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(ir_model)
    return ir.serde.serialize_model(ir_model)


def share_shapes(model: Any) -> tuple[int, str | None]:
    """Each layer of a TorchScript export computes its own tensors' shapes (Shape ->
    Gather -> Unsqueeze -> Concat -> Reshape, about 50 nodes a layer: a 30-layer
    Llama runs some 1,600 of them per decode step). Where onnxruntime's symbolic shape
    inference proves that two Shape nodes read tensors of the same shape (the same
    dims, by name: 'batch', 'past + seq', 576), every user of the later one reads the
    first one instead; the dead Shapes go and tidy()'s common-subexpression pass then
    merges the chains that now compute the same values. Equal symbols are equal at
    run time (they come from the graph inputs' named axes and the ops' own shape
    rules), so every value the graph computes is unchanged.

    In place on an onnx ModelProto; returns how many Shape nodes were re-pointed and,
    when nothing could be proved, why (an op the inference does not know). Weights
    are left out of the inference (it reads values only of small shape tensors)."""
    import onnx
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    graph = model.graph
    nested = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    if any(a.type in nested for n in graph.node for a in n.attribute):
        return 0, "the graph has subgraphs (If, Loop, Scan)"
    # When incomplete it saves the model to ./sym_shape_infer_temp.onnx and raises a
    # bare Exception: the working directory is a scratch one for the call. Where it
    # cannot finish (the MoE exports) it also logs "unsupported broadcast" warnings,
    # which the returned reason replaces.
    quiet = logging.getLogger(SymbolicShapeInference.__module__)
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):
        try:
            inferred = SymbolicShapeInference.infer_shapes(_without_weights(model))
        except Exception as exc:
            return 0, f"symbolic shape inference: {type(exc).__name__}: {exc}"
        finally:
            quiet.setLevel(level)
    shapes = {
        v.name: _dims(v)
        for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    }
    outputs = {o.name for o in graph.output}
    first: dict[tuple[Any, ...], str] = {}
    moved: dict[str, str] = {}
    for node in graph.node:
        if node.op_type != "Shape" or node.domain not in ("", "ai.onnx"):
            continue
        dims = shapes.get(node.input[0])
        if dims is None or node.output[0] in outputs:
            continue
        attrs = {a.name: a.i for a in node.attribute}
        sig = tuple(dims[attrs.get("start", 0) : attrs.get("end", len(dims))])
        if sig in first:
            moved[node.output[0]] = first[sig]
        else:
            first[sig] = node.output[0]
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in moved:
                node.input[i] = moved[name]
    return len(moved), None


def _without_weights(model: Any) -> Any:
    """`model` with every initializer of more than 64 elements turned into a graph
    input of its dtype and shape: what shape inference needs, without the weights."""
    import math

    import onnx
    from onnx import helper

    out = onnx.ModelProto(ir_version=model.ir_version)
    out.opset_import.extend(model.opset_import)
    out.functions.extend(model.functions)
    g = out.graph
    g.node.extend(model.graph.node)
    g.input.extend(model.graph.input)
    g.output.extend(model.graph.output)
    inputs = {i.name for i in model.graph.input}
    for t in model.graph.initializer:
        if math.prod(t.dims) <= 64:
            g.initializer.append(t)
        elif t.name not in inputs:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return out


def _dims(value: Any) -> tuple[Any, ...] | None:
    """A value's shape as ints and symbol names, or None if any dim is unknown."""
    tt = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tt.HasField("shape"):
        return None
    dims: list[Any] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        elif d.dim_param:
            dims.append(d.dim_param)
        else:
            return None
    return tuple(dims)


def check(
    model: Any, full: bool = True, saved: Any = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """onnx's checker (with full shape inference when `full`), then the graph's inputs
    and outputs (value_info). `saved`: the file the model was saved to, with external
    data, which the checker reads from there (a proto past 2 GiB cannot be passed)."""
    import onnx

    onnx.checker.check_model(str(saved) if saved is not None else model, full_check=full)
    return value_info(model.graph.input), value_info(model.graph.output)


def fuse_siblings(ir_model: Any, stored: dict[str, tuple[str, int, int]] | None = None) -> int:
    """Horizontal fusion, in place on an onnx_ir model: MatMuls that read the same input
    and multiply it by constant fp32 weights of the same K (a layer's q/k/v
    projections, an MLP's gate and up) become one MatMul over the weights side by
    side, then a Split back into the original outputs. Every output element is the
    same dot product as before; a decode step reads its input once and runs one
    kernel instead of three. A weight used anywhere else (tied) stays put.

    Weights read as Transpose(the checkpoint's matrix), whose checkpoint bytes
    `stored` names (builders/common/weights.py stored_layout), are fused only in runs
    that lie back to back in the checkpoint file (gate_proj, up_proj), so the fused
    matrix is a byte range of the checkpoint and no new bytes are stored; the others
    stay one MatMul each. Returns how many MatMuls were folded away."""
    import numpy as np
    import onnx_ir as ir

    from builders.common.weights import transposed_weight

    graph = ir_model.graph
    stored = stored or {}
    order = {id(node): i for i, node in enumerate(graph)}

    def weight(node: Any) -> Any:
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
            return None
        w = node.inputs[1]
        if w is None or not w.is_initializer() or len(w.uses()) != 1:
            return None
        t = w.const_value
        ok = t is not None and t.dtype == ir.DataType.FLOAT and len(t.shape) == 2
        return w if ok else None

    plain: dict[tuple[int, int], list[Any]] = {}
    kept: dict[tuple[int, int], list[Any]] = {}
    for node in graph:
        if node.inputs and node.inputs[0] is None:
            continue
        w = weight(node)
        if w is not None:
            plain.setdefault((id(node.inputs[0]), w.const_value.shape[0]), []).append(node)
            continue
        w = transposed_weight(node)
        if w is not None and w.name in stored:
            kept.setdefault((id(node.inputs[0]), w.const_value.shape[1]), []).append(node)
    runs = [nodes for nodes in plain.values() if len(nodes) > 1]
    for nodes in kept.values():
        located = sorted(nodes, key=lambda n: stored[transposed_weight(n).name][:2])
        run = [located[0]]
        for node in located[1:]:
            file, offset, n = stored[transposed_weight(run[-1]).name]
            if stored[transposed_weight(node).name][:2] == (file, offset + n):
                run.append(node)
                continue
            runs += [run] if len(run) > 1 else []
            run = [node]
        runs += [run] if len(run) > 1 else []
    folded = 0
    for nodes in runs:
        first = min(nodes, key=lambda n: order[id(n)])
        name = f"{first.name or first.outputs[0].name}/fused"
        weights = [transposed_weight(n) for n in nodes]
        if weights[0] is not None:  # the checkpoint's matrices, row after row
            arrays = [w.const_value.numpy() for w in weights]
            joined = ir.Value(name=f"{name}.stored", const_value=ir.tensor(np.concatenate(arrays)))
            file, offset, _ = stored[weights[0].name]
            stored[f"{name}.stored"] = (file, offset, sum(a.nbytes for a in arrays))
            transpose = ir.Node(
                "", "Transpose", [joined], [ir.AttrInt64s("perm", [1, 0])], name=f"{name}.t"
            )
            sizes = np.array([a.shape[0] for a in arrays], np.int64)
            rhs, extra = transpose.outputs[0], [transpose]
            stale = [n.inputs[1].producer() for n in nodes]
        else:
            arrays = [n.inputs[1].const_value.numpy() for n in nodes]
            joined = ir.Value(
                name=f"{name}.weight", const_value=ir.tensor(np.concatenate(arrays, 1))
            )
            sizes = np.array([a.shape[1] for a in arrays], np.int64)
            rhs, extra, weights, stale = joined, [], [n.inputs[1] for n in nodes], []
        split_sizes = ir.Value(name=f"{name}.split", const_value=ir.tensor(sizes))
        graph.register_initializer(joined)
        graph.register_initializer(split_sizes)
        matmul = ir.Node("", "MatMul", [first.inputs[0], rhs], name=name, num_outputs=1)
        split = ir.Node(
            "",
            "Split",
            [matmul.outputs[0], split_sizes],
            [ir.AttrInt64("axis", -1)],
            name=f"{name}.split",
            num_outputs=len(nodes),
        )
        graph.insert_before(first, [*extra, matmul, split])
        for node, out in zip(nodes, split.outputs, strict=True):
            out.name, node.outputs[0].name = node.outputs[0].name, None
            node.outputs[0].replace_all_uses_with(out, replace_graph_outputs=True)
        graph.remove([*nodes, *stale], safe=True)
        for w in weights:
            del graph.initializers[w.name]
            stored.pop(w.name, None)
        folded += len(nodes) - 1
    return folded


def fuse_skip_norms(model: Any) -> int:
    """Residual Add + RMSNorm as onnxruntime's SkipSimplifiedLayerNormalization, in
    place on an onnx ModelProto that onnxruntime's optimizer has written (its
    SimplifiedLayerNormFusion makes the norms; its SkipLayerNormFusion fuses only
    LayerNormalization, and only an Add with one reader, while a decoder's residual sum
    also feeds the next residual Add). The fused node's fourth output is the sum, which
    the Add's other readers read instead. It computes what the two nodes compute, the
    sum in the same dtype, then the norm over the last axis: a Llama decode step runs
    60 nodes fewer per 30 layers. Only an Add of two computed tensors (no constant that
    could broadcast) into a norm over the last axis whose inverse-std output is unused
    is fused. Returns how many."""
    from onnx import helper

    graph = model.graph
    producer = {o: n for n in graph.node for o in n.output}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    outputs = {o.name for o in graph.output}
    constant = {t.name for t in graph.initializer} | {
        o for n in graph.node if n.op_type == "Constant" for o in n.output
    }
    fused: dict[int, Any] = {}  # the Add's position -> the fused node
    gone: set[int] = set()
    for norm in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in norm.attribute}
        if norm.op_type != "SimplifiedLayerNormalization" or norm.domain not in ("", "ai.onnx"):
            continue
        if attrs.get("axis", -1) != -1 or (len(norm.output) > 1 and norm.output[1]):
            continue
        add = producer.get(norm.input[0])
        if add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx"):
            continue
        if id(add) in gone or any(x in constant or x not in producer for x in add.input):
            continue
        total = add.output[0]
        shared = readers[total] > 1 or total in outputs
        node = helper.make_node(
            "SkipSimplifiedLayerNormalization",
            [add.input[0], add.input[1], norm.input[1]],
            [norm.output[0], *(["", "", total] if shared else [])],
            name=f"{norm.name}/skip",
            domain="com.microsoft",
            epsilon=attrs.get("epsilon", 1e-5),
        )
        fused[id(add)] = node
        gone |= {id(add), id(norm)}
    if not fused:
        return 0
    nodes = [fused.get(id(n), n) for n in graph.node if id(n) not in gone or id(n) in fused]
    del graph.node[:]
    graph.node.extend(nodes)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return len(fused)

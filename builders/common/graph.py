"""ONNX graph tidy and check, the half of every family's onnx step they share.

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

from typing import Any

DTYPES = {1: "float32", 7: "int64", 10: "float16", 16: "bfloat16"}
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


def tidy(model: Any, fold_weights: bool = False) -> Any:
    """The graph after onnxscript's optimizer passes, less its pattern rewriter (the
    module's docstring says why). `fold_weights`: fold the weight subgraphs too (a
    quantized graph's Q/DQ around every weight), up to FOLD_LIMIT."""
    import onnx_ir as ir
    import onnxscript.optimizer
    from onnx_ir.passes import common

    limits = {"input_size_limit": FOLD_LIMIT, "output_size_limit": FOLD_LIMIT}
    ir_model = ir.serde.deserialize_model(model)
    common.InlinePass()(ir_model)
    for _ in range(2):  # as onnxscript's optimize: until nothing changes, twice at most
        folded = onnxscript.optimizer.fold_constants_ir(
            ir_model, onnx_shape_inference=True, **(limits if fold_weights else {})
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


def check(model: Any, full: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """onnx's checker (with full shape inference when `full`), then the graph's inputs
    and outputs (value_info)."""
    import onnx

    onnx.checker.check_model(model, full_check=full)
    return value_info(model.graph.input), value_info(model.graph.output)

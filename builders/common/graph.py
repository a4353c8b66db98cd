"""ONNX graph tidy and check, the half of every family's onnx step they share.

tidy: onnxscript's optimizer folds constants and removes dead nodes (it roughly
halves the node count of a legacy TorchScript export). check: onnx's checker, with
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
    """The graph after onnxscript's optimizer. `fold_weights`: fold the weight
    subgraphs too (a quantized graph's Q/DQ around every weight), up to FOLD_LIMIT."""
    import onnxscript.optimizer

    limits = {"input_size_limit": FOLD_LIMIT, "output_size_limit": FOLD_LIMIT}
    return onnxscript.optimizer.optimize(model, **(limits if fold_weights else {}))


def check(model: Any, full: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """onnx's checker (with full shape inference when `full`), then the graph's inputs
    and outputs (value_info)."""
    import onnx

    onnx.checker.check_model(model, full_check=full)
    return value_info(model.graph.input), value_info(model.graph.output)

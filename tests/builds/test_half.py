"""precision.compute fp16|bf16 on the onnxruntime CPU backend (issue 18, item 2): the
engine step converts the onnx step's fp32 graph with onnxruntime's float16 converter
(builders/causal_lm/backends/_half.py) and onnxruntime decides what runs.

bf16: onnxruntime's CPU provider has no bf16 kernels, and the recipe says so with
onnxruntime's own message. fp16: the CPU provider of onnxruntime's x86 builds has no
fp16 MatMul kernel either; it would compute them in fp32 between the Casts it
inserts, so the recipe is unsupported-here saying so, never a pass. Where a build of
onnxruntime does compute fp16 MatMuls, the recipe is built and judged by
thresholds/half-precision.yaml. Either way the converted graph holds fp16 weights, an
fp16 KV cache and fp32 logits, and the runtime feeds a cache in the dtype io.json
names. Built on the store of the ordinary tiny builds (the `built` fixture): only
the two engines and a scored reference run, about 10 s on 2 cores.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import World, heavy, make_world

pytestmark = heavy

FP16, BF16 = "tiny-llama-fp16", "tiny-llama-bf16"
FLOAT, FLOAT16 = 1, 10  # onnx.TensorProto's element types


@pytest.fixture(scope="module")
def half(tmp_path_factory: pytest.TempPathFactory, built: World) -> World:
    w = make_world(tmp_path_factory.mktemp("half"), built.hub, ("tiny-llama", FP16, BF16))
    w = World(root=w.root, hub=built.hub, store=built.store)
    w.doit("build", f"recipe={FP16},{BF16}", check=True)  # unsupported is no failure
    return w


def test_bf16_is_unsupported_here_with_onnxruntimes_message(half: World) -> None:
    e = half.last(BF16)
    assert e["verdict"] == "unsupported-here" and e["metrics"] == {}
    # onnxruntime's NOT_IMPLEMENTED text, which names the op it found no kernel for
    assert (
        "CPUExecutionProvider cannot run bfloat16: Could not find an implementation for"
        in (e["reason"])
    ), e["reason"]


def test_fp16_is_built_where_onnxruntime_computes_it_else_unsupported_with_the_reason(
    half: World,
) -> None:
    e = half.last(FP16)
    if e["verdict"] == "unsupported-here":
        assert "has no float16 kernel for" in e["reason"] and "MatMul" in e["reason"]
        assert "compute float32, slower than the fp32 engine" in e["reason"]
        return
    # a build of onnxruntime with fp16 kernels: judged by the half-precision gates
    assert e["verdict"] == "pass", e["reason"]
    assert e["metrics"]["scored_positions"] == 512
    engine = json.loads((half.artifact(FP16, "engine") / "engine.json").read_text())
    assert engine["compute"]["dtype"] == "float16"
    assert "MatMul" not in engine["compute"]["float32_ops"]


def test_the_converted_graph_holds_fp16_weights_and_cache_and_fp32_logits(half: World) -> None:
    """What the fp16 engine step hands onnxruntime, from the tiny-llama onnx step."""
    import onnx

    from builders.causal_lm.backends._half import convert
    from builders.common import graph

    model = convert(graph.load(half.artifact(FP16, "onnx") / "model.onnx"), "fp16")
    io = {v.name: v.type.tensor_type.elem_type for v in (*model.graph.input, *model.graph.output)}
    assert io["logits"] == FLOAT
    caches = {n: t for n, t in io.items() if n.startswith(("past.", "present."))}
    assert len(caches) == 8 and set(caches.values()) == {FLOAT16}
    weights = [t for t in model.graph.initializer if len(t.dims) == 2]
    weights_by_name = {t.name for t in weights}
    assert weights and {t.data_type for t in weights} == {FLOAT16}
    g = onnx.shape_inference.infer_shapes(model).graph
    types = {v.name: v.type.tensor_type.elem_type for v in (*g.input, *g.output, *g.value_info)}
    types |= {t.name: t.data_type for t in g.initializer}
    matmuls = [n for n in g.node if n.op_type in ("MatMul", "FusedMatMul")]
    # q+v and gate/up fused, k, o, down (FusedMatMul over the checkpoint's layout): 5 a
    # layer, and the lm_head; the attention products are inside GroupQueryAttention
    assert len(matmuls) == 11
    assert {types[x] for n in matmuls for x in n.input if x in types} == {FLOAT16}
    assert sum(x in weights_by_name for n in matmuls for x in n.input) == 11  # fp16 weights
    attention = [n for n in g.node if n.op_type == "GroupQueryAttention"]
    assert len(attention) == 2  # per layer one, which also rotates q and k
    assert {types[n.input[0]] for n in attention} == {FLOAT16}


def test_the_runtime_feeds_the_cache_in_the_dtype_io_json_names(
    half: World, tmp_path: Path
) -> None:
    """The tiny-llama bundle with its engine swapped for the fp16 graph (which
    onnxruntime runs here by casting around its fp32 kernels): runtime/causal_lm.py
    makes fp16 caches from bundle.json's io, and greedy decoding keeps the fp32
    reference's tokens (fp16 rounding of the weights and cache only)."""
    import runtime
    from builders.causal_lm.backends._half import convert
    from builders.common import graph

    bundle = tmp_path / "bundle"
    shutil.copytree(half.artifact("tiny-llama", "bundle"), bundle)
    model = convert(graph.load(half.artifact(FP16, "onnx") / "model.onnx"), "fp16")
    graph.save(model, bundle / "fp16.onnx")
    meta = json.loads((bundle / "bundle.json").read_text())
    meta["engines"]["main"]["file"] = "fp16.onnx"
    meta["io"]["kv_cache"]["dtype"] = "float16"
    meta["io"]["inputs"] = graph.value_info(model.graph.input)
    meta["io"]["outputs"] = graph.value_info(model.graph.output)
    (bundle / "bundle.json").write_text(json.dumps(meta))
    opened = runtime.open(bundle)
    assert {c.dtype for c in opened._empty_cache(2)} == {np.dtype("float16")}
    reference = json.loads((half.artifact(FP16, "reference") / "reference.json").read_text())
    records = reference["records"][:2]
    out = opened.generate([r["prompt_ids"] for r in records], 16)
    assert [t[:16] for t in out.tokens] == [r["tokens"][:16] for r in records]

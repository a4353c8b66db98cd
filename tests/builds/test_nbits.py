"""Weight-only quantized engines on onnxruntime run the fused MatMulNBits kernel
(builders/causal_lm/_nbits.py) over modelopt's own integers and scales.

The numerics are bounded per layer by a rule, not by a measured number. For one
output y_n = sum_k a_k w_kn over K terms, with w the fake-quant weight modelopt's
torch model uses and a the layer's real input (captured from the graph on real text):

  accuracy_level 1 (fp32 A): the kernel computes the same products in another order.
      Any order of K fp32 multiply-adds is within gamma_m * sum_k |a_k||w_kn| of the
      exact sum, gamma_m = m u / (1 - m u), u = 2^-24 (Higham, Accuracy and Stability
      of Numerical Algorithms, 2nd ed., eq. 3.5); m = K + 2 adds the rounding of the
      product q*s on the kernel's side and on modelopt's.
  accuracy_level 4 (the shipped engines: A in int8 per block of K, scale max|a|/127,
      integer dot products): rounding a_k to the nearest step moves it by at most half
      a step (plus 256 u steps for the fp32 a/step), so the sum moves by at most
      sum_blocks (0.5 + 256u) step_b sum_{k in b} |w_kn|; the fp32 arithmetic after
      the integer dot adds gamma_{K+4} times the magnitude it works on, which with
      the zero-point form (codes q + 2^(bits-1), the offset subtracted via the block
      sums of A) is sum_k (|a_k| + step_b) (|w_kn| + 2^(bits-1) s_bn).

End to end, the level-1 graph's logits equal modelopt's fake-quant model's within
1e-4, the bound tests/builds/test_precisions.py already applies to the Q/DQ graph
(same arithmetic, summation order only). The level-4 engines are judged by the
recipes' own quality gates (validate), which must still pass.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import World, heavy, make_world

pytestmark = heavy

RECIPES = {"tiny-llama-int8-wo": 8, "tiny-llama-int4-awq": 4}  # recipe -> bits
# MatMulNBits per recipe: q, k, v, o, gate, up, down in each of the tiny llama's 2
# layers; int4-awq calibrates q/k/v and gate/up fused (builders/common/siblings.py)
LINEARS = {"tiny-llama-int8-wo": 14, "tiny-llama-int4-awq": 8}
U = 2.0**-24


@pytest.fixture(scope="session")
def wo(tmp_path_factory: pytest.TempPathFactory, hub: Path) -> World:
    w = make_world(tmp_path_factory.mktemp("nbits"), hub, ("tiny-llama", *RECIPES))
    w.doit("build", "recipe=" + ",".join(RECIPES), check=True)
    return w


def gamma(m: int) -> float:
    return m * U / (1 - m * U)


def ids_of(w: World, name: str) -> list[int]:
    import runtime
    from builders.causal_lm.scoring import TEXT

    return runtime.open(w.artifact(name, "bundle")).encode(TEXT.read_text())[:96]


def feeds(w: World, name: str, ids: list[int]) -> dict[str, Any]:
    io = json.loads((w.artifact(name, "onnx") / "io.json").read_text())
    out: dict[str, Any] = {
        "input_ids": np.array([ids]),
        "attention_mask": np.ones((1, len(ids)), np.int64),
        "position_ids": np.arange(len(ids))[None],
    }
    for e in io["kv_cache"]["entries"]:
        out[e["past"]] = np.zeros([{"batch": 1, "seq": 0}.get(d, d) for d in e["shape"]], "f4")
    out["logits_to_keep"] = np.array(0)  # every position (builders/causal_lm/export.py)
    return out


def fake_quant_model(w: World, name: str) -> Any:
    from builders.common.hf import load_causal_lm, restore_quantized

    checkpoint = w.artifact(name, "fetch") / "checkpoint"
    return restore_quantized(load_causal_lm(checkpoint), w.artifact(name, "quantize")).eval()


def fake_weights(model: Any) -> dict[str, Any]:
    """torch module name -> modelopt's fake-quant weight as the MatMul uses it, [K, N]."""
    import torch

    out = {}
    with torch.no_grad():
        for mod_name, mod in model.named_modules():
            if isinstance(mod, torch.nn.Linear) and hasattr(mod, "weight_quantizer"):
                if not mod.weight_quantizer.is_enabled:
                    continue
                fake = mod.weight_quantizer(mod.weight).double().numpy().T
                out[mod_name] = fake
    return out


def module_of(matmul: str) -> str:
    """'/model/model/layers.0/mlp/up_proj/MatMul' -> 'model.layers.0.mlp.up_proj' (the
    exported wrapper's `model` attribute, then the torch module path). A fused layer
    traced inside the Slice that called it ('.../mlp/gate_proj/gate_up_proj/MatMul') is
    the fused layer ('model.layers.0.mlp.gate_up_proj')."""
    from builders.common.siblings import FUSIONS

    parts = matmul.removeprefix("/model/").removesuffix("/MatMul").split("/")
    fused = {name: set(group) for group, name in FUSIONS}
    if len(parts) > 1 and parts[-2] in fused.get(parts[-1], set()):
        del parts[-2]
    return ".".join(parts)


def nbits_nodes(model: Any) -> list[Any]:
    return [n for n in model.graph.node if n.op_type == "MatMulNBits"]


def attrs(node: Any) -> dict[str, Any]:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def dq_fed_matmuls(model: Any) -> list[str]:
    """MatMuls whose B comes from a DequantizeLinear, through data movement only."""
    from builders.causal_lm._nbits import MOVES

    producer = {o: n for n in model.graph.node for o in n.output}
    found = []
    for node in model.graph.node:
        if node.op_type != "MatMul":
            continue
        src = producer.get(node.input[1])
        while src is not None and src.op_type in MOVES:
            src = producer.get(src.input[0])
        if src is not None and src.op_type == "DequantizeLinear":
            found.append(node.name)
    return found


def quantizer_block(bits: int) -> int | None:
    """The weight quantizer's block along K in modelopt's config (None: per channel)."""
    import modelopt.torch.quantization as mtq

    from builders.causal_lm.quantize import CONFIGS

    name = CONFIGS["int4-awq" if bits == 4 else "int8-wo"]
    assert name is not None
    for entry in getattr(mtq, name)["quant_cfg"]:
        if entry.get("quantizer_name") == "*weight_quantizer":
            cfg = entry.get("cfg", entry)
            cfg = cfg[0] if isinstance(cfg, list) else cfg
            sizes = cfg.get("block_sizes") or {}
            return sizes.get(-1)
    raise AssertionError(f"no weight quantizer in {name}")


@pytest.mark.parametrize("name", list(RECIPES))
def test_weight_only_graphs_run_matmulnbits_and_no_dequantize_before_a_matmul(
    wo: World, name: str
) -> None:
    import onnx

    bits = RECIPES[name]
    io = json.loads((wo.artifact(name, "onnx") / "io.json").read_text())
    assert io["nbits"]["matmul_nbits"] == LINEARS[name] and io["nbits"]["kept_dq"] == {}
    for kind, file in (("onnx", "model.onnx"), ("engine", "engine.onnx")):
        model = onnx.load(str(wo.artifact(name, kind) / file))
        nodes = nbits_nodes(model)
        assert len(nodes) == LINEARS[name], (kind, len(nodes))
        assert dq_fed_matmuls(model) == [], kind
        assert not [n for n in model.graph.node if n.op_type == "DequantizeLinear"], kind
        block = quantizer_block(bits)
        for node in nodes:
            a = attrs(node)
            assert a["bits"] == bits and a["accuracy_level"] == io["nbits"]["accuracy_level"]
            if block is not None:  # int4-awq: modelopt's block, as calibrated
                assert a["block_size"] == block, (node.name, a)
    evidence = wo.manifest(name)["evidence"][-1]
    assert evidence["verdict"] == "pass", evidence["reason"]  # the quantized gates, unchanged


def test_awq_calibrates_siblings_as_one_layer_and_folds_their_scales_away(
    wo: World,
) -> None:
    """int4-awq calibrated q/k/v and gate/up fused (2 groups in each of 2 layers), and
    the AWQ scale of each group multiplies the RMSNorm's weight before it: the fused
    MatMulNBits reads the norm's output directly, and GroupQueryAttention takes the
    packed [q | k | v]. down's scale multiplies up's rows of the fused gate_up weight,
    so down reads act(gate) * up directly (2 more folds). o keeps AWQ's activation Mul
    (its input, the attention's output, comes from no norm, and GroupQueryAttention
    shares each value head among several query heads). int8-wo is calibrated per
    layer, as before, and folds nothing."""
    import onnx

    name = "tiny-llama-int4-awq"
    done = json.loads((wo.artifact(name, "quantize") / "quantize.json").read_text())
    assert done["fused_groups"] == 4 and done["folded_scales"] == 6
    plain = json.loads(
        (wo.artifact("tiny-llama-int8-wo", "quantize") / "quantize.json").read_text()
    )
    assert plain["fused_groups"] == plain["folded_scales"] == 0
    model = onnx.load(str(wo.artifact(name, "engine") / "engine.onnx"))
    producer = {o: n for n in model.graph.node for o in n.output}
    fed_by = {
        module_of(n.name.removesuffix("_nbits")).rsplit(".", 1)[-1]: producer[n.input[0]].op_type
        for n in nbits_nodes(model)
        if "layers.1" in n.name
    }
    assert fed_by == {
        "qkv_proj": "SkipSimplifiedLayerNormalization",
        "o_proj": "Mul",
        "gate_up_proj": "SkipSimplifiedLayerNormalization",
        "down_proj": "Mul",  # the MLP's own act(gate) * up: AWQ's Mul is gone
    }
    muls = [n for n in model.graph.node if n.op_type == "Mul" and "input_quantizer" in n.name]
    owners = sorted(n.name.split("/input_quantizer")[0].rsplit("/", 1)[-1] for n in muls)
    assert owners == ["o_proj", "o_proj"], owners
    attention = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(attention) == 2 and all(n.input[1] == n.input[2] == "" for n in attention)


def per_layer(model: Any, fd: dict[str, Any]) -> dict[str, tuple[Any, Any, Any]]:
    """Each MatMulNBits node: (its input A, its output Y, the node), from one run."""
    import onnx
    import onnxruntime as ort

    nodes = nbits_nodes(model)
    extra = [n for node in nodes for n in (node.input[0], node.output[0])]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    have = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in extra if n not in have)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    values = dict(zip(extra, sess.run(extra, fd), strict=True))
    return {
        module_of(n.name.removesuffix("_nbits")): (values[n.input[0]], values[n.output[0]], n)
        for n in nodes
    }


def bound(a: Any, w: Any, node: Any, scales: Any) -> Any:
    """The rule in this module's docstring, per output element: a [rows, K], w [K, N],
    scales [N, blocks] (the node's, for the zero-point offset's magnitude only)."""
    at = attrs(node)
    k, level, block, bits = w.shape[0], at["accuracy_level"], at["block_size"], at["bits"]
    aa, ww = np.abs(a).astype(np.float64), np.abs(w)
    if level == 1:
        return gamma(k + 2) * (aa @ ww)
    assert level == 4, level
    blocks = -(-k // block)
    pad = blocks * block - k
    amax = np.pad(aa, ((0, 0), (0, pad))).reshape(len(a), blocks, block).max(-1)
    step = np.repeat(amax / 127.0, block, axis=1)[:, :k]  # [rows, K]
    rounding = ((0.5 + 256 * U) * step) @ ww
    offset = 2 ** (bits - 1) * np.abs(np.repeat(scales.T, block, axis=0)[:k])  # [K, N]
    magnitude = (aa + step) @ (ww + offset)
    return rounding + gamma(k + 4) * magnitude


@pytest.mark.parametrize("level", [1, 4])
@pytest.mark.parametrize("name", list(RECIPES))
def test_each_matmulnbits_computes_modelopts_weights_within_the_rule(
    wo: World, name: str, level: int
) -> None:
    import onnx

    model = onnx.load(str(wo.artifact(name, "onnx") / "model.onnx"))
    for node in nbits_nodes(model):
        for a in node.attribute:
            if a.name == "accuracy_level":
                a.i = level
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    weights = fake_weights(fake_quant_model(wo, name))
    layers = per_layer(model, feeds(wo, name, ids_of(wo, name)))
    assert set(layers) == set(weights), (sorted(layers), sorted(weights))
    for layer, (a, y, node) in layers.items():
        a2 = a.reshape(-1, a.shape[-1]).astype(np.float64)
        exact = a2 @ weights[layer]
        err = np.abs(y.reshape(exact.shape) - exact)
        limit = bound(a2, weights[layer], node, consts[node.input[2]])
        assert (err <= limit).all(), (layer, level, err.max(), (err / limit).max())
        assert np.abs(exact).max() > 0  # real activations, not a zero input


@pytest.mark.parametrize("name", list(RECIPES))
def test_fp32_level_logits_equal_the_fake_quant_model(wo: World, name: str) -> None:
    import onnx
    import onnxruntime as ort
    import torch

    model = onnx.load(str(wo.artifact(name, "onnx") / "model.onnx"))
    for node in nbits_nodes(model):
        for a in node.attribute:
            if a.name == "accuracy_level":
                a.i = 1
    ids = ids_of(wo, name)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    ours = sess.run(["logits"], feeds(wo, name, ids))[0][0]
    with torch.no_grad():
        fake = fake_quant_model(wo, name)(torch.tensor([ids])).logits[0].numpy()
    assert np.abs(ours - fake).max() < 1e-4, np.abs(ours - fake).max()


def synthetic(q: Any, scale: Any, dq_attrs: dict[str, Any], transpose: bool) -> Any:
    """x [2, K] -> DequantizeLinear(q, scale) -> (Transpose) -> MatMul, opset 21."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    dtype = TensorProto.INT4 if q.dtype.name == "int4" else TensorProto.INT8
    k = q.shape[1] if transpose else q.shape[0]
    n = q.shape[0] if transpose else q.shape[1]
    nodes = [helper.make_node("DequantizeLinear", ["q", "s"], ["w"], "dq", **dq_attrs)]
    if transpose:
        nodes.append(helper.make_node("Transpose", ["w"], ["wt"], "t", perm=[1, 0]))
    nodes.append(helper.make_node("MatMul", ["x", "wt" if transpose else "w"], ["y"], "mm"))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
        [
            helper.make_tensor("q", dtype, q.shape, q.astype(np.int8).ravel().tolist()),
            numpy_helper.from_array(scale.astype(np.float32), "s"),
        ],
    )
    return helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 21)])


def run(model: Any, x: Any) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(["y"], {"x": x})[0]


@pytest.mark.parametrize(
    ("case", "k", "n"),
    [
        ("int8 per channel, K=72: no block divides it, the last one padded", 72, 24),
        ("int4 blocks of 32 along K=80: a partial last block", 80, 24),
    ],
)
def test_padded_blocks_compute_the_dequantized_weights(case: str, k: int, n: int) -> None:
    """K need not be a multiple of the block: MatMulNBits' last block is padded with
    the zero code. Same rule as the per-layer test at level 1."""
    import ml_dtypes

    from builders.causal_lm._nbits import to_matmul_nbits

    rng = np.random.default_rng(0)
    if case.startswith("int8"):
        q = rng.integers(-127, 128, (n, k)).astype(np.int8)
        scale, dq = rng.random(n) + 0.1, {"axis": 0}
        w = q.astype(np.float64).T * scale
    else:
        q = rng.integers(-8, 8, (n, k)).astype(ml_dtypes.int4)
        scale, dq = rng.random((n, -(-k // 32))) + 0.1, {"axis": 1, "block_size": 32}
        w = (q.astype(np.float64) * np.repeat(scale, 32, axis=1)[:, :k]).T
    model = synthetic(q, scale, dq, transpose=True)
    converted, kept = to_matmul_nbits(model, accuracy_level=1)
    assert (converted, kept) == (1, {}), case
    x = rng.standard_normal((2, k)).astype(np.float32)
    err = np.abs(run(model, x) - x.astype(np.float64) @ w)
    assert (err <= gamma(k + 2) * (np.abs(x) @ np.abs(w))).all(), case


def test_a_layer_matmulnbits_cannot_express_keeps_its_dequantize_and_says_why() -> None:
    """int4 blocked along N (the MatMul's output axis), not K: scales vary inside every
    block of K, so the layer stays DequantizeLinear -> MatMul, with the reason."""
    import ml_dtypes

    from builders.causal_lm._nbits import to_matmul_nbits

    rng = np.random.default_rng(0)
    k, n = 32, 64
    q = rng.integers(-8, 8, (k, n)).astype(ml_dtypes.int4)  # [K, N], no Transpose
    scale = rng.random((k, n // 32)) + 0.1
    model = synthetic(q, scale, {"axis": 1, "block_size": 32}, transpose=False)
    x = rng.standard_normal((2, k)).astype(np.float32)
    before = run(model, x)
    converted, kept = to_matmul_nbits(model)
    assert converted == 0
    assert kept == {"mm": "the scales are not constant over blocks of 32 along K=32"}
    assert [nd.op_type for nd in model.graph.node] == ["DequantizeLinear", "MatMul"]
    assert np.array_equal(run(model, x), before)


def unpack(node: Any, consts: dict[str, Any]) -> tuple[Any, Any, Any]:
    """A symmetric MatMulNBits node's weight (no zero-point input): its codes less
    the zero point 2^(bits-1) and each element's scale, both [K, N], and the scales
    as stored, [N, blocks]."""

    at = attrs(node)
    k, n, bits, block = at["K"], at["N"], at["bits"], at["block_size"]
    packed, scales = consts[node.input[1]], consts[node.input[2]].reshape(n, -1)
    assert len(node.input) == 3, "symmetric: no zero-point input"
    if bits == 4:  # two codes a byte, the low nibble first
        raw = packed.astype(np.int64).ravel()
        codes = np.stack([raw & 0xF, raw >> 4], axis=-1).ravel()
    else:
        codes = packed.astype(np.int64).ravel()
    codes = codes.reshape(n, -1)[:, :k] - 2 ** (bits - 1)
    return codes.T, np.repeat(scales, block, axis=1)[:, :k].T.astype(np.float64), scales


def logits_and_head_input(wo: World, name: str, model: Any, node: Any) -> tuple[Any, Any]:
    """The graph's logits on real text, and `node`'s input A as [rows, K] in float64."""
    import onnx
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    probe.graph.output.extend([onnx.ValueInfoProto(name=node.input[0])])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    y, a = sess.run(["logits", node.input[0]], feeds(wo, name, ids_of(wo, name)))
    return y, a.reshape(-1, a.shape[-1]).astype(np.float64)


@pytest.mark.parametrize("name", list(RECIPES))
def test_quantize_lm_head_rounds_the_fp32_lm_head_to_nearest_within_the_rule(
    wo: World, name: str
) -> None:
    """precision.lm_head int8|int4: modelopt leaves the lm_head fp32; the onnx step
    rounds it with onnxruntime's MatMulNBits quantizer. Every weight is within half
    its block's step of the fp32 one (round to nearest), and the kernel computes the
    rounded weights within the level-4 rule of the per-layer test above."""
    import onnx

    from builders.causal_lm._nbits import per_channel_block, quantize_lm_head
    from builders.common import graph

    bits = RECIPES[name]
    model = graph.load(wo.artifact(name, "onnx") / "model.onnx")
    head = next(n for n in model.graph.node if "logits" in n.output)
    assert head.op_type == "MatMul"  # what modelopt left
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    w = consts[head.input[1]].astype(np.float64)  # [K, N]
    block = 32 if bits == 4 else per_channel_block(w.shape[0])
    model, record = quantize_lm_head(model, bits, 32 if bits == 4 else None)
    assert record == {
        "node": head.name,
        "K": w.shape[0],
        "N": w.shape[1],
        "bits": bits,
        "block_size": block,
        "method": "round-to-nearest",
    }
    node = next(n for n in model.graph.node if "logits" in n.output)
    assert node.op_type == "MatMulNBits" and attrs(node)["block_size"] == block
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    codes, scale, scales = unpack(node, consts)
    rounded = codes * scale
    # round to nearest: within half a step, except that the codes run one further on
    # the negative side (-2^(bits-1) .. 2^(bits-1) - 1), so a weight of the block's
    # largest magnitude and the other sign clips to the top code, one step away
    err, step = np.abs(rounded - w), np.abs(scale) * (1 + 1e-6)
    clipped = codes == 2 ** (bits - 1) - 1
    assert ((err <= 0.5 * step) | (clipped & (err <= step))).all()
    assert err.max() > 0  # it did quantize

    y, a2 = logits_and_head_input(wo, name, model, node)
    exact = a2 @ rounded
    err = np.abs(y.reshape(exact.shape) - exact)
    assert (err <= bound(a2, rounded, node, scales)).all(), err.max()


def test_lm_head_outlier_channels_stay_fp32_beside_the_rounded_weight(wo: World) -> None:
    """precision.lm_head_outliers: the named input channels' rows of the lm_head are
    zeroed before rounding (their codes are 0 and they widen no block's scale) and come
    back through an fp32 product, so the logits are the rounded weight's product plus
    the exact product of those rows, within the level-4 rule plus fp32 summation."""
    import onnx

    from builders.causal_lm._nbits import quantize_lm_head
    from builders.common import graph

    name = "tiny-llama-int4-awq"
    model = graph.load(wo.artifact(name, "onnx") / "model.onnx")
    head = next(n for n in model.graph.node if "logits" in n.output)
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    w = consts[head.input[1]].astype(np.float64)  # [K, N]
    channels = [5, 0, w.shape[0] - 1]
    for bad in ([1, 1], [w.shape[0]], [-1]):
        with pytest.raises(ValueError, match="not distinct channels"):
            quantize_lm_head(graph.load(wo.artifact(name, "onnx") / "model.onnx"), 4, 32, bad)
    model, record = quantize_lm_head(model, 4, 32, channels)
    assert record["outliers"] == channels
    assert record["method"] == "round-to-nearest, 3 fp32 channels"
    writes = {o: n for n in model.graph.node for o in n.output}
    add = writes["logits"]
    assert add.op_type == "Add" and writes[add.input[1]].op_type == "MatMul"
    node = writes[add.input[0]]
    assert node.op_type == "MatMulNBits" and node.input[0] == head.input[0]
    consts = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    codes, scale, scales = unpack(node, consts)
    assert (codes[channels] == 0).all() and np.abs(codes).sum() > 0
    rest = np.setdiff1d(np.arange(w.shape[0]), channels)
    err = np.abs(codes * scale - w)[rest]
    clipped = (codes == 7)[rest]
    step = np.abs(scale[rest]) * (1 + 1e-6)
    assert ((err <= 0.5 * step) | (clipped & (err <= step))).all()

    y, a2 = logits_and_head_input(wo, name, model, node)
    side = a2[:, channels] @ w[channels]
    exact = a2 @ (codes * scale) + side
    fp32 = gamma(len(channels) + 1) * (np.abs(a2[:, channels]) @ np.abs(w[channels]))
    fp32 += U * np.abs(exact)  # the Add's rounding
    err = np.abs(y.reshape(exact.shape) - exact)
    assert (err <= bound(a2, codes * scale, node, scales) + fp32).all(), err.max()


def test_the_quantize_step_ranks_lm_head_inputs_by_mean_magnitude(wo: World) -> None:
    """The channels precision.lm_head_outliers keeps are those of largest mean |x| of
    the lm_head's input over the calibration texts, as transformers' own final hidden
    states (after the final norm) give them."""
    import torch
    from transformers import AutoTokenizer

    from builders.causal_lm.quantize import calibration_ids, lm_head_outliers

    name = "tiny-llama-int4-awq"
    model = fake_quant_model(wo, name)
    tokenizer = AutoTokenizer.from_pretrained(wo.artifact(name, "fetch") / "checkpoint")
    texts = calibration_ids(tokenizer, 4, 32)

    def loop(m: Any, batch: list[list[int]]) -> None:
        with torch.no_grad():
            for ids in batch:
                m(torch.tensor([ids]))

    ranked = lm_head_outliers(model, texts, 6, loop)
    with torch.no_grad():
        states = [
            model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]
            for ids in texts
        ]
    mean = torch.cat(states).abs().mean(0).double().numpy()
    assert ranked["channels"] == [int(i) for i in np.argsort(-mean, kind="stable")[:6]]
    assert np.allclose(ranked["mean_abs"], mean[ranked["channels"]], rtol=1e-5, atol=1e-6)
    assert ranked["mean_abs"] == sorted(ranked["mean_abs"], reverse=True)

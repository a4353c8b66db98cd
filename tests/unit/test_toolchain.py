"""The quantized engine's option picks its own builder and code digest, and nothing
else: fp32 and tensorrt engine steps keep the options, code and keys they had."""

from __future__ import annotations

from pathlib import Path

from samples import base, quantized, steps

from kiln.plan import toolchain
from kiln.plan.toolchain import current


def test_a_quantized_onnxruntime_engine_builds_with_qengine_and_its_own_code(
    tmp_path: Path,
) -> None:
    got = steps(quantized("int8-wo"), tmp_path)["engine"]
    assert got.options["quantized"] is True
    assert toolchain.builder_module("engine", None, got.options) == "builders.causal_lm.qengine"
    assert got.material["code"] == current().code["engine/quantized"]
    assert current().code["engine/quantized"] != current().code["engine@onnxruntime"]
    assert "builders/causal_lm/qengine.py" in toolchain.OPTION_CODE["engine/quantized"]


def test_fp32_and_tensorrt_engines_keep_their_builder_and_code(tmp_path: Path) -> None:
    fp32 = steps(base(), tmp_path)["engine"]
    trt = steps(quantized(backend="tensorrt", target="sm90"), tmp_path)["engine"]
    for step, backend in ((fp32, "onnxruntime"), (trt, "tensorrt")):
        assert "quantized" not in step.options
        assert toolchain.builder_module("engine", None, step.options) == "builders.causal_lm.engine"
        assert step.material["code"] == current().code[f"engine@{backend}"]
    # qengine.py is hashed only into the quantized engine's code entry
    others = (*toolchain.CODE["engine"], *toolchain.BACKEND_CODE["onnxruntime"])
    assert not any("qengine" in p for p in others)

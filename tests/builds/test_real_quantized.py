"""The real chat model quantized, as a user builds it: SmolLM2-135M-Instruct in int8-wo
and int4-awq, calibrated by modelopt, run as onnxruntime CPU's MatMulNBits, judged on
perplexity and next-token agreement with the fp32 reference over 512 positions of the
shipped evaluation text (thresholds/quantized-int8.yaml, quantized-int4.yaml).

Nightly (KILN_NIGHTLY=1, `make nightly`): about 8 minutes on 2 cores.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import World, heavy, make_world

pytestmark = [
    heavy,
    pytest.mark.skipif(os.environ.get("KILN_NIGHTLY") != "1", reason="nightly: KILN_NIGHTLY=1"),
]

RECIPES = ("smollm2-135m-instruct-int8-wo", "smollm2-135m-instruct-int4-awq")


def test_quantized_real_recipes_pass_on_real_text_with_fused_kernels(
    tmp_path: Path, hub: Path
) -> None:
    import onnx

    world: World = make_world(tmp_path, hub, ("smollm2-135m-instruct", *RECIPES))
    world.doit("build", "recipe=" + ",".join(RECIPES), check=True)
    for name in RECIPES:
        evidence = world.manifest(name)["evidence"][-1]
        assert evidence["verdict"] == "pass", (name, evidence)
        metrics = evidence["metrics"]
        assert metrics["scored_positions"] == 512
        assert metrics["next_token_agreement"] > 0.8 and metrics["log_perplexity_ratio"] < 0.2
        steps = {s["kind"]: s["key"] for s in world.manifest(name)["lock"]["steps"]}
        engine = world.store / "objects" / steps["engine"][:2] / steps["engine"] / "engine.onnx"
        graph = onnx.load(str(engine), load_external_data=False)
        fused = [n for n in graph.graph.node if n.op_type == "MatMulNBits"]
        assert len(fused) >= 30 * 7, name  # every linear layer of the 30

"""The TensorRT backend's pure decisions, without TensorRT (it cannot be installed
here): optimization profiles from the build options, network and precision flags
for 10.x and 11.x enums. Nothing here builds, or pretends to build, an engine."""

from __future__ import annotations

import importlib.util
from enum import IntEnum
from types import SimpleNamespace

import pytest

from builders.causal_lm.backends.tensorrt import builder_flags, network_flags, profile_shapes

IO = {
    "kv_cache": {"kv_heads": 2, "head_dim": 16, "layers": 1},
    "inputs": [
        {"name": "input_ids"},
        {"name": "attention_mask"},
        {"name": "position_ids"},
        {"name": "past.0.key"},
        {"name": "past.0.value"},
    ],
}


class Net10(IntEnum):  # TensorRT 10.x NetworkDefinitionCreationFlag
    EXPLICIT_BATCH = 0
    STRONGLY_TYPED = 1


class Flags10(IntEnum):  # a few of 10.16's BuilderFlag members
    FP16 = 0
    INT8 = 2
    FP8 = 11
    INT4 = 23


class Flags11(IntEnum):  # 11.x removed the precision flags (api_facts 1)
    DEBUG = 0
    REFIT = 1


TRT10 = SimpleNamespace(NetworkDefinitionCreationFlag=Net10, BuilderFlag=Flags10)
TRT11 = SimpleNamespace(
    NetworkDefinitionCreationFlag=IntEnum("Net11", {"STRONGLY_TYPED": 1}), BuilderFlag=Flags11
)


def test_profiles_cover_prefill_and_decode_within_the_build_limits() -> None:
    shapes = profile_shapes(IO, max_batch=4, max_input=128, max_seq=256)
    assert shapes["input_ids"] == ((1, 1), (2, 1), (4, 128))
    assert shapes["attention_mask"] == ((1, 1), (2, 128), (4, 256))
    # a prefill starts from an empty cache; decode's cache holds up to max_seq - 1
    assert shapes["past.0.key"] == ((1, 2, 0, 16), (2, 2, 127, 16), (4, 2, 255, 16))
    assert set(shapes) == {v["name"] for v in IO["inputs"]}
    for lo, opt, hi in shapes.values():
        assert all(a <= b <= c for a, b, c in zip(lo, opt, hi, strict=True))


def test_batch_one_profiles_stay_ordered() -> None:
    lo, opt, hi = profile_shapes(IO, max_batch=1, max_input=8, max_seq=8)["input_ids"]
    assert lo[0] == opt[0] == hi[0] == 1


def test_strongly_typed_network_in_both_versions() -> None:
    assert network_flags(TRT10) == 1 << 1
    assert network_flags(TRT11) == 1 << 1
    old = IntEnum("Net9", {"EXPLICIT_BATCH": 0})  # before strong typing existed
    assert network_flags(SimpleNamespace(NetworkDefinitionCreationFlag=old)) == 0


def test_precision_comes_from_the_graph_when_strongly_typed() -> None:
    assert builder_flags(TRT10, "fp8", strongly_typed=True) == []
    assert builder_flags(TRT11, "fp8", strongly_typed=True) == []


def test_weakly_typed_10x_gets_its_flags_and_11x_has_none_to_give() -> None:
    assert builder_flags(TRT10, "fp8", strongly_typed=False) == [Flags10.FP8]
    assert builder_flags(TRT10, "w4a8-awq", strongly_typed=False) == [Flags10.INT4, Flags10.FP8]
    assert builder_flags(TRT10, "fp32", strongly_typed=False) == []
    assert builder_flags(TRT11, "fp8", strongly_typed=False) == []  # guarded with hasattr


@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is not None, reason="TensorRT present")
def test_without_tensorrt_the_engine_step_is_unsupported_not_built(tmp_path: object) -> None:
    from pathlib import Path

    from builders.causal_lm.backends import tensorrt
    from kiln.store.execute import Request
    from kiln.store.unsupported import Unsupported

    options = {
        "task": "text-generation",
        "backend": "tensorrt",
        "max_batch_size": 4,
        "max_seq_len": 256,
        "target": "sm90",
        "max_input_len": 256,
        "quantized": True,
        "compute": "fp32",
    }
    request = Request("engine", "0" * 64, "engine", options, {"onnx": Path(str(tmp_path))})
    with pytest.raises(Unsupported, match="import tensorrt"):
        tensorrt.build(request, None)

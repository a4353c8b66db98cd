"""tensorrt: an engine built with the TensorRT Python API (api_facts 1).

  1. builder.create_network with the STRONGLY_TYPED bit (ignored, and implied, in
     11.x; required in 10.x for precision to come from the graph);
  2. trt.OnnxParser(...).parse_from_file on the `tensorrt` form of the graph, whose
     modelopt Q/DQ ops (TRT_FP8QuantizeLinear, trt::DequantizeLinear) the parser
     registers by name;
  3. a builder config: workspace pool, the precision flags only 10.x knows (guarded
     with hasattr: 11.x removed FP16/INT8/FP8/INT4/FP4 flags), and one optimization
     profile whose min/opt/max shapes come from the recipe's build options;
  4. a timing cache, created empty, serialized next to the engine for the next build;
  5. build_serialized_network, written as engine.plan.

TensorRT cannot be installed on this project's machines (FIELD_NOTES), so where
`import tensorrt` fails the step ends `unsupported-here` with the import error.
The pure decisions (profiles, flags) are functions below, unit-tested without
TensorRT; nothing here, or in the tests, pretends an engine was built.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kiln.store.api import Request, Writer

from builders.causal_lm.backends import Options, fp32_only
from builders.common.ort import check_limits

WORKSPACE = 1 << 30
# Precision flags a TensorRT 10.x builder needs for a graph whose Q/DQ ops carry
# these types when the network is not strongly typed (removed in 11.x).
_FLAGS_10X = {
    "int8-sq": ("INT8",),
    "int8-wo": ("INT8",),
    "fp8": ("FP8",),
    "int4-awq": ("INT4",),
    "w4a8-awq": ("INT4", "FP8"),
    "nvfp4": ("FP4", "FP8"),
}


def profile_shapes(
    io: dict[str, Any], max_batch: int, max_input: int, max_seq: int
) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """min/opt/max for every dynamic input. One profile serves prefill (seq up to
    max_input, empty cache) and decode (seq 1, cache up to max_seq - 1); opt is a
    decode step at half the largest batch, the shape that runs most often."""
    kv = io["kv_cache"]
    heads, dim = kv["kv_heads"], kv["head_dim"]
    opt_batch = max(1, max_batch // 2)
    shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {
        "input_ids": ((1, 1), (opt_batch, 1), (max_batch, max_input)),
        "position_ids": ((1, 1), (opt_batch, 1), (max_batch, max_input)),
        "attention_mask": ((1, 1), (opt_batch, max_seq // 2), (max_batch, max_seq)),
    }
    for value in io["inputs"][3:]:
        if not value["name"].startswith("past."):  # logits_to_keep: a scalar, no profile
            continue
        shapes[value["name"]] = (
            (1, heads, 0, dim),
            (opt_batch, heads, max_seq // 2 - 1, dim),
            (max_batch, heads, max_seq - 1, dim),
        )
    return shapes


def network_flags(trt: Any) -> int:
    """STRONGLY_TYPED where the enum has it (10.x, and deprecated-but-present in 11.x)."""
    flag = getattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED", None)
    return 0 if flag is None else 1 << int(flag)


def builder_flags(trt: Any, weights: str, strongly_typed: bool) -> list[Any]:
    """Precision flags: none when the network is strongly typed (the Q/DQ nodes decide,
    and 11.x has no such flags); the 10.x flags otherwise, where they exist."""
    if strongly_typed:
        return []
    names = _FLAGS_10X.get(weights, ())
    return [getattr(trt.BuilderFlag, n) for n in names if hasattr(trt.BuilderFlag, n)]


def build(request: Request, writer: Writer) -> None:
    opts = Options.model_validate(request.options)
    fp32_only(request, opts)
    try:
        import tensorrt as trt
    except ImportError as exc:
        raise request.unsupported(
            f"TensorRT is not installed here (import tensorrt: {exc}); no TensorRT native "
            "library installs on this project's machines (FIELD_NOTES)"
        ) from None
    source = request.inputs["onnx"]
    io = json.loads((source / "io.json").read_text())
    check_limits(request, opts.max_seq_len, io)
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = network_flags(trt)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(source / "model.onnx")):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise request.error(f"TensorRT's ONNX parser refused the graph: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE)
    weights = io.get("quantization", {}).get("weights", "fp32")
    for flag in builder_flags(trt, weights, strongly_typed=flags != 0):
        config.set_flag(flag)
    profile = builder.create_optimization_profile()
    for name, (lo, mid, hi) in profile_shapes(
        io, opts.max_batch_size, opts.max_input_len, opts.max_seq_len
    ).items():
        profile.set_shape(name, lo, mid, hi)
    config.add_optimization_profile(profile)
    cache = config.create_timing_cache(b"")
    config.set_timing_cache(cache, False)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise request.error("TensorRT could not build the engine; see its log above")
    writer.write_bytes("engine.plan", bytes(plan))
    writer.write_bytes("timing.cache", bytes(config.get_timing_cache().serialize()))
    writer.write_json("io.json", io)
    writer.write_json(
        "engine.json",
        {
            "backend": "tensorrt",
            "version": trt.__version__,
            "provider": opts.target,
            "file": "engine.plan",
            "max_batch_size": opts.max_batch_size,
            "max_seq_len": opts.max_seq_len,
        },
    )

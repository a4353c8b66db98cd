"""What every onnxruntime engine step shares (text generation, the encoders, seq2seq).

check_limits  build.max_seq_len within the model's max_position_embeddings (every backend)
provider      the execution provider for a build target; unsupported-here where missing
optimize      onnxruntime's offline optimization, saved to a file; returns the session
share_weights point a saved engine's weights at copies of its source graph's data files
smoke         one run at the largest batch: the output has the expected shape, is finite
engine_json   engine.json, which the bundle step and runtime/ read

The optimization level is ORT_ENABLE_EXTENDED (fusions, which stay portable across
CPUs; the layout optimizations of ORT_ENABLE_ALL are hardware-specific), and the
saved graph is what the runtime loads, without optimizing again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.common import graph

LEVEL = "ORT_ENABLE_EXTENDED"


def external_data(saved: Path) -> list[str]:
    """The external-data files a saved graph refers to (names beside it), sorted."""
    import onnx

    return graph.external_files(onnx.load(str(saved), load_external_data=False))


def check_limits(request: Any, max_seq_len: int, io: dict[str, Any]) -> None:
    """A model without max_position_embeddings (None in io.json) has no such bound."""
    limit = io["max_position_embeddings"]
    if limit is not None and max_seq_len > limit:
        raise request.error(
            f"build.max_seq_len {max_seq_len} exceeds the model's max_position_embeddings {limit}",
            f"set build.max_seq_len to {limit} or less",
        )


def provider(request: Any, target: str) -> str:
    """CPU for target cpu, CUDA otherwise: only onnxruntime-gpu has the CUDA provider,
    and where it is not installed the step ends `unsupported-here`."""
    import onnxruntime as ort

    name = "CPUExecutionProvider" if target == "cpu" else "CUDAExecutionProvider"
    if name not in ort.get_available_providers():
        raise request.unsupported(
            f"onnxruntime {ort.__version__} here has no {name} "
            f"(available: {', '.join(ort.get_available_providers())})"
        )
    return name


def optimize(
    source: Path,
    saved: Path,
    provider: str,
    disabled: tuple[str, ...] = (),
    external: bool = False,
) -> Any:
    """Optimize the graph at `source` offline, save it as `saved`, and return the
    session; `disabled` names graph transformers to leave out. `external`: weights of
    1 KiB and more go to `<saved>.data` beside it (external_data() lists what was
    written), so a graph past protobuf's 2 GiB limit saves, and loads."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(saved)
    if external:
        so.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", f"{saved.name}.data"
        )
        so.add_session_config_entry(
            "session.optimized_model_external_initializers_min_size_in_bytes",
            str(graph.EXTERNAL_MIN),
        )
    extra = {"disabled_optimizers": list(disabled)} if disabled else {}
    return ort.InferenceSession(str(source), so, providers=[provider], **extra)


def share_weights(saved: Path, source: Path) -> tuple[int, int]:
    """onnxruntime writes every weight of the optimized graph `saved` anew, into
    `<saved>.data`; most are byte for byte tensors of the source graph's external data
    (an fp32 Llama: all of them, which are the checkpoint's own bytes:
    builders/common/weights.py). Each such tensor is read from a copy of the source's
    data file beside the engine instead (weights.share_data), which the store keeps
    once. Returns (bytes shared, bytes kept new)."""
    from builders.common import weights

    return weights.share_data(saved, weights.graph_starts(source))


def load(saved: Path, provider: str, threads: int = 1) -> Any:
    """A session on a saved engine as the runtime opens it: no optimization again."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = threads
    return ort.InferenceSession(str(saved), so, providers=[provider])


def smoke(
    request: Any, session: Any, output: str, feeds: dict[str, Any], shape: tuple[int, ...]
) -> None:
    """Run the session once; `output` must have `shape` and be finite."""
    import numpy as np

    got = session.run([output], feeds)[0]
    if got.shape != shape or not np.isfinite(got).all():
        raise request.error(f"engine smoke run gave {output} of shape {got.shape}", "kiln bug")


def engine_json(
    writer: Any, provider: str, max_batch_size: int, max_seq_len: int, **fields: Any
) -> None:
    """engine.json: the backend and where it runs, the limits, and `fields` (the
    engine's file or files, and any disabled optimizers)."""
    import onnxruntime as ort

    writer.write_json(
        "engine.json",
        {
            "backend": "onnxruntime",
            "version": ort.__version__,
            "provider": provider,
            "graph_optimization_level": LEVEL,
            "max_batch_size": max_batch_size,
            "max_seq_len": max_seq_len,
            **fields,
        },
    )

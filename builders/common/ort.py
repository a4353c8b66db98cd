"""What every onnxruntime engine step shares (text generation, the encoders, seq2seq).

check_limits  build.max_seq_len within the model's max_position_embeddings (every backend)
provider      the execution provider for a build target; unsupported-here where missing
optimize      onnxruntime's offline optimization, saved to a file; returns the session
share_weights point a saved engine's weights at a copy of its source graph's data file
smoke         one run at the largest batch: the output has the expected shape, is finite
engine_json   engine.json, which the bundle step and runtime/ read

The optimization level is ORT_ENABLE_EXTENDED (fusions, which stay portable across
CPUs; the layout optimizations of ORT_ENABLE_ALL are hardware-specific), and the
saved graph is what the runtime loads, without optimizing again.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from builders.common import graph

LEVEL = "ORT_ENABLE_EXTENDED"
# share_weights copies a source data file into the engine only when the engine reads
# at least this share of it
SHARE_MIN = 0.9


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
    (an fp32 Llama: all of them). Each such tensor is pointed at a copy of the source's
    data file placed beside the engine as `source.<name>` (the same bytes, which the
    store keeps once: kiln/store's blobs), and `<saved>.data` keeps only the others
    (it goes when there are none). Tensors are matched by their bytes (BLAKE2b), so
    what the graph reads is unchanged. A source file the engine reads less than
    SHARE_MIN of is not copied (the engine would carry the rest unread): its tensors
    stay in `<saved>.data`. Returns (bytes shared, bytes kept new)."""
    import hashlib

    import onnx

    def chunks(model: Any) -> list[tuple[Any, dict[str, str]]]:
        return [
            (t, {e.key: e.value for e in t.external_data})
            for t in model.graph.initializer
            if t.data_location == onnx.TensorProto.EXTERNAL
        ]

    def read(folder: Path, info: dict[str, str]) -> bytes:
        with (folder / info["location"]).open("rb") as fh:
            fh.seek(int(info.get("offset", 0)))
            return fh.read(int(info["length"]))

    src = onnx.load(str(source), load_external_data=False)
    found: dict[bytes, tuple[str, int, int]] = {}
    for _, info in chunks(src):
        digest = hashlib.blake2b(read(source.parent, info), digest_size=16).digest()
        found[digest] = (info["location"], int(info.get("offset", 0)), int(info["length"]))
    model = onnx.load(str(saved), load_external_data=False)
    own = saved.parent / f"{saved.name}.data"
    hits: list[tuple[Any, bytes, tuple[str, int, int] | None]] = []
    read_from: dict[str, int] = {}
    for tensor, info in chunks(model):
        if info["location"] != own.name:
            raise ValueError(f"{saved}: external data {info['location']!r}, not {own.name!r}")
        data = read(saved.parent, info)
        hit = found.get(hashlib.blake2b(data, digest_size=16).digest())
        hits.append((tensor, data, hit))
        if hit is not None:
            read_from[hit[0]] = read_from.get(hit[0], 0) + len(data)
    used = {
        name
        for name, n in read_from.items()
        if n >= SHARE_MIN * (source.parent / name).stat().st_size
    }
    if not used:
        return 0, sum(len(data) for _, data, _ in hits)
    shared = kept = 0
    fresh: list[tuple[Any, bytes]] = []
    for tensor, data, hit in hits:
        if hit is None or hit[0] not in used:
            fresh.append((tensor, data))
            kept += len(data)
        else:
            _point(tensor, f"source.{hit[0]}", hit[1], hit[2])
            shared += len(data)
    for name in sorted(used):
        shutil.copyfile(source.parent / name, saved.parent / f"source.{name}")
    own.unlink()
    if fresh:
        with own.open("wb") as fh:
            for tensor, data in fresh:
                _point(tensor, own.name, fh.tell(), len(data))
                fh.write(data)
    onnx.save(model, str(saved))
    return shared, kept


def _point(tensor: Any, location: str, offset: int, length: int) -> None:
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


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

"""Engine backends for the runtime, behind one call: `open_engine(bundle, meta)`
returns an object with `run(output_names, feeds) -> list[np.ndarray]` (the shape of
onnxruntime's InferenceSession.run), so runtime/causal_lm.py's loop knows no backend.

Each backend imports its library inside its constructor: an onnxruntime bundle
never imports torch, and only the aoti, inductor and tensorrt backends do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from runtime.format import default_threads


class Engine(Protocol):
    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]: ...


class OnnxRuntimeEngine:
    def __init__(self, file: Path, meta: dict[str, Any], threads: int | None) -> None:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # done at build
        so.intra_op_num_threads = threads or default_threads()
        self.session = ort.InferenceSession(str(file), so, providers=[meta["provider"]])

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return list(self.session.run(output_names, feeds))


class AotiEngine:
    """An AOTInductor .pt2 package; inputs in the bundle's I/O order.

    A one-token decode step of a small model is ~30 tiny kernels: at more than one
    intra-op thread each pays an OpenMP fork/join, which on a loaded 2-core host costs
    more than the kernel (bench/aoti_profile.py: 2 threads 400-1400 tokens/s, 1 thread
    ~5100). Decode steps therefore run at one thread and the prefill at the caller's
    count, which is restored after each call (the process may run other torch code).
    The package is called through its loader with a flat list: AOTICompiledModel's
    __call__ re-parses its pytree specs on every call (~20 us a token).
    """

    def __init__(self, file: Path, meta: dict[str, Any], threads: int | None) -> None:
        import torch

        if threads:
            torch.set_num_threads(threads)
        self.torch = torch
        self.device = meta["provider"]
        self.runner = torch._inductor.aoti_load_package(str(file))
        self.loader = self.runner.loader

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        t = self.torch
        args = [t.from_numpy(np.ascontiguousarray(v)) for v in feeds.values()]
        if self.device != "cpu":
            args = [a.to(self.device) for a in args]
        decode = self.device == "cpu" and args[0].shape[1] == 1  # input_ids [batch, 1]
        threads = t.get_num_threads()
        if decode:
            t.set_num_threads(1)
        try:
            with t.inference_mode():
                outs = self.loader.boxed_run(args)  # flat outputs, in the I/O order
        finally:
            t.set_num_threads(threads)
        return [o.cpu().numpy() for o in outs]


class TensorRTEngine:
    """A serialized TensorRT engine run with execute_async_v3 (api_facts 1, Runtime).
    Written against the documented API; TensorRT cannot be installed here."""

    def __init__(self, file: Path, meta: dict[str, Any], threads: int | None) -> None:
        import tensorrt as trt
        import torch

        self.torch = torch
        self.engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(
            file.read_bytes()
        )
        self.context = self.engine.create_execution_context()

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        t = self.torch
        inputs = {k: t.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in feeds.items()}
        for name, tensor in inputs.items():
            self.context.set_input_shape(name, tuple(tensor.shape))
            self.context.set_tensor_address(name, tensor.data_ptr())
        outputs = {}
        for name in output_names:
            shape = tuple(self.context.get_tensor_shape(name))
            outputs[name] = t.empty(shape, dtype=t.float32, device="cuda")
            self.context.set_tensor_address(name, outputs[name].data_ptr())
        stream = t.cuda.current_stream()
        self.context.execute_async_v3(stream.cuda_stream)
        stream.synchronize()
        return [outputs[n].cpu().numpy() for n in output_names]


def _inductor(file: Path, meta: dict[str, Any], threads: int | None) -> Any:
    """runtime/inductor.py's engine, imported only by bundles that need torch."""
    from runtime.inductor import InductorEngine

    return InductorEngine(file, meta, threads)


BACKENDS: dict[str, Any] = {
    "onnxruntime": OnnxRuntimeEngine,
    "aoti": AotiEngine,
    "tensorrt": TensorRTEngine,
    "inductor": _inductor,
}


def open_engine(folder: Path, meta: dict[str, Any], threads: int | None = None) -> Engine:
    backend = BACKENDS.get(meta["backend"])
    if backend is None:
        raise ValueError(f"unknown engine backend {meta['backend']!r}")
    engine: Engine = backend(folder / meta["file"], meta, threads)
    return engine

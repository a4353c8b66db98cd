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
from runtime.pages import opened_on_huge_pages


class Engine(Protocol):
    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]: ...


# A forward over a small model runs on one thread when it feeds fewer tokens than
# SHORT_WORK / (the bundle's engine bytes). onnxruntime's pool hands every op of a
# forward to its threads, and over a model this small the hand-off costs more than
# the split saves. Measured on the 2-core host with tiny-llama's bundle (0.6 MB), one
# thread against two: greedy decode 1.2-1.4x faster, a 16-token step after a 256-token
# prefix 1.5-2.3x faster, steps of up to 64 tokens no slower; a 272-token prefill up
# to 1.3x faster at two. 64 MiB puts tiny-llama's cut at 110 tokens, between the two;
# SmolLM2-135M (651 MB) never takes the one-thread session (its 16-token step: 51 ms
# at two threads, 85 at one), and no bundle of 64 MiB or more opens it.
SHORT_WORK = 64 << 20


def engine_bytes(folder: Path) -> int:
    """The bytes of the ONNX graphs and external weight files in a bundle folder (an
    fp32 engine reads most weights from the checkpoint's own safetensors file:
    builders/common/weights.py)."""
    weights = (".onnx", ".data", ".safetensors")
    return sum(f.stat().st_size for f in folder.iterdir() if f.suffix in weights)


_KEEP_ALL = np.array(0, np.int64)  # logits_to_keep 0: every fed position (one, stepping)


def _ortvalue(array: np.ndarray) -> Any:
    import onnxruntime as ort

    return ort.OrtValue.ortvalue_from_numpy(array)


class SharedCache:
    """The KV cache in place: one buffer per cached tensor, [batch, heads, capacity,
    dim], bound as both the past input and the present output of a graph whose every
    present is GroupQueryAttention's (bundle.json engines.main.shared_cache; the export
    makes nothing else read the past's length: builders/causal_lm/_ort_attention.py).
    onnxruntime then appends each step's keys and values inside the buffer (its
    past-present buffer sharing, which onnxruntime-genai uses) instead of writing a
    whole new cache for every forward and handing it back as a fresh array.

    A forward still takes and returns caches as arrays: what it returns are views of
    the buffers, [batch, heads, total, dim]; a past that is such a view (the previous
    forward's present, or a cut of it along seq, as a speculative rollback makes) is
    already in place, and any other past is copied in first. So a caller that keeps a
    returned cache past the next forward must copy it (runtime/causal_lm.py PrefixCache
    does): the next forward may write over what it covers."""

    def __init__(self, session: Any, capacity: int) -> None:
        names = {o.name: o for o in session.get_outputs()}
        pasts = [i.name for i in session.get_inputs() if i.name.startswith("past.")]
        self.pairs = [(p, "present." + p.removeprefix("past.")) for p in pasts]
        if not pasts or any(q not in names for _, q in self.pairs):
            raise ValueError("shared_cache needs a present.* output for every past.* input")
        self.capacity = capacity
        vocab = names["logits"].shape[-1] if "logits" in names else None
        if not isinstance(vocab, int):
            raise ValueError("shared_cache needs a logits output of a fixed vocabulary size")
        self.vocab = vocab
        self.buffers: list[np.ndarray] = []
        self.starts: list[int] = []  # each buffer's address
        self.returned: list[np.ndarray] = []  # the presents the last forward returned
        self.bindings: dict[int, Any] = {}  # per session: the cache bound once
        self.logits: dict[tuple[int, int], Any] = {}  # a decode step's logits, bound once
        # a decode step's token and position, per (session, batch): arrays the step
        # writes into, bound once; `stepping` names the binding they are bound in now
        # (a forward binds its own inputs over them)
        self.steps: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.stepping: tuple[int, int] | None = None
        # the inputs bound per forward (the pasts are bound once, as the buffers)
        self.inputs = [i.name for i in session.get_inputs() if not i.name.startswith("past.")]
        images = next((i for i in session.get_inputs() if i.name == "image_features"), None)
        hidden = images.shape[-1] if images is not None else None
        self.no_images = np.zeros((0, hidden), np.float32) if isinstance(hidden, int) else None
        # a DeepStack decoder's (Qwen3-VL) rows per level: none in a step either
        deep = next((i for i in session.get_inputs() if i.name == "deepstack_features"), None)
        self.no_deepstack = None if deep is None else np.zeros((0, *deep.shape[1:]), np.float32)
        self.orders: dict[tuple[str, ...], list[int] | None] = {}
        self.total = 0  # positions the buffers hold after the last forward or step

    def _place(self, pasts: list[np.ndarray]) -> None:
        same = len(pasts) == len(self.returned)
        if same and all(p is r for p, r in zip(pasts, self.returned, strict=True)):
            return  # the last forward's presents: in place (most decode steps)
        shapes = [(*p.shape[:2], self.capacity, *p.shape[3:]) for p in pasts]
        if [(b.shape, b.dtype) for b in self.buffers] != [
            (s, p.dtype) for s, p in zip(shapes, pasts, strict=True)
        ]:
            self.buffers = [np.zeros(s, p.dtype) for s, p in zip(shapes, pasts, strict=True)]
            self.starts = [b.__array_interface__["data"][0] for b in self.buffers]
            self.bindings, self.logits, self.steps, self.stepping = {}, {}, {}, None
        for buffer, start, past in zip(self.buffers, self.starts, pasts, strict=True):
            view = buffer[:, :, : past.shape[2]]
            if past.__array_interface__["data"][0] != start or past.strides != view.strides:
                view[...] = past

    def _binding(self, session: Any) -> Any:
        """The session's IOBinding with every buffer bound as past and present."""
        import onnxruntime as ort

        binding = self.bindings.get(id(session))
        if binding is None:
            binding = session.io_binding()
            for (past, present), buffer in zip(self.pairs, self.buffers, strict=True):
                value = ort.OrtValue.ortvalue_from_numpy(buffer)
                binding.bind_ortvalue_input(past, value)
                binding.bind_ortvalue_output(present, value)
            self.bindings[id(session)] = binding
        return binding

    def _order(self, output_names: list[str]) -> list[int] | None:
        """Where each asked-for output is in [logits, *presents]; None when something
        else is asked for (a drafter's hidden states, say). Worked out once per list."""
        key = tuple(output_names)
        if key not in self.orders:
            where = {"logits": 0, **{q: i + 1 for i, (_, q) in enumerate(self.pairs)}}
            self.orders[key] = (
                [where[n] for n in key] if set(key) <= set(where) and "logits" in key else None
            )
        return self.orders[key]

    def step(
        self, session: Any, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray
    ) -> np.ndarray | None:
        """A decode step on the cache the last forward left in place (`ids` [batch, 1],
        `mask` [batch, total]): its logits, [batch, 1, vocab], in a buffer the next
        step writes over; None where it does not fit (the caller runs a forward with
        `presents()` as the past). What run() does for such a step, less the work a
        generation loop pays per token for nothing: no feeds dict, no check of 60
        pasts, no views of the cache, no copy of the logits, and only the mask bound
        anew (the token and position are written into arrays bound once, as the
        logits are). Python's work between two steps is time the engine's other
        threads spin through, or sleep through and are woken from."""
        batch, total = mask.shape
        if total > self.capacity or not self.buffers or self.buffers[0].shape[0] != batch:
            return None
        key = (id(session), batch)
        binding = self._binding(session)
        if self.stepping != key:
            if key not in self.steps:
                # positions [batch, 1], or [batch, 1, 3] for M-RoPE (runtime/grid_vlm.py)
                self.steps[key] = (np.empty((batch, 1), np.int64), np.empty_like(positions))
            token, position = self.steps[key]
            binding.bind_ortvalue_input("input_ids", _ortvalue(token))
            binding.bind_ortvalue_input("position_ids", _ortvalue(position))
            if self.no_images is not None:  # a step feeds no image rows (a VLM's decoder)
                binding.bind_cpu_input("image_features", self.no_images)
            if self.no_deepstack is not None:
                binding.bind_cpu_input("deepstack_features", self.no_deepstack)
            if "logits_to_keep" in self.inputs:
                binding.bind_cpu_input("logits_to_keep", _KEEP_ALL)
            binding.bind_ortvalue_output("logits", self._row(session, batch)[1])
            self.stepping = key
        token, position = self.steps[key]
        token[...] = ids
        position[...] = positions
        binding.bind_cpu_input("attention_mask", mask)
        session.run_with_iobinding(binding)
        self.total = total
        return self._row(session, batch)[0]

    def _row(self, session: Any, batch: int) -> tuple[np.ndarray, Any]:
        """The [batch, 1, vocab] logits buffer of one-position forwards on `session`,
        and its OrtValue: allocated and wrapped once, then bound by every such forward."""
        key = (id(session), batch)
        if key not in self.logits:
            logits = np.empty((batch, 1, self.vocab), np.float32)
            self.logits[key] = (logits, _ortvalue(logits))
        return self.logits[key]

    def presents(self) -> list[np.ndarray]:
        """The cache after the last step, as a forward returns it (views of the
        buffers), which a forward then takes as a past in place."""
        self.returned = [b[:, :, : self.total] for b in self.buffers]
        return list(self.returned)

    def run(
        self, session: Any, output_names: list[str], feeds: dict[str, np.ndarray]
    ) -> list[np.ndarray] | None:
        """The forward in place; None when it does not fit the buffers (the caller runs
        it as usual)."""
        import onnxruntime as ort

        pasts = [feeds[p] for p, _ in self.pairs]
        batch, seq = feeds["input_ids"].shape
        total = pasts[0].shape[2] + seq
        order = self._order(output_names)
        if total > self.capacity or order is None or any(p.ndim != 4 for p in pasts):
            return None
        self._place(pasts)
        binding = self._binding(session)
        self.stepping = None  # its inputs are bound over a step's
        for name in self.inputs:
            if name in feeds:
                binding.bind_cpu_input(name, feeds[name])
        keep = int(feeds.get("logits_to_keep", 0))  # the last `keep` positions' logits
        rows = min(keep, seq) if keep > 0 else seq
        if rows == 1:  # a decode step, or a prefill's last position: bound once
            logits, value = self._row(session, batch)
            binding.bind_ortvalue_output("logits", value)
        else:
            logits = np.empty((batch, rows, self.vocab), np.float32)
            binding.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))
        session.run_with_iobinding(binding)
        self.total = total
        self.returned = [b[:, :, :total] for b in self.buffers]
        out = [logits.copy() if rows == 1 else logits, *self.returned]
        return [out[i] for i in order]


class OnnxRuntimeEngine:
    """An onnxruntime session at the caller's thread count; over a small model, forwards
    of few tokens (decode steps, a reused prefix's suffix) run on a second session of
    one thread (SHORT_WORK), opened at the first such forward. An engine whose bundle
    says so keeps its KV cache in place (SharedCache)."""

    def __init__(self, file: Path, meta: dict[str, Any], threads: int | None) -> None:
        self.file, self.provider = file, meta["provider"]
        self.threads = threads or default_threads()
        self.huge_bytes = 0  # of its sessions' memory, on huge pages (runtime/pages.py)
        self.session = self._open(self.threads)
        self.narrow: Any = None
        self.short = SHORT_WORK // max(1, engine_bytes(file.parent)) if self.threads > 1 else 0
        shared = meta.get("shared_cache")
        self.cache = SharedCache(self.session, int(shared["capacity"])) if shared else None

    def _open(self, threads: int) -> Any:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # done at build
        so.intra_op_num_threads = threads
        session, collapsed = opened_on_huge_pages(
            lambda: ort.InferenceSession(str(self.file), so, providers=[self.provider])
        )
        self.huge_bytes += collapsed
        return session

    def step(self, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray) -> np.ndarray | None:
        """A decode step in place (SharedCache.step), on the session run() would pick;
        None without a shared cache, or where it does not fit."""
        if self.cache is None or not self.cache.buffers:
            return None
        return self.cache.step(self._pick(ids.size), ids, mask, positions)

    def presents(self) -> list[np.ndarray]:
        """The cache after the last step (SharedCache.presents)."""
        assert self.cache is not None
        return self.cache.presents()

    def _pick(self, tokens: int) -> Any:
        if tokens < self.short:
            if self.narrow is None:
                self.narrow = self._open(1)
            return self.narrow
        return self.session

    def run(self, output_names: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        session = self._pick(feeds["input_ids"].size)
        if self.cache is not None:
            done = self.cache.run(session, output_names, feeds)
            if done is not None:
                return done
        return list(session.run(output_names, feeds))


class AotiEngine:
    """An AOTInductor .pt2 package; inputs in the bundle's I/O order.

    A one-token decode step of a small model is ~30 tiny kernels: at more than one
    intra-op thread each pays an OpenMP fork/join, which on a loaded 2-core host costs
    more than the kernel (bench/probes/aoti_profile.py: 2 threads 400-1400 tokens/s, 1 thread
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

"""The inductor backend's engine: torch.export programs over a static KV cache
(builders/causal_lm/backends/inductor.py writes them), compiled with Inductor, the
cache held on the device and updated in place (runtime/inductor_lm.py drives it).
On CUDA the decode step is captured in a CUDA graph once and replayed; per token the
host writes the step's small inputs and reads the logits. Both programs read the
same weight tensors: one copy in memory.

Inductor's compiled artifacts are cached beside the bundle, in
.inductor-cache/<torch version>-<device>/ (TORCHINDUCTOR_CACHE_DIR), when the bundle's
folder is writable, so a second load does not recompile.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from runtime.format import BundleError

# torch.compile mode per device when the bundle names none. Inductor's default: the
# CUDA graph is ours (so no cudagraphs mode), and max-autotune-no-cudagraphs is not
# yet measured against it inside a validate step's time (issue 18).
MODES = {"cpu": "default", "cuda": "default"}


class InductorEngine:
    def __init__(self, file: Path, meta: dict[str, Any], threads: int | None) -> None:
        import torch
        from safetensors.torch import load

        self.torch = torch
        self.device = meta["provider"]
        if self.device == "cuda" and not torch.cuda.is_available():
            raise BundleError(f"{file}: this bundle runs on CUDA; this host has no CUDA device")
        if threads:
            torch.set_num_threads(threads)
        _cache_dir(file.parent, torch.__version__, self.device)
        with zipfile.ZipFile(file) as archive:
            self.program = json.loads(archive.read("program.json"))
            weights = load(archive.read("weights.safetensors"))
            programs = {
                name: torch.export.load(io.BytesIO(archive.read(name)))
                for name in ("decode.pt2", "prefill.pt2")
                if name in archive.namelist()
            }
        self.dtype = getattr(torch, self.program["dtype"])
        self.weights = [weights[n].to(self.device) for n in self.program["weights"]]
        self.batch, self.length = self.program["batch"], self.program["max_seq_len"]
        self.chunk = int(self.program["prefill_chunk_len"])
        self.cache = [
            torch.zeros(shape, dtype=self.dtype, device=self.device)
            for shape in self.program["cache"]
        ]
        mode = meta.get("compile_mode") or MODES[self.device]
        self.steps = {
            (1 if name == "decode.pt2" else self.chunk): _compiled(torch, ep, mode)
            for name, ep in programs.items()
        }
        self.graph: Any = None  # the captured decode step, on CUDA
        self._warm()

    def _warm(self) -> None:
        """Compile every program (and capture the CUDA graph) at load, not inside the
        first generation: a bundle's first tokens/s then measures decoding."""
        for tokens in self.steps:
            ids = np.zeros((self.batch, tokens), np.int64)
            slots = np.arange(tokens, dtype=np.int64)
            mask = np.zeros((self.batch, self.length), np.int64)
            self.call(ids, np.broadcast_to(slots, ids.shape), slots, mask)
        self.reset()

    def reset(self) -> None:
        for t in self.cache:
            t.zero_()

    def call(
        self, ids: np.ndarray, positions: np.ndarray, slots: np.ndarray, mask: np.ndarray
    ) -> Any:
        """One program call: ids/positions [B, T], slots [T], mask [B, max_seq_len]."""
        t = self.torch
        args = [
            t.from_numpy(np.ascontiguousarray(a)).to(self.device)
            for a in (ids, positions, slots, mask)
        ]
        tokens = ids.shape[1]
        if self.device == "cuda" and tokens == 1:
            return self._replay(args)
        with t.inference_mode():
            return self.steps[tokens](*self.weights, *args, *self.cache)

    def _replay(self, args: list[Any]) -> Any:
        """The decode step in a CUDA graph: captured on first use, after warm-up calls
        on a side stream (their cache writes land in slot args[2], which the prompt
        rewrites before it is read)."""
        t = self.torch
        if self.graph is None:
            self.inputs = [a.clone() for a in args]
            saved = [c.clone() for c in self.cache]
            side = t.cuda.Stream()
            side.wait_stream(t.cuda.current_stream())
            with t.cuda.stream(side), t.inference_mode():
                for _ in range(3):
                    self.steps[1](*self.weights, *self.inputs, *self.cache)
            t.cuda.current_stream().wait_stream(side)
            self.graph = t.cuda.CUDAGraph()
            with t.cuda.graph(self.graph), t.inference_mode():
                self.out = self.steps[1](*self.weights, *self.inputs, *self.cache)
            for c, s in zip(self.cache, saved, strict=True):
                c.copy_(s)
        for dst, src in zip(self.inputs, args, strict=True):
            dst.copy_(src, non_blocking=True)
        self.graph.replay()
        return self.out


def _compiled(torch: Any, program: Any, mode: str) -> Any:
    module = program.module()
    return torch.compile(module, mode=None if mode == "default" else mode, fullgraph=True)


def _cache_dir(folder: Path, version: str, device: str) -> None:
    """Inductor's on-disk cache beside the bundle, keyed by torch version and device;
    left to Inductor's default where the bundle is read-only (the store seals it)."""
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return
    target = folder / ".inductor-cache" / f"{version}-{device}"
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    if os.access(target, os.W_OK):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(target)

"""The inductor backend's engine: torch.export programs over a static KV cache
(builders/causal_lm/backends/inductor.py writes them), compiled with Inductor, the
cache held on the device and updated in place (runtime/inductor_lm.py drives it).
Every program reads the same weight tensors: one copy in memory. A drafting bundle's
engine also has a verify program of exactly max_draft_len + 1 tokens (program.json
"verify_len"; bundles without one load as before), compiled and, on CUDA, captured in a
CUDA graph of its own like the prefill chunk. An image-text-to-text engine's prefill
program also takes image features, zero-padded to its static rows (program.json
"image_features"; builders/causal_lm/backends/_images.py): `call` writes a chunk's
rows into that buffer. A drafting engine (dflash, dspark: program.json "drafter";
builders/causal_lm/backends/_drafter.py) also holds its drafter's programs, `draft` and
`markov`, over their own static context cache, and its target programs return (logits,
the drafter's hidden states): `call` keeps the last call's in `hidden`
(runtime/inductor_drafter.py drives the drafter).

The decode step is compiled together with its bookkeeping: the greedy token (argmax
of the logits plus a bias row that bans tokens, e.g. EOS while it is suppressed) is
written to the step's own `ids` input and to a `history` row, the new slot becomes
visible, and position and slot advance, all on the device. So consecutive steps need
no host work: on CUDA one step, and a block of BLOCK steps, are each captured in a
CUDA graph at load and replayed (so is the prefill chunk), and the host reads the
generated ids once a block (runtime/inductor_lm.py). The same code runs on CPU,
without the graphs.
An engine with a one-row decode program (decode_one; program.json
"decode_batch_one") runs greedy generation at batch 1 through it, over the first row of
the same state and cache (views), in CUDA graphs of its own: the max-batch step reads
every row's cache at every step, live or not.

The engine carries its compiled kernels (runtime/kernels.py): a load installs them
into this host's Inductor cache and compiles nothing, or refuses where they were built
for another host (torch, GPU, Triton): it never picks kernels of its own silently.
It also carries its programs as plain FX graphs (runtime/graphs.py, the decode step's
with its bookkeeping), which a load hands straight to Inductor
(torch._inductor.standalone_compile, whose caches then hold every graph): no
torch.export.load and no Dynamo trace, which were 11 s and ~8 s of a 22 s load of the
SmolLM2-geometry bundle on the H100 (bench/results/load_profile_2026-12-06.txt). A
load's phases are in `timings` (bench/probes/load_profile.py prints them).
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import json
import sys
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from runtime import graphs, kernels
from runtime.format import BundleError

# torch.compile mode per device when the bundle names none: on CUDA autotuned matmul
# and reduction kernels (the CUDA graph is ours, so the no-cudagraphs form), measured
# to keep fp32 greedy tokens identical on the H200 (bench/results/); on CPU Inductor's
# default (max-autotune on CPU tunes little and compiles for minutes on 2 cores).
MODES = {"cpu": "default", "cuda": "max-autotune-no-cudagraphs"}
# The prefill program's mode on CUDA: autotuning its chunk-sized matmuls would add
# about a minute to every uncached load, for a call made once per chunk of a prompt.
PREFILL_MODES = {"cpu": "default", "cuda": "default"}
# The verify program's mode: as the prefill chunk's (a few tokens' matmuls; autotuning
# them would lengthen every uncached load again).
VERIFY_MODES = PREFILL_MODES
# The sdpa backends a CUDA decode step may use, by engine dtype, in order of choice.
# The math backend, which Inductor fuses into a few small kernels for one query, for
# every dtype. torch's fused kernels are slower in fp32 (no flash or cuDNN kernel, and
# the memory-efficient one took over 20 us a layer on the H200). In bf16/fp16 cuDNN's
# fused attention is faster (6 us a layer on the H200 at SmolLM2-135M's geometry over a
# 1,024-slot cache, against about 15 us for the math kernels,
# bench/results/decode_gpu_smollm2_shape_2026-12-01.txt) but not deterministic: on the
# H100 the real SmolLM2 bf16 decode step, run uncompiled from one saved state, gave 2
# distinct 63-step logit paths in 10 with cuDNN's attention and 1 with the math
# backend's (bench/results/gpu_determinism_2026-12-06b.txt), and greedy output parted
# between runs of one process where a top-2 margin was a tie.
DECODE_ATTENTION = {"float32": ("MATH",), "bfloat16": ("MATH",)}
DECODE_ATTENTION["float16"] = DECODE_ATTENTION["bfloat16"]
# Decode steps per CUDA graph replay, and per read of the generated ids.
BLOCK = 16
# Inductor options added to every CUDA compile: with them, every choice among kernel
# configs is made once, at build, and found again by each load in the autotune cache
# the engine carries. Without them torch 2.11 times some kernels afresh in every
# process (coordinate-descent tuning on a warm cache, pytorch#172819; the halved
# R0_BLOCK candidates _dynamic_scale_rblock adds after the cache lookup, pytorch#189121),
# so two processes may pick different block sizes, which sum in different orders:
# the same bf16 bundle gave a different greedy answer in each of 5 processes on the
# H100 (bench/results/gpu_real_2026-12-05.txt). The cost is the few percent those
# tunings gain.
CUDA_OPTIONS = {"coordinate_descent_tuning": False, "dynamic_scale_rblock": False}
# A drafting engine's drafter programs (builders/causal_lm/backends/_drafter.py), loaded,
# derived and compiled as the target's are; run outside CUDA graphs, between the
# target's calls.
DRAFTER_PROGRAMS = ("draft", "markov")


class InductorEngine:
    """`compile_here`: the engine step's own compile (builders/causal_lm/backends/
    _kernels.py), which makes the kernels the engine then carries."""

    def __init__(
        self, file: Path, meta: dict[str, Any], threads: int | None, compile_here: bool = False
    ) -> None:
        import torch

        self.torch = torch
        self.device = meta["provider"]
        # seconds of each phase of this load, in order (bench/probes/load_profile.py)
        self.timings: dict[str, float] = {}
        self.load = next(_LOADS)  # this process's loads, counted (_key_state)
        start = time.perf_counter()
        if self.device == "cuda" and not torch.cuda.is_available():
            raise BundleError(f"{file}: this bundle runs on CUDA; this host has no CUDA device")
        with zipfile.ZipFile(file) as archive:
            names = archive.namelist()
            self.program = json.loads(archive.read("program.json"))
            carried = json.loads(archive.read(kernels.META)) if kernels.META in names else None
            if not compile_here:
                compile_here = not kernels.check(file, carried, self.device)
            if self.device == "cpu":
                # Inductor's C++ is generated for a thread count (it splits loops and
                # reductions by it): the carried kernels' count, else a fixed one (a
                # tensor-parallel rank's share of it: its ranks run side by side)
                world = int(self.program.get("tensor_parallel", 1))
                here = max(1, kernels.threads() // world)
                count = carried["threads"] if carried and not compile_here else here
                if threads and threads != count:  # never silently: the caller asked
                    print(
                        f"kiln: {file.name}: runs at {count} threads, not the {threads} asked: "
                        f"its kernels were generated for {count} (another count is another "
                        "compile, with other sums)",
                        file=sys.stderr,
                    )
                torch.set_num_threads(count)
            elif threads:
                torch.set_num_threads(threads)
            if carried and carried.get("folder") and not compile_here:
                folder = kernels.pinned_folder(carried["folder"])
            else:
                own = None if compile_here else kernels.digest(archive)
                folder = kernels.cache_folder(kernels.host_key(self.device), own)
            self.timings["read"] = time.perf_counter() - start
            # what this load installed and compiled (the engine step's check prints it)
            with self._timed("install"):
                installed = 0 if compile_here else kernels.install(archive, folder)
            self.kernels = {"installed": installed}
            with self._timed("weights"):
                weights = _mapped(file, self.program)
            # the programs as FX graphs (runtime/graphs.py); the build's compile, or a
            # recompile of a bundle built before them, derives them from the .pt2 programs
            if graphs.GRAPHS in names:
                with self._timed("graphs"):
                    programs = graphs.decode(
                        archive.read(graphs.GRAPHS), archive.read(graphs.CONSTANTS)
                    )
                exported: dict[str, Any] = {}
            elif compile_here:
                programs = {}
                exported = {}
                for name in (*graphs.PROGRAMS, *DRAFTER_PROGRAMS):
                    if f"{name}.pt2" in names:
                        with self._timed(f"export.load {name}"):
                            member = io.BytesIO(archive.read(f"{name}.pt2"))
                            exported[name] = torch.export.load(member)
            else:
                raise BundleError(
                    f"{file}: built before inductor engines carried their programs as FX "
                    f"graphs ({graphs.GRAPHS}; issue 39's load time): rebuild the bundle "
                    f"(doit build recipe=NAME), or set {kernels.RECOMPILE}=1 to compile here"
                )
        self.dtype = getattr(torch, self.program["dtype"])
        with self._timed("weights"):
            self.weights = [weights[n].to(self.device) for n in self.program["weights"]]
        self.batch, self.length = self.program["batch"], self.program["max_seq_len"]
        self.chunk = int(self.program["prefill_chunk_len"])
        # The verify program's tokens; 0 without one (then a chunk of that length, or
        # single steps, verify).
        has_verify = "verify" in programs or "verify" in exported
        self.verify_len = int(self.program.get("verify_len", 0)) if has_verify else 0
        self.vocab = int(self.program["vocab_size"])
        self.cache = [
            torch.zeros(shape, dtype=self.dtype, device=self.device)
            for shape in self.program["cache"]
        ]
        # The recipe's build.compile_mode (program.json), else this device's default.
        chosen = self.program.get("compile_mode") or meta.get("compile_mode")
        self.mode = _mode(chosen or MODES[self.device])
        # The decode step's inputs and bookkeeping, resident on the device.
        b, n, kw = self.batch, self.length, {"device": self.device, "dtype": torch.long}
        # an M-RoPE decoder's positions are (t, h, w) triples (program.json position_axes)
        self.axes = (3,) if self.program.get("position_axes") == 3 else ()
        self.ids, self.positions = torch.zeros(b, 1, **kw), torch.zeros(b, 1, *self.axes, **kw)
        self.slots, self.visible = torch.zeros(1, **kw), torch.zeros(b, n, **kw)
        self.history = torch.zeros(b, n, **kw)  # history[:, s]: the token step s chose
        self.bias = torch.zeros(self.vocab, device=self.device)  # -inf bans a token
        self.state = [self.ids, self.positions, self.slots, self.visible, self.bias, self.history]
        # the one-row decode program's (decode_one): the first row of the same state and
        # cache, as views, so it continues what the prefill chunk wrote there
        self.state_one = [t if t is self.slots or t is self.bias else t[:1] for t in self.state]
        self.cache_one = [c[:1] for c in self.cache]
        self._program_inputs()
        inputs = {
            "decode": [*self.weights, *self.state, *self.cache],
            "decode_one": [*self.weights, *self.state_one, *self.cache_one],
            "prefill": [*self.weights, *self.chunk_in, *self.cache, *self.features],
            "verify": [*self.weights, *self.verify_in, *self.cache],
            **self._drafter_inputs(weights),
        }
        self.hidden: Any = None  # the drafter's hidden states of the last call, if any
        # graphs.json and graphs.safetensors when this load derived them (the build's
        # compile writes them into engine.zip)
        self.graph_files: tuple[bytes, bytes] | None = None
        if exported:
            with self._timed("derive graphs"):
                step = functools.partial(_greedy_step, count=len(self.weights))
                self.graph_files = graphs.derive(exported, inputs, step, self._attention)
            programs = graphs.decode(*self.graph_files)  # compiled as a load reads them
        modes = {"decode": self.mode, "prefill": _mode(PREFILL_MODES[self.device])}
        modes["decode_one"] = self.mode
        modes["verify"] = _mode(VERIFY_MODES[self.device])
        steps = {"decode": 1, "prefill": self.chunk, "verify": self.verify_len}
        misses = kernels.Misses()
        tuning = kernels.Tuning() if self.device == "cuda" else None
        self.steps: dict[int, Callable[..., Any]] = {}
        self.step_one: Callable[..., Any] | None = None  # the one-row decode program's
        self.drafting: dict[str, Callable[..., Any]] = {}  # the drafter's programs
        for name, gm in programs.items():
            with self._timed(f"compile {name}"):
                mode = modes.get(name, modes["verify"])  # the drafter's: few rows, as verify's
                compiled = self._compile(gm, mode, inputs[name], name, compile_here)
            if name in DRAFTER_PROGRAMS:
                self.drafting[name] = compiled
            elif name == "decode_one":
                self.step_one = compiled
            else:
                self.steps[steps[name]] = compiled
        self.graphs: dict[int, Any] = {}  # steps per replay -> captured CUDA graph
        self.graphs_one: dict[int, Any] = {}  # the same, of the one-row decode program
        self.out: Any = None  # the logits of the last decode step
        self._warm()
        self.timings["total"] = time.perf_counter() - start
        self.kernels["compiled"] = misses.count()
        tuned = tuning.tuned() if tuning else []
        if tuning:  # CUDA: the kernels timed on the device during this load
            self.kernels["tuned"] = len(tuned)
        if self.kernels["compiled"] and not compile_here:
            raise BundleError(
                f"{file}: {self.kernels['compiled']} graphs were compiled afresh on this load, "
                "although the engine's kernels were installed (is Inductor's FX-graph cache "
                "off, TORCHINDUCTOR_FX_GRAPH_CACHE=0, or another process writing this cache "
                "folder?): their numerics were not validated; "
                f"rebuild the bundle on this host, or set {kernels.RECOMPILE}=1 "
                f"[{_key_state(carried, self.load)}]"
            )
        if tuned and not compile_here:
            names = sorted(set(tuned))
            listed = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
            raise BundleError(
                f"{file}: this load timed {len(tuned)} kernels on the device to choose their "
                f"configs ({listed}), "
                "although the engine carries its choices: another process may choose "
                "otherwise, and sum in another order; rebuild the bundle with this kiln, or "
                f"set {kernels.RECOMPILE}=1"
            )

    @contextlib.contextmanager
    def _timed(self, phase: str) -> Iterator[None]:
        """Adds the block's seconds to the phase's (a CUDA phase's work awaited)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.device == "cuda":
                self.torch.cuda.synchronize()
            seconds = time.perf_counter() - start
            self.timings[phase] = self.timings.get(phase, 0.0) + seconds

    def _compile(
        self, gm: Any, mode: str | None, inputs: list[Any], name: str, compile_here: bool
    ) -> Callable[..., Any]:
        """The program's graph compiled for these inputs by Inductor itself
        (standalone_compile: no Dynamo; its caches hold the engine's kernels); the
        callable returns the graph's one output, the logits. The decode step's
        attention is compiled with DECODE_ATTENTION's backends. A load from the
        carried kernels compiles in this process alone: Inductor's pool of compile
        workers (started when its compiler is imported, where Triton is installed)
        would only take cores from the load (compile_threads is not in its cache keys)."""
        t = self.torch
        options = dict(t._inductor.list_mode_options(mode)) if mode else {}
        if self.device == "cuda":  # the mode's options, with CUDA_OPTIONS
            options |= {k: v for k, v in CUDA_OPTIONS.items() if hasattr(t._inductor.config, k)}
        attention = self._attention() if name in graphs.STEPS else contextlib.nullcontext()
        # the CPU's vector ISA from its flags (runtime/kernels.py keys the kernels by
        # them), not from Inductor's probe, which compiles and loads a test program in
        # every process and, when that fails under a loaded host's contention, settles
        # on a lesser ISA: other C++, another cache key, a load that "compiled afresh"
        patches: dict[str, Any] = {"cpp.vec_isa_ok": True}
        if not compile_here:
            patches["compile_threads"] = 1
        alone = t._inductor.config.patch(patches)
        # not donate_graph_module (torch 2.13): a donated graph is another cache key
        # than its copy (a tiny-llama engine compiled from copies missed all 4 graphs)
        with t.inference_mode(), attention, alone:
            compiled = t._inductor.standalone_compile(
                gm,
                list(inputs),
                dynamic_shapes="from_example_inputs",
                options={"config_patches": options},
            )

        def run(*args: Any) -> Any:
            out = compiled(*args)
            return out[0] if len(out) == 1 else tuple(out)

        return run

    def _attention(self) -> Any:
        """On CUDA, the sdpa backends of DECODE_ATTENTION for the engine's dtype (the
        first that takes the inputs): the attention a graph is traced with."""
        if self.device != "cuda":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        names = DECODE_ATTENTION.get(self.program["dtype"], DECODE_ATTENTION["float32"])
        return sdpa_kernel([getattr(SDPBackend, n) for n in names])

    def _warm(self) -> None:
        """Compile every program and capture the CUDA graphs at load, not inside the
        first generation: a bundle's first tokens/s then measures decoding."""
        t = self.torch
        chunk = self.chunk
        # each program's first call (on CUDA: its kernels' first launch)
        first = {"first call decode": self._step}
        if self.step_one:
            first["first call decode_one"] = self._step_one
        if chunk:
            first["first call prefill"] = self._prefill
        if self.verify_len:
            first["first call verify"] = self._verify
        with t.inference_mode():
            for name, fn in self.drafting.items():  # zeros in, as the compile's examples
                self._first(f"first call {name}", functools.partial(fn, *self.drafter_in[name]))
            if self.device != "cuda":
                outs = {name: self._first(name, fn) for name, fn in first.items()}
                self.out = outs["first call decode"]
                self.chunk_out = outs.get("first call prefill")
                self.verify_out = outs.get("first call verify")
            else:
                self._capture(chunk, first)
        self.reset()

    def _first(self, phase: str, fn: Callable[[], Any]) -> Any:
        with self._timed(phase):
            return fn()

    def _capture(self, chunk: int, first: dict[str, Callable[[], Any]]) -> None:
        """Each program called three times on a side stream (the first call compiles
        it), then the CUDA graphs of one step, of BLOCK steps, of the prefill chunk and
        of the verify program."""
        t = self.torch
        side = t.cuda.Stream()
        side.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(side):
            for name, fn in first.items():
                self._first(name, fn)
        with t.cuda.stream(side), self._timed("warm calls"):
            for _ in range(2):
                self._step()
                if self.step_one:
                    self._step_one()
                if chunk:
                    self._prefill()
                if self.verify_len:
                    self._verify()
        t.cuda.current_stream().wait_stream(side)
        with self._timed("cuda graphs"):
            for one in (False, True) if self.step_one else (False,):
                step, graphs = self._decode(one)
                for steps in (1, BLOCK):
                    self.reset()
                    graphs[steps] = t.cuda.CUDAGraph()
                    with t.cuda.graph(graphs[steps]):
                        for _ in range(steps):
                            out = step()
                    if steps == 1 and not one:
                        self.out = out
            if chunk:
                self.reset()
                self.chunk_graph = t.cuda.CUDAGraph()
                with t.cuda.graph(self.chunk_graph):
                    self.chunk_out = self._prefill()
            if self.verify_len:
                self.reset()
                self.verify_graph = t.cuda.CUDAGraph()
                with t.cuda.graph(self.verify_graph):
                    self.verify_out = self._verify()

    def _program_inputs(self) -> None:
        """The prefill chunk's and the verify program's inputs, on the device: host
        arrays are copied into these, so a captured graph reads them."""
        t = self.torch
        self.chunk_in = self._inputs(self.chunk) if self.chunk else []
        # the prefill's image features after its cache, as the program takes them
        shape = self.program.get("image_features")
        self.features = (
            [t.zeros(shape, dtype=self.dtype, device=self.device)] if self.chunk and shape else []
        )
        if self.features and self.program.get("image_rows"):  # and how many are written
            self.features.append(t.zeros((), dtype=t.long, device=self.device))
        self.verify_in = self._inputs(self.verify_len) if self.verify_len else []

    def _drafter_inputs(self, weights: dict[str, Any]) -> dict[str, list[Any]]:
        """The drafter programs' inputs (weights, then the module docstring's of
        builders/causal_lm/backends/_drafter.py), on the device; {} without a drafter."""
        meta = self.program.get("drafter")
        self.drafter_cache: list[Any] = []
        self.drafter_in: dict[str, list[Any]] = {}
        if not meta:
            return {}
        t, kw = self.torch, {"device": self.device, "dtype": self.torch.long}
        rows, size, n = meta["context"], meta["block"], self.length
        own = {
            name: [weights[w].to(self.device) for w in names]
            for name, names in meta["weights"].items()
        }
        self.drafter_cache = [
            t.zeros(shape, dtype=self.dtype, device=self.device) for shape in meta["cache"]
        ]
        self.drafter_in["draft"] = [
            *own["draft"],
            t.zeros(1, rows, meta["width"], dtype=self.dtype, device=self.device),
            t.zeros(1, rows, **kw),
            t.arange(rows, **kw),
            t.zeros(1, size, **kw),
            t.zeros(1, size, **kw),
            t.ones(1, n + size, **kw),
            *self.drafter_cache,
        ]
        if "markov" in own:
            self.drafter_in["markov"] = [
                *own["markov"],
                t.zeros(1, meta["hidden"], dtype=self.dtype, device=self.device),
                t.zeros(1, **kw),
            ]
        return dict(self.drafter_in)

    def _inputs(self, tokens: int) -> list[Any]:
        """A multi-token program's inputs (ids, positions, slots, mask), on the device:
        host arrays are copied into these, so a captured graph reads them."""
        t, b = self.torch, self.batch
        kw = {"device": self.device, "dtype": t.long}
        return [
            t.zeros(b, tokens, **kw),
            t.zeros(b, tokens, *self.axes, **kw),
            t.zeros(tokens, **kw),
            t.zeros(b, self.length, **kw),
        ]

    def _prefill(self) -> Any:
        return self.steps[self.chunk](*self.weights, *self.chunk_in, *self.cache, *self.features)

    def _verify(self) -> Any:
        return self.steps[self.verify_len](*self.weights, *self.verify_in, *self.cache)

    def _step(self) -> Any:
        """One decode step (its attention's backends chosen at compile: `_compile`)."""
        return self.steps[1](*self.weights, *self.state, *self.cache)

    def _step_one(self) -> Any:
        """One decode step of the first row alone (the one-row program)."""
        assert self.step_one is not None
        return self.step_one(*self.weights, *self.state_one, *self.cache_one)

    def _decode(self, one: bool) -> tuple[Callable[[], Any], dict[int, Any]]:
        """The decode step and its CUDA graphs: the one-row program's where `one`."""
        return (self._step_one, self.graphs_one) if one else (self._step, self.graphs)

    def _one(self, rows: int | None) -> bool:
        """Whether `rows` rows decode through the one-row program (1, and it is built)."""
        return rows == 1 and self.step_one is not None

    def reset(self) -> None:
        for t in (*self.cache, self.ids, self.positions, self.slots, self.visible, self.history):
            t.zero_()
        for t in self.drafter_cache:
            t.zero_()

    def ban(self, tokens: list[int]) -> None:
        """Greedy steps never choose these ids (until the next ban)."""
        self.bias.zero_()
        if tokens:
            self.bias[self.torch.tensor(tokens, device=self.device)] = float("-inf")

    def advance(self, steps: int, rows: int | None = None) -> None:
        """`steps` greedy decode steps from the device state, enqueued, not awaited; of
        the first row alone through the one-row program where `rows` is 1 and the
        engine has one (the other rows' state is then left as it was)."""
        one = self._one(rows)
        step, graphs = self._decode(one)
        with self.torch.inference_mode():
            while steps > 0:
                take = BLOCK if steps >= BLOCK else 1
                if graphs:
                    graphs[take].replay()
                else:
                    for _ in range(take):
                        out = step()
                        if not one:
                            self.out = out
                steps -= take

    def call(
        self,
        ids: np.ndarray,
        positions: np.ndarray,
        slots: np.ndarray,
        mask: np.ndarray,
        features: np.ndarray | None = None,
    ) -> Any:
        """One program call from host arrays: ids/positions [B, T] (positions [B, T, 3]
        for M-RoPE), slots [T], mask [B, max_seq_len]; the logits [B, T, vocab] on the
        device, in the program's own output buffer (the next call of that program
        overwrites it). One token goes
        through the decode step (its greedy bookkeeping is then overwritten by the next
        call's inputs, or continued by `advance`); verify_len tokens through the verify
        program, other lengths through the prefill chunk. `features`: the rows of the
        image tokens in `ids`, in order, which only the prefill chunk takes."""
        t = self.torch
        args = [t.from_numpy(np.ascontiguousarray(a)) for a in (ids, positions, slots, mask)]
        rows = 0 if features is None else len(features)
        chunked = ids.shape[1] != 1 and not (self.verify_len and ids.shape[1] == self.verify_len)
        if rows and not (chunked and self.features):
            where = "this engine's programs take none" if not self.features else "the prefill does"
            raise BundleError(f"{rows} image feature rows fed to {ids.shape[1]} tokens: {where}")
        if chunked and self.features:  # this chunk's rows, zeros after them
            buffer = self.features[0]
            if rows > buffer.shape[0]:
                raise BundleError(f"{rows} image feature rows; a prefill chunk takes {len(buffer)}")
            buffer.zero_()
            if rows:
                buffer[:rows].copy_(t.from_numpy(np.ascontiguousarray(features)))
            if len(self.features) > 1:  # how many rows are the chunk's (image_rows)
                self.features[1].fill_(rows)
        with t.inference_mode():
            if self.verify_len and ids.shape[1] == self.verify_len:
                for dst, src in zip(self.verify_in, args, strict=True):
                    dst.copy_(src)
                if self.graphs:
                    self.verify_graph.replay()
                else:
                    self.verify_out = self._verify()
                return self._output(self.verify_out)
            if ids.shape[1] != 1:
                for dst, src in zip(self.chunk_in, args, strict=True):
                    dst.copy_(src)
                if self.graphs:
                    self.chunk_graph.replay()
                else:
                    self.chunk_out = self._prefill()
                return self._output(self.chunk_out)
            for dst, src in zip(self.state, args, strict=False):
                dst.copy_(src)
            if self.graphs:
                self.graphs[1].replay()
            else:
                self.out = self._step()
            return self._output(self.out)

    def _output(self, out: Any) -> Any:
        """A program's logits; a drafting engine's hidden states kept in `hidden`."""
        self.hidden = out[1] if isinstance(out, tuple) else None
        return out[0] if isinstance(out, tuple) else out

    def profile(self, rows: int | None = None) -> tuple[int, float, list[tuple[str, float]]]:
        """(kernels, summed kernel microseconds, the kernels by time) of one decode
        step, run outside its graph (the kernels the graph replays); of the one-row
        program where `rows` is 1 and the engine has one (as `advance`); CUDA only.
        Leaves the state reset."""
        from torch.profiler import ProfilerActivity, profile

        t = self.torch
        step = self._decode(self._one(rows))[0]
        self.reset()
        with t.inference_mode(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            t.cuda.synchronize()
        self.reset()
        kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
        times = sorted(((e.name, e.time_range.elapsed_us()) for e in kernels), key=lambda x: -x[1])
        return len(kernels), sum(us for _, us in times), times


def _key_state(carried: dict[str, Any] | None, load: int) -> str:
    """This process's share of Inductor's cache keys (codecache.FxGraphHashDetails,
    AOTAutogradCache): where a load misses kernels it installed, the state that may
    differ from the compile's, said with the refusal. Under `doit -n 2` a validate in a
    long-lived worker has missed where the same validate in a fresh one did not."""
    import os

    import torch

    state = {
        "threads": f"{torch.get_num_threads()} (carried {(carried or {}).get('threads')})",
        "grad": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "default dtype": str(torch.get_default_dtype()).removeprefix("torch."),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "autocast": torch.is_autocast_enabled("cpu"),
        "load in this process": load,
        "pid": os.getpid(),
    }
    return "; ".join(f"{k} {v}" for k, v in state.items())


_LOADS = itertools.count(1)


def _mapped(file: Path, program: dict[str, Any]) -> dict[str, Any]:
    """The engine's weights file (this rank's, tensor-parallel), checked against the
    CRC-32 its build recorded, then opened by safetensors: mapped, its tensors views of
    the page cache (processes that load one bundle share one copy; a CUDA engine copies
    them to its device). A multi-GB zip member read through CPython's
    zipfile took 44 of a 55 s load at the 8B geometry (bench/results/
    load_profile_8b_cpu_2026-12-06.txt)."""
    import mmap

    from safetensors import SafetensorError, safe_open

    name = _weights_member(file, program)
    path = file.parent / name
    crcs = program.get("weights_crc32")
    if not isinstance(crcs, dict) or name not in crcs:
        raise BundleError(
            f"{file}: built before inductor engines kept their weights beside engine.zip "
            "(issue 39's load time): rebuild the bundle (doit build recipe=NAME)"
        )
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ) as m:
            crc = zlib.crc32(m)
    except (OSError, ValueError) as exc:  # ValueError: mmap of an empty file
        raise BundleError(f"{path}: cannot read the engine's weights ({exc})") from None
    if crc != crcs[name]:
        raise BundleError(
            f"{path}: truncated or corrupt (its CRC-32 differs from the one its build "
            "recorded in program.json): rebuild the bundle"
        )
    try:
        with safe_open(path, framework="pt", device="cpu") as weights:
            return {n: weights.get_tensor(n) for n in weights.keys()}  # noqa: SIM118
    except SafetensorError as exc:
        raise BundleError(f"{path}: not a safetensors file ({exc}): rebuild the bundle") from None


def _weights_member(file: Path, program: dict[str, Any]) -> str:
    """The engine's weights, or a tensor-parallel engine's shard of this process's rank
    (runtime/sharded.py starts the ranks): its own member only is read."""
    world = int(program.get("tensor_parallel", 1))
    if world == 1:
        return "weights.safetensors"
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() != world:
        raise BundleError(
            f"{file}: a tensor-parallel engine of {world} ranks runs in its ranks' "
            "processes, which runtime.open starts; this process is not one of them"
        )
    if dist.group.WORLD.group_name != program["group"]:
        raise BundleError(
            f"{file}: the programs all-reduce over process group {program['group']!r}; "
            f"this rank's default group is {dist.group.WORLD.group_name!r}"
        )
    return f"weights.rank{dist.get_rank()}.safetensors"


def _greedy_step(module: Any, count: int) -> Callable[..., Any]:
    """The decode program plus its bookkeeping, as one function for Inductor to fuse."""

    def step(*args: Any) -> Any:
        weights, (ids, positions, slots, visible, bias, history, *cache) = (
            args[:count],
            args[count:],
        )
        out = module(*weights, ids, positions, slots, visible, *cache)
        logits = out[0] if isinstance(out, tuple) else out  # (logits, hidden): drafting
        token = _argmax(logits[:, -1] + bias)  # [B, 1]
        history.index_copy_(1, slots, token)
        visible.index_fill_(1, slots, 1)
        ids.copy_(token)
        positions.add_(1)
        slots.add_(1)
        return out

    return step


# Columns per block of the two-stage argmax.
SPLIT = 1024


def _argmax(scores: Any) -> Any:
    """scores.argmax(-1, keepdim=True) for [B, V] in two reductions: the best of each
    block of SPLIT columns, then the best block. Inductor runs a whole-row argmax as one
    program per row (44 us of a 49,152-column row on the H200, one SM busy); blocks
    spread it. The same index: the first maximum, as argmax picks (the first block
    holding the maximum, and the first maximum in it)."""
    import torch

    rows, width = scores.shape
    if width <= SPLIT:
        return scores.argmax(-1, keepdim=True)
    blocks = -(-width // SPLIT)
    padded = torch.nn.functional.pad(scores, (0, blocks * SPLIT - width), value=float("-inf"))
    best, where = padded.view(rows, blocks, SPLIT).max(-1)  # [B, blocks]
    block = best.argmax(-1, keepdim=True)  # [B, 1]
    return block * SPLIT + where.gather(-1, block)


def _mode(name: str) -> str | None:
    """torch.compile's mode for a bundle's name of it; the CUDA graph is ours, so a
    mode that would capture its own is taken in its no-cudagraphs form."""
    if name == "default":
        return None
    return "max-autotune-no-cudagraphs" if name == "max-autotune" else name

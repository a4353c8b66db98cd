"""Batch-1 greedy decode on a CUDA GPU: HF `generate` vs a decode step captured in a
CUDA graph, and how far that is from the launch-bound limit.

    python bench/decode_gpu.py [--repo kiln-tiny/llama | --checkpoint DIR] [--dtype bf16]
        [--new-tokens 128] [--recipe tiny-llama-inductor-h200 | --bundle PATH] [--rounds 5]
        [--hf-rounds N] [--paths eager,inductor,inductor16,autotune] [--batch 8]
        [--bandwidth] [--result FILE]

--checkpoint: a local checkpoint folder instead of a tiny repo (bench/shape.py
writes the SmolLM2-135M-geometry one); --dtype: the HF model's and the hand-written
paths' dtype; --paths: which hand-written paths to run; --hf-rounds: timed HF rounds
beyond the pass that records its tokens (HF is slow at 30 layers).

Same tiny checkpoint (from tinyhub's mirror, sdpa attention for both sides: the
eager mask builds a CPU scalar that CUDA graph capture refuses), same 8 prompts, fp32, EOS off so
every run makes exactly --new-tokens tokens. The graph path uses transformers'
StaticCache, prefills eagerly, then captures one decode step (forward, argmax,
position += 1) and replays it: no host work and no sync per token. Both sides
suppress EOS (HF through min_new_tokens), so their greedy tokens can be compared.

Every path is compiled and captured first, then timed in --rounds interleaved rounds
(HF, each hand-written path, the bundle, again), and each path's figure is its median
round. A bundle goes through the product: `runtime.open`, then `generate` (greedy on
the device, EOS suppressed as min_new_tokens does); its kernels per token come from
its engine's decode step profiled outside the CUDA graph, its GPU memory from
max_memory_allocated, its time to first token from Generation.first_token_seconds
with the prompt chunked and token by token.

Launch-bound limit: a graph of the same number of kernels, each doing (almost)
nothing, replayed the same way; the step cannot be faster than that.

--bandwidth (issue 39): the bandwidth bound, measured in the same run. A device-to-device
copy of a 2 GiB buffer (read and write counted) gives the memory's bandwidth; a decode
step must read every weight and the KV cache it attends over, so at batch 1 it cannot
make more than bandwidth / (weight bytes + KV bytes) tokens a second. The bundle's
bytes are its engine's (its weights, and its whole static cache [batch, kv_heads,
max_seq_len, head_dim] per layer, which the decode attention reads every step whatever
the position; at batch 1 one row of it where the engine has a one-row decode program,
runtime/inductor.py decode_one); HF's and the hand-written paths' are the model's
weights and the KV of the longest sequence. Each row prints its rate as a share of its bound.

--batch N (N > 1): N prompts at once (the default prompts, repeated as needed, left
padded for HF), HF `generate` against the bundle; tokens/s counts every row's tokens,
and the bound is N x bandwidth / (weights + the bundle's whole static cache) (the
weights are read once for the N rows). The hand-written paths are
batch 1 only.

Without CUDA (this repository's CPU hosts), the hand-written paths, the kernel profile
and the GPU memory figures are skipped; HF and the bundle run on the CPU, so the
script itself is proven before a GPU run. --result FILE appends one JSON line of the
figures (bench/gpu_8b.sh collects them).
Prints tokens/s and ratios; no asserts (timings belong in bench/, not tests).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def load(repo: str, checkpoint: Path | None, dtype: str) -> tuple[Any, list[list[int]]]:
    import torch
    import yaml
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import tinyhub
    from builders.common.hf import cache_keyword

    where: dict[str, Any] = {}
    source: Any = checkpoint
    if checkpoint is None:
        hub = Path(tempfile.mkdtemp()) / "hub"
        where = {"revision": tinyhub.write_repo(hub, repo), "cache_dir": hub}
        source = repo
    tok = AutoTokenizer.from_pretrained(source, **where)
    model = AutoModelForCausalLM.from_pretrained(
        source, **where, dtype=getattr(torch, DTYPES[dtype]), attn_implementation="sdpa"
    )
    prompts = yaml.safe_load((ROOT / "prompts" / "default.yaml").read_text())["prompts"]
    global CACHE_KW
    CACHE_KW = cache_keyword(model)
    return model.to(DEVICE).eval(), [tok(p)["input_ids"] for p in prompts]


CACHE_KW = "past_key_values"
DEVICE = "cuda"  # main() sets "cpu" where torch has no CUDA


def sync() -> None:
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def hf_generate(model: Any, ids: list[list[int]], new: int, out: list[Any] | None = None) -> float:
    """Seconds for HF greedy generate over every prompt; its tokens go to `out`."""
    import torch

    start = time.perf_counter()
    with torch.no_grad():
        for p in ids:
            tokens = model.generate(
                torch.tensor([p], device=DEVICE),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )[0, len(p) :]
            if out is not None:
                out.append(tokens)
    sync()
    if out is not None:
        out[:] = [t.tolist() for t in out]
    return time.perf_counter() - start


def hf_batch(model: Any, rows: list[list[int]], new: int, out: list[Any] | None = None) -> float:
    """Seconds for one HF greedy generate of all `rows` at once, left padded; the new
    tokens of each row go to `out`."""
    import torch

    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in rows], device=DEVICE)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in rows], device=DEVICE)
    start = time.perf_counter()
    with torch.no_grad():
        made = model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
        )[:, width:]
    sync()
    if out is not None:
        out[:] = made.tolist()
    return time.perf_counter() - start


def agreement(got: list[list[int]], want: list[list[int]]) -> float:
    """The fraction of `want`'s tokens that `got` has at the same place."""
    pairs = [(a, b) for g, w in zip(got, want, strict=True) for a, b in zip(g, w, strict=True)]
    return sum(a == b for a, b in pairs) / len(pairs)


def copy_bandwidth(size: int = 2 << 30, repeats: int = 20) -> float:
    """Bytes a second a device-to-device copy of `size` bytes moves (each byte read and
    written: 2 x size a copy), median of `repeats`."""
    import torch

    a = torch.ones(size, dtype=torch.uint8, device=DEVICE)
    b = torch.empty_like(a)
    b.copy_(a)
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        b.copy_(a)
        sync()
        times.append(time.perf_counter() - start)
    del a, b
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return 2 * size / median(times)


class GraphDecoder:
    """Decode steps (forward + argmax + token store + position bump) captured in CUDA
    graphs: one of `per_graph` steps and one of a single step, so a replay launches
    many tokens' kernels at once and the host does nothing per token."""

    def __init__(self, model: Any, max_len: int, forward: Any = None, per_graph: int = 1) -> None:
        import torch
        from transformers import StaticCache

        self.model, self.torch, self.per_graph = model, torch, per_graph
        self.forward = forward or model
        eos = model.generation_config.eos_token_id
        self.eos = torch.tensor(eos if isinstance(eos, list) else [eos], device="cuda")
        self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        self.ids = torch.zeros(1, 1, dtype=torch.long, device="cuda")
        self.pos = torch.zeros(1, dtype=torch.long, device="cuda")
        self.tokens = torch.zeros(max_len, dtype=torch.long, device="cuda")
        self.made = torch.zeros(1, dtype=torch.long, device="cuda")
        self.graphs: dict[int, Any] = {}

    def _step(self) -> None:
        with self.torch.no_grad():
            out = self.forward(
                input_ids=self.ids,
                position_ids=self.pos[None],
                cache_position=self.pos,
                use_cache=True,
                **{CACHE_KW: self.cache},
            )
            self._keep(self._pick(out.logits))
            self.pos.add_(1)

    def _keep(self, token: Any) -> None:
        self.ids.copy_(token)
        self.tokens.index_copy_(0, self.made, token.view(1))
        self.made.add_(1)

    def prefill(self, prompt: list[int]) -> None:
        torch = self.torch
        self.cache.reset()
        self.made.zero_()
        ids = torch.tensor([prompt], device="cuda")
        pos = torch.arange(len(prompt), device="cuda")
        with torch.no_grad():
            out = self.model(
                input_ids=ids, cache_position=pos, use_cache=True, **{CACHE_KW: self.cache}
            )
        self._keep(self._pick(out.logits))  # the prefill's token is the first new one
        self.pos.fill_(len(prompt))

    def _pick(self, logits: Any) -> Any:
        """Greedy, with EOS suppressed as HF's min_new_tokens does (its raw argmax
        can be EOS; generate then takes the runner-up)."""
        return logits[:, -1].index_fill(-1, self.eos, float("-inf")).argmax(-1, keepdim=True)

    def capture(self, prompt: list[int]) -> None:
        torch = self.torch
        self.prefill(prompt)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        for steps in {1, self.per_graph}:
            self.prefill(prompt)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(steps):
                    self._step()
            self.graphs[steps] = graph

    def generate(self, prompt: list[int], new: int) -> list[int]:
        self.prefill(prompt)
        full, rest = divmod(new - 1, self.per_graph)
        for _ in range(full):
            self.graphs[self.per_graph].replay()
        for _ in range(rest):
            self.graphs[1].replay()
        return [int(t) for t in self.tokens[:new].tolist()]


def kernels_per_step(dec: GraphDecoder, prompt: list[int]) -> tuple[int, float, list[Any]]:
    """(kernels, summed kernel microseconds, (name, µs) by time) of one decode step,
    profiled unbatched."""
    from torch.profiler import ProfilerActivity, profile

    dec.prefill(prompt)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        dec._step()
        dec.torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    times = sorted(((e.name, e.time_range.elapsed_us()) for e in kernels), key=lambda x: -x[1])
    return len(kernels), sum(us for _, us in times), times


def top(times: list[Any], n: int = 8) -> str:
    return "; ".join(f"{us:.1f} {name[:60]}" for name, us in times[:n])


def by_kind(times: list[Any], n: int = 12) -> str:
    """Kernels per step grouped by name (Inductor's names without their numbering):
    count and summed µs, most frequent first."""
    import re
    from collections import Counter

    count: Counter[str] = Counter()
    busy: Counter[str] = Counter()
    for name, us in times:
        kind = re.sub(r"_\d+$", "", name)[:70]
        count[kind] += 1
        busy[kind] += us
    return "; ".join(f"{c}x {busy[k]:.0f} us {k}" for k, c in count.most_common(n))


def launch_floor(kernels: int, replays: int) -> float:
    """Seconds per replay of a graph of `kernels` near-empty kernels."""
    import torch

    x = torch.zeros(1, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(kernels):
            x.add_(1)
    g.replay()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(replays):
        g.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / replays


def compiled_forward(model: Any, mode: str | None = None) -> Any:
    """The model's forward compiled by Inductor for the decode shape (batch 1, one
    token, static cache): pointwise work and reductions fused into Triton kernels, so
    fewer launches per token. Our own CUDA graph captures it afterwards, as above."""
    import torch

    torch._dynamo.reset()  # a new mode compiles afresh rather than reusing cached code
    return torch.compile(model.forward, dynamic=False, mode=mode)


def prepare(dec: GraphDecoder, ids: list[list[int]], new: int, want: list[list[int]]) -> Any:
    """(one timed pass over the prompts, fraction of HF's tokens reproduced, (kernels,
    kernel µs) per step) of a hand-written path, captured now."""
    import torch

    dec.capture(ids[0])
    got = [dec.generate(p, new) for p in ids]
    same = sum(a == b for g, w in zip(got, want, strict=True) for a, b in zip(g, w, strict=True))

    def run() -> float:
        start = time.perf_counter()
        for p in ids:
            dec.generate(p, new)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    return run, same / (len(ids) * new), kernels_per_step(dec, ids[0])


def prepare_bundle(
    path: Path,
    ids: list[list[int]],
    new: int,
    want: list[list[int]],
    rows: list[list[int]] | None = None,
    rows_want: list[list[int]] | None = None,
) -> Any:
    """The same for a built bundle through runtime.open, one prompt at a time, EOS
    suppressed as HF's min_new_tokens does; plus its load seconds, kernels per step
    (the engine's decode step profiled outside its graph), GPU memory and time to first
    token, chunked prefill against token by token; with `rows`, a run of them all at
    once and the fraction of `rows_want` it reproduces."""
    import torch

    import runtime
    from runtime.inductor_lm import InductorBundle

    cuda = DEVICE == "cuda"
    sync()
    before = torch.cuda.memory_allocated() if cuda else 0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    bundle = runtime.open(path, expect=InductorBundle)
    ready = time.perf_counter() - start
    sync()
    loaded = torch.cuda.max_memory_allocated() - before if cuda else 0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    eos = tuple(sorted(bundle.eos))
    bundle.eos = set()  # generate runs to `new` tokens; greedy never picks EOS

    def gen(p: list[int]) -> list[int]:
        return bundle.generate([p], new, suppress=eos).tokens[0]

    got = [gen(p) for p in ids]
    same = sum(a == b for g, w in zip(got, want, strict=True) for a, b in zip(g, w, strict=True))

    def run() -> float:
        begin = time.perf_counter()
        for p in ids:
            gen(p)
        return time.perf_counter() - begin

    run()
    batch = None
    if rows:
        made = bundle.generate(rows, new, suppress=eos).tokens
        assert rows_want is not None
        batch_same = agreement(made, rows_want)

        def run_rows() -> float:
            begin = time.perf_counter()
            bundle.generate(rows, new, suppress=eos)
            return time.perf_counter() - begin

        batch = (run_rows, batch_same)
    engine = bundle.engine
    weights = sum(w.numel() * w.element_size() for w in engine.weights)
    cache = sum(c.numel() * c.element_size() for c in engine.cache)
    peak = torch.cuda.max_memory_allocated() - before if cuda else 0
    rows_cached = engine.batch if engine.step_one is not None else 0
    memory = (loaded, peak, weights, cache, rows_cached)
    kernels = engine.profile(rows=1) if cuda else (0, 0.0, [])  # the batch-1 step's
    # Time to first token: the longest prompt the bundle holds (up to 512 tokens; 32
    # on a CPU, where 512 steps token by token of a reduced 8B shape take minutes).
    length = min(512 if cuda else 32, bundle.max_seq_len - 2)
    prompt = (ids[0] * length)[:length]
    ttft = {}
    for label, chunk in (("chunked", engine.chunk), ("token by token", 0)):
        engine.chunk = chunk
        ttft[label] = min(bundle.generate([prompt], 1).first_token_seconds for _ in range(3))
    engine.chunk = int(engine.program["prefill_chunk_len"])
    return run, same / (len(ids) * new), kernels, ready, memory, (length, ttft), batch


def built_bundle(recipe: str) -> Path:
    """The store path of a recipe's built bundle (KILN_ROOT's store)."""
    from kiln.commands.build import plan_of
    from kiln.commands.workspace import store

    return store().get(plan_of(recipe).step("bundle").key).path


def median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", default="kiln-tiny/llama")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--steps-per-graph", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds")
    parser.add_argument(
        "--bundle", type=Path, help="also time this built bundle through runtime.open"
    )
    parser.add_argument("--recipe", help="time this recipe's bundle (built by doit build)")
    parser.add_argument("--only-bundle", action="store_true", help="skip the hand-written paths")
    parser.add_argument("--checkpoint", type=Path, help="a local checkpoint folder")
    parser.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    parser.add_argument("--hf-rounds", type=int, help="timed HF rounds (default: --rounds)")
    parser.add_argument("--paths", default="eager,inductor,inductor16,autotune")
    parser.add_argument(
        "--inductor-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set torch._inductor.config.NAME (a Python literal) before anything compiles",
    )
    parser.add_argument(
        "--decode-attention",
        metavar="BACKEND,...",
        help="the bundle's CUDA decode-step sdpa backends, for every dtype (e.g. MATH), in "
        "place of runtime/inductor.py's DECODE_ATTENTION",
    )
    parser.add_argument("--batch", type=int, default=1, help="also time N prompts at once")
    parser.add_argument("--bandwidth", action="store_true", help="measure the bandwidth bound")
    parser.add_argument("--result", type=Path, help="append the figures as one JSON line")
    parser.add_argument(
        "--no-second-load", action="store_true", help="skip timing a second load of the bundle"
    )
    args = parser.parse_args()
    import ast

    import torch
    import torch._inductor.config as inductor_config

    global DEVICE
    DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
    # measured first, with the device's memory still free
    bandwidth = 0.0
    if args.bandwidth:  # a smaller buffer on the CPU, which shares its memory with others
        bandwidth = copy_bandwidth(*(() if DEVICE == "cuda" else (256 << 20, 5)))

    for item in args.inductor_config:
        name, _, value = item.partition("=")
        inductor_config.__setattr__(name, ast.literal_eval(value))

    if args.recipe:
        args.bundle = built_bundle(args.recipe)
    if args.decode_attention:
        from runtime import inductor

        for dtype in inductor.DECODE_ATTENTION:
            inductor.DECODE_ATTENTION[dtype] = tuple(args.decode_attention.split(","))

    model, ids = load(args.repo, args.checkpoint, args.dtype)
    new = args.new_tokens
    tokens = len(ids) * new
    hf_generate(model, ids[:1], 8)  # warm up
    want: list[Any] = []
    hf_first = hf_generate(model, ids, new, want)
    max_len = max(map(len, ids)) + new + 1
    card = (
        torch.cuda.get_device_name()
        if DEVICE == "cuda"
        else f"cpu, {torch.get_num_threads()} threads"
    )
    print(
        f"{args.checkpoint or args.repo}: {len(ids)} prompts x {new} new tokens, batch 1, "
        f"{args.dtype}, {card}, torch {torch.__version__}"
    )
    rows = [ids[i % len(ids)] for i in range(args.batch)] if args.batch > 1 else None
    rows_want = [want[i % len(want)] for i in range(args.batch)]
    # Every path is prepared (compiled, captured) first, then timed in interleaved
    # rounds; each path's figure is its median round.
    runs: dict[str, Any] = {"HF generate": lambda: hf_generate(model, ids, new)}
    notes: dict[str, str] = {"HF generate": ""}
    k = args.steps_per_graph
    chosen = set() if args.only_bundle else set(args.paths.split(","))
    if DEVICE != "cuda" and chosen - {"none"}:
        print(f"no CUDA: the hand-written paths ({', '.join(sorted(chosen))}) are skipped")
        chosen = set()
    paths: dict[str, Any] = {}
    compiled = compiled_forward(model) if chosen & {"inductor", "inductor16"} else None
    every = {
        "eager": ("eager step, CUDA graph", lambda: GraphDecoder(model, max_len)),
        "inductor": ("Inductor step, CUDA graph", lambda: GraphDecoder(model, max_len, compiled)),
        "inductor16": (
            f"Inductor, {k} steps/graph",
            lambda: GraphDecoder(model, max_len, compiled, k),
        ),
        # Autotuned matmul and reduction kernels (Triton templates vs cuBLAS, per shape)
        "autotune": (
            "Inductor max-autotune, graph",
            lambda: GraphDecoder(
                model, max_len, compiled_forward(model, "max-autotune-no-cudagraphs"), k
            ),
        ),
    }
    for key, (label, make) in every.items():
        if key in chosen:
            paths[label] = make
    extra = []
    for label, make in paths.items():
        start = time.perf_counter()
        run, match, (kernels, busy, times) = prepare(make(), ids, new, want)
        extra.append(f"{label} top kernels (us): {top(times)}")
        floor = 1 / launch_floor(kernels, 2000)
        runs[label] = run
        notes[label] = (
            f"{match:.3f} of HF's greedy tokens reproduced; {kernels} kernels/token summing "
            f"{busy:.0f} us of kernel time; launch-bound limit for that many kernels "
            f"{floor:.0f} tokens/s; capture + compile {time.perf_counter() - start:.0f} s"
        )
    memory = (0, 0, 0, 0, 0)
    if rows:
        hf_rows: list[Any] = []
        hf_rows_first = hf_batch(model, rows, new, hf_rows)
        runs[f"HF generate, batch {args.batch}"] = lambda: hf_batch(model, rows, new)
        notes[f"HF generate, batch {args.batch}"] = (
            f"{agreement(hf_rows, rows_want):.3f} of HF's batch-1 greedy tokens"
        )
    if args.bundle:  # last: the hand-written paths reset dynamo, which would recompile it
        run, match, (kernels, busy, times), ready, memory, (length, ttft), batch = prepare_bundle(
            args.bundle, ids, new, want, rows, rows_want
        )
        loaded, peak, weights, cache, _ = memory
        if batch is not None:
            runs[f"bundle, batch {args.batch}"] = batch[0]
            notes[f"bundle, batch {args.batch}"] = f"{batch[1]:.3f} of HF's batch-1 greedy tokens"
        extra.append(f"bundle top kernels (us): {top(times)}")
        extra.append(f"bundle kernels by kind: {by_kind(times)}")
        floor = 1 / launch_floor(kernels, 2000) if DEVICE == "cuda" else 0.0
        runs["bundle (runtime.open)"] = run
        notes["bundle (runtime.open)"] = (
            f"{match:.3f} of HF's greedy tokens reproduced; {kernels} kernels/token summing "
            f"{busy:.0f} us of kernel time; launch-bound limit for that many kernels "
            f"{floor:.0f} tokens/s; load + compile + capture {ready:.0f} s"
        )
        mib = 1 / 2**20
        held = weights + cache
        extra.append(
            f"bundle {DEVICE} memory: weights {weights * mib:.1f} MiB + KV cache "
            f"{cache * mib:.1f} MiB "
            f"= {held * mib:.1f} MiB; max_memory_allocated during generation {peak * mib:.1f} MiB "
            f"({peak / held:.2f}x), during load (compile, autotune, capture) "
            f"{loaded * mib:.1f} MiB ({loaded / held:.2f}x)"
        )
        extra.append(
            f"bundle time to first token, {length}-token prompt (best of 3): "
            + "; ".join(f"{label} {s * 1e3:.1f} ms" for label, s in ttft.items())
            + f" ({ttft['token by token'] / ttft['chunked']:.1f}x)"
        )
    seconds: dict[str, list[float]] = {label: [] for label in runs}
    seconds["HF generate"].append(hf_first)
    if rows:
        seconds[f"HF generate, batch {args.batch}"].append(hf_rows_first)
    hf_rounds = args.rounds if args.hf_rounds is None else args.hf_rounds
    for i in range(args.rounds):
        for label, run in runs.items():
            if not label.startswith("HF generate") or i < hf_rounds:
                seconds[label].append(run())

    def made(label: str) -> int:  # tokens a run of `label` makes
        return int(args.batch * new if label.endswith(f"batch {args.batch}") else tokens)

    rates = {label: made(label) / median(s) for label, s in seconds.items()}
    hf = rates["HF generate"]
    best = max(
        (r for label, r in rates.items() if not label.startswith(("HF", "bundle"))),
        default=0.0,
    )
    bounds = {}
    if bandwidth:
        # bytes a step reads: the bundle's engine (weights + its whole static cache), or
        # the HF model's weights + the KV of the longest sequence (transformers' layout)
        cfg = model.config.get_text_config()
        width = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        per_token_kv = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * width
        kv = per_token_kv * max_len * next(model.parameters()).element_size()
        hf_bytes = sum(p.numel() * p.element_size() for p in model.parameters()) + kv
        engine_bytes = memory[2] + memory[3]
        # the batch-1 step of an engine with a one-row decode program reads its row of
        # the cache only (runtime/inductor.py decode_one)
        one_row = memory[2] + memory[3] // memory[4] if memory[4] else engine_bytes
        for label in rates:
            rows_of = args.batch if label.endswith(f"batch {args.batch}") else 1
            step = hf_bytes
            if label.startswith("bundle"):
                step = engine_bytes if rows_of > 1 else one_row
            bounds[label] = rows_of * bandwidth / step if step else 0.0
        gb = 1e9
        print(
            f"bandwidth (device-to-device copy, {DEVICE}, median of the repeats): "
            f"{bandwidth / gb:.0f} GB/s. Bound at batch 1: the bundle "
            f"{bounds.get('bundle (runtime.open)', 0.0):.0f} "
            f"tokens/s ({memory[2] / gb:.2f} GB weights + "
            f"{(one_row - memory[2]) / gb:.3f} GB KV cache a step"
            f"{' (its one-row decode program: one row of the cache)' if memory[4] else ''}"
            f"; its weights alone {bandwidth / max(memory[2], 1):.0f}), HF and the "
            f"hand-written paths {bandwidth / hf_bytes:.0f} tokens/s "
            f"({hf_bytes / gb:.2f} GB a step, KV of {max_len} positions included)"
        )
    for label, rate in rates.items():
        spread = ", ".join(f"{made(label) / s:.0f}" for s in seconds[label])
        vs_best = (
            f"; {rate / best:.2f}x the best hand-written" if best and "bundle" in label else ""
        )
        bound = f"; {rate / bounds[label]:.1%} of the bandwidth bound" if bounds.get(label) else ""
        print(
            f"{label + ':':30} {rate:9.0f} tokens/s  ({rate / hf:.1f}x HF{vs_best}{bound}; "
            f"wall {1e6 / rate:.0f} us/token; rounds {spread}) {notes[label]}"
        )
    if args.result:
        import json

        figures = {
            "checkpoint": str(args.checkpoint or args.repo),
            "recipe": args.recipe,
            "dtype": args.dtype,
            "device": card,
            "bandwidth_gb_s": round(bandwidth / 1e9, 1),
            "tokens_per_s": {k: round(v, 1) for k, v in rates.items()},
            "bound_tokens_per_s": {k: round(v, 1) for k, v in bounds.items()},
            "bundle_weights_bytes": memory[2],
            "bundle_cache_bytes": memory[3],
            "notes": notes,
        }
        with args.result.open("a") as out:
            out.write(json.dumps(figures, sort_keys=True) + "\n")
    for line in extra:
        print(line)
    if args.bundle and not args.no_second_load:  # after the timing: a second copy is loaded
        import runtime

        start = time.perf_counter()
        runtime.open(args.bundle)
        print(
            f"bundle second load (Inductor's compiled artifacts cached): "
            f"{time.perf_counter() - start:.1f} s, against {ready:.1f} s for the first"
        )


if __name__ == "__main__":
    main()

"""Batch-1 greedy decode on a CUDA GPU: HF `generate` vs a decode step captured in a
CUDA graph, and how far that is from the launch-bound limit.

    python bench/decode_gpu.py [--repo kiln-tiny/llama | --checkpoint DIR] [--dtype bf16]
        [--new-tokens 128] [--recipe tiny-llama-inductor-h200 | --bundle PATH] [--rounds 5]
        [--hf-rounds N] [--paths eager,inductor,inductor16,autotune]

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
    return model.cuda().eval(), [tok(p)["input_ids"] for p in prompts]


CACHE_KW = "past_key_values"
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def hf_generate(model: Any, ids: list[list[int]], new: int, out: list[Any] | None = None) -> float:
    """Seconds for HF greedy generate over every prompt; its tokens go to `out`."""
    import torch

    start = time.perf_counter()
    with torch.no_grad():
        for p in ids:
            tokens = model.generate(
                torch.tensor([p], device="cuda"),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )[0, len(p) :]
            if out is not None:
                out.append(tokens)
    torch.cuda.synchronize()
    if out is not None:
        out[:] = [t.tolist() for t in out]
    return time.perf_counter() - start


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


def prepare_bundle(path: Path, ids: list[list[int]], new: int, want: list[list[int]]) -> Any:
    """The same for a built bundle through runtime.open, one prompt at a time, EOS
    suppressed as HF's min_new_tokens does; plus its load seconds, kernels per step
    (the engine's decode step profiled outside its graph), GPU memory and time to first
    token, chunked prefill against token by token."""
    import torch

    import runtime
    from runtime.inductor_lm import InductorBundle

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    bundle = runtime.open(path, expect=InductorBundle)
    ready = time.perf_counter() - start
    torch.cuda.synchronize()
    loaded = torch.cuda.max_memory_allocated() - before
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
    engine = bundle.engine
    weights = sum(w.numel() * w.element_size() for w in engine.weights)
    cache = sum(c.numel() * c.element_size() for c in engine.cache)
    memory = (loaded, torch.cuda.max_memory_allocated() - before, weights, cache)
    kernels = engine.profile()
    # Time to first token: the longest prompt the bundle holds (up to 512 tokens).
    length = min(512, bundle.max_seq_len - 2)
    prompt = (ids[0] * length)[:length]
    ttft = {}
    for label, chunk in (("chunked", engine.chunk), ("token by token", 0)):
        engine.chunk = chunk
        ttft[label] = min(bundle.generate([prompt], 1).first_token_seconds for _ in range(3))
    engine.chunk = int(engine.program["prefill_chunk_len"])
    return run, same / (len(ids) * new), kernels, ready, memory, (length, ttft)


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
    args = parser.parse_args()
    import ast

    import torch
    import torch._inductor.config as inductor_config

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
    print(
        f"{args.checkpoint or args.repo}: {len(ids)} prompts x {new} new tokens, batch 1, "
        f"{args.dtype}, {torch.cuda.get_device_name()}, torch {torch.__version__}"
    )
    # Every path is prepared (compiled, captured) first, then timed in interleaved
    # rounds; each path's figure is its median round.
    runs: dict[str, Any] = {"HF generate": lambda: hf_generate(model, ids, new)}
    notes: dict[str, str] = {"HF generate": ""}
    k = args.steps_per_graph
    chosen = set() if args.only_bundle else set(args.paths.split(","))
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
    if args.bundle:  # last: the hand-written paths reset dynamo, which would recompile it
        run, match, (kernels, busy, times), ready, memory, (length, ttft) = prepare_bundle(
            args.bundle, ids, new, want
        )
        loaded, peak, weights, cache = memory
        extra.append(f"bundle top kernels (us): {top(times)}")
        extra.append(f"bundle kernels by kind: {by_kind(times)}")
        floor = 1 / launch_floor(kernels, 2000)
        runs["bundle (runtime.open)"] = run
        notes["bundle (runtime.open)"] = (
            f"{match:.3f} of HF's greedy tokens reproduced; {kernels} kernels/token summing "
            f"{busy:.0f} us of kernel time; launch-bound limit for that many kernels "
            f"{floor:.0f} tokens/s; load + compile + capture {ready:.0f} s"
        )
        mib = 1 / 2**20
        held = weights + cache
        extra.append(
            f"bundle GPU memory: weights {weights * mib:.1f} MiB + KV cache {cache * mib:.1f} MiB "
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
    hf_rounds = args.rounds if args.hf_rounds is None else args.hf_rounds
    for i in range(args.rounds):
        for label, run in runs.items():
            if label != "HF generate" or i < hf_rounds:
                seconds[label].append(run())
    rates = {label: tokens / median(s) for label, s in seconds.items()}
    hf = rates["HF generate"]
    best = max(
        (r for label, r in rates.items() if label not in ("HF generate", "bundle (runtime.open)")),
        default=0.0,
    )
    for label, rate in rates.items():
        spread = ", ".join(f"{tokens / s:.0f}" for s in seconds[label])
        vs_best = (
            f"; {rate / best:.2f}x the best hand-written" if best and "bundle" in label else ""
        )
        print(
            f"{label + ':':30} {rate:9.0f} tokens/s  ({rate / hf:.1f}x HF{vs_best}; wall "
            f"{1e6 / rate:.0f} us/token; rounds {spread}) {notes[label]}"
        )
    for line in extra:
        print(line)
    if args.bundle:  # after the timing: a second copy of the engine is loaded
        import runtime

        start = time.perf_counter()
        runtime.open(args.bundle)
        print(
            f"bundle second load (Inductor's compiled artifacts cached): "
            f"{time.perf_counter() - start:.1f} s, against {ready:.1f} s for the first"
        )


if __name__ == "__main__":
    main()

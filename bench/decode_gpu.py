"""Batch-1 greedy decode on a CUDA GPU: HF `generate` vs a decode step captured in a
CUDA graph, and how far that is from the launch-bound limit.

    python bench/decode_gpu.py [--repo kiln-tiny/llama] [--new-tokens 128]

Same tiny checkpoint (from tinyhub's mirror, sdpa attention for both sides: the
eager mask builds a CPU scalar that CUDA graph capture refuses), same 8 prompts, fp32, EOS off so
every run makes exactly --new-tokens tokens. The graph path uses transformers'
StaticCache, prefills eagerly, then captures one decode step (forward, argmax,
position += 1) and replays it: no host work and no sync per token. Both sides
suppress EOS (HF through min_new_tokens), so their greedy tokens can be compared.

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


def load(repo: str) -> tuple[Any, list[list[int]]]:
    import torch
    import yaml
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import tinyhub
    from builders.common.hf import cache_keyword

    hub = Path(tempfile.mkdtemp()) / "hub"
    revision = tinyhub.write_mirror(hub)[repo]
    tok = AutoTokenizer.from_pretrained(repo, revision=revision, cache_dir=hub)
    model = AutoModelForCausalLM.from_pretrained(
        repo, revision=revision, cache_dir=hub, dtype=torch.float32, attn_implementation="sdpa"
    )
    prompts = yaml.safe_load((ROOT / "prompts" / "default.yaml").read_text())["prompts"]
    global CACHE_KW
    CACHE_KW = cache_keyword(model)
    return model.cuda().eval(), [tok(p)["input_ids"] for p in prompts]


CACHE_KW = "past_key_values"


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


def kernels_per_step(dec: GraphDecoder, prompt: list[int]) -> tuple[int, float]:
    """(kernels, summed kernel microseconds) of one decode step, profiled unbatched."""
    from torch.profiler import ProfilerActivity, profile

    dec.prefill(prompt)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        dec._step()
        dec.torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    return len(kernels), sum(e.time_range.elapsed_us() for e in kernels)


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


def measure(dec: GraphDecoder, ids: list[list[int]], new: int, want: list[list[int]]) -> Any:
    """(tokens/s, fraction of HF's tokens reproduced, (kernels, kernel µs) per step)."""
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

    tokens = len(ids) * new
    return tokens / min(run() for _ in range(3)), same / tokens, kernels_per_step(dec, ids[0])


def measure_bundle(path: Path, ids: list[list[int]], new: int, want: list[list[int]]) -> Any:
    """(tokens/s, fraction of HF's tokens reproduced, load seconds) of a built bundle,
    one prompt at a time, EOS suppressed as HF's min_new_tokens does."""
    import numpy as np

    import runtime
    from runtime.causal_lm import Bundle

    start = time.perf_counter()
    bundle = runtime.open(path, expect=Bundle)
    ready = time.perf_counter() - start
    eos = sorted(bundle.eos)
    bundle.eos = set()  # generate runs to `new` tokens; the sampler never picks EOS

    def no_eos(logits: Any) -> Any:
        logits = logits.copy()
        logits[:, eos] = -np.inf
        return logits.argmax(-1)

    got = [bundle.generate([p], new, no_eos).tokens[0] for p in ids]  # type: ignore[arg-type]
    same = sum(a == b for g, w in zip(got, want, strict=True) for a, b in zip(g, w, strict=True))

    def run() -> float:
        begin = time.perf_counter()
        for p in ids:
            bundle.generate([p], new, no_eos)  # type: ignore[arg-type]
        return time.perf_counter() - begin

    return len(ids) * new / min(run() for _ in range(3)), same / (len(ids) * new), ready


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", default="kiln-tiny/llama")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--steps-per-graph", type=int, default=16)
    parser.add_argument(
        "--bundle", type=Path, help="also time this built bundle through runtime.open"
    )
    parser.add_argument("--only-bundle", action="store_true", help="skip the hand-written paths")
    args = parser.parse_args()
    import torch

    model, ids = load(args.repo)
    new = args.new_tokens
    tokens = len(ids) * new
    hf_generate(model, ids[:1], 8)  # warm up
    want: list[Any] = []
    hf_generate(model, ids, new, want)
    hf_runs = [tokens / hf_generate(model, ids, new) for _ in range(3)]
    hf = max(hf_runs)  # the best HF run: ratios are then the least flattering
    max_len = max(map(len, ids)) + new + 1
    print(
        f"{args.repo}: {len(ids)} prompts x {new} new tokens, batch 1, fp32, "
        f"{torch.cuda.get_device_name()}"
    )
    print(
        f"HF generate:                 {hf:9.0f} tokens/s  (best of 3 runs: "
        f"{', '.join(f'{r:.0f}' for r in hf_runs)})"
    )
    if args.bundle:
        rate, match, ready = measure_bundle(args.bundle, ids, new, want)
        print(
            f"{'bundle (runtime.open):':28} {rate:9.0f} tokens/s  ({rate / hf:.1f}x HF; "
            f"{match:.3f} of HF's greedy tokens reproduced; load + compile {ready:.0f} s)"
        )
    if args.only_bundle:
        return
    k = args.steps_per_graph
    compiled = compiled_forward(model)
    paths = {
        "eager step, CUDA graph": lambda: GraphDecoder(model, max_len),
        "Inductor step, CUDA graph": lambda: GraphDecoder(model, max_len, compiled),
        f"Inductor, {k} steps/graph": lambda: GraphDecoder(model, max_len, compiled, k),
        # Autotuned matmul and reduction kernels (Triton templates vs cuBLAS, per shape)
        "Inductor max-autotune, graph": lambda: GraphDecoder(
            model, max_len, compiled_forward(model, "max-autotune-no-cudagraphs"), k
        ),
    }
    for label, make in paths.items():
        start = time.perf_counter()
        rate, match, (kernels, busy) = measure(make(), ids, new, want)
        ready = time.perf_counter() - start
        floor = 1 / launch_floor(kernels, 2000)
        print(
            f"{label + ':':28} {rate:9.0f} tokens/s  ({rate / hf:.1f}x HF; {match:.3f} of HF's "
            f"greedy tokens reproduced; {kernels} kernels/token summing {busy:.0f} us of "
            f"kernel time (wall {1e6 / rate:.0f} us/token); launch-bound limit for that many "
            f"kernels {floor:.0f} tokens/s, this path at {rate / floor:.0%} of it; "
            f"capture + compile {ready:.0f} s)"
        )


if __name__ == "__main__":
    main()

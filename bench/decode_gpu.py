"""Batch-1 greedy decode on a CUDA GPU: HF `generate` vs a decode step captured in a
CUDA graph, and how far that is from the launch-bound limit.

    python bench/decode_gpu.py [--repo kiln-tiny/llama] [--new-tokens 128]

Same tiny checkpoint (from tinyhub's mirror, sdpa attention for both sides: the
eager mask builds a CPU scalar that CUDA graph capture refuses), same 8 prompts, fp32, EOS off so
every run makes exactly --new-tokens tokens. The graph path uses transformers'
StaticCache, prefills eagerly, then captures one decode step (forward, argmax,
position += 1) and replays it: no host work and no sync per token.

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
    from builders._hf import cache_keyword

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


def hf_generate(model: Any, ids: list[list[int]], new: int) -> float:
    import torch

    start = time.perf_counter()
    with torch.no_grad():
        for p in ids:
            model.generate(
                torch.tensor([p], device="cuda"),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )
    torch.cuda.synchronize()
    return time.perf_counter() - start


class GraphDecoder:
    """One decode step (forward + argmax + position bump) captured in a CUDA graph."""

    def __init__(self, model: Any, max_len: int) -> None:
        import torch
        from transformers import StaticCache

        self.model, self.torch = model, torch
        self.cache = StaticCache(config=model.config, max_cache_len=max_len)
        self.ids = torch.zeros(1, 1, dtype=torch.long, device="cuda")
        self.pos = torch.zeros(1, dtype=torch.long, device="cuda")
        self.graph: Any = None

    def _step(self) -> None:
        with self.torch.no_grad():
            out = self.model(
                input_ids=self.ids,
                position_ids=self.pos[None],
                cache_position=self.pos,
                use_cache=True,
                **{CACHE_KW: self.cache},
            )
            self.ids.copy_(out.logits[:, -1].argmax(-1, keepdim=True))
            self.pos.add_(1)

    def prefill(self, prompt: list[int]) -> None:
        torch = self.torch
        self.cache.reset()
        ids = torch.tensor([prompt], device="cuda")
        pos = torch.arange(len(prompt), device="cuda")
        with torch.no_grad():
            out = self.model(
                input_ids=ids, cache_position=pos, use_cache=True, **{CACHE_KW: self.cache}
            )
        self.ids.copy_(out.logits[:, -1].argmax(-1, keepdim=True))
        self.pos.fill_(len(prompt))

    def capture(self, prompt: list[int]) -> None:
        torch = self.torch
        self.prefill(prompt)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        self.prefill(prompt)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self._step()

    def generate(self, prompt: list[int], new: int) -> list[int]:
        self.prefill(prompt)
        out = [self.ids.clone()]  # the prefill's token is the first new one, as in HF
        for _ in range(new - 1):
            self.graph.replay()
            out.append(self.ids.clone())  # stays on the GPU; no sync per token
        return [int(t) for t in self.torch.cat(out).flatten().tolist()]


def kernels_per_step(dec: GraphDecoder, prompt: list[int]) -> int:
    from torch.profiler import ProfilerActivity, profile

    dec.prefill(prompt)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        dec._step()
        dec.torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type.name == "CUDA")


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo", default="kiln-tiny/llama")
    parser.add_argument("--new-tokens", type=int, default=128)
    args = parser.parse_args()
    import torch

    model, ids = load(args.repo)
    new = args.new_tokens
    tokens = len(ids) * new
    hf_generate(model, ids[:1], 8)  # warm up
    hf = tokens / min(hf_generate(model, ids, new) for _ in range(2))
    dec = GraphDecoder(model, max_len=max(map(len, ids)) + new + 1)
    dec.capture(ids[0])
    # the graph path must produce HF's tokens
    with torch.no_grad():
        want = model.generate(
            torch.tensor([ids[1]], device="cuda"),
            max_new_tokens=16,
            min_new_tokens=16,
            do_sample=False,
            pad_token_id=0,
        )[0, len(ids[1]) :].tolist()
    same = dec.generate(ids[1], 16) == want

    def run_graph() -> float:
        start = time.perf_counter()
        for p in ids:
            dec.generate(p, new)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    run_graph()
    graph = tokens / min(run_graph() for _ in range(3))
    k = kernels_per_step(dec, ids[0])
    floor = 1 / launch_floor(k, 2000)
    print(
        f"{args.repo}: {len(ids)} prompts x {new} new tokens, batch 1, fp32, "
        f"{torch.cuda.get_device_name()}"
    )
    print(f"HF generate:                    {hf:9.0f} tokens/s")
    print(
        f"CUDA-graph decode step:         {graph:9.0f} tokens/s  ({graph / hf:.1f}x HF; "
        f"tokens match HF: {same})"
    )
    print(
        f"launch-bound limit ({k} kernels): {floor:9.0f} tokens/s  "
        f"(graph path at {graph / floor:.0%} of it)"
    )


if __name__ == "__main__":
    main()

"""Tensor parallelism on this CPU host (issue 42): tiny-llama's inductor bundle unsplit
(tiny-llama-inductor) against split two ways (tiny-llama-tp2), both through
runtime.open, one after the other in this process's run.

    .venv/bin/python bench/tp_cpu.py [--new-tokens 128] [--rounds 5] [--out FILE]

Per bundle: time to first token (Generation.first_token_seconds: the prompt's prefill
program and the first argmax) and decode tokens/s (the tokens after the first over
the time after it), greedy, batch 1, EOS suppressed (the bundle's own `suppress`, as
HF's min_new_tokens), the median over rounds of the 8 default prompts; and whether
the two bundles' tokens are identical. The all-reduces per decode step are counted
in the split bundle's decode program (its _c10d_functional.all_reduce nodes), and the
time of one is measured apart: two gloo ranks, at the bundle's one thread each,
all-reducing a tensor of the decode step's shape (batch x 1 x hidden) as the programs
do (functional all_reduce + wait), 2,000 times. Needs both recipes built.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from _process import ROOT, bundle_path  # bench/ is on sys.path: this runs as a script

sys.path.insert(0, str(ROOT))

UNSPLIT, SPLIT = "tiny-llama-inductor", "tiny-llama-tp2"


def prompts() -> list[str]:
    import yaml

    data = yaml.safe_load((ROOT / "prompts" / "default.yaml").read_text())
    return [p if isinstance(p, str) else p["text"] for p in data["prompts"]]


def measure(folder: Path, texts: list[str], new: int, rounds: int) -> dict[str, Any]:
    import runtime

    started = time.perf_counter()
    bundle: Any = runtime.open(folder)
    load = time.perf_counter() - started
    ids = [bundle.encode(t) for t in texts]
    suppress = tuple(bundle.eos)
    bundle.generate([ids[0]], 8, suppress=suppress)  # the first call's own costs aside
    firsts, rates, tokens = [], [], []
    for _ in range(rounds):
        for prompt in ids:
            out = bundle.generate([prompt], new, suppress=suppress)
            firsts.append(out.first_token_seconds)
            rates.append((len(out.tokens[0]) - 1) / (out.seconds - out.first_token_seconds))
            tokens.append(out.tokens[0])
    if hasattr(bundle, "shutdown"):
        bundle.shutdown()
    return {
        "load_s": load,
        "first_token_ms": 1e3 * statistics.median(firsts),
        "decode_tokens_per_s": statistics.median(rates),
        "tokens": tokens[: len(ids)],
    }


def reduces_per_step(folder: Path) -> tuple[int, list[int]]:
    """The all-reduce nodes of the decode program, and the shape each reduces."""
    import torch

    with zipfile.ZipFile(folder / "engine.zip") as archive:
        program = torch.export.load(io.BytesIO(archive.read("decode.pt2")))
    nodes = [n for n in program.graph.nodes if "all_reduce" in str(n.target)]
    return len(nodes), list(nodes[0].args[0].meta["val"].shape) if nodes else []


def _reduce_rank(rank: int, store: str, shape: list[int], count: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
    x = torch.ones(shape)
    reduce = torch.ops._c10d_functional.all_reduce
    wait = torch.ops._c10d_functional.wait_tensor
    group = dist.group.WORLD.group_name
    for _ in range(100):
        wait(reduce(x, "sum", group))
    dist.barrier()
    started = time.perf_counter()
    for _ in range(count):
        wait(reduce(x, "sum", group))
    seconds = time.perf_counter() - started
    if rank == 0:
        Path(out).write_text(json.dumps(seconds / count))
    dist.destroy_process_group()


def reduce_seconds(shape: list[int], count: int = 2000) -> float:
    """One all-reduce of `shape` between two gloo ranks of this host, in seconds."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        ranks = [
            context.Process(target=_reduce_rank, args=(r, f"{tmp}/store", shape, count, out))
            for r in range(2)
        ]
        for p in ranks:
            p.start()
        for p in ranks:
            p.join()
        return float(json.loads(Path(out).read_text()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    texts = prompts()
    folders = {UNSPLIT: bundle_path(UNSPLIT), SPLIT: bundle_path(SPLIT)}
    results = {r: measure(f, texts, args.new_tokens, args.rounds) for r, f in folders.items()}
    count, shape = reduces_per_step(folders[SPLIT])
    one = reduce_seconds(shape)
    same = results[UNSPLIT]["tokens"] == results[SPLIT]["tokens"]
    lines = [
        f"bench/tp_cpu.py  {time.strftime('%Y-%m-%d')}  {platform.node()}  "
        f"{os.cpu_count()} cores  load {os.getloadavg()[0]:.2f}",
        f"greedy, batch 1, {len(texts)} default prompts x {args.rounds} rounds, "
        f"{args.new_tokens} new tokens, EOS suppressed; medians",
        "",
        f"{'bundle':<22}{'ranks':>6}{'load s':>9}{'first token ms':>16}{'decode tok/s':>14}",
    ]
    for recipe, ranks in ((UNSPLIT, 1), (SPLIT, 2)):
        r = results[recipe]
        lines.append(
            f"{recipe:<22}{ranks:>6}{r['load_s']:>9.1f}{r['first_token_ms']:>16.2f}"
            f"{r['decode_tokens_per_s']:>14.0f}"
        )
    ratio = results[SPLIT]["decode_tokens_per_s"] / results[UNSPLIT]["decode_tokens_per_s"]
    step_ms = 1e3 / results[SPLIT]["decode_tokens_per_s"]
    lines += [
        "",
        f"TP 2 decode / TP 1 decode: {ratio:.2f}x; tokens identical: {same}",
        f"all-reduces per decode step (decode program): {count}, each of {shape} fp32",
        f"one all-reduce, two gloo ranks at one thread each (measured apart): "
        f"{one * 1e6:.0f} us; per step {count} x = {count * one * 1e3:.2f} ms "
        f"of the split bundle's {step_ms:.2f} ms step",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

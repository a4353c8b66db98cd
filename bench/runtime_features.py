"""The runtime features' costs and gains on a built bundle, each through runtime.open:

    PYTHONPATH=$PWD .venv/bin/python bench/runtime_features.py prefix  [--recipe tiny-llama]
    PYTHONPATH=$PWD .venv/bin/python bench/runtime_features.py chunked [--recipe tiny-llama]
    PYTHONPATH=$PWD .venv/bin/python bench/runtime_features.py guided  [--recipe tiny-llama]
    PYTHONPATH=$PWD .venv/bin/python bench/runtime_features.py decode  [--recipe tiny-llama]

prefix   time to first token of a request whose first 256 tokens an earlier request
         fed (a system prompt) plus 16 of its own, with the prefix cache
         (Bundle.enable_prefix_cache) and without; the median of --rounds requests,
         each with a new suffix. The tokens of every request are checked equal. The
         floor is each prompt sent again (all but one token reused): the engine's
         fixed cost of one forward, which no reuse goes below.
chunked  time to first token and peak RSS for one 1,024-token prompt, fed in one pass
         and in chunks of 64 and 256 (Bundle.prefill_chunk_len, what
         build.prefill_chunk_len sets); each setting in a process of its own, so
         its peak RSS (VmHWM) is that setting's. The first tokens are checked equal.
guided   tokens/s of greedy decoding with and without a JSON-schema constraint
         (runtime/guided.py), over the prompts of prompts/default.yaml: each prompt
         decodes its JSON, then as many tokens unconstrained (EOS off), alternately.
decode   greedy decode tokens/s over the prompts of prompts/default.yaml (EOS off, so
         every prompt decodes --new-tokens), three ways, interleaved per prompt: the
         default (the caller's pool for long forwards, few-token forwards on the
         one-thread session runtime/backends.py opens below SHORT_WORK), every forward
         on the pool (`session.short = 0`: the runtime before that rule), and a bundle
         opened at one thread. --threads sets the pool (default: the runtime's own).

The tiny bundles' bundle.json allows 256 tokens (the recipe's build.max_seq_len, which
the model's 512 positions cap). The graph takes any length, so `prefix` and `chunked`
raise the runtime's check to what they feed where bundle.json's is lower (printed with
the figures): past position 511 the rotary angles leave the range the config
declares, which changes what the random-weight model's tokens mean, not what a
prefill costs. --bundle runs a bundle folder instead (one built before a runtime or
builder edit re-keyed the recipe's steps). smollm2-135m-instruct (a real checkpoint,
2,048 tokens) needs no raise. Wall figures hold on an idle machine only: the load
average is printed first, and CPU seconds (user+sys) next to the wall times. One run
of each on tiny-llama stays well under three minutes on 2 cores (smollm2: `chunked
--rounds 1`, about 40 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _process import bundle_path, peak_rss  # noqa: E402  (bench/ is on sys.path: run as a script)

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 16},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 4},
        "member": {"type": "boolean"},
    },
    "required": ["name", "age", "city", "tags", "member"],
    "additionalProperties": False,
}


def opened(args: argparse.Namespace, needs: int = 0) -> Any:
    """The recipe's bundle; its max_seq_len raised to `needs` tokens where it is below
    (the graph takes any length), which is printed."""
    import runtime

    path = Path(args.bundle) if args.bundle else bundle_path(args.recipe)
    bundle = runtime.open(path, args.threads or None, expect=runtime.Bundle)
    if bundle.max_seq_len < needs:
        print(f"  max_seq_len raised from bundle.json's {bundle.max_seq_len} to {needs}")
        bundle.max_seq_len = needs
    return bundle


def cpu() -> float:
    return time.process_time()  # user + sys of this process


def prefix(args: argparse.Namespace) -> None:
    bundle = opened(args, 256 + 16 + args.new_tokens)
    rng = np.random.default_rng(0)
    shared = rng.integers(3, 500, 256).tolist()
    suffixes = [rng.integers(3, 500, 16).tolist() for _ in range(args.rounds + 1)]
    first = shared + suffixes[0]  # the earlier request that fed the prefix
    bundle.generate([first], 1)  # warm-up: onnxruntime's first runs allocate
    cold, cold_cpu, cold_tokens = [], [], []
    for s in suffixes[1:]:
        c = cpu()
        out = bundle.generate([shared + s], args.new_tokens)
        cold.append(out.first_token_seconds)
        cold_cpu.append(cpu() - c)
        cold_tokens.append(out.tokens[0])
    bundle.enable_prefix_cache()
    bundle.generate([first], args.new_tokens)
    warm, warm_cpu, warm_tokens, floor = [], [], [], []
    for s in suffixes[1:]:
        c = cpu()
        out = bundle.generate([shared + s], args.new_tokens)
        assert bundle.last_reused == 256, bundle.last_reused
        warm.append(out.first_token_seconds)
        warm_cpu.append(cpu() - c)
        warm_tokens.append(out.tokens[0])
        again = bundle.generate([shared + s], 1)  # all but its last token reused
        assert bundle.last_reused == 256 + 15, bundle.last_reused
        floor.append(again.first_token_seconds)
    same = warm_tokens == cold_tokens
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"prefix reuse, {args.recipe}: 256 shared + 16 new tokens, {args.rounds} requests")
    for name, ttft, used in (("without", c, cold_cpu), ("with", w, warm_cpu)):
        each = statistics.median(used) * 1e3
        print(
            f"  {name + ' reuse:':14} TTFT median {ttft * 1e3:.2f} ms (cpu/request {each:.2f} ms)"
        )
    f = statistics.median(floor)
    print(f"  floor:         TTFT median {f * 1e3:.2f} ms (the same prompt again: 1 token fed)")
    print(
        f"  speed-up {c / w:.1f}x (at most {c / f:.1f}x); tokens identical to the cold runs: {same}"
    )
    if not same:
        sys.exit(1)


def chunked_one(args: argparse.Namespace) -> None:
    """One setting, in this process: prints a JSON line."""
    import psutil

    bundle = opened(args, args.prompt_len + args.new_tokens)
    bundle.prefill_chunk_len = args.chunk
    ids = np.random.default_rng(1).integers(3, 500, args.prompt_len).tolist()
    bundle.generate([ids[:64]], 1)  # warm-up on a short prompt
    before = psutil.Process().memory_info().rss
    c = cpu()
    out = bundle.generate([ids], args.new_tokens)
    used = cpu() - c
    peak = peak_rss()
    print(
        json.dumps(
            {
                "chunk": args.chunk,
                "ttft_ms": out.first_token_seconds * 1e3,
                "cpu_ms": used * 1e3,
                "rss_before_mb": before / 2**20,
                "peak_rss_mb": peak / 2**20,
                "tokens": out.tokens[0],
            }
        )
    )


def chunked(args: argparse.Namespace) -> None:
    rows = []
    for chunk in (0, 64, 256):
        runs = []
        for _ in range(args.rounds):
            cmd = [sys.executable, __file__, "chunked-one", "--chunk", str(chunk)]
            cmd += ["--recipe", args.recipe, "--prompt-len", str(args.prompt_len)]
            cmd += ["--bundle", args.bundle] if args.bundle else []
            cmd += ["--new-tokens", str(args.new_tokens)]
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
            lines = proc.stdout.strip().splitlines()
            raised = next(
                (f";{x.strip()[len('max_seq_len') :]}" for x in lines if "raised" in x), ""
            )
            runs.append(json.loads(lines[-1]))
        rows.append(runs)
    print(
        f"chunked prefill, {args.recipe}: one {args.prompt_len}-token prompt, "
        f"{args.new_tokens} new tokens, {args.rounds} processes each{raised}"
    )
    base = statistics.median(r["ttft_ms"] for r in rows[0])
    for runs in rows:
        ttft = statistics.median(r["ttft_ms"] for r in runs)
        used = statistics.median(r["cpu_ms"] for r in runs)
        peak = statistics.median(r["peak_rss_mb"] for r in runs)
        rise = statistics.median(r["peak_rss_mb"] - r["rss_before_mb"] for r in runs)
        name = "one-shot" if runs[0]["chunk"] == 0 else f"chunk {runs[0]['chunk']}"
        print(
            f"  {name:9}: TTFT {ttft:7.2f} ms ({ttft / base:.2f}x one-shot; cpu {used:.1f} ms), "
            f"peak RSS {peak:.1f} MB ({rise:+.1f} MB over the loaded bundle)"
        )
    same = len({json.dumps(r["tokens"]) for runs in rows for r in runs}) == 1
    print(f"  tokens identical across settings: {same}")
    if not same:
        sys.exit(1)


def guided(args: argparse.Namespace) -> None:
    import yaml

    from runtime.guided import Grammar
    from runtime.processors import Decoding

    bundle = opened(args)
    texts = yaml.safe_load((ROOT / "prompts" / "default.yaml").read_text())["prompts"]
    prompts = [bundle.encode(t) for t in texts]
    constraint = Decoding(grammar=Grammar.json_schema(SCHEMA))
    eos = set(bundle.eos)

    lengths: dict[int, int] = {}  # prompt -> how many tokens its JSON took

    def constrained(row: int) -> Any:
        out = bundle.generate_with([prompts[row]], args.new_tokens, constraint)
        json.loads(bundle.decode(out.tokens[0]))  # it parses
        lengths[row] = len(out.tokens[0])
        return out

    def plain(row: int) -> Any:
        bundle.eos = set()  # no EOS: as many tokens as the JSON took, at the same lengths
        try:
            return bundle.generate([prompts[row]], lengths[row])
        finally:
            bundle.eos = set(eos)

    for row in range(2):  # warm-up: allocations, llguidance's tokenizer and grammar
        constrained(row), plain(row)
    totals = {"json_schema": [0, 0.0, 0.0], "plain": [0, 0.0, 0.0]}
    for _ in range(args.rounds):
        for row in range(len(prompts)):
            for name, run in (("json_schema", constrained), ("plain", plain)):
                c = cpu()
                out = run(row)
                totals[name][0] += len(out.tokens[0])
                totals[name][1] += out.seconds
                totals[name][2] += cpu() - c
    print(f"guided decoding, {args.recipe}: {len(prompts)} prompts x {args.rounds} rounds, greedy")
    rate = {}
    for name, (n, wall, used) in totals.items():
        rate[name] = (n / wall, n / used)
        print(
            f"  {name:11}: {n} tokens, {n / wall:8.1f} tokens/s wall, {n / used:8.1f} tokens/cpu-s"
        )
    print(
        f"  constrained is {rate['plain'][0] / rate['json_schema'][0]:.2f}x slower (wall), "
        f"{rate['plain'][1] / rate['json_schema'][1]:.2f}x (cpu)"
    )


def decode(args: argparse.Namespace) -> None:
    import yaml

    import runtime

    texts = yaml.safe_load((ROOT / "prompts" / "default.yaml").read_text())["prompts"]
    path = Path(args.bundle) if args.bundle else bundle_path(args.recipe)
    ways = {
        "default": runtime.open(path, args.threads or None, expect=runtime.Bundle),
        "pool only": runtime.open(path, args.threads or None, expect=runtime.Bundle),
        "1 thread": runtime.open(path, 1, expect=runtime.Bundle),
    }
    ways["pool only"].session.short = 0  # every forward on the caller's pool
    pool = ways["default"].session.threads
    short = ways["default"].session.short
    prompts = [ways["default"].encode(t) for t in texts]
    for bundle in ways.values():
        bundle.eos = set()  # every prompt decodes --new-tokens tokens
        bundle.generate([prompts[0]], 8)  # warm-up: onnxruntime's first runs allocate
    rates: dict[str, list[float]] = {name: [] for name in ways}
    tokens: dict[str, list[list[int]]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for ids in prompts:
            for name, bundle in ways.items():
                out = bundle.generate([ids], args.new_tokens)
                decode_s = out.seconds - out.first_token_seconds
                rates[name].append((len(out.tokens[0]) - 1) / decode_s)
                tokens[name].append(out.tokens[0])
    print(
        f"greedy decode, {args.recipe}: {len(prompts)} prompts x {args.rounds} rounds, "
        f"{args.new_tokens} new tokens, EOS off; pool {pool} threads, "
        f"one-thread forwards below {short} tokens"
    )
    base = statistics.median(rates["pool only"])
    for name, got in rates.items():
        rate = statistics.median(got)
        print(
            f"  {name:9}: median {rate:8.1f} tokens/s after the first token "
            f"({rate / base:.2f}x pool only; range {min(got):.0f}-{max(got):.0f})"
        )
    same = tokens["default"] == tokens["pool only"] == tokens["1 thread"]
    print(f"  tokens identical across the three: {same}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["prefix", "chunked", "chunked-one", "guided", "decode"])
    parser.add_argument("--recipe", default="tiny-llama")
    parser.add_argument(
        "--bundle", default="", help="a bundle folder to run instead of the recipe's planned one"
    )
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument(
        "--rounds", type=int, default=0, help="default: 20 prefix, 3 chunked/decode, 2 guided"
    )
    parser.add_argument(
        "--new-tokens",
        type=int,
        default=0,
        help="default: 8 prefix/chunked, 200 guided, 128 decode",
    )
    parser.add_argument(
        "--max-seq-len", type=int, default=0, help="default: 1100 (0: bundle.json's)"
    )
    parser.add_argument("--prompt-len", type=int, default=1024)
    parser.add_argument("--chunk", type=int, default=0)
    args = parser.parse_args()
    args.rounds = args.rounds or {"prefix": 20, "guided": 2}.get(args.what, 3)
    args.new_tokens = args.new_tokens or {"guided": 200, "decode": 128}.get(args.what, 8)
    print(
        f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} on {os.cpu_count()} cores"
    )
    modes = {"prefix": prefix, "chunked": chunked, "chunked-one": chunked_one, "guided": guided}
    modes["decode"] = decode
    modes[args.what](args)


if __name__ == "__main__":
    main()

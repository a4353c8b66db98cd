"""Decode tokens/s of kiln bundles, each in a fresh process, interleaved: a before/after
check of one recipe's bundle across code changes, as a user runs one bundle per process.

    .venv/bin/python bench/probes/decode_ab.py NAME=BUNDLE_DIR NAME=BUNDLE_DIR ... [--rounds 4]
        [--env NAME:KEY=VALUE ...] [--tree NAME=CHECKOUT] [--threads N]

--env sets a variable in one side's processes (KILN_HUGE_PAGES=0: the same bundle with
its weights left on 4 KiB pages, runtime/pages.py); --tree runs one side with another
checkout's runtime (`git worktree add /tmp/before HEAD~1`: a before/after of a runtime
change on the same bundle).

Each round starts one process per bundle in turn (the order kept), which opens it at
--threads threads (default 1) through `runtime.open`, warms up, and decodes 96 greedy
tokens (EOS masked, bench/_eos.py) three times after one chat prompt; the process prints
its median. The table gives each bundle's median over rounds and the spread. In one
process, several bundles of one model share the cache and memory bandwidth, and
SmolLM2's fp32 bundles came out up to 17% apart there while fresh processes put them
within 3%: compare bundles here. No asserts: timings belong in bench/.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Write a short story about a robot learning to paint."
CHILD = """
import statistics, sys
import runtime
from _eos import NoEos
b = runtime.open(sys.argv[1], threads=int(sys.argv[3]), expect=runtime.Bundle)
ids = b.encode_chat([{"role": "user", "content": sys.argv[2]}])
b.generate([ids], 8, NoEos(eos=frozenset(b.eos)))
rates = []
for _ in range(3):
    g = b.generate([ids], 96, NoEos(eos=frozenset(b.eos)))
    rates.append(95 / (g.seconds - g.first_token_seconds))
print(statistics.median(rates))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bundles", nargs="+", metavar="NAME=DIR")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--env", action="append", default=[], metavar="NAME:KEY=VALUE")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=CHECKOUT")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    pairs = [b.partition("=")[::2] for b in args.bundles]
    base = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    envs = {name: dict(base) for name, _ in pairs}
    trees = dict(t.partition("=")[::2] for t in args.tree)
    for name, env in envs.items():
        tree = Path(trees.get(name, ROOT)).resolve()
        env["PYTHONPATH"] = os.pathsep.join([str(tree), str(ROOT / "bench")])
    for spec in args.env:
        name, _, setting = spec.partition(":")
        key, _, value = setting.partition("=")
        if name not in envs or not key:
            parser.error(f"--env {spec}: expected NAME:KEY=VALUE with NAME one of {list(envs)}")
        envs[name][key] = value
    for name, env in envs.items():
        extra = {k: v for k, v in env.items() if base.get(k) != v and k != "PYTHONPATH"}
        other = trees.get(name)
        if extra or other:
            print(f"{name}: {extra or ''}{' runtime from ' + other if other else ''}")
    rates: dict[str, list[float]] = {name: [] for name, _ in pairs}
    print(
        f"load {os.getloadavg()[0]:.2f}; {args.rounds} rounds, one process per bundle each, "
        f"{args.threads} thread(s)"
    )
    for r in range(args.rounds):
        for name, folder in pairs:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, folder, PROMPT, str(args.threads)],
                capture_output=True,
                text=True,
                env=envs[name],
                check=True,
            )
            rates[name].append(float(out.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:.1f}" for n, v in rates.items()))
    print(f"load {os.getloadavg()[0]:.2f}")
    for name, got in rates.items():
        print(
            f"{name:<24} {statistics.median(got):7.1f} tokens/s (min {min(got):.1f}, "
            f"max {max(got):.1f})"
        )


if __name__ == "__main__":
    main()

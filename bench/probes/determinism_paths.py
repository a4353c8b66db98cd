"""Which program gives a half-precision inductor bundle different greedy tokens in
different processes (issue 39)? The validate step's determinism proof on the H100 found
the real SmolLM2 bf16 bundle decoding 1 of its 16 prompts differently from token 10 in 1
of 5 processes, with every load compiling nothing and timing no kernel. This probe
repeats that decode and splits it by program, in fresh processes:

- each process opens the bundle (runtime.open), then for each validation prompt (the
  recipe's prompt set, plain and as a chat turn, as builders/causal_lm/validate.py
  makes them) decodes greedily twice (the decode program in CUDA graphs; the second
  decode shows a race inside one process), then feeds prompt + its own answer through
  the prefill program once more (Bundle.logits: the teacher-forced logits of every
  generated position) and records their digest, the argmax agreement with the decoded
  tokens, and the narrowest top-1/top-2 margin on the path;
- the parent compares the processes: prompts whose tokens differ, and, among prompts
  whose tokens agree, whether the prefill program's logits of the very same ids differ
  between processes (the kernels' bits depend on the process) or not (the difference
  is in the decode program or its graph replay).

    python bench/probes/determinism_paths.py BUNDLE [--runs 6] [--prompts chat]
        [--new 64] [--env NAME=VALUE ...]

Name the card with the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench._process import child_json  # noqa: E402  (the repository root is on sys.path above)

CHILD = """
import hashlib, json, sys, time
import numpy as np, yaml
import runtime
bundle, prompt_file, new = sys.argv[1], sys.argv[2], int(sys.argv[3])
start = time.perf_counter()
b = runtime.open(bundle)
load = time.perf_counter() - start
texts = yaml.safe_load(open(prompt_file))["prompts"]
sets = {"plain": [b.encode(t) for t in texts]}
if b.has_chat:
    sets["chat"] = [b.encode_chat([{"role": "user", "content": t}]) for t in texts]
digest = lambda a: hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:12]
rows = {}
for name, prompts in sets.items():
    if name == "chat":
        b.eos |= set(b.meta["chat"].get("end_of_turn", []))
    for i, ids in enumerate(prompts):
        first = list(b.generate([ids], new).tokens[0])
        again = list(b.generate([ids], new).tokens[0])
        full = ids + first
        logits = b.logits(full)[len(ids) - 1 : len(full) - 1].astype(np.float32)
        twice = b.logits(full)[len(ids) - 1 : len(full) - 1].astype(np.float32)
        top = np.sort(logits, axis=1)[:, -2:]
        margins = top[:, 1] - top[:, 0]
        narrow = int(np.argmin(margins)) if len(margins) else -1
        rows[f"{name}{i}"] = {
            "tokens": first,
            "again_same": again == first,
            "logits": digest(logits),
            "logits_twice_same": bool(np.array_equal(logits, twice)),
            "prefill_argmax_agrees": float(np.mean(logits.argmax(1) == np.asarray(first)))
            if first else 1.0,
            "narrowest_margin": float(margins[narrow]) if narrow >= 0 else None,
            "narrowest_at": narrow,
            "ties": int((margins == 0).sum()),
        }
kernels = getattr(b.session, "kernels", None)
print(json.dumps({"load_s": round(load, 2), "kernels": kernels, "rows": rows}))
"""


def child(bundle: str, prompts: Path, new: int, extra: dict[str, str]) -> dict[str, object]:
    return child_json(CHILD, [bundle, str(prompts), str(new)], extra)


def compare(runs: list[dict[str, object]], label: str) -> None:
    good = [r for r in runs if "error" not in r]
    for r in runs:
        if "error" in r:
            print(f"{label}: a process failed: {r['error']}")
    if not good:
        return
    loads = [r["load_s"] for r in good]
    print(f"{label}: {len(good)} processes, loads {loads} s, kernels {good[0].get('kernels')}")
    names = list(good[0]["rows"])  # type: ignore[call-overload]
    differ, same_ids_other_bits, inside = [], [], []
    for name in names:
        rows = [r["rows"][name] for r in good]  # type: ignore[index]
        if not all(x["again_same"] and x["logits_twice_same"] for x in rows):
            inside.append(name)
        if len({json.dumps(x["tokens"]) for x in rows}) > 1:
            base = rows[0]["tokens"]
            at = min(
                next((j for j, (a, b) in enumerate(zip(base, x["tokens"], strict=False)) if a != b),
                     min(len(base), len(x["tokens"])))
                for x in rows if x["tokens"] != base
            )  # fmt: skip
            margins = [(x["narrowest_margin"], x["narrowest_at"], x["ties"]) for x in rows]
            differ.append(
                f"{name} from new token {at} (narrowest margin, at, ties per process: {margins})"
            )
        elif len({x["logits"] for x in rows}) > 1:
            same_ids_other_bits.append(name)
    agree = min(x["prefill_argmax_agrees"] for r in good for x in r["rows"].values())  # type: ignore[attr-defined]
    ties = sum(x["ties"] for x in good[0]["rows"].values())  # type: ignore[attr-defined]
    print(f"{label}: prompts decoding differently across processes: {len(differ)}")
    for line in differ:
        print("   ", line)
    print(
        f"{label}: prompts with equal tokens whose prefill-program logits differ across "
        f"processes: {len(same_ids_other_bits)} {same_ids_other_bits}"
    )
    print(f"{label}: prompts differing within one process (decode twice, logits twice): {inside}")
    print(
        f"{label}: lowest agreement of the prefill program's argmax with the decoded tokens "
        f"{agree:.3f}; exact top-2 ties on process 1's paths: {ties}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--prompts", default="chat", help="a prompt set of prompts/")
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for every process")
    args = parser.parse_args()
    extra = dict(e.split("=", 1) for e in args.env)
    prompts = ROOT / "prompts" / f"{args.prompts}.yaml"
    label = " ".join(args.env) or "default"
    runs = []
    for i in range(args.runs):
        runs.append(child(args.bundle, prompts, args.new, extra))
        print(f"{label}: process {i + 1} done", flush=True)
    compare(runs, label)


if __name__ == "__main__":
    main()

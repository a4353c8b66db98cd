"""Which program does a half-precision speculative bundle's greedy output agree with?
(issue 39's DSpark headline in bf16). Speculation takes the target's argmax from the
verify program (max_draft_len + 1 rows); target-only greedy can take it from the same
program (InductorSpeculativeBundle.generate_plain, no-draft rounds) or from the
one-row decode program (InductorBundle's device loop, what generate_plain ran before
b2c9458). In bf16 the two programs round differently, so only the first comparison
can show a speculation fault alone.

Runs each reference record's prompt for its token count through the bundle three ways
and prints, per prompt and in all, how many leading tokens speculation shares with
each target-only path (the validate feature's speculative_match_rate counts the same
way), and the acceptance of the drafts.

    python bench/probes/spec_programs.py BUNDLE REFERENCE_JSON [--threads N]

BUNDLE: an inductor bundle of a drafting variant (ngram, dflash, dspark);
REFERENCE_JSON: the reference step's reference.json (its records' prompt_ids and
tokens). Name the host with the figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def shared(a: list[int], b: list[int]) -> int:
    """Leading tokens `a` shares with `b` (all of b where they are equal)."""
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    return len(b) if first is None and len(a) == len(b) else (first or 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bundle", type=Path)
    parser.add_argument("reference", type=Path)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    import runtime
    from runtime.inductor_lm import InductorBundle, InductorSpeculativeBundle

    started = time.perf_counter()
    bundle = runtime.open(args.bundle, threads=args.threads, expect=InductorSpeculativeBundle)
    engine = bundle.engine
    opened = time.perf_counter() - started
    print(
        f"{args.bundle}: {bundle.meta['variant']}, verify program {engine.verify_len} rows; "
        f"opened in {opened:.1f} s"
    )
    records = json.loads(args.reference.read_text())["records"]
    totals = {"verify": 0, "decode": 0, "programs": 0}
    count = drafted = accepted = 0
    for i, record in enumerate(records):
        prompt, new = record["prompt_ids"], len(record["tokens"])
        t0 = time.perf_counter()
        spec = bundle.generate([prompt], new).tokens[0]
        drafted += bundle.last_stats.drafted
        accepted += bundle.last_stats.accepted
        verify = bundle.generate_plain([prompt], new).tokens[0]
        decode = InductorBundle.generate(bundle, [prompt], new).tokens[0]
        row = {
            "verify": shared(spec, verify),
            "decode": shared(spec, decode),
            "programs": shared(verify, decode),
        }
        for k, v in row.items():
            totals[k] += v
        count += len(verify)
        print(
            f"prompt {i} ({len(prompt)} tokens, {new} new): speculation = target alone through "
            f"the verify program for {row['verify']}/{len(verify)}, through the decode program "
            f"for {row['decode']}/{len(decode)}; the two target-only paths share "
            f"{row['programs']} ({time.perf_counter() - t0:.0f} s)"
        )
    print(
        f"in all: speculation vs verify-program greedy {totals['verify']}/{count} = "
        f"{totals['verify'] / count:.3f}; vs decode-program greedy {totals['decode']}/{count} = "
        f"{totals['decode'] / count:.3f}; verify- vs decode-program greedy "
        f"{totals['programs'] / count:.3f}; acceptance {accepted}/{drafted}"
    )


if __name__ == "__main__":
    main()

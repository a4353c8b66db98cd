"""The `determinism` feature (issue 39): the same bundle, prompts and variables give the
same greedy tokens in every process on one host.

    proof = determinism(request, bundle_folder, {"chat": ids, "plain": ids}, new_tokens)

runs PROCESSES fresh Python processes one after another; each opens the bundle with
runtime.open (timed: the load a user waits for, with the disk warm) and decodes every
prompt set greedily, in batches of the bundle's max_batch_size. The proof counts the
distinct outputs over the processes (1 where deterministic) and records the loads'
seconds. A compiled engine that chose its kernels at each load failed exactly this
(issue 39: two of seven `doit run` processes answered another sentence).

The validate step runs it for inductor bundles, whose kernels are compiled code; a
determinism proof that does not hold fails the verdict (kiln/evidence/record.py).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from builders.common.child import ChildFailed, run_json

if TYPE_CHECKING:
    from kiln.store.api import Request

PROCESSES = 5
TIMEOUT = 1800.0  # one process: a load and a few greedy batches


def determinism(
    request: Request, bundle: Path, prompts: dict[str, list[list[int]]], new_tokens: int
) -> dict[str, Any]:
    outputs: list[dict[str, list[list[int]]]] = []
    loads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="kiln-determinism-") as tmp:
        job = Path(tmp) / "job.json"
        job.write_text(json.dumps({"bundle": str(bundle), "prompts": prompts, "new": new_tokens}))
        for i in request.progress(range(PROCESSES), PROCESSES, "determinism: fresh processes"):
            try:
                got = run_json("builders.causal_lm._determinism", [str(job)], TIMEOUT)
            except ChildFailed as exc:
                tail = " | ".join(exc.tail[-3:])
                raise RuntimeError(f"process {i + 1} failed (exit {exc.status}): {tail}") from None
            outputs.append(got["tokens"])
            loads.append(float(got["load_seconds"]))
    distinct = len({json.dumps(o, sort_keys=True) for o in outputs})
    differ, first = _differences(outputs)
    sets = ", ".join(f"{len(v)} {k}" for k, v in prompts.items())
    said = (
        "the same tokens in every one"
        if distinct == 1
        else f"{distinct} distinct outputs: {differ} prompt(s) decode differently in some "
        f"process, the earliest at new token {first}"
    )
    return {
        "proved": distinct == 1,
        "check": f"{PROCESSES} fresh processes each load the bundle and decode {sets} "
        f"prompts greedily ({new_tokens} new tokens): {said}",
        "metrics": {
            "processes": float(PROCESSES),
            "distinct_outputs": float(distinct),
            "prompts_differing": float(differ),
            "load_seconds_median": round(statistics.median(loads), 3),
            "load_seconds_max": round(max(loads), 3),
        },
    }


def _differences(outputs: list[dict[str, list[list[int]]]]) -> tuple[int, int]:
    """How many prompts decode differently in some process than in the first, and the
    earliest new-token position where any does (-1: none): where the divergence starts
    says whether the prompt's first token (its prefill) or a later decode step differs."""
    differ, first = 0, -1
    base = outputs[0]
    for name, rows in base.items():
        for i, row in enumerate(rows):
            others = [o[name][i] for o in outputs[1:]]
            if all(o == row for o in others):
                continue
            differ += 1
            at = min(
                next((j for j, (a, b) in enumerate(zip(row, o, strict=False)) if a != b),
                     min(len(row), len(o)))
                for o in others if o != row
            )  # fmt: skip
            first = at if first < 0 else min(first, at)
    return differ, first


def main(job_file: Path) -> None:
    import time

    job = json.loads(job_file.read_text())
    import runtime
    from runtime.causal_lm import Bundle

    start = time.perf_counter()
    bundle = runtime.open(job["bundle"], expect=Bundle)
    load = time.perf_counter() - start
    size = bundle.max_batch_size
    tokens = {}
    for name, ids in job["prompts"].items():  # plain first: chat adds end-of-turn ids
        if name == "chat":  # to the stop ids, as encode_chat does
            bundle.eos |= set(bundle.meta["chat"].get("end_of_turn", []))
        out: list[list[int]] = []
        for i in range(0, len(ids), size):
            out += bundle.generate(ids[i : i + size], job["new"]).tokens
        tokens[name] = out
    print(json.dumps({"tokens": tokens, "load_seconds": load}))


if __name__ == "__main__":
    main(Path(sys.argv[-1]))

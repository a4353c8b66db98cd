"""Where one decode step's time goes: a kiln bundle's onnxruntime graph against
onnxruntime-genai's model of the same checkpoint, op by op.

    PYTHONPATH=. .venv/bin/python bench/step_profile.py --bundle BUNDLE_DIR \\
        [--og OG_DIR --hf HF_DIR] [--threads 1] [--steps 64]

Both run one chat prompt ("What is the capital of France?") and --steps greedy decode
steps at --threads intra-op threads with onnxruntime's profiler on; the prefill is left
out. Per step: nodes run, the session's run time, kernel time, and the op types that
take it. The kiln side goes through `runtime.open` and the bundle's own generate loop
(EOS masked, bench/_eos.py), with its engine's session replaced by the same session
with profiling on. The profiler adds a cost per node, so its wall figures are higher
than bench/chat_peers.py's; compare the two sides' breakdowns, not the tokens/s.
See bench/chat_peers.py for where the inputs come from. The onnxruntime-genai side
needs onnxruntime-genai (0.18) and the dequantized HF folder (for the prompt's ids).
"""

from __future__ import annotations

import argparse
import collections
import gc
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


def breakdown(profile: Path, name: str) -> str:
    """A profile's decode steps (every run after the first), summarised."""
    events = json.loads(profile.read_text())
    runs = [e for e in events if e.get("name") == "model_run"]
    prefill_end = runs[0]["ts"] + runs[0]["dur"]
    by: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] > prefill_end:
            by[e["args"]["op_name"]] += e["dur"]
            count[e["args"]["op_name"]] += 1
    steps = len(runs) - 1
    run_ms = sum(r["dur"] for r in runs[1:]) / steps / 1000
    kernel_ms = sum(by.values()) / steps / 1000
    lines = [
        f"{name}: {sum(count.values()) // steps} nodes per decode step; session run "
        f"{run_ms:.1f} ms, kernels {kernel_ms:.1f} ms, the rest (executor) "
        f"{run_ms - kernel_ms:.1f} ms ({steps} steps)"
    ]
    for op, us in by.most_common(10):
        lines.append(
            f"  {op:<34} {us / steps / 1000:7.2f} ms  {100 * us / sum(by.values()):5.1f}%"
            f"  x{count[op] // steps}"
        )
    return "\n".join(lines)


def kiln(bundle_dir: Path, threads: int, steps: int, work: Path) -> str:
    import onnxruntime as ort
    from _eos import NoEos

    import runtime

    bundle = runtime.open(bundle_dir, threads=threads, expect=runtime.Bundle)
    engine = bundle.meta["engines"]["main"]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as the runtime
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    so.profile_file_prefix = str(work / "kiln")
    session = ort.InferenceSession(
        str(bundle_dir / engine["file"]), so, providers=[engine["provider"]]
    )
    bundle.session.session = session  # type: ignore[attr-defined]
    bundle.session.short = 0  # type: ignore[attr-defined]  # every forward on this session
    ids = bundle.encode_chat(PROMPT)
    bundle.generate([ids], steps + 1, NoEos(eos=frozenset(bundle.eos)))
    return breakdown(Path(session.end_profiling()), f"kiln bundle {bundle_dir.name[:12]}")


def genai(og_dir: Path, hf: Path, threads: int, steps: int, work: Path) -> str:
    from transformers import AutoTokenizer

    og: Any = importlib.import_module("onnxruntime_genai")
    tokenizer = AutoTokenizer.from_pretrained(hf)
    text = tokenizer.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    options = {
        "intra_op_num_threads": threads,
        "inter_op_num_threads": 1,
        "enable_profiling": "og",  # a prefix, written to the working directory
    }
    config = og.Config(str(og_dir))
    config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
    here = Path.cwd()
    os.chdir(work)
    try:
        model = og.Model(config)
        params = og.GeneratorParams(model)
        total = len(ids) + steps + 1
        params.set_search_options(do_sample=False, max_length=total, min_length=total)
        gen = og.Generator(model, params)
        gen.append_tokens(ids)
        for _ in range(steps + 1):
            gen.generate_next_token()
        del gen, params, model, config  # the profile is written when the session closes
        gc.collect()
    finally:
        os.chdir(here)
    profile = max(work.glob("og*.json"), key=lambda p: p.stat().st_mtime)
    return breakdown(profile, f"onnxruntime-genai {og_dir.name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--og", type=Path, help="an onnxruntime-genai model folder")
    parser.add_argument("--hf", type=Path, help="the HF checkpoint folder (with --og)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=64)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="step_profile-"))
    load = os.getloadavg()[0]
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {args.threads} thread(s), load {load:.2f}")
    print(kiln(args.bundle, args.threads, args.steps, work))
    if args.og is not None:
        if args.hf is None:
            parser.error("--og needs --hf (the prompt's token ids)")
        print(genai(args.og, args.hf, args.threads, args.steps, work))


if __name__ == "__main__":
    main()

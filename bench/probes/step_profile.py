"""Where one decode step's time goes: a kiln bundle's onnxruntime graph against
onnxruntime-genai's model of the same checkpoint, op by op.

    PYTHONPATH=. .venv/bin/python bench/probes/step_profile.py --bundle BUNDLE_DIR \\
        [--og OG_DIR --hf HF_DIR [--bare]] [--threads 1] [--steps 64]

Both run one chat prompt ("What is the capital of France?") and --steps greedy decode
steps at --threads intra-op threads with onnxruntime's profiler on; the prefill is left
out. Per step: nodes run, the session's run time, kernel time, and the op types that
take it. The kiln side goes through `runtime.open` and the bundle's own generate loop
(EOS masked, bench/_eos.py), with its engine's session replaced by the same session
with profiling on. The profiler adds a cost per node, so its wall figures are higher
than bench/chat_peers.py's; compare the two sides' breakdowns, not the tokens/s.
See bench/chat_peers.py for where the inputs come from. The onnxruntime-genai side
needs onnxruntime-genai (0.18) and the dequantized HF folder (for the prompt's ids).

With --bare, and no profiler, the two graphs alone: each engine file in a plain
onnxruntime session (kiln's as the runtime opens it, optimizations done at build;
onnxruntime-genai's at onnxruntime's default level, as its generator opens it), its
cache buffers bound as both past and present, one decode step over a past of --past
positions repeated: --rounds rounds of 40 steps each, the graphs alternating, the
median ms per step. Twice: with both graphs' memory on 4 KiB pages, and with both
collapsed into huge pages as kiln's runtime does (runtime/pages.py; onnxruntime-genai
does not). No Python runs between the steps but the call itself.
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

ROOT = Path(__file__).resolve().parents[2]
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

    import runtime
    from bench._eos import NoEos

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


def bare_session(path: Path, threads: int, level: Any, huge: bool, past: int, dim: int) -> Any:
    """A plain session of `path` with a decode step's inputs bound: the cache buffers
    ([1, heads, past + 64, dim], dim where the graph leaves it symbolic) as both past
    and present, the logits to a buffer. Returns a function that runs one step."""
    import numpy as np
    import onnxruntime as ort

    from runtime import pages

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.graph_optimization_level = level

    def open_() -> Any:
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

    session = pages.opened_on_huge_pages(open_)[0] if huge else open_()
    binding, keep = session.io_binding(), []
    names = {o.name for o in session.get_outputs()}
    inputs = {i.name: i for i in session.get_inputs()}
    for name, value in inputs.items():
        if "past" not in name:
            continue
        heads, size = value.shape[1], value.shape[3]
        size = size if isinstance(size, int) else dim
        buffer = np.zeros((1, heads, past + 64, size), np.float32)
        keep.append(buffer)
        bound = ort.OrtValue.ortvalue_from_numpy(buffer)
        binding.bind_ortvalue_input(name, bound)
        layer, kind = name.split(".")[-2:]
        binding.bind_ortvalue_output(
            next(n for n in names if n.startswith("present") and n.endswith(f"{layer}.{kind}")),
            bound,
        )
    feeds = {
        "input_ids": np.array([[42]], np.int64),
        "attention_mask": np.ones((1, past + 1), np.int64),
        "position_ids": np.array([[past]], np.int64),
        "logits_to_keep": np.array(1, np.int64),
    }
    for name, array in feeds.items():
        if name in inputs:
            binding.bind_cpu_input(name, array)
            keep.append(array)
    logits = np.empty((1, 1, session.get_outputs()[0].shape[-1]), np.float32)
    keep.append(logits)
    binding.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))

    def step(held: list[Any] = keep) -> None:  # the bound arrays live as long as it
        session.run_with_iobinding(binding)

    return step


def bare(bundle_dir: Path, og_dir: Path, threads: int, rounds: int, past: int) -> str:
    """The two graphs alone, alternating (the module docstring)."""
    import statistics

    import onnxruntime as ort

    engine = json.loads((bundle_dir / "bundle.json").read_text())["engines"]["main"]["file"]
    decoder = json.loads((og_dir / "genai_config.json").read_text())["model"]["decoder"]
    graphs = {
        f"kiln {bundle_dir.name[:12]}": (
            bundle_dir / engine,
            ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        ),
        f"onnxruntime-genai {og_dir.name}": (
            og_dir / decoder["filename"],
            ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        ),
    }
    lines = [f"the graphs alone, one decode step over {past} positions, {rounds} rounds of 40:"]
    for huge in (False, True):
        steps = {
            name: bare_session(path, threads, level, huge, past, decoder["head_size"])
            for name, (path, level) in graphs.items()
        }
        times: dict[str, list[float]] = {name: [] for name in steps}
        for step in steps.values():
            for _ in range(5):
                step()
        for _ in range(rounds):
            for name, step in steps.items():
                began = time.perf_counter()
                for _ in range(40):
                    step()
                times[name].append((time.perf_counter() - began) / 40 * 1000)
        pages_ = "huge pages" if huge else "4 KiB pages"
        for name, values in times.items():
            lines.append(
                f"  {pages_:<12} {name:<40} {statistics.median(values):6.2f} ms a step "
                f"(min {min(values):.2f}, max {max(values):.2f})"
            )
        del steps
        gc.collect()
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--og", type=Path, help="an onnxruntime-genai model folder")
    parser.add_argument("--hf", type=Path, help="the HF checkpoint folder (with --og)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--bare", action="store_true", help="also the graphs alone (with --og)")
    parser.add_argument("--rounds", type=int, default=6, help="--bare's rounds")
    parser.add_argument("--past", type=int, default=100, help="--bare's past positions")
    args = parser.parse_args()
    if args.bare and args.og is None:
        parser.error("--bare compares with --og's graph: give --og")
    work = Path(tempfile.mkdtemp(prefix="step_profile-"))
    load = os.getloadavg()[0]
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {args.threads} thread(s), load {load:.2f}")
    print(kiln(args.bundle, args.threads, args.steps, work))
    if args.og is not None:
        if args.hf is None:
            parser.error("--og needs --hf (the prompt's token ids)")
        print(genai(args.og, args.hf, args.threads, args.steps, work))
    if args.bare:
        print(bare(args.bundle, args.og, args.threads, args.rounds, args.past))


if __name__ == "__main__":
    main()

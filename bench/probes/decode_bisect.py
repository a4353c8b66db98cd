"""Where inside one process does a half-precision inductor bundle's greedy decode part
from itself (issue 39)? bench/probes/determinism_paths.py saw the real SmolLM2 bf16
bundle decode one validation prompt differently twice in one process; its prefill
program gave the same bits every time, and torch's sdpa backends alone are
deterministic at its shapes (bench/probes/sdpa_determinism.py). This probe:

1. generates the prompt greedily REPEATS times in one process, snapshotting the whole
   device state (KV cache, ids, positions, slots, mask, history, bias) when the decode
   loop starts: are the snapshots (prefill + first token) bitwise equal, and the
   answers?
2. from the first snapshot, runs STEPS decode steps again and again in four ways, each
   step's logits digested: the captured one-step CUDA graph, the captured BLOCK-step
   graph (its history only), the compiled step called directly (no graph), and the
   exported decode program uncompiled (torch.export's module in eager, with the
   engine's sdpa backends, and again with MATH only). Distinct paths per way: 1 where
   that way is deterministic; where ways part, the first step they part at.

    python bench/probes/decode_bisect.py BUNDLE [--prompt TEXT] [--repeats 8] [--steps 20]
        [--paths 12]

Name the card with the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import zipfile
from typing import Any

import numpy as np

DEFAULT_PROMPT = "Once upon a time there was a small model that wanted to be deployed"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--paths", type=int, default=12)
    parser.add_argument("--new", type=int, default=64)
    args = parser.parse_args()

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import runtime
    from runtime import inductor

    b = runtime.open(args.bundle)
    e = b.engine
    cuda = torch.cuda.is_available()
    card = torch.cuda.get_device_name() if cuda else "CPU"
    print(f"{card}, torch {torch.__version__}; kernels {e.kernels}")
    turn = [{"role": "user", "content": args.prompt}]
    ids = b.encode_chat(turn) if b.has_chat else b.encode(args.prompt)
    state = [*e.cache, e.ids, e.positions, e.slots, e.visible, e.history, e.bias]

    def save() -> list[Any]:
        return [x.clone() for x in state]

    def restore(snap: list[Any]) -> None:
        for x, y in zip(state, snap, strict=True):
            x.copy_(y)

    def digest(x: Any) -> str:
        return hashlib.sha256(x.float().cpu().numpy().tobytes()).hexdigest()[:10]

    snaps: list[list[Any]] = []
    advance = e.advance

    def snapping(steps: int) -> None:
        if len(snaps) == len(answers):  # the first advance of this generation
            if cuda:
                torch.cuda.synchronize()
            snaps.append(save())
        advance(steps)

    e.advance = snapping  # type: ignore[method-assign]
    answers: list[list[int]] = []
    for _ in range(args.repeats):
        answers.append(list(b.generate([ids], args.new).tokens[0]))
    e.advance = advance  # type: ignore[method-assign]
    equal = [all(torch.equal(x, y) for x, y in zip(snaps[0], s, strict=True)) for s in snaps]
    print(
        f"1. {args.repeats} generations: {len({tuple(a) for a in answers})} distinct answers; "
        f"decode-start state equal to the first's: {equal}"
    )
    base = answers[0]
    for a in answers[1:]:
        if a != base:
            at = next((j for j, (x, y) in enumerate(zip(base, a, strict=False)) if x != y), -1)
            print(f"   an answer parts from the first at new token {at}: {base[at]} vs {a[at]}")
    first = snaps[0]

    engine_file = b.path / b.meta["engines"]["main"]["file"]
    with zipfile.ZipFile(engine_file) as archive:
        module = torch.export.load(io.BytesIO(archive.read("decode.pt2"))).module()
    eager_step = inductor._greedy_step(module, len(e.weights))
    names = inductor.DECODE_ATTENTION.get(e.program["dtype"], ("MATH",))

    def way(name: str) -> Any:
        def graph1() -> Any:
            e.graphs[1].replay()
            return e.out

        def compiled() -> Any:
            return e._step()

        def eager(backends: tuple[str, ...]) -> Any:
            def run() -> Any:
                with sdpa_kernel([getattr(SDPBackend, n) for n in backends]):
                    return eager_step(*e.weights, *e.state, *e.cache)

            return run

        return {
            "graph1": graph1,
            "compiled": compiled,
            "eager": eager(tuple(names)),
            "eager-math": eager(("MATH",)),
        }[name]

    print(f"2. from the first decode-start state, {args.paths} paths of {args.steps} steps each:")
    paths: dict[str, list[tuple[str, ...]]] = {}
    with torch.inference_mode():
        ways = ("graph1", "compiled", "eager", "eager-math") if e.graphs else ("compiled", "eager")
        for name in ways:
            step = way(name)
            runs = []
            for _ in range(args.paths):
                restore(first)
                runs.append(tuple(digest(step()) for _ in range(args.steps)))
            paths[name] = runs
            print(f"   {name}: {len(set(runs))} distinct paths", flush=True)
        blocks = set()
        for _ in range(args.paths if e.graphs else 0):
            restore(first)
            e.graphs[inductor.BLOCK].replay()
            blocks.add(digest(e.history))
        print(f"   block graph ({inductor.BLOCK} steps): {len(blocks)} distinct histories")
    ref = next(iter(paths.values()))[0]
    for name, runs in paths.items():
        for run in runs:
            if run != ref:
                at = next(j for j, (x, y) in enumerate(zip(ref, run, strict=True)) if x != y)
                print(f"   {name} parts from the first way's first path at step {at}")
                break
    restore(first)
    with torch.inference_mode():
        logits = e._step().float()
    finite = bool(torch.isfinite(logits).all())
    top = torch.topk(logits[0, -1], 2).values.cpu().numpy()
    print(
        f"   first step's logits finite: {finite}; top-2 margin {float(np.diff(top[::-1])[0]):.4f}"
    )


if __name__ == "__main__":
    main()

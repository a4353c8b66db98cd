"""A vision-language bundle against transformers on the CPU, same image and question,
one run (issue 40).

    .venv/bin/python bench/vlm.py [--recipe tiny-llava] [--image FILE] [--question TEXT]
        [--new-tokens 64] [--rounds 5] [--threads 2]

The recipe's bundle is built through kiln as `doit run` builds it (ensure_bundle:
every step the bundle needs, in this process, in the default store, so a built bundle
is reused; no reference, validate or manifest). Any image-text-to-text recipe runs:
the ONNX ones (tiny-llava, tiny-gemma3-vlm, tiny-qwen2-vl, tiny-qwen2.5-vl, tiny-qwen3-vl,
tiny-idefics3, tiny-internvl) and the inductor ones (tiny-llava-inductor,
tiny-qwen2.5-vl-inductor, tiny-idefics3-inductor), each opened by runtime.open as its
bundle.json says (the vision layout and the decoder's backend pick the runner, e.g.
InductorGridVisionBundle). The anchor is the recipe's fetched checkpoint in
transformers, the class its config.json names (architectures[0]:
LlavaForConditionalGeneration, Gemma3ForConditionalGeneration,
Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration,
Qwen3VLForConditionalGeneration, Idefics3ForConditionalGeneration,
InternVLForConditionalGeneration; an inductor recipe's is its onnxruntime sibling's, the
same checkpoint), as AutoModelForImageTextToText makes it (a different class is
refused), fp32, eager attention, loaded and driven as builders/vlm/reference.py does:
the checkpoint's processor (backend "pil"; builders/common/hf.py load_processor) and chat
template, then `generate`. Both sides run at `--threads` CPU threads
(torch.set_num_threads; the bundle's decoder and vision sessions). What is timed, per
round, with the image file read from disk inside every timed region on both sides:

  * time to first token: the bundle's whole path, VisionBundle.ask (image read,
    preprocessing to pixel values, the vision program, the chat template and the
    image tokens' expansion) plus generate_images(max_new_tokens=1) (the decoder's
    prefill with the features merged at the image tokens, and the greedy choice),
    wall clock around both calls; Generation.first_token_seconds alone would leave the
    image out. HF: load_image + apply_chat_template + processor(images, text) +
    model.generate(max_new_tokens=1), wall clock;
  * decode: `--new-tokens` greedy tokens per side, EOS masked as HF's min_new_tokens
    masks it (bench/_eos.py's NoEos on the bundle; min_new_tokens with the same EOS
    ids, the checkpoint's and the template's end of turn, on HF), so both produce the
    same count (printed). Decode tokens/s is (new tokens - 1) over the time from the
    prefill's logits to the last token's logits, stamped by a logits processor on each
    side (the bundle's sampler, an HF LogitsProcessor); the whole call's seconds are
    printed too. On an inductor bundle greedy decoding runs on the device loop
    (InductorVisionBundle.generate_images), which takes no sampler: there EOS leaves the
    bundle's stop set (bundle.eos emptied after each ask, so it runs to `--new-tokens`)
    but is not masked, and decode tokens/s is (new tokens - 1) over Generation.seconds less
    Generation.first_token_seconds (the call's start to the first token's choice): the
    same span, stamped by the runtime. Whether the tokens match HF's is printed.

The stages of the first token follow the bundle's vision layout (bundle.json
vision.layout, VISION_STAGES): one fixed picture (pixels, the vision program), "grid"
(patches and grids; Qwen2-VL, Qwen2.5-VL, Qwen3-VL) or "crops" (Idefics3, InternVL).

Each round runs both measurements on both sides, the sides' order alternating round by
round (bundle first, then HF first); one warm-up round is not counted. Prints the
medians, the ratios (time to first token bundle/HF: <= 1 meets issue 40's target;
decode tokens/s bundle/HF: > 1 is the bundle faster) and whether the greedy tokens are
identical. Then each side alone, 4 x `--rounds` calls back to back (no idle gap and
no other side's work in between: the bundle's interleaved first token is slower mostly
for the gap before it, as one after a sleep is): the time to first token, and where it
goes (each stage timed alone, median).
Timings on a shared 2-core machine move run to run: compare the sides of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

IMAGE = ROOT / "builders" / "data" / "images" / "circle_64x48.png"
QUESTION = "What is in the picture?"

# bundle.json vision.layout (None: one fixed-size picture) -> how the first token's
# first two stages run on the bundle: the pictures' inputs from the files, then the
# vision program on them (runtime/vlm.py, grid_vlm.py, crops_vlm.py)
Prepare = Callable[[Any, list[Path]], Any]
Vision = Callable[[Any, Any], Any]
VISION_STAGES: dict[str | None, tuple[Prepare, Vision]] = {
    None: (
        lambda b, files: b.pixels(files),
        lambda b, pixels: b.vision.run(["image_features"], {"pixel_values": pixels})[0],
    ),
    "grid": (lambda b, files: b.patches(files), lambda b, made: b.run_vision(*made)),
    "crops": (lambda b, files: b.crops(files), lambda b, made: b.run_vision(made)),
}
# bundle.json engines.main.backend whose greedy decoding runs on its own loop, which
# takes no sampler (the module docstring: EOS left out of the stop set, not masked)
DEVICE_LOOP = frozenset({"inductor"})


def build(recipe: str) -> tuple[Path, Path]:
    """The recipe's bundle folder and its fetched checkpoint folder, built through kiln
    in the default store (KILN_STORE) as `doit run` builds them."""
    from kiln.commands.build import ensure_bundle
    from kiln.commands.workspace import store

    p = ensure_bundle(recipe)
    found = store()
    bundle = Path(found.get(p.step("bundle").key).path)
    checkpoint = Path(found.get(p.step("fetch").key).path) / "checkpoint"
    return bundle, checkpoint


def host() -> str:
    name = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{name}, {os.cpu_count()} cores, load {load}"


def versions() -> str:
    names = ("onnxruntime", "torch", "transformers", "tokenizers", "numpy", "pillow")
    return ", ".join(f"{n} {version(n)}" for n in names) + f", python {platform.python_version()}"


def bundle_side(path: Path, threads: int, image: Path, question: str, n: int, eos: Any) -> Any:
    from _eos import NoEos

    import runtime
    from runtime.vlm import VisionBundle

    bundle = runtime.open(path, threads=threads, expect=VisionBundle)
    layout = bundle.meta["vision"].get("layout")
    if layout not in VISION_STAGES:
        known = list(VISION_STAGES)
        raise SystemExit(f"{path}: vision layout {layout!r}; this bench knows {known}")
    prepare, vision = VISION_STAGES[layout]
    device_loop = bundle.meta["engines"]["main"]["backend"] in DEVICE_LOOP

    def first_token() -> tuple[float, int]:
        start = time.perf_counter()
        ids, feats = bundle.ask(question, [image])
        out = bundle.generate_images([(ids, feats)], 1)
        return time.perf_counter() - start, out.tokens[0][0]

    def decode() -> tuple[float, float, list[int]]:
        sampler = None if device_loop else NoEos(eos=frozenset(eos) | frozenset(bundle.eos))
        start = time.perf_counter()
        ids, feats = bundle.ask(question, [image])
        if device_loop:  # runs to n tokens (EOS not masked: the module docstring); after
            bundle.eos = set()  # ask, whose chat template adds the end of turn back
        out = bundle.generate_images([(ids, feats)], n, sampler)
        seconds = time.perf_counter() - start
        if sampler is None:
            return seconds, out.seconds - out.first_token_seconds, out.tokens[0]
        return seconds, sampler.stamps[-1] - sampler.stamps[0], out.tokens[0]

    def stages() -> dict[str, float]:
        """Each stage of the first token alone: seconds."""
        t0 = time.perf_counter()
        made = prepare(bundle, [image])
        t1 = time.perf_counter()
        feats = vision(bundle, made)
        t2 = time.perf_counter()
        parts = [{"type": "image"}, {"type": "text", "text": question}]
        turn = [{"role": "user", "content": parts}]  # as ask() does
        ids = bundle.encode_chat(turn, images=feats)  # the pictures' grids, where they vary
        t4 = time.perf_counter()
        bundle.generate_images([(ids, feats)], 1)
        t5 = time.perf_counter()
        return {
            "image read + pixel values": t1 - t0,
            "vision program": t2 - t1,
            "chat template + image tokens": t4 - t2,
            "prefill (merge in graph) + choice": t5 - t4,
        }

    return bundle, first_token, decode, stages


def hf_side(checkpoint: Path, threads: int, image: Path, question: str, n: int) -> Any:
    import torch
    from transformers import GenerationConfig, LogitsProcessor
    from transformers.image_utils import load_image

    from builders.common.hf import IMAGE_TEXT, load_causal_lm, load_processor
    from builders.vlm.reference import messages

    torch.set_num_threads(threads)
    processor = load_processor(checkpoint)
    tokenizer = processor.tokenizer
    model = load_causal_lm(checkpoint, IMAGE_TEXT)
    anchor = json.loads((checkpoint / "config.json").read_text())["architectures"][0]
    if type(model).__name__ != anchor:
        raise SystemExit(f"{checkpoint}: {IMAGE_TEXT} made {type(model).__name__}, not {anchor}")
    eos = model.generation_config.eos_token_id
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
    end = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)  # the template's end of turn
    eos_ids += [end] if isinstance(end, int) and end not in eos_ids else []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]

    def config(new: int) -> Any:
        return GenerationConfig(
            do_sample=False,
            num_beams=1,
            max_new_tokens=new,
            min_new_tokens=new,
            eos_token_id=eos_ids,
            pad_token_id=pad,
        )

    one, many = config(1), config(n)

    class Stamp(LogitsProcessor):  # type: ignore[misc]
        def __init__(self) -> None:
            self.stamps: list[float] = []

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            self.stamps.append(time.perf_counter())
            return scores

    def inputs() -> Any:
        text = processor.apply_chat_template(messages(question), add_generation_prompt=True)
        return processor(images=[load_image(str(image))], text=text, return_tensors="pt")

    def first_token() -> tuple[float, int]:
        start = time.perf_counter()
        with torch.no_grad():
            encoded = inputs()
            out = model.generate(**encoded, generation_config=one)
        return time.perf_counter() - start, int(out[0, -1])

    def decode() -> tuple[float, float, list[int]]:
        stamp = Stamp()
        start = time.perf_counter()
        with torch.no_grad():
            encoded = inputs()
            out = model.generate(**encoded, generation_config=many, logits_processor=[stamp])
        seconds = time.perf_counter() - start
        new = out[0, encoded["input_ids"].shape[1] :].tolist()
        return seconds, stamp.stamps[-1] - stamp.stamps[0], new

    def stages() -> dict[str, float]:
        t0 = time.perf_counter()
        with torch.no_grad():
            encoded = inputs()
            t1 = time.perf_counter()
            model.generate(**encoded, generation_config=one)
        t2 = time.perf_counter()
        return {"image read + processor (template, pixels)": t1 - t0, "generate(1)": t2 - t1}

    return model, eos_ids, first_token, decode, stages


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", default="tiny-llava")
    parser.add_argument("--image", type=Path, default=IMAGE)
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    n = args.new_tokens

    path, checkpoint = build(args.recipe)
    model, eos, hf_first, hf_decode, hf_stages = hf_side(
        checkpoint, args.threads, args.image, args.question, n
    )
    bundle, b_first, b_decode, b_stages = bundle_side(
        path, args.threads, args.image, args.question, n, eos
    )
    names = ("bundle", "hf")
    first = {"bundle": b_first, "hf": hf_first}
    decode = {"bundle": b_decode, "hf": hf_decode}
    ttft: dict[str, list[float]] = {s: [] for s in names}
    call: dict[str, list[float]] = {s: [] for s in names}
    rate: dict[str, list[float]] = {s: [] for s in names}
    firsts: dict[str, set[int]] = {s: set() for s in names}
    tokens: dict[str, list[list[int]]] = {s: [] for s in names}
    for r in range(args.rounds + 1):  # round 0 warms up
        order = names if r % 2 else names[::-1]
        for side in order:
            seconds, token = first[side]()
            if r:
                ttft[side].append(seconds)
                firsts[side].add(token)
        for side in order:
            seconds, decoding, new = decode[side]()
            if r:
                call[side].append(seconds)
                rate[side].append((len(new) - 1) / decoding)
                tokens[side].append(new)
    # each side alone, its calls back to back (the other side's threads and caches
    # not in between): the first token, then its stages
    alone: dict[str, list[float]] = {s: [] for s in names}
    stage: dict[str, dict[str, list[float]]] = {"bundle": {}, "hf": {}}
    for side, run in (("bundle", b_stages), ("hf", hf_stages)):
        first[side]()
        alone[side] = [first[side]()[0] for _ in range(4 * args.rounds)]
        for _ in range(4 * args.rounds):
            for k, v in run().items():
                stage[side].setdefault(k, []).append(v)

    med = {k: {s: statistics.median(v[s]) for s in names} for k, v in
           (("ttft", ttft), ("call", call), ("rate", rate))}  # fmt: skip
    counts = {s: sorted({len(t) for t in tokens[s]}) for s in names}
    same_runs = all(a == b for a, b in zip(tokens["bundle"], tokens["hf"], strict=True))
    stable = all(t == tokens[s][0] for s in names for t in tokens[s])
    engine = bundle.meta["engines"]["main"]
    vision = bundle.meta["vision"]["engine"]
    prompt = bundle.ask(args.question, [args.image])[0]
    prompt_len, image_tokens = len(prompt), prompt.count(bundle.image_token)
    device_loop = "HF only (the bundle's device loop: EOS not a stop, not masked)"
    masked = device_loop if engine["backend"] in DEVICE_LOOP else "both sides"
    print(f"{args.recipe}: one image ({args.image.name}), question {args.question!r}, CPU")
    print(f"host: {host()}")
    print(f"versions: {versions()}")
    print(
        f"bundle: {type(bundle).__name__}, decoder {engine['backend']} "
        f"{engine.get('provider', engine.get('device', ''))}, vision {vision['backend']} "
        f"{vision['provider']}; HF: {type(model).__name__} fp32 eager; "
        f"{args.threads} threads each; {args.rounds} rounds (+1 warm-up), medians"
    )
    print(
        f"prompt: {prompt_len} tokens ({image_tokens} image tokens); "
        f"decode: {n} new tokens greedy, EOS masked on {masked}"
    )
    print()
    print(f"{'':34}{'bundle':>12}{'HF':>12}{'ratio':>10}")
    t = med["ttft"]
    print(
        f"{'time to first token (ms)':34}{t['bundle'] * 1e3:12.2f}{t['hf'] * 1e3:12.2f}"
        f"{t['bundle'] / t['hf']:9.3f}x  bundle/HF (target <= 1)"
    )
    c = med["call"]
    print(
        f"{f'{n} new tokens, whole call (ms)':34}{c['bundle'] * 1e3:12.2f}{c['hf'] * 1e3:12.2f}"
        f"{c['bundle'] / c['hf']:9.3f}x  bundle/HF"
    )
    d = med["rate"]
    print(
        f"{'decode tokens/s':34}{d['bundle']:12.0f}{d['hf']:12.0f}"
        f"{d['bundle'] / d['hf']:9.2f}x  bundle/HF (speed)"
    )
    print(
        f"{'new tokens generated':34}{'/'.join(map(str, counts['bundle'])):>12}"
        f"{'/'.join(map(str, counts['hf'])):>12}"
    )
    a = {s: statistics.median(alone[s]) for s in names}
    print(
        f"{'first token, each side alone (ms)':34}{a['bundle'] * 1e3:12.2f}{a['hf'] * 1e3:12.2f}"
        f"{a['bundle'] / a['hf']:9.3f}x  bundle/HF ({4 * args.rounds} calls back to back)"
    )
    spread = {s: (min(ttft[s]) * 1e3, max(ttft[s]) * 1e3) for s in names}
    print(
        f"time to first token range (ms): bundle {spread['bundle'][0]:.2f}-"
        f"{spread['bundle'][1]:.2f}, HF {spread['hf'][0]:.2f}-{spread['hf'][1]:.2f}"
    )
    print(
        f"first token: bundle {sorted(firsts['bundle'])}, HF {sorted(firsts['hf'])}: "
        f"{'identical' if firsts['bundle'] == firsts['hf'] else 'DIFFERENT'}"
    )
    print(
        f"greedy {n} tokens: {'identical' if same_runs else 'DIFFERENT'} in every round"
        f"{'' if stable else ' (a side varied between rounds)'}"
    )
    print()
    print("where the first token goes (each side alone, each stage timed alone, median ms):")
    for side in names:
        for k, v in stage[side].items():
            print(f"  {side:7}{k:44}{statistics.median(v) * 1e3:9.2f}")


if __name__ == "__main__":
    main()

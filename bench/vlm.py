"""A vision-language bundle against transformers on the CPU (or, for a GPU recipe, on
its CUDA device), same image and question, one run (issue 40).

    .venv/bin/python bench/vlm.py [--recipe tiny-llava] [--image FILE] [--question TEXT]
        [--new-tokens 64] [--rounds 5] [--threads 2] [--device auto|cpu|cuda]
        [--hf-dtype auto|fp32|bf16|fp16]
    e.g. on a GPU host: bench/vlm.py --recipe tiny-qwen3-vl-inductor-bf16-h200

The recipe's bundle is built through kiln as `doit run` builds it (ensure_bundle:
every step the bundle needs, in this process, in the default store, so a built bundle
is reused; no reference, validate or manifest). Any image-text-to-text recipe runs:
the ONNX ones (tiny-llava, tiny-gemma3-vlm, tiny-qwen2-vl, tiny-qwen2.5-vl, tiny-qwen3-vl,
tiny-idefics3, tiny-internvl) and the inductor ones (tiny-llava-inductor,
tiny-qwen2.5-vl-inductor, tiny-qwen3-vl-inductor, tiny-idefics3-inductor,
tiny-internvl-inductor), each opened by runtime.open as its
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
    same span, stamped by the runtime. Whether the tokens match HF's is printed (for
    the device loop, up to its first EOS: past it HF's masked choice differs by design).

The stages of the first token follow the bundle's vision layout (bundle.json
vision.layout, VISION_STAGES): one fixed picture (pixels, the vision program), "grid"
(patches and grids; Qwen2-VL, Qwen2.5-VL, Qwen3-VL) or "crops" (Idefics3, InternVL).

With --processes one (the default), each round runs both measurements on both sides in
this process, the sides' order alternating round by round (bundle first, then HF
first); one warm-up round is not counted. With --processes two, each side runs its
rounds in a fresh process of its own (this script, --side), HF's first, the other
side's process gone. On the idle host the two gave the inductor rows alike (LLaVA
0.90x and 0.91x; Idefics3 0.72x in one process, 1.76x in two:
bench/results/vlm_all_2026-12-06.txt); the 4-5x seen before came from a host loaded
by builds, where the bundle's prefill stalled in a process of its own too. Prints the
medians, the ratios (time to first token bundle/HF: <= 1 meets issue 40's target;
decode tokens/s bundle/HF: > 1 is the bundle faster) and whether the greedy tokens are
identical. Then each side alone, 4 x `--rounds` calls back to back (no idle gap and
no other side's work in between: the bundle's interleaved first token is slower mostly
for the gap before it, as one after a sleep is): the time to first token, and where it
goes (each stage timed alone, median).
Timings on a shared 2-core machine move run to run: compare the sides of one run.

On a GPU: `--device auto` (the default) reads the bundle's bundle.json: where its main
engine runs on CUDA (engines.main provider or device "cuda", or CUDAExecutionProvider;
e.g. tiny-llava-inductor-bf16-h200, tiny-qwen3-vl-inductor-bf16-h200, inductor on cuda
in bf16), the HF side runs on the same GPU, else both run on the CPU. `--hf-dtype auto`
loads HF in fp32 on the CPU and, on cuda, in the recipe's compute precision (bundle.json
precision.compute: bf16 for those recipes; bf16 where it names none), the model moved
with model.to(device, dtype) and the processor's outputs with BatchFeature.to(device,
dtype) (which casts only the floating tensors, the pixel values). The HF side's stamps
are synchronized on cuda (torch.cuda.synchronize() before each perf_counter that ends a
timed region, and in the decode stamp's logits processor before each stamp, which
generate's per-step stopping check syncs anyway), so they time the GPU's work, not the
host's enqueueing; the bundle's runtime stamps its own. `--device cuda` on a host
without CUDA stops with a one-line reason. `--threads` still sets the CPU threads (the
vision program's onnxruntime session on the CPU, the host side). The host line adds the
GPU's name.
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
from importlib.metadata import PackageNotFoundError, version
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
# --hf-dtype (and bundle.json precision.compute) -> the torch dtype's name
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def bundle_device(meta: dict[str, Any]) -> str:
    """The HF side's device for --device auto: "cuda" where the bundle's main engine runs
    on CUDA (bundle.json engines.main: an inductor engine's provider or device "cuda",
    an onnxruntime one's CUDAExecutionProvider), else "cpu"."""
    engine = meta["engines"]["main"]
    where = f"{engine.get('device', '')} {engine.get('provider', '')}".lower()
    return "cuda" if "cuda" in where else "cpu"


def hf_dtype(meta: dict[str, Any], device: str, asked: str) -> str:
    """--hf-dtype resolved: "auto" is fp32 on the CPU and, on cuda, the recipe's
    compute precision (bundle.json precision.compute; bf16 where it names none)."""
    if asked != "auto":
        return asked
    if device == "cpu":
        return "fp32"
    compute = (meta.get("precision") or {}).get("compute")
    return compute if compute in DTYPES else "bf16"


def check_cuda(device: str) -> None:
    """A one-line stop where CUDA is asked for and this host has none."""
    if device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("--device cuda: this host has no CUDA device (torch.cuda.is_available())")


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


def host(device: str = "cpu") -> str:
    name = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    gpu = ""
    if device == "cuda":
        import torch

        gpu = f", GPU {torch.cuda.get_device_name()}"
    return f"{name}, {os.cpu_count()} cores, load {load}{gpu}"


def versions() -> str:
    names = ("onnxruntime", "torch", "transformers", "tokenizers", "numpy", "pillow")
    found = []
    for n in names:
        try:
            found.append(f"{n} {version(n)}")
        except PackageNotFoundError:  # e.g. no onnxruntime on a GPU host
            found.append(f"{n} absent")
    return ", ".join(found) + f", python {platform.python_version()}"


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


def hf_side(
    checkpoint: Path,
    threads: int,
    image: Path,
    question: str,
    n: int,
    device: str = "cpu",
    dtype_name: str = "fp32",
) -> Any:
    import torch
    from transformers import GenerationConfig, LogitsProcessor
    from transformers.image_utils import load_image

    from builders.common.hf import IMAGE_TEXT, load_causal_lm, load_processor
    from builders.vlm.reference import messages

    torch.set_num_threads(threads)
    processor = load_processor(checkpoint)
    tokenizer = processor.tokenizer
    dtype = getattr(torch, DTYPES[dtype_name])
    model = load_causal_lm(checkpoint, IMAGE_TEXT).to(device=device, dtype=dtype)
    cuda = device == "cuda"

    def now() -> float:
        """perf_counter, after the GPU's queued work is done (on cuda)."""
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

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
            self.stamps.append(now())
            return scores

    def inputs() -> Any:
        text = processor.apply_chat_template(messages(question), add_generation_prompt=True)
        encoded = processor(images=[load_image(str(image))], text=text, return_tensors="pt")
        return encoded.to(device=device, dtype=dtype)  # casts only the floating tensors

    def first_token() -> tuple[float, int]:
        start = time.perf_counter()
        with torch.no_grad():
            encoded = inputs()
            out = model.generate(**encoded, generation_config=one)
            token = int(out[0, -1])  # syncs
        return time.perf_counter() - start, token

    def decode() -> tuple[float, float, list[int]]:
        stamp = Stamp()
        start = time.perf_counter()
        with torch.no_grad():
            encoded = inputs()
            out = model.generate(**encoded, generation_config=many, logits_processor=[stamp])
        seconds = now() - start
        new = out[0, encoded["input_ids"].shape[1] :].tolist()
        return seconds, stamp.stamps[-1] - stamp.stamps[0], new

    def stages() -> dict[str, float]:
        t0 = time.perf_counter()
        with torch.no_grad():
            encoded = inputs()
            t1 = now()
            model.generate(**encoded, generation_config=one)
        t2 = now()
        return {"image read + processor (template, pixels)": t1 - t0, "generate(1)": t2 - t1}

    return model, eos_ids, first_token, decode, stages


def alone(first: Any, stages: Any, rounds: int) -> dict[str, Any]:
    """4 x `rounds` first tokens back to back (after one more), then as many stage
    breakdowns: {"alone": seconds, "stages": {stage: seconds}}."""
    first()
    out: dict[str, Any] = {"alone": [first()[0] for _ in range(4 * rounds)], "stages": {}}
    for _ in range(4 * rounds):
        for k, v in stages().items():
            out["stages"].setdefault(k, []).append(v)
    return out


def interleaved(sides: dict[str, tuple[Any, Any, Any]], rounds: int) -> dict[str, Any]:
    """The sides (name -> first token, decode, stages) in this process, round by round,
    their order alternating (round 0 warms up), then each side `alone`: one side is
    measured with no other's work between its calls."""
    names = tuple(sides)
    out: dict[str, Any] = {
        s: {k: [] for k in ("ttft", "call", "rate", "firsts", "tokens")} for s in names
    }
    for r in range(rounds + 1):
        order = names if r % 2 else names[::-1]
        for side in order:
            seconds, token = sides[side][0]()
            if r:
                out[side]["ttft"].append(seconds)
                out[side]["firsts"].append(token)
        for side in order:
            seconds, decoding, new = sides[side][1]()
            if r:
                out[side]["call"].append(seconds)
                out[side]["rate"].append((len(new) - 1) / decoding)
                out[side]["tokens"].append(new)
    for side in names:
        out[side] |= alone(sides[side][0], sides[side][2], rounds)
    return out


def describe_bundle(bundle: Any, args: argparse.Namespace) -> dict[str, Any]:
    engine = bundle.meta["engines"]["main"]
    vision = bundle.meta["vision"]["engine"]
    prompt = bundle.ask(args.question, [args.image])[0]
    return {
        "class": type(bundle).__name__,
        "backend": engine["backend"],
        "where": engine.get("provider", engine.get("device", "")),
        "vision": f"{vision['backend']} {vision['provider']}",
        "prompt": len(prompt),
        "image_tokens": prompt.count(bundle.image_token),
    }


def child(side: str, args: argparse.Namespace, eos: list[int]) -> dict[str, Any]:
    """`side` measured by this script in a fresh process of its own (--side); its
    result, read back from the JSON file it writes."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / f"{side}.json"
        command = [sys.executable, __file__, "--side", side, "--result", str(result)]
        command += ["--recipe", args.recipe, "--image", str(args.image)]
        command += ["--question", args.question, "--new-tokens", str(args.new_tokens)]
        command += ["--rounds", str(args.rounds), "--threads", str(args.threads)]
        command += ["--eos", ",".join(map(str, eos))]
        command += ["--device", args.device, "--hf-dtype", args.hf_dtype]
        done = subprocess.run(command, check=False)
        if done.returncode:
            raise SystemExit(f"the {side} side's process exited {done.returncode}")
        found: dict[str, Any] = json.loads(result.read_text())
        return found


def one_side(args: argparse.Namespace) -> None:
    """--side: one side alone in this process; its measurements into --result."""
    check_cuda(args.device)
    path, checkpoint = build(args.recipe)
    resolve(args, path)
    n = args.new_tokens
    if args.side == "hf":
        model, eos, first, decode, stages = hf_side(
            checkpoint, args.threads, args.image, args.question, n, args.device, args.hf_dtype
        )
        about: dict[str, Any] = {"class": type(model).__name__, "eos": eos}
    else:
        eos = [int(x) for x in args.eos.split(",") if x]
        bundle, first, decode, stages = bundle_side(
            path, args.threads, args.image, args.question, n, eos
        )
        about = describe_bundle(bundle, args)
    measured = interleaved({args.side: (first, decode, stages)}, args.rounds)[args.side]
    args.result.write_text(json.dumps({"about": about, **measured}))


def resolve(args: argparse.Namespace, path: Path) -> None:
    """--device and --hf-dtype "auto" resolved from the bundle's bundle.json, in args."""
    meta = json.loads((path / "bundle.json").read_text())
    if args.device == "auto":
        args.device = bundle_device(meta)
        check_cuda(args.device)
    args.hf_dtype = hf_dtype(meta, args.device, args.hf_dtype)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipe", default="tiny-llava")
    parser.add_argument("--image", type=Path, default=IMAGE)
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--processes",
        choices=("one", "two"),
        default="one",
        help="one: both sides in this process, rounds interleaved; two: each side in a "
        "fresh process of its own, HF's first",
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="where the HF side runs; auto: cuda where the bundle's engine runs on cuda",
    )
    parser.add_argument(
        "--hf-dtype",
        choices=("auto", *DTYPES),
        default="auto",
        help="the HF side's dtype; auto: fp32 on cpu, the recipe's compute precision on cuda",
    )
    parser.add_argument("--side", choices=("bundle", "hf"), help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--eos", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        return one_side(args)
    n = args.new_tokens

    check_cuda(args.device)
    path, checkpoint = build(args.recipe)
    resolve(args, path)
    processes = args.processes
    if processes == "two":
        got = {"hf": child("hf", args, [])}
        got["bundle"] = child("bundle", args, got["hf"]["about"]["eos"])
        about, model_class = got["bundle"]["about"], got["hf"]["about"]["class"]
    else:
        model, eos, hf_first, hf_decode, hf_stages = hf_side(
            checkpoint, args.threads, args.image, args.question, n, args.device, args.hf_dtype
        )
        bundle, b_first, b_decode, b_stages = bundle_side(
            path, args.threads, args.image, args.question, n, eos
        )
        sides = {"bundle": (b_first, b_decode, b_stages), "hf": (hf_first, hf_decode, hf_stages)}
        got = interleaved(sides, args.rounds)
        about, model_class = describe_bundle(bundle, args), type(model).__name__
    stops = got["hf"]["about"]["eos"] if processes == "two" else eos
    report(args, got, about, model_class, processes, set(stops))


def report(
    args: argparse.Namespace,
    got: dict[str, Any],
    about: dict[str, Any],
    model_class: str,
    processes: str,
    stops: set[int],
) -> None:
    names = ("bundle", "hf")
    n = args.new_tokens
    med = {k: {s: statistics.median(got[s][k]) for s in names} for k in ("ttft", "call", "rate")}
    tokens = {s: got[s]["tokens"] for s in names}
    firsts = {s: set(got[s]["firsts"]) for s in names}
    counts = {s: sorted({len(t) for t in tokens[s]}) for s in names}
    # HF's EOS is masked; the device loop's is not a stop but is chosen where it wins,
    # so there the two agree up to the bundle's first EOS and part there by design
    ends = stops if about["backend"] in DEVICE_LOOP else set()
    cuts = [next((i for i, x in enumerate(t) if x in ends), len(t)) for t in tokens["bundle"]]
    pairs = zip(tokens["bundle"], tokens["hf"], cuts, strict=True)
    same_runs = all(a[:k] == b[:k] and (k < len(a) or a == b) for a, b, k in pairs)
    upto = f" (up to the bundle's first EOS, token {min(cuts)})" if min(cuts) < n else ""
    stable = all(t == tokens[s][0] for s in names for t in tokens[s])
    device_loop = "HF only (the bundle's device loop: EOS not a stop, not masked)"
    masked = device_loop if about["backend"] in DEVICE_LOOP else "both sides"
    how = (
        "each side in a fresh process of its own, HF's first"
        if processes == "two"
        else "both sides in one process, rounds interleaved"
    )
    print(
        f"{args.recipe}: one image ({args.image.name}), question {args.question!r}, "
        f"{'CUDA' if args.device == 'cuda' else 'CPU'}"
    )
    print(f"host: {host(args.device)}")
    print(f"versions: {versions()}")
    print(
        f"bundle: {about['class']}, decoder {about['backend']} {about['where']}, vision "
        f"{about['vision']}; HF: {model_class} {args.hf_dtype} eager on "
        f"{args.device}; {args.threads} threads each; "
        f"{args.rounds} rounds (+1 warm-up), medians; {how}"
    )
    print(
        f"prompt: {about['prompt']} tokens ({about['image_tokens']} image tokens); "
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
    a = {s: statistics.median(got[s]["alone"]) for s in names}
    print(
        f"{'first token, each side alone (ms)':34}{a['bundle'] * 1e3:12.2f}{a['hf'] * 1e3:12.2f}"
        f"{a['bundle'] / a['hf']:9.3f}x  bundle/HF ({4 * args.rounds} calls back to back)"
    )
    spread = {s: (min(got[s]["ttft"]) * 1e3, max(got[s]["ttft"]) * 1e3) for s in names}
    print(
        f"time to first token range (ms): bundle {spread['bundle'][0]:.2f}-"
        f"{spread['bundle'][1]:.2f}, HF {spread['hf'][0]:.2f}-{spread['hf'][1]:.2f}"
    )
    print(
        f"first token: bundle {sorted(firsts['bundle'])}, HF {sorted(firsts['hf'])}: "
        f"{'identical' if firsts['bundle'] == firsts['hf'] else 'DIFFERENT'}"
    )
    print(
        f"greedy {n} tokens: {'identical' if same_runs else 'DIFFERENT'} in every round{upto}"
        f"{'' if stable else ' (a side varied between rounds)'}"
    )
    print()
    print("where the first token goes (each side alone, each stage timed alone, median ms):")
    for side in names:
        for k, v in got[side]["stages"].items():
            print(f"  {side:7}{k:44}{statistics.median(v) * 1e3:9.2f}")


if __name__ == "__main__":
    main()

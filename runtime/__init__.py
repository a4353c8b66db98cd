"""Runs built bundles; `open(path)` is the one loader. Imports nothing from kiln,
builders or tasks: a bundle runs on a machine that never built it.

  __init__.py     open(path): reads bundle.json, returns the runner its task and variant call for
  format.py       the bundle format: BUNDLE_SCHEMA, read_meta(), BundleError
  causal_lm.py    Bundle: causal-LM prefill and decode with a KV cache (builders/causal_lm/)
  chat.py         a conversation through the checkpoint's chat template; the prompt policy
  speculative.py  SpeculativeBundle: a drafter proposes, the target verifies (lossless rule)
  drafters.py     the drafters a bundle carries: draft model, eagle3/mtp chain, dflash/dspark block
  ngram.py        prompt-lookup drafting, model-free
  sampling.py     Sampler (greedy, temperature / top-k / top-p) and draw()
  processors.py   logits post-processors: the (token_ids, logits) hook, Decoding's options
  guided.py       guided decoding: JSON schema / regex / Lark masks from llguidance
  backends.py     engine backends behind one run(): onnxruntime, aoti, tensorrt
  pages.py        an onnxruntime engine's weights moved onto huge pages (MADV_COLLAPSE)
  inductor_lm.py  InductorBundle: KV cache on the device, greedy decoding there (ids only back);
                  InductorSpeculativeBundle: n-gram, DFlash, DSpark drafts verified over that cache
  inductor_drafter.py InductorBlock: the DFlash/DSpark drafter's passes on the engine's programs
  inductor.py     InductorEngine: FX graphs, carried kernels, static KV cache, CUDA graphs
  graphs.py       an engine's programs as plain FX graphs (JSON + safetensors), read back as built
  inductor_vlm.py InductorVisionBundle: VisionBundle whose decoder is the inductor engine
                  (InductorGridVisionBundle, InductorCropsVisionBundle: the grid and crops
                  bundles' pictures and positions)
  sharded.py      a tensor-parallel bundle: N rank processes over their weight shards, in step
  kernels.py      an inductor engine's compiled kernels, keyed by host, put in Inductor's cache
  encoder.py      EncoderBundle: loading and right padding shared by classify and embed
  classify.py     Classifier: class probabilities per text (builders/classify/)
  embed.py        Embedder: one pooled vector per text (builders/embed/)
  seq2seq.py      Seq2Seq and Speech: encode once, decode greedily or by beams (builders/seq2seq/)
  beams.py        beam search over one input's decoder rows, by transformers' rules
  audio.py        WAV reading and Whisper's log-mel features, in numpy
  images.py       image files read safely; CLIP, SigLIP, Qwen2-VL, Idefics3, InternVL pixels
  vlm.py          VisionBundle: images -> vision program -> features merged in the decoder
  grid_vlm.py     GridVisionBundle: pictures of their own grids, M-RoPE positions (Qwen2.5-VL)
  mrope.py        those grids' 3-D rotary positions and vision index inputs, in numpy
  crops_vlm.py    CropsVisionBundle: pictures cut into crops, each its own sequence (Idefics3,
                  InternVL)

Modules import heavy libraries (onnxruntime, tokenizers, torch) inside functions; no
module imports one that imports it back (tests/unit/test_runtime_open.py checks both
this and the dispatch).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, overload

from runtime.format import BUNDLE_SCHEMA, BundleError, read_meta, task_of
from runtime.sampling import Sampler

if TYPE_CHECKING:
    from runtime.causal_lm import Bundle, Generation, Row
    from runtime.classify import Classifier
    from runtime.embed import Embedder
    from runtime.guided import Grammar
    from runtime.processors import Decoding
    from runtime.seq2seq import Seq2Seq, Speech
    from runtime.speculative import SpeculativeBundle
    from runtime.vlm import VisionBundle

Runner: TypeAlias = "Bundle | Classifier | Embedder | Seq2Seq"
R = TypeVar("R", bound=Runner)

# task -> variant -> "module:Class" of its runner. The runner's module is imported when a
# bundle needs it, so this package imports no runner: a step's key covers the static
# import closure of its builder (kiln.plan.toolchain), and a builder that opens one
# family's bundles imports that family's runner itself (a test checks that every runner
# named here is in the closure of its family's validate step). Other tasks build the
# ordinary variant only (builders/*/bundle.py).
_SPECULATIVE = ("draft", "ngram", "mtp", "eagle3", "dflash", "dspark")
RUNNERS: dict[str, dict[str, str]] = {
    "text-generation": {
        "ordinary": "runtime.causal_lm:Bundle",
        "lora": "runtime.causal_lm:Bundle",  # the adapter is merged into the graph at export
        **dict.fromkeys(_SPECULATIVE, "runtime.speculative:SpeculativeBundle"),
    },
    "text-classification": {"ordinary": "runtime.classify:Classifier"},
    "feature-extraction": {"ordinary": "runtime.embed:Embedder"},
    "text2text-generation": {"ordinary": "runtime.seq2seq:Seq2Seq"},
    "automatic-speech-recognition": {"ordinary": "runtime.seq2seq:Speech"},
    "image-text-to-text": {"ordinary": "runtime.vlm:VisionBundle"},
}
# An engine backend whose runner replaces its variant's: the inductor engine keeps the
# KV cache on the device, so its bundles run through their own forward.
BACKEND_RUNNERS: dict[tuple[str, str, str], str] = {
    ("text-generation", "ordinary", "inductor"): "runtime.inductor_lm:InductorBundle",
    **{
        ("text-generation", v, "inductor"): "runtime.inductor_lm:InductorSpeculativeBundle"
        for v in ("ngram", "dflash", "dspark")
    },
    ("image-text-to-text", "ordinary", "inductor"): "runtime.inductor_vlm:InductorVisionBundle",
}
# A vision program whose pictures are each their own grid, before an M-RoPE decoder
# (bundle.json vision.layout; Qwen2.5-VL): its runner computes the grids' positions.
VISION_RUNNERS: dict[str, str] = {
    "grid": "runtime.grid_vlm:GridVisionBundle",
    "crops": "runtime.crops_vlm:CropsVisionBundle",  # pictures cut into crops (Idefics3, InternVL)
}
# A layout's runner on an engine backend whose runner replaces the variant's.
VISION_BACKEND_RUNNERS: dict[tuple[str, str], str] = {
    ("grid", "inductor"): "runtime.inductor_vlm:InductorGridVisionBundle",
    ("crops", "inductor"): "runtime.inductor_vlm:InductorCropsVisionBundle",
}
_PUBLIC = {
    "Bundle": "runtime.causal_lm",
    "Generation": "runtime.causal_lm",
    "Row": "runtime.causal_lm",
    "Classifier": "runtime.classify",
    "Embedder": "runtime.embed",
    "Seq2Seq": "runtime.seq2seq",
    "Speech": "runtime.seq2seq",
    "SpeculativeBundle": "runtime.speculative",
    "VisionBundle": "runtime.vlm",
    "Decoding": "runtime.processors",
    "Grammar": "runtime.guided",
}


def resolve(name: str) -> type[Any]:
    """The class a RUNNERS entry ("module:Class") names, its module imported now."""
    module, _, cls = name.partition(":")
    found: type[Any] = getattr(importlib.import_module(module), cls)
    return found


def __getattr__(name: str) -> Any:
    """runtime.Bundle, runtime.Classifier, ...: each imported on first use."""
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'runtime' has no attribute {name!r}")


@overload
def open(path: Path | str, threads: int | None = None) -> Runner: ...
@overload
def open(path: Path | str, threads: int | None = None, *, expect: type[R]) -> R: ...
def open(
    path: Path | str, threads: int | None = None, *, expect: type[Any] | None = None
) -> Runner:
    """The runner of the bundle at `path`, chosen by bundle.json's task and variant:
    Bundle, SpeculativeBundle, Classifier, Embedder, Seq2Seq or Speech. A bundle this
    runtime cannot run (no bundle.json, a newer schema, an unknown task or variant)
    raises BundleError. `expect` is for a caller that serves one family (a validate
    step): a bundle whose runner is not an `expect` is refused, and the result is typed
    as one."""
    path = Path(path)
    meta = read_meta(path)
    task = task_of(meta)
    variants = RUNNERS.get(task)
    if variants is None:
        raise BundleError(
            f"{path}: bundle.json names task {task!r}; this runtime runs {', '.join(RUNNERS)}"
        )
    variant = meta.get("variant")
    named = variants.get(variant) if isinstance(variant, str) else None
    if named is None:
        raise BundleError(
            f"{path}: bundle.json names variant {variant!r}; a {task} bundle runs as "
            f"{', '.join(variants)}"
        )
    engine = (
        meta.get("engines", {}).get("main", {}) if isinstance(meta.get("engines"), dict) else {}
    )
    backend = engine.get("backend") if isinstance(engine, dict) else None
    runner = resolve(BACKEND_RUNNERS.get((task, str(variant), str(backend)), named))
    vision = meta.get("vision")
    if isinstance(vision, dict) and vision.get("layout") in VISION_RUNNERS:
        layout = vision["layout"]
        runner = resolve(VISION_BACKEND_RUNNERS.get((layout, str(backend)), VISION_RUNNERS[layout]))
    if expect is not None and not issubclass(runner, expect):
        raise BundleError(
            f"{path} is a {task} bundle, run by {runner.__name__}, not by {expect.__name__}"
        )
    if isinstance(engine, dict) and int(engine.get("tensor_parallel", 1)) > 1:
        from runtime.sharded import in_rank, open_sharded

        if not in_rank():  # the controller of N ranks, each of which opens it below
            return open_sharded(path, threads, runner, meta)
    return runner(path, threads)


__all__ = [
    "BACKEND_RUNNERS",
    "BUNDLE_SCHEMA",
    "RUNNERS",
    "Bundle",
    "BundleError",
    "Classifier",
    "Decoding",
    "Embedder",
    "Generation",
    "Grammar",
    "Row",
    "Runner",
    "Sampler",
    "Seq2Seq",
    "SpeculativeBundle",
    "Speech",
    "VisionBundle",
    "open",
    "resolve",
]

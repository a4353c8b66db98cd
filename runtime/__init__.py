"""Runs built bundles; `open(path)` is the one loader. Imports nothing from kiln,
builders or tasks: a bundle runs on a machine that never built it.

  __init__.py     open(path): reads bundle.json, returns the runner its task and variant call for
  format.py       the bundle format: BUNDLE_SCHEMA, read_meta(), BundleError
  causal_lm.py    Bundle: causal-LM prefill and decode with a KV cache (builders/causal_lm/)
  speculative.py  SpeculativeBundle: a drafter proposes, the target verifies (lossless rule)
  drafters.py     the drafters a bundle carries: draft model, eagle3/mtp chain, dflash/dspark block
  ngram.py        prompt-lookup drafting, model-free
  sampling.py     Sampler (greedy, temperature / top-k / top-p) and draw()
  backends.py     engine backends behind one run(): onnxruntime, aoti, tensorrt
  encoder.py      EncoderBundle: loading and right padding shared by classify and embed
  classify.py     Classifier: class probabilities per text (builders/classify/)
  embed.py        Embedder: one pooled vector per text (builders/embed/)
  seq2seq.py      Seq2Seq and Speech: encode once, decode greedily (builders/seq2seq/)
  audio.py        WAV reading and Whisper's log-mel features, in numpy

Modules import heavy libraries (onnxruntime, tokenizers, torch) inside functions; no
module imports one that imports it back (tests/unit/test_runtime_open.py checks both
this and the dispatch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar, overload

from runtime.causal_lm import TASK as TEXT_GENERATION
from runtime.causal_lm import Bundle, Generation
from runtime.classify import TASK as TEXT_CLASSIFICATION
from runtime.classify import Classifier
from runtime.embed import TASK as FEATURE_EXTRACTION
from runtime.embed import Embedder
from runtime.format import BUNDLE_SCHEMA, BundleError, read_meta, task_of
from runtime.sampling import Sampler
from runtime.seq2seq import SPEECH, Seq2Seq, Speech
from runtime.seq2seq import TASK as TEXT2TEXT
from runtime.speculative import SPECULATIVE, SpeculativeBundle

Runner = Bundle | Classifier | Embedder | Seq2Seq
R = TypeVar("R", bound=Runner)

# task -> variant -> runner. Other tasks build the ordinary variant only (builders/*/bundle.py).
RUNNERS: dict[str, dict[str, type[Runner]]] = {
    TEXT_GENERATION: {
        "ordinary": Bundle,
        "lora": Bundle,  # the adapter is merged into the graph at export
        **dict.fromkeys(SPECULATIVE, SpeculativeBundle),
    },
    TEXT_CLASSIFICATION: {"ordinary": Classifier},
    FEATURE_EXTRACTION: {"ordinary": Embedder},
    TEXT2TEXT: {"ordinary": Seq2Seq},
    SPEECH: {"ordinary": Speech},
}


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
    runner = variants.get(variant) if isinstance(variant, str) else None
    if runner is None:
        raise BundleError(
            f"{path}: bundle.json names variant {variant!r}; a {task} bundle runs as "
            f"{', '.join(variants)}"
        )
    if expect is not None and not issubclass(runner, expect):
        raise BundleError(
            f"{path} is a {task} bundle, run by {runner.__name__}, not by {expect.__name__}"
        )
    return runner(path, threads)


__all__ = [
    "BUNDLE_SCHEMA",
    "RUNNERS",
    "Bundle",
    "BundleError",
    "Classifier",
    "Embedder",
    "Generation",
    "Runner",
    "Sampler",
    "Seq2Seq",
    "SpeculativeBundle",
    "Speech",
    "open",
]

"""What a build process imports before its first step, for doit's `-n` workers.

The process that forks the workers imports these once (kiln.store.execute.preload,
when there is more than one worker and a step of these kinds to build), so the forked
workers share them copy-on-write instead of each importing them again on its own
core. No builder imports this module, so it is in no step's code digest.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable

# What a process imports before its first step that loads a model, whatever the step:
# torch and transformers' model machinery (`import transformers` is lazy; what every
# architecture's modeling module imports loads at the first from_pretrained), and
# rich for the step's progress. About 7 s of CPU on the 2-core CI host, nearly all
# single-threaded Python (torch 2.7, transformers 1.2, its Auto classes 0.8,
# modeling_utils 3.8, which pulls torch.distributed.tensor, torch._dynamo and
# scipy.optimize); a step itself then takes about a second.
#
# Only what steps of several kinds share: what one kind alone imports (the tokenizer
# classes, torch.onnx and onnxscript, onnxruntime: a second or two in all) stays with
# that kind's first step, so the workers import those parts at once, each on its own
# core, which on an idle host ends sooner than importing them all here first. So do
# one architecture's modules (modeling_llama: a tenth of a second) and first-call
# costs that only running torch would pay (the exporter's first trace).
_MODEL = (
    "torch",
    "transformers.modeling_utils",
    "transformers.masking_utils",
    "transformers.modeling_layers",
    "transformers.models.auto.modeling_auto",
    "rich.progress",
)
PRELOAD: dict[str, tuple[str, ...]] = {
    kind: _MODEL for kind in ("import", "reference", "quantize", "export", "drafter")
}


def preload(kinds: Iterable[str]) -> list[str]:
    """Import, in this process, what steps of `kinds` import first (PRELOAD); returns
    the modules imported here (kiln.store.execute.preload calls it by name).

    For the process that forks doit's `-n` workers, before it forks them: each worker
    then starts with the libraries in memory (shared, copy-on-write) instead of
    importing them again. The import cannot be split across cores, so without this
    every worker spends the same seconds on it before its first step: N workers on
    fewer than N cores queue for them (`-n 4` on 2 cores: twice the wait), and on a
    shared host they take another ~8 s of CPU each from everything else. Only
    imports: no library runs a parallel region here, so the forked workers start
    their thread pools afresh (share_cores sized them before this). A module that
    is not installed is skipped: the step that needs it reports that itself."""
    wanted = set(kinds)
    done = []
    for kind, modules in PRELOAD.items():
        if kind not in wanted:
            continue
        for name in modules:
            if name in sys.modules:
                continue
            try:
                importlib.import_module(name)
            except Exception:  # not installed, or broken: the step says so, with its name
                continue
            done.append(name)
    return done

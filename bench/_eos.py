"""EOS masked the way HF's `min_new_tokens` masks it, for kiln's runtime.

HF's `min_new_tokens` sets the EOS logits to -inf until that many tokens exist, so
greedy decoding takes the best token that is not EOS. Removing EOS from the bundle's
stop set (`bundle.eos = set()`) only keeps the loop going: on an instruct model, where
EOS is often the argmax, the bundle then emits EOS and continues after it, and its
tokens are no longer HF's. `NoEos` is a `runtime.Sampler` (greedy unless told
otherwise) that masks the EOS ids first, so the bundle's own generate loop runs with
HF's semantics and never sees an EOS to stop at. It masks the logits it is handed in
place: in the generate loop they are the step's own buffer, which the next step
writes over (a copy cost ~45 us a token, which onnxruntime-genai's C++ loop does not
pay).

It also stamps each call: the first stamp is when the prefill's logits arrived
(time to first token, less one argmax), the rest one per decoded token.

Imported by bench/decode_vs_hf.py and bench/chat_peers.py (run as scripts, so this
folder is on sys.path), and by bench/probes/step_profile.py (as bench._eos) and
bench/probes/decode_ab.py's child processes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from runtime.sampling import Sampler


@dataclass
class NoEos(Sampler):
    eos: frozenset[int] = frozenset()
    stamps: list[float] = field(default_factory=list, repr=False)

    def __call__(self, logits: np.ndarray) -> np.ndarray:
        self.stamps.append(time.perf_counter())
        # in place, as HF's and llama-cpp-python's processors mask theirs; one id at a
        # time: right after a decode step Python's caches are cold, and a fancy-indexed
        # store then costs ~45 us against ~11 for these
        for token in self.eos:
            logits[:, token] = -np.inf
        return super().__call__(logits)

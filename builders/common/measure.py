"""What every validate step does before it compares: read the reference, load the
bundle, run it in batches of the bundle's max_batch_size, and time it.

    m = measure.start(request, load)        # reference.json, the bundle
    ids, agree = m.tokenize(prompts)        # tokenizer_match_rate
    rows, per_s = m.rows(ids, bundle.logits)                    # encoders: inputs/s
    tokens, per_s = m.generate(ids, "greedy decode", generate)  # generators: tokens/s
    writer.evidence(metrics, outputs, m.backend("main"))

Encoders are timed by the wall clock around all batches; generators by the
runtime's own timing of each batch (Generation.seconds), which leaves out what
validate does between batches.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from kiln.store.api import Request

T = TypeVar("T")
R = TypeVar("R")


class Measurement:
    """One validate step's reference (`folder`, `reference`) and bundle."""

    def __init__(self, request: Request, bundle: Any) -> None:
        self.request = request
        self.folder: Path = request.inputs["reference"]
        self.reference: dict[str, Any] = json.loads((self.folder / "reference.json").read_text())
        self.bundle = bundle

    def arrays(self, name: str) -> Any:
        """One of the reference's .npz files (logits, embeddings, features, text scores)."""
        import numpy as np

        return np.load(self.folder / name)

    def tokenize(self, prompts: list[str]) -> tuple[list[list[int]], float]:
        """The bundle's token ids of each prompt, and the fraction of prompts it tokenizes
        exactly as the reference did (tokenizer_match_rate)."""
        return self.agreement([self.bundle.encode(p) for p in prompts])

    def agreement(self, ids: list[list[int]]) -> tuple[list[list[int]], float]:
        """`ids`, and the fraction of them equal to the reference's prompt ids."""
        records = self.reference["records"]
        agree = sum(a == r["prompt_ids"] for a, r in zip(ids, records, strict=True))
        return ids, agree / len(ids)

    def batched(
        self, items: Sequence[T], what: str, run: Callable[[list[T]], R]
    ) -> tuple[list[R], float]:
        """`run` over `items` in batches of the bundle's max_batch_size, in order, with
        progress; each batch's result and the wall-clock seconds of all of them."""
        size = self.bundle.max_batch_size
        batches = [list(items[i : i + size]) for i in range(0, len(items), size)]
        started = time.perf_counter()
        done = [run(b) for b in self.request.progress(batches, len(batches), what)]
        return done, time.perf_counter() - started

    def rows(
        self, ids: list[list[int]], run: Callable[[list[list[int]]], Any]
    ) -> tuple[Any, float]:
        """An encoder's `run` (rows per text) over `ids`: the rows, concatenated, and
        texts per second."""
        import numpy as np

        done, seconds = self.batched(ids, self.bundle.TASK, run)
        return np.concatenate(done), (len(ids) / seconds if seconds else 0.0)

    def generate(
        self, inputs: Sequence[Any], what: str, run: Callable[[list[Any]], Any]
    ) -> tuple[list[list[int]], float]:
        """A generator's `run` (a Generation per batch) over `inputs`: the new tokens of
        each input, and decode tokens per second by the runtime's own timing."""
        done, _ = self.batched(inputs, what, run)
        tokens = [t for out in done for t in out.tokens]
        seconds = sum(out.seconds for out in done)
        new = sum(len(t) for t in tokens)
        return tokens, (new / seconds if seconds else 0.0)

    def backend(self, engine: str) -> dict[str, Any]:
        """The evidence's backend: what built the bundle's `engine` and where it runs."""
        meta = self.bundle.meta["engines"][engine]
        return {
            "name": meta["backend"],
            "version": meta["backend_version"],
            "device": meta["provider"],
        }


def start(request: Request, load: Callable[[Path], Any]) -> Measurement:
    """The reference of `request` and its bundle, opened with the runtime's `load`."""
    return Measurement(request, load(request.inputs["bundle"]))

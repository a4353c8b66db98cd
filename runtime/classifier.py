"""Load a text-classification bundle and classify: class probabilities per text.

Like runtime/bundle.py it needs onnxruntime, numpy and tokenizers only. A batch is
right-padded (builders/classify says why) and the padding masked out, so a row's
probabilities are what it gets alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from runtime.bundle import BUNDLE_SCHEMA, BundleError

TASK = "text-classification"


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax, shifted by the row maximum so exp never overflows."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    out: np.ndarray = e / e.sum(axis=-1, keepdims=True)
    return out


class Classifier:
    def __init__(self, path: Path, threads: int | None = None) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.path = Path(path)
        meta_path = self.path / "bundle.json"
        if not meta_path.is_file():
            raise BundleError(f"{self.path} is not a bundle: bundle.json is missing")
        self.meta: dict[str, Any] = json.loads(meta_path.read_text())
        if self.meta.get("schema_version") != BUNDLE_SCHEMA:
            raise BundleError(f"bundle schema {self.meta.get('schema_version')} is not supported")
        if self.meta.get("task") != TASK:
            raise BundleError(f"{self.path} is a {self.meta.get('task')} bundle, not {TASK}")
        engine = self.meta["engines"]["main"]
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # done at build
        so.intra_op_num_threads = threads or min(4, os.cpu_count() or 1)
        self.session = ort.InferenceSession(
            str(self.path / engine["file"]), so, providers=[engine["provider"]]
        )
        self.tokenizer = Tokenizer.from_file(str(self.path / self.meta["tokenizer"]["file"]))
        self.pad = int(self.meta["tokenizer"]["pad"])
        self.input_names = [v["name"] for v in self.meta["io"]["inputs"]]
        self.labels: list[str] = list(self.meta["labels"])
        self.max_batch_size: int = self.meta["limits"]["max_batch_size"]
        self.max_seq_len: int = self.meta["limits"]["max_seq_len"]

    def encode(self, text: str) -> list[int]:
        """The tokenizer's own special tokens ([CLS]/[SEP] where it has them), as
        transformers' tokenizer adds them by default."""
        return list(self.tokenizer.encode(text, add_special_tokens=True).ids)

    def logits(self, batch: list[list[int]]) -> np.ndarray:
        """Logits [len(batch), num_labels] for token-id inputs, right-padded into one batch."""
        if not batch or len(batch) > self.max_batch_size:
            raise BundleError(
                f"batch of {len(batch)} inputs; this bundle serves 1 to {self.max_batch_size}"
            )
        if any(len(ids) == 0 for ids in batch):
            raise BundleError("empty input: nothing to classify")
        width = max(len(ids) for ids in batch)
        if width > self.max_seq_len:
            raise BundleError(
                f"an input of {width} tokens exceeds the bundle's max_seq_len of "
                f"{self.max_seq_len}; shorten it or rebuild with a larger build.max_seq_len"
            )
        ids = np.full((len(batch), width), self.pad, np.int64)
        mask = np.zeros((len(batch), width), np.int64)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:  # one segment, as transformers' default
            feeds["token_type_ids"] = np.zeros_like(ids)
        out: np.ndarray = self.session.run(["logits"], feeds)[0]
        return out

    def probabilities(self, batch: list[list[int]]) -> np.ndarray:
        """Class probabilities [len(batch), num_labels] (softmax of the logits)."""
        return softmax(self.logits(batch))

    def classify(self, texts: list[str]) -> list[tuple[str, float]]:
        """(label, probability) of the most probable class, per text."""
        probs = self.probabilities([self.encode(t) for t in texts])
        return [(self.labels[int(p.argmax())], float(p.max())) for p in probs]


def load(path: Path | str, threads: int | None = None) -> Classifier:
    return Classifier(Path(path), threads)

"""Run a text-classification bundle (builders/classify/): class probabilities per text.

runtime/encoder.py loads the bundle and pads the batch (right-padded, masked), so a
row's probabilities are what it gets alone.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from runtime.encoder import EncoderBundle

TASK = "text-classification"


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax, shifted by the row maximum so exp never overflows."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    out: np.ndarray = e / e.sum(axis=-1, keepdims=True)
    return out


class Classifier(EncoderBundle):
    TASK = TASK

    def __init__(self, path: Path, threads: int | None = None) -> None:
        super().__init__(path, threads)
        self.labels: list[str] = list(self.meta["labels"])

    def logits(self, batch: list[list[int]]) -> np.ndarray:
        """Logits [len(batch), num_labels] for token-id inputs, right-padded into one batch."""
        return self.run(self.feeds(batch), "logits")

    def probabilities(self, batch: list[list[int]]) -> np.ndarray:
        """Class probabilities [len(batch), num_labels] (softmax of the logits)."""
        return softmax(self.logits(batch))

    def classify(self, texts: list[str]) -> list[tuple[str, float]]:
        """(label, probability) of the most probable class, per text."""
        probs = self.probabilities([self.encode(t) for t in texts])
        return [(self.labels[int(p.argmax())], float(p.max())) for p in probs]

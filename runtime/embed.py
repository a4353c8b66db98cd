"""Run a feature-extraction bundle (builders/embed/): one vector per text.

runtime/encoder.py loads the bundle and pads the batch (right-padded, masked); the
graph gives every token's last hidden state, and this module pools them into one
vector the way sentence-transformers' Pooling and Normalize modules do (the bundle's
`pooling`, read from the checkpoint's modules.json and 1_Pooling/config.json):

    mean   sum of the real tokens' states / their count (count clamped to 1e-9)
    cls    the first token's state
    max    the largest value per dimension over the real tokens
    normalize   divide by the L2 norm (clamped to 1e-12, as torch's F.normalize)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from runtime.encoder import EncoderBundle

TASK = "feature-extraction"
POOLING_MODES = ("mean", "cls", "max")


def pool(hidden: np.ndarray, mask: np.ndarray, pooling: dict[str, Any]) -> np.ndarray:
    """Sentence embeddings [batch, dim] from token states [batch, seq, dim]."""
    mode = pooling["mode"]
    weights = mask[..., None].astype(hidden.dtype)
    if mode == "mean":
        counts = np.clip(weights.sum(axis=1), 1e-9, None)
        out: np.ndarray = (hidden * weights).sum(axis=1) / counts
    elif mode == "cls":
        out = hidden[:, 0]
    elif mode == "max":
        out = np.where(weights > 0, hidden, -1e9).max(axis=1)
    else:
        raise ValueError(f"pooling mode {mode!r} is not one of {', '.join(POOLING_MODES)}")
    if pooling["normalize"]:
        norms = np.linalg.norm(out, axis=-1, keepdims=True)
        out = out / np.clip(norms, 1e-12, None)
    return out


class Embedder(EncoderBundle):
    TASK = TASK

    def __init__(self, path: Path, threads: int | None = None) -> None:
        super().__init__(path, threads)
        self.pooling: dict[str, Any] = dict(self.meta["pooling"])

    def hidden_states(self, batch: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        """Token states [len(batch), seq, dim] and the mask of real tokens."""
        feeds = self.feeds(batch)
        return self.run(feeds, "last_hidden_state"), feeds["attention_mask"]

    def embeddings(self, batch: list[list[int]]) -> np.ndarray:
        """Sentence embeddings [len(batch), dim] for token-id inputs."""
        hidden, mask = self.hidden_states(batch)
        return pool(hidden, mask, self.pooling)

    def embed(self, texts: list[str]) -> np.ndarray:
        """Sentence embeddings of texts, in batches of at most max_batch_size."""
        ids = [self.encode(t) for t in texts]
        size = self.max_batch_size
        rows = [self.embeddings(ids[i : i + size]) for i in range(0, len(ids), size)]
        return np.concatenate(rows)

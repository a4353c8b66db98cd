"""Load an encoder bundle (text-classification, feature-extraction) and run it: what
runtime/classify.py and runtime/embed.py share.

Like runtime/causal_lm.py it needs onnxruntime, numpy and tokenizers only. A batch is
right-padded (builders/common/encoder.py says why) and the padding masked out, so a row's
output is what it gets alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from runtime.format import BundleError, default_threads, read_meta


def session_options(threads: int | None, spin: bool = True) -> Any:
    """`spin`: the intra-op threads spin-wait for work after a run (onnxruntime's
    default); off where another runtime's threads run next on the same cores."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # done at build
    so.intra_op_num_threads = threads or default_threads()
    if not spin:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so


def plain_tokenizer(file: Path) -> Any:
    """The bundle's tokenizer.json without its own padding and truncation: a file may
    carry them (all-MiniLM-L6-v2's pads every text to 128 tokens); transformers turns
    both off and pads per call, and so do these runtimes, so the ids are the
    reference's."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(file))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


class EncoderBundle:
    TASK = ""  # the task a subclass serves

    def __init__(self, path: Path, threads: int | None = None) -> None:
        import onnxruntime as ort

        self.path = Path(path)
        self.meta = read_meta(self.path, self.TASK)
        engine = self.meta["engines"]["main"]
        so = session_options(threads)
        self.session = ort.InferenceSession(
            str(self.path / engine["file"]), so, providers=[engine["provider"]]
        )
        self.tokenizer = plain_tokenizer(self.path / self.meta["tokenizer"]["file"])
        self.pad = int(self.meta["tokenizer"]["pad"])
        self.input_names = [v["name"] for v in self.meta["io"]["inputs"]]
        self.max_batch_size: int = self.meta["limits"]["max_batch_size"]
        self.max_seq_len: int = self.meta["limits"]["max_seq_len"]

    def encode(self, text: str) -> list[int]:
        """The tokenizer's own special tokens ([CLS]/[SEP] where it has them), as
        transformers' tokenizer adds them by default."""
        return list(self.tokenizer.encode(text, add_special_tokens=True).ids)

    def feeds(self, batch: list[list[int]]) -> dict[str, np.ndarray]:
        """Token-id inputs right-padded into one batch, with their mask."""
        if not batch or len(batch) > self.max_batch_size:
            raise BundleError(
                f"batch of {len(batch)} inputs; this bundle serves 1 to {self.max_batch_size}"
            )
        if any(len(ids) == 0 for ids in batch):
            raise BundleError("empty input: nothing to encode")
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
        return feeds

    def run(self, feeds: dict[str, np.ndarray], output: str) -> np.ndarray:
        out: np.ndarray = self.session.run([output], feeds)[0]
        return out

"""Run a text2text-generation or automatic-speech-recognition bundle (builders/seq2seq/)
and generate greedily: encode once, then decode with a self-attention KV cache
(builders/seq2seq/__init__.py: the contracts).

Like runtime/causal_lm.py it needs onnxruntime, numpy and tokenizers only. Text encoder
inputs are right-padded and masked; speech inputs are log-mel features of one fixed
length (runtime/audio.py), whose encoder also returns the cross-attention cache the
decoder reads at every step. Rows decode in lockstep from the decoder start token, a
finished row feeds padding that is never read.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from runtime import audio
from runtime.causal_lm import Generation
from runtime.encoder import plain_tokenizer, session_options
from runtime.format import BundleError, read_meta

TASK = "text2text-generation"
SPEECH = "automatic-speech-recognition"
Context = dict[str, np.ndarray]  # the decoder's feeds that stay fixed for a generation


class Seq2Seq:
    task = TASK

    def __init__(self, path: Path, threads: int | None = None) -> None:
        import onnxruntime as ort

        self.path = Path(path)
        self.meta = read_meta(self.path, self.task)
        so = session_options(threads)
        self.sessions = {
            name: ort.InferenceSession(str(self.path / e["file"]), so, providers=[e["provider"]])
            for name, e in self.meta["engines"].items()
        }
        tok = self.meta["tokenizer"]
        self.tokenizer = plain_tokenizer(self.path / tok["file"])
        self.eos = set(tok["eos"])
        self.pad = int(tok["pad"])
        self.start = int(self.meta["decoder_start_token_id"])
        self.entries = self.meta["io"]["kv_cache"]["entries"]
        self.max_batch_size: int = self.meta["limits"]["max_batch_size"]
        self.max_seq_len: int = self.meta["limits"]["max_seq_len"]

    def encode(self, text: str) -> list[int]:
        """The tokenizer's own special tokens, as transformers' tokenizer adds them."""
        return list(self.tokenizer.encode(text, add_special_tokens=True).ids)

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode([i for i in ids if i not in self.eos]))

    def _check_batch(self, size: int) -> None:
        if not size or size > self.max_batch_size:
            raise BundleError(
                f"batch of {size} inputs; this bundle serves 1 to {self.max_batch_size}"
            )

    def _encoder(self, prompts: list[Any]) -> Context:
        """The decoder's fixed feeds for a batch of inputs: token-id prompts here, log-mel
        features for Speech."""
        self._check_batch(len(prompts))
        if any(len(p) == 0 for p in prompts):
            raise BundleError("empty prompt: nothing to condition on")
        width = max(len(p) for p in prompts)
        if width > self.max_seq_len:
            raise BundleError(
                f"a prompt of {width} tokens exceeds the bundle's max_seq_len of "
                f"{self.max_seq_len}; shorten it or rebuild with a larger build.max_seq_len"
            )
        ids = np.full((len(prompts), width), self.pad, np.int64)
        mask = np.zeros((len(prompts), width), np.int64)
        for row, p in enumerate(prompts):
            ids[row, : len(p)] = p
            mask[row, : len(p)] = 1
        hidden = self.sessions["encoder"].run(None, {"input_ids": ids, "attention_mask": mask})[0]
        return {"encoder_hidden": hidden, "encoder_attention_mask": mask}

    def _decode(
        self, ids: np.ndarray, context: Context, past: list[np.ndarray]
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        feeds = {"decoder_input_ids": ids, **context}
        feeds.update({e["past"]: t for e, t in zip(self.entries, past, strict=True)})
        logits, *present = self.sessions["decoder"].run(None, feeds)
        return logits, present

    def _empty(self, batch: int) -> list[np.ndarray]:
        return [
            np.zeros([{"batch": batch, "seq": 0}.get(d, d) for d in e["shape"]], np.float32)
            for e in self.entries
        ]

    def logits(self, prompt: Any, target: list[int]) -> np.ndarray:
        """Teacher-forced decoder logits [1 + len(target), vocab] of one pair: the
        decoder reads the start token then `target`, in one pass."""
        context = self._encoder([prompt])
        ids = np.asarray([[self.start, *target]], np.int64)
        logits, _ = self._decode(ids, context, self._empty(1))
        return logits[0]

    def generate(
        self,
        prompts: list[Any],
        max_new_tokens: int,
        num_beams: int = 1,
        length_penalty: float = 1.0,
        early_stopping: bool | str = False,
    ) -> Generation:
        """Greedy output per input (prompt ids, or features for speech), up to and
        including EOS (the start token excluded). With num_beams > 1, beam search
        (runtime/beams.py) for each input, transformers' rules and defaults."""
        if max_new_tokens > self.max_seq_len:
            raise BundleError(
                f"{max_new_tokens} new tokens exceed the bundle's max_seq_len of {self.max_seq_len}"
            )
        if num_beams > 1:
            return self._beam_search(
                prompts, max_new_tokens, num_beams, length_penalty, early_stopping
            )
        started = time.perf_counter()
        context = self._encoder(prompts)
        batch = len(prompts)
        nxt = np.full((batch, 1), self.start, np.int64)
        past = self._empty(batch)
        out: list[list[int]] = [[] for _ in prompts]
        done = np.zeros(batch, bool)
        steps = 0
        for _ in range(max_new_tokens):
            logits, past = self._decode(nxt, context, past)
            steps += 1
            best = logits[:, -1, :].argmax(-1)
            for row in np.flatnonzero(~done):
                out[row].append(int(best[row]))
                done[row] = int(best[row]) in self.eos
            if done.all():
                break
            nxt = np.where(done, self.pad, best)[:, None].astype(np.int64)
        return Generation(out, steps, time.perf_counter() - started)

    def _beam_search(
        self,
        prompts: list[Any],
        max_new_tokens: int,
        num_beams: int,
        length_penalty: float,
        early_stopping: bool | str,
    ) -> Generation:
        """Each input alone: encoded once, its context repeated for `num_beams` decoder
        rows, whose self-attention caches follow their beams at every step."""
        from runtime.beams import BeamSearch

        if num_beams > self.max_batch_size:
            raise BundleError(
                f"num_beams={num_beams}: the beams decode as one batch, and this bundle "
                f"serves batches of 1 to {self.max_batch_size}"
            )
        self._check_batch(len(prompts))
        started = time.perf_counter()
        out, steps = [], 0
        for prompt in prompts:
            context = {
                k: np.repeat(v, num_beams, axis=0) for k, v in self._encoder([prompt]).items()
            }
            search = BeamSearch(
                num_beams, self.start, self.eos, max_new_tokens, length_penalty, early_stopping
            )
            past = self._empty(num_beams)
            nxt = search.inputs()
            while True:
                logits, past = self._decode(nxt, context, past)
                steps += 1
                sources = search.step(logits[:, -1, :])
                if search.done:
                    break
                past = [p[sources] for p in past]
                nxt = search.inputs()
            out.append(search.best())
        return Generation(out, steps, time.perf_counter() - started)


class Speech(Seq2Seq):
    """A speech bundle: audio in, through the bundle's log-mel settings."""

    task = SPEECH

    def __init__(self, path: Path, threads: int | None = None) -> None:
        super().__init__(path, threads)
        self.audio: dict[str, Any] = self.meta["audio"]
        self.cross = self.meta["io"]["cross_cache"]["entries"]

    def features(self, waveform: np.ndarray) -> np.ndarray:
        """[mel, frames] log-mel features of a 1-D float waveform at the bundle's rate."""
        return audio.log_mel(waveform, self.audio)

    def read(self, path: Path | str) -> np.ndarray:
        """Features of a mono 16-bit WAV file."""
        return self.features(audio.read_wav(path, self.audio["sampling_rate"]))

    def transcribe(self, paths: list[Path | str], max_new_tokens: int) -> list[str]:
        out = self.generate([self.read(p) for p in paths], max_new_tokens)
        return [self.decode(t) for t in out.tokens]

    def _encoder(self, features: list[np.ndarray]) -> Context:
        self._check_batch(len(features))
        batch = np.stack([np.asarray(f, np.float32) for f in features])
        shape = (self.audio["feature_size"], self.audio["n_samples"] // self.audio["hop_length"])
        if batch.shape[1:] != shape:
            raise BundleError(f"features of shape {batch.shape[1:]}; this bundle takes {shape}")
        out = self.sessions["encoder"].run(None, {"input_features": batch})
        return {e["name"]: t for e, t in zip(self.cross, out[1:], strict=True)}

"""InductorBundle: a causal_lm.Bundle whose forward keeps the KV cache on the device,
in the inductor engine's own tensors (runtime/inductor.py), instead of passing it
through numpy: the prompt runs through the prefill program chunk by chunk, the rest
one token at a time through the decode program.

Greedy generation stays on the device: the prompt's last logits row is reduced to
its argmax there, then the engine's decode steps feed their own tokens back (its
greedy step, replayed in CUDA graphs of BLOCK steps), and the host reads the new ids
once a block, to stop when every row has reached EOS. Only token ids cross to the
host. Sampling (temperature > 0) takes Bundle's loop, which reads logits.

InductorSpeculativeBundle (the ngram, dflash and dspark variants on this backend)
verifies drafts through the same forward: its target feeds [last, drafts...] as one
call of the engine's verify program (max_draft_len + 1 tokens) over the device cache,
and truncating the cache is moving its length back (the slots past it are masked out
and rewritten by the next feed). A DFlash/DSpark engine's programs also return the
hidden states its drafter reads, which the target hands to runtime/speculative.py's
rounds as the onnxruntime target does; the drafter is runtime/drafters.py's
BlockDrafter over the engine's own drafter programs (runtime/inductor_drafter.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from runtime.causal_lm import Bundle, Generation
from runtime.drafters import BlockDrafter
from runtime.format import BundleError
from runtime.inductor import BLOCK, InductorEngine
from runtime.inductor_drafter import InductorBlock
from runtime.sampling import Sampler
from runtime.speculative import Drafter, SpeculativeBundle, Target


class InductorBundle(Bundle):
    """A causal-LM bundle of the inductor backend (ordinary variant)."""

    @property
    def engine(self) -> InductorEngine:
        return cast(InductorEngine, self.session)

    def _empty_cache(self, batch: int) -> list[np.ndarray]:
        return []  # the engine's cache lives on the device; [] marks a fresh sequence

    def _rows(
        self, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The engine's static batch: rows beyond the caller's repeat its first row
        (computed, never read); the mask widened to every slot."""
        engine = self.engine
        rows = ids.shape[0]
        if rows > engine.batch:
            raise BundleError(f"batch of {rows}; this bundle serves 1 to {engine.batch}")
        fill = [0] * (engine.batch - rows)
        ids, mask, positions = (np.concatenate([a, a[fill]]) for a in (ids, mask, positions))
        visible = np.zeros((engine.batch, engine.length), np.int64)
        visible[:, : mask.shape[1]] = mask
        return ids, visible, positions

    def _run(
        self,
        ids: np.ndarray,
        positions: np.ndarray,
        visible: np.ndarray,
        width: int,
        keep: Callable[[Any], Any],
        images: list[np.ndarray | None] | None = None,
        hidden: list[Any] | None = None,
    ) -> list[Any]:
        """The new tokens ids [B, T] (the last T of `width` slots) through the programs:
        windows of the longest multi-token program (the prefill chunk, the verify
        program) that T holds, else single decode steps; `keep` of each call's logits at
        positions not kept before (on the device, in a buffer the next call may
        overwrite). `images`: each caller's row's image features, of which each window
        takes the rows of its own image tokens (a window that starts inside the one
        before takes those rows again, as it feeds those tokens again). `hidden`: a
        drafting engine's hidden states of the same positions are appended to it, as
        `keep` of them."""
        engine = self.engine
        new = ids.shape[1]
        chunk = max((n for n in (engine.chunk, engine.verify_len) if 0 < n <= new), default=0)
        # Whole chunks; a remainder runs as one more chunk that ends at the last token
        # and starts inside the one before: it rewrites those slots with what they
        # already hold (the same tokens over the same cache), so no single steps.
        starts = list(range(0, new - chunk + 1, chunk)) if chunk else []
        if chunk and starts[-1] + chunk < new:
            starts.append(new - chunk)
        done = starts[-1] + chunk if starts else 0
        steps = [(s, chunk) for s in starts] + [(s, 1) for s in range(done, new)]
        out = []
        end = 0
        seen = None if images is None else self._image_counts(ids[: len(images)])
        for start, take in steps:
            slots = np.arange(width - new + start, width - new + start + take)
            part = slice(start, start + take)
            features = None
            if images is not None and seen is not None:
                features = _window_rows(images, seen, start, start + take)
            logits = engine.call(ids[:, part], positions[:, part], slots, visible, features)
            out.append(keep(logits[:, end - start :]))  # only positions not returned yet
            if hidden is not None:
                hidden.append(keep(engine.hidden[:, end - start :]))
            end = start + take
        return out

    def _image_counts(self, ids: np.ndarray) -> np.ndarray:
        """[rows, T + 1]: each row's image tokens before each position of `ids`."""
        if self.image_token is None:
            return np.zeros((ids.shape[0], ids.shape[1] + 1), np.int64)
        counts = np.cumsum(ids == self.image_token, axis=1)
        return np.concatenate([np.zeros((ids.shape[0], 1), np.int64), counts], axis=1)

    def forward(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        positions: np.ndarray,
        past: list[np.ndarray],
        keep: int = 0,
        images: np.ndarray | None = None,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """The Bundle contract over the engine's static cache: `mask` covers every slot
        so far (its last ids.shape[1] columns are the new tokens). Every position's
        logits come back (`keep` allows that). `images`: the features of the image
        tokens in `ids`, row by row (an image-text-to-text engine's prefill merges
        them)."""
        rows = ids.shape[0]
        per_row: list[np.ndarray | None] | None = None
        if images is not None and len(images):
            counts = self._image_counts(ids)[:, -1]
            # One sequence's image tokens past its rows are ones it generated, text as a
            # decode step fed them (Bundle.logits checks the prompt's): the program
            # merges only the rows written (image_rows, backends/_images.py).
            made = rows == 1 and int(counts.sum()) > len(images)
            if int(counts.sum()) != len(images) and not made:
                raise BundleError(
                    f"{int(counts.sum())} image tokens but {len(images)} image feature rows"
                )
            per_row = [images] if rows == 1 else list(np.split(images, np.cumsum(counts)[:-1]))
        if not past:
            self.engine.reset()
        ids, visible, positions = self._rows(ids, mask, positions)
        logits = self._run(
            ids,
            positions,
            visible,
            mask.shape[1],
            lambda out: out[:rows].float().cpu().numpy(),
            per_row,
        )
        return np.concatenate(logits, axis=1), [np.zeros(0, np.float32)]

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        sampler: Sampler | None = None,
        *,
        suppress: tuple[int, ...] = (),
    ) -> Generation:
        """As Bundle.generate; greedy runs on the device. `suppress`: ids greedy
        decoding never picks (as transformers' min_new_tokens does for EOS)."""
        sampler = sampler or Sampler()
        if not sampler.greedy:
            if suppress:
                raise BundleError("suppress applies to greedy decoding only")
            return super().generate(prompts, max_new_tokens, sampler)
        return self._greedy(prompts, max_new_tokens, suppress)

    def _greedy(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        suppress: tuple[int, ...] = (),
        images: list[np.ndarray | None] | None = None,
    ) -> Generation:
        """Greedy generation on the device (the module docstring); `images`: each
        prompt's image features, which its prefill windows merge
        (runtime/inductor_vlm.py)."""
        torch, engine = self.engine.torch, self.engine
        started = time.perf_counter()
        ids, mask, positions = self._batch(prompts, max_new_tokens)
        if images is not None:
            self._check_images(ids, images)
            positions = self.rope_positions(ids, mask, positions, images)  # M-RoPE: [B, T, 3]
        pad = engine.chunk - ids.shape[1]
        if engine.chunk and pad > 0 and engine.chunk + max_new_tokens <= engine.length:
            # A prompt shorter than the chunk runs as one chunk, left-padded with
            # slots it never sees, not token by token.
            ids, mask, positions = (
                np.pad(a, ((0, 0), (pad, 0), *[(0, 0)] * (a.ndim - 2)))
                for a in (ids, mask, positions)
            )
        rows, width = ids.shape
        engine.reset()
        engine.ban(list(suppress))
        ids, visible, positions = self._rows(ids, mask, positions)
        with torch.inference_mode():
            last = self._run(ids, positions, visible, width, lambda out: out[:, -1], images)[-1]
            first = (last + engine.bias).argmax(-1, keepdim=True)
            engine.ids.copy_(first)
            engine.positions.copy_(torch.from_numpy(positions[:, -1:] + 1))
            engine.slots.fill_(width)
            engine.visible.copy_(torch.from_numpy(visible))
            tokens = [[int(t)] for t in first[:rows, 0].tolist()]
        first_token = time.perf_counter() - started
        done = [t[0] in self.eos for t in tokens]
        made = 0  # decode steps run; step s wrote history[:, width + s]
        pending: tuple[int, int, Any, Any] | None = None
        while True:
            launched = None
            if made < max_new_tokens - 1 and not all(done):
                take = min(BLOCK, max_new_tokens - 1 - made)
                engine.advance(take, rows)
                with torch.inference_mode():
                    ids_out = engine.history[:rows, width + made : width + made + take]
                    host = ids_out.to("cpu", non_blocking=True)
                event = torch.cuda.Event() if engine.graphs else None
                if event is not None:
                    event.record()
                launched = (made, take, host, event)
                made += take
            if pending is not None:  # read the block before the one just launched
                _, _, host, event = pending
                if event is not None:
                    event.synchronize()
                for row, new in enumerate(host.tolist()):
                    for t in new:
                        if not done[row]:
                            tokens[row].append(int(t))
                            done[row] = int(t) in self.eos
            pending = launched
            if pending is None:
                break
            if all(done):  # a block may be in flight: its ids are past every EOS
                break
        if engine.graphs:
            torch.cuda.current_stream().synchronize()
        return Generation(tokens, made, time.perf_counter() - started, first_token)


class InductorTarget(Target):
    """speculative.Target over an inductor bundle's device cache, batch one: a feed is
    one forward of the bundle's programs (exactly verify_len tokens: the verify
    program), and truncation only moves the length back."""

    def __init__(self, bundle: InductorBundle) -> None:
        self.bundle = bundle
        self.hidden = "drafter" in bundle.engine.program  # its programs return features
        self.length = 0
        self.fed: list[int] = []  # the token at each slot below `length`
        bundle.engine.reset()

    def extend(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray | None]:
        """Feed `ids` after the cache; their logits [n, V]. A feed shorter than the
        verify program (fewer drafts, or none) that has as many committed tokens
        before it runs as one verify call that starts inside them: it rewrites those
        slots with the tokens and positions they hold, so the cache means what it
        meant, and every token after the prompt gets its logits from the verify
        program's arithmetic (generate_plain's too)."""
        bundle = cast(InductorBundle, self.bundle)
        n, window = len(ids), bundle.engine.verify_len
        back = window - n if 0 < n < window and self.length >= window - n else 0
        feed = self.fed[self.length - back : self.length] + list(ids)
        start = self.length - back
        width = start + len(feed)
        batch, visible, positions = bundle._rows(
            np.asarray([feed], np.int64),
            np.ones((1, width), np.int64),
            np.arange(start, width, dtype=np.int64)[None],
        )
        rows: list[Any] | None = [] if self.hidden else None
        parts = bundle._run(
            batch,
            positions,
            visible,
            width,
            lambda out: out[:1].float().cpu().numpy(),
            hidden=rows,
        )
        logits = np.concatenate(parts, axis=1)[0]
        self.fed[self.length :] = list(ids)
        self.length += n
        features = np.concatenate(rows, axis=1)[0][back:] if rows else None
        return logits[back:], features

    def truncate(self, length: int) -> None:
        """Slots from `length` on are masked out from now on and rewritten when fed."""
        self.length = length
        del self.fed[length:]


class InductorSpeculativeBundle(SpeculativeBundle, InductorBundle):
    """A drafting bundle of the inductor backend (ngram, dflash, dspark):
    SpeculativeBundle's rounds, verified through the device cache. generate_plain, what
    speculation must reproduce, is the target alone through the same target and so
    the same programs: the prompt as a round's prefill, then one token a round, each
    in a verify call. In half precision the verify program (k + 1 rows) and the
    decode program (one row) round differently, and where the target's top two
    logits are that close the two greedy paths part for that reason alone
    (spec_decoding_facts.md section 5); compared through one program, any difference
    left is the speculation's. (Bundle quality against the fp32 reference is judged on
    the decode path by the statistical gates, as for the ordinary variant.)"""

    def target(self) -> Target:
        return InductorTarget(self)

    def drafter(self) -> Drafter:
        """A DFlash/DSpark bundle's BlockDrafter runs the engine's drafter programs;
        ngram's drafter is the onnxruntime bundle's (model-free)."""
        if self.meta["variant"] in ("dflash", "dspark"):
            return BlockDrafter(self, InductorBlock(self.engine))
        return super().drafter()

    def generate_plain(
        self, prompts: list[list[int]], max_new_tokens: int, sampler: Sampler | None = None
    ) -> Generation:
        """Greedy: the rounds with no drafts (the class docstring); sampling: the
        device loop's."""
        sampler = sampler or Sampler()
        if not sampler.greedy:
            return InductorBundle.generate(self, prompts, max_new_tokens, sampler)
        return self.rounds(prompts, max_new_tokens, sampler, _NoDrafts, 0)[0]

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        sampler: Sampler | None = None,
        *,
        suppress: tuple[int, ...] = (),
    ) -> Generation:
        """SpeculativeBundle.generate; `suppress` is the device greedy loop's alone."""
        if suppress:
            raise BundleError("suppress applies to target-only greedy decoding, not to drafting")
        return SpeculativeBundle.generate(self, prompts, max_new_tokens, sampler)


class _NoDrafts:
    """The drafter of generate_plain's rounds: never asked (they draft 0 tokens)."""

    def propose(
        self, tokens: list[int], feats: list[np.ndarray], k: int, sampler: Sampler
    ) -> tuple[list[int], np.ndarray | None]:
        raise AssertionError("a round of target-only greedy asked for drafts")


def _window_rows(
    images: list[np.ndarray | None], seen: np.ndarray, start: int, end: int
) -> np.ndarray | None:
    """The feature rows of the image tokens at positions [start, end) of each row,
    row by row (`seen`: each row's image tokens before each position); None where
    there are none."""
    parts = [
        features[seen[row, start] : seen[row, end]]
        for row, features in enumerate(images)
        if features is not None and seen[row, end] > seen[row, start]
    ]
    return np.concatenate(parts) if parts else None

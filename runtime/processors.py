"""Logits post-processors: what may change the next token's logits before the sampler
draws (runtime/sampling.py), and `Decoding`, the options that name them.

The hook is any callable `(token_ids, logits) -> logits`: `token_ids` is one row's
sequence so far (its prompt then what it generated, int64 [seq], no padding) and
`logits` that row's next-token logits (float32 [vocab]). It is called once per row
and step, so a left-padded row sees exactly what it would alone. It may change the
array in place or return a new one.

The common processors are numpy ports of transformers' LogitsProcessors of the same
name, in the order its `generate` applies them (tests/builds/test_features.py checks
each against the transformers class on the same logits):

  RepetitionPenalty   RepetitionPenaltyLogitsProcessor: a seen token's logit / p if > 0, * p if < 0
  BadWords            NoBadWordsLogitsProcessor: a word (token sequence) never completes
  MinLength           MinLengthLogitsProcessor: no EOS while the sequence (prompt included) is short
  MinNewTokens        MinNewTokensLengthLogitsProcessor: no EOS before n new tokens
  SuppressTokens      SuppressTokensLogitsProcessor: these ids never come (`banned_ids`)

A user's own processors run after these; a grammar's mask (runtime/guided.py) runs
last, so nothing can re-allow a token it forbids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from runtime.guided import Grammar, Guide

Processor = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class RepetitionPenalty:
    penalty: float

    def __post_init__(self) -> None:
        if not self.penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, not {self.penalty}")

    def __call__(self, token_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        seen = np.unique(token_ids)
        score = logits[seen]
        logits[seen] = np.where(score < 0, score * self.penalty, score / self.penalty)
        return logits


@dataclass(frozen=True)
class BadWords:
    """Each word is a token sequence; its last token is forbidden wherever the rest of
    it ends the sequence so far (a one-token word: everywhere). A word that is one EOS
    token is dropped, as transformers drops it: generation must still be able to end."""

    words: tuple[tuple[int, ...], ...]
    eos: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if any(not w for w in self.words):
            raise ValueError("a bad word is an empty token sequence")
        kept = tuple(w for w in self.words if not (len(w) == 1 and w[0] in self.eos))
        object.__setattr__(self, "words", kept)

    def __call__(self, token_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        tail = token_ids.tolist()
        for word in self.words:
            prefix = list(word[:-1])
            if len(prefix) > len(tail):
                continue
            if not prefix or tail[len(tail) - len(prefix) :] == prefix:
                logits[word[-1]] = -np.inf
        return logits


@dataclass(frozen=True)
class MinLength:
    min_length: int
    eos: frozenset[int]

    def __call__(self, token_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        if token_ids.shape[-1] < self.min_length:
            logits[sorted(self.eos)] = -np.inf
        return logits


@dataclass(frozen=True)
class MinNewTokens:
    prompt_len: int
    min_new_tokens: int
    eos: frozenset[int]

    def __call__(self, token_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        if token_ids.shape[-1] - self.prompt_len < self.min_new_tokens:
            logits[sorted(self.eos)] = -np.inf
        return logits


@dataclass(frozen=True)
class SuppressTokens:
    ids: tuple[int, ...]

    def __call__(self, token_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        logits[list(self.ids)] = -np.inf
        return logits


@dataclass(frozen=True)
class Decoding:
    """What steers generation besides the Sampler: the common processors' options,
    the caller's own processors, and a grammar (runtime/guided.py) the output must
    match. The default steers nothing, and generation runs its plain loop."""

    repetition_penalty: float = 1.0  # 1: off
    bad_words: Sequence[Sequence[int]] = ()  # token sequences never generated
    banned_ids: Sequence[int] = ()  # token ids never generated
    min_length: int = 0  # the sequence, prompt included, has at least this many tokens before EOS
    min_new_tokens: int = 0  # at least this many new tokens before EOS
    processors: Sequence[Processor] = ()  # the caller's hooks, run after the ones above
    grammar: Grammar | None = None

    def __post_init__(self) -> None:
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0, not {self.repetition_penalty}")
        if self.min_length < 0 or self.min_new_tokens < 0:
            raise ValueError("min_length and min_new_tokens must be >= 0")

    @property
    def steers(self) -> bool:
        return bool(
            self.repetition_penalty != 1.0
            or self.bad_words
            or self.banned_ids
            or self.min_length
            or self.min_new_tokens
            or self.processors
            or self.grammar is not None
        )

    def chain(self, prompt_len: int, eos: set[int], vocab: int) -> list[Processor]:
        """One row's processors, in transformers' order, then the caller's."""
        ids = [i for w in self.bad_words for i in w] + list(self.banned_ids)
        out_of_range = [i for i in ids if not 0 <= i < vocab]
        if out_of_range:
            raise ValueError(
                f"token ids {out_of_range} are outside the vocabulary (0..{vocab - 1})"
            )
        ends = frozenset(eos)
        chain: list[Processor] = []
        if self.repetition_penalty != 1.0:
            chain.append(RepetitionPenalty(self.repetition_penalty))
        if self.bad_words:
            chain.append(BadWords(tuple(tuple(int(i) for i in w) for w in self.bad_words), ends))
        if self.min_length:
            chain.append(MinLength(self.min_length, ends))
        if self.min_new_tokens:
            chain.append(MinNewTokens(prompt_len, self.min_new_tokens, ends))
        if self.banned_ids:
            chain.append(SuppressTokens(tuple(int(i) for i in self.banned_ids)))
        return chain + list(self.processors)


class Steering:
    """One generation's processors and grammars, row by row (each row its own
    Decoding, or None: a batch of requests that asked different things): `__call__`
    turns the batch's next-token logits into the steered ones, `advance` records the
    token each row took, `incomplete` says which rows' grammar never ended."""

    def __init__(
        self,
        decodings: Sequence[Decoding | None],
        prompts: list[list[int]],
        eos: set[int],
        vocab: int,
        tokenizer_json: Callable[[], str],
    ) -> None:
        self.decodings = list(decodings)
        self.history = [list(p) for p in prompts]
        self.chains = [
            d.chain(len(p), eos, vocab) if d is not None else []
            for d, p in zip(self.decodings, prompts, strict=True)
        ]
        self.eos = eos
        self.guides: list[Guide | None] = [None] * len(prompts)
        grammars = {id(d.grammar): d.grammar for d in self.decodings if d and d.grammar}
        if grammars:
            from runtime.guided import guides

            for key, grammar in grammars.items():  # one matcher per row, per grammar
                rows = [r for r, d in enumerate(self.decodings) if d and id(d.grammar) == key]
                made = guides(grammar, len(rows), tokenizer_json(), vocab, eos)
                for row, guide in zip(rows, made, strict=True):
                    self.guides[row] = guide

    def __call__(self, logits: np.ndarray, done: np.ndarray) -> np.ndarray:
        out = np.array(logits, np.float32)  # a copy: the caller's logits stay as they came
        for row in [r for r, finished in enumerate(done.tolist()) if not finished]:
            scores = out[row]
            if self.chains[row]:
                ids = np.asarray(self.history[row], np.int64)
                for process in self.chains[row]:
                    scores = process(ids, scores)
            guide = self.guides[row]
            if guide is not None:
                scores = guide.mask(scores, processed=bool(self.chains[row]))
            out[row] = scores
        return out

    def advance(self, row: int, token: int) -> None:
        self.history[row].append(token)
        guide = self.guides[row]
        if guide is not None:
            guide.advance(token)

    def incomplete(self, ended: np.ndarray, budgets: Sequence[int]) -> dict[int, str]:
        """Why each row with a grammar failed: it used its whole budget (`ended`: the
        row met an end of sequence) and its output is not a complete match."""
        out = {}
        for row, guide in enumerate(self.guides):
            if guide is None or ended[row] or guide.accepting:
                continue
            decoding = self.decodings[row]
            kind = decoding.grammar.kind if decoding and decoding.grammar else "grammar"
            out[row] = (
                f"the output did not complete its {kind.replace('_', ' ')} within "
                f"max_new_tokens={budgets[row]}; raise max_new_tokens, or bound the grammar "
                "(a JSON schema's maxLength, maxItems, maxProperties)"
            )
        return out

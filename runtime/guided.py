"""Guided decoding: the output must match a JSON schema, a regular expression or a Lark
grammar. llguidance (guidance-ai's Rust engine, imported inside functions) compiles
the grammar against the bundle's own tokenizer.json and says, at each step, which
token ids may come next; the runtime sets every other id's logit to -inf before the
sampler draws (runtime/processors.py: after every other processor), so greedy or
sampled, the output is in the grammar's language. EOS is allowed only where the
grammar may end, so a generation that stops at EOS is complete. One that runs out
of new tokens first is not, and generate() says so instead of returning it.

llguidance reads a Hugging Face tokenizer.json itself (byte-level BPE, SentencePiece
BPE with byte fallback, Unigram), so the runtime needs no token trie of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np

Kind = Literal["json_schema", "regex", "lark"]
# JSON comes out compact (no whitespace between tokens: `{"a":1,"b":[2]}`), so no
# token is spent on layout; a schema's own "x-guidance" options override this.
COMPACT: Any = {"whitespace_flexible": False}  # llguidance's JsonCompileOptions


# What an empty language looks like, per kind, for the refusal (issue 37).
EMPTY = {
    "json_schema": 'a schema that only refers to itself, such as {"$ref": "#"}, is one',
    "regex": r"a character class that holds nothing, such as [^\s\S], is one",
    "lark": "a rule that only refers to itself, such as `start: start`, is one",
}


class GrammarError(ValueError):
    """A schema, regex or grammar llguidance cannot compile, or whose language is empty."""


@dataclass(frozen=True)
class Grammar:
    """What the output must match: `Grammar.json_schema(...)`, `.regex(...)`, `.lark(...)`."""

    kind: Kind
    source: str

    @classmethod
    def json_schema(cls, schema: str | dict[str, Any]) -> Grammar:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GrammarError(f"the JSON schema is not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise GrammarError(f"a JSON schema is an object, not a {type(parsed).__name__}")
        return cls("json_schema", text)

    @classmethod
    def regex(cls, pattern: str) -> Grammar:
        return cls("regex", pattern)

    @classmethod
    def lark(cls, grammar: str) -> Grammar:
        return cls("lark", grammar)

    def compiled(self) -> str:
        """llguidance's grammar text for this source (not yet checked)."""
        from llguidance import LLMatcher

        if self.kind == "json_schema":
            try:
                return str(LLMatcher.grammar_from_json_schema(self.source, defaults=COMPACT))
            except ValueError as exc:
                raise GrammarError(f"the JSON schema is not usable: {exc}") from None
        if self.kind == "regex":
            return str(LLMatcher.grammar_from_regex(self.source))
        return str(LLMatcher.grammar_from_lark(self.source))


# A Metaspace decoder (T5's and mBART's Unigram tokenizers, and transformers' newer
# conversions of SentencePiece BPE) says of each token what this sequence says: the
# replacement character is a space, <0xXX> a byte. llguidance 1.9.1 reads a token's
# bytes from byte-level and byte-fallback decoders only, so it gets the Metaspace one
# in that form.
def _metaspace_as_sequence(replacement: str) -> dict[str, Any]:
    return {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": replacement}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }


def for_llguidance(tokenizer_json: str) -> str:
    """The tokenizer.json llguidance reads: the bundle's, a Metaspace decoder restated."""
    data = json.loads(tokenizer_json)
    decoder = data.get("decoder") or {}
    if decoder.get("type") != "Metaspace":
        return tokenizer_json
    data["decoder"] = _metaspace_as_sequence(decoder.get("replacement", "\u2581"))
    return json.dumps(data)


@lru_cache(maxsize=8)
def _tokenizer(tokenizer_json: str, vocab: int, eos: tuple[int, ...]) -> Any:
    """llguidance's view of a tokenizer.json: every token's bytes, for masks over
    `vocab` logits (a graph's vocabulary may be padded past the tokenizer's)."""
    import llguidance

    try:
        return llguidance.LLTokenizer(
            for_llguidance(tokenizer_json), n_vocab=vocab, eos_token=list(eos)
        )
    except ValueError as exc:
        raise GrammarError(f"llguidance cannot read this bundle's tokenizer: {exc}") from None


class Guide:
    """One row's matcher: the mask for its next token, then the token it took.

    The mask is computed in the caller's thread, after the forward. Handing it to a
    worker thread while the forward runs (llguidance's advice: both release the GIL)
    was measured slower on a shared 2-core CPU host: a mask takes 10-30 us for the
    tiny models' vocabularies, less than the hand-off and the wake-up cost."""

    def __init__(self, matcher: Any, vocab: int) -> None:
        self.matcher = matcher
        self.vocab = vocab
        self.bits = np.full((vocab + 31) // 32, -1, np.int32)
        self.pointer = self.bits.ctypes.data  # asked once: each .ctypes makes an object
        self.last = np.ones(vocab, bool)  # the ids the last mask allowed

    def allowed(self) -> np.ndarray:
        """bool [vocab]: the ids the grammar allows next (llguidance writes one bit an
        id into `bits`, the lowest bit first)."""
        self.matcher.unsafe_compute_mask_ptr(self.pointer, self.bits.nbytes)
        bits = np.unpackbits(self.bits.view(np.uint8), count=self.vocab, bitorder="little")
        return bits.view(bool)

    def mask(self, logits: np.ndarray, processed: bool = True) -> np.ndarray:
        """-inf for every id the grammar forbids. `processed`: other processors ran
        first, and may have forbidden every id the grammar allows."""
        self.last = self.allowed()
        logits[: self.vocab][~self.last] = -np.inf
        if logits.shape[-1] > self.vocab:
            logits[self.vocab :] = -np.inf
        if processed and not np.isfinite(logits[: self.vocab][self.last]).any():
            raise GrammarError(
                "no token the grammar allows is left (a processor or banned id forbids them all)"
            )
        return logits

    def advance(self, token: int) -> None:
        """Take the token drawn from the masked logits. Only a token outside the mask
        (a tokenizer with no token for the bytes the grammar forces, such as t5's
        without "{") breaks the grammar."""
        if token >= self.vocab or not self.last[token]:
            needs = self.matcher.compute_ff_bytes()
            raise GrammarError(
                f"token {token} breaks the grammar; where the grammar forces {needs!r} "
                "next, a tokenizer without a token for those bytes cannot follow it"
            )
        if not self.matcher.consume_token(token):
            raise GrammarError(f"token {token} breaks the grammar: {self.matcher.get_error()}")

    @property
    def accepting(self) -> bool:
        return bool(self.matcher.is_accepting())


@lru_cache(maxsize=16)
def _matcher(grammar: Grammar, tokenizer: Any) -> Any:
    """The grammar compiled and checked against the tokenizer, as a fresh matcher that
    each generation's rows copy (a copy takes microseconds, a compile milliseconds)."""
    from llguidance import LLMatcher

    text = grammar.compiled()
    what = {"json_schema": "JSON schema", "regex": "regex", "lark": "Lark grammar"}[grammar.kind]
    failed, messages = LLMatcher.validate_grammar_with_warnings(text, tokenizer)
    if failed:
        message = " ".join(messages[0].split())  # llguidance's caret diagram, on one line
        raise GrammarError(f"the {what} does not compile: {message}")
    matcher = LLMatcher(tokenizer, text, log_level=0)
    if _matches_nothing(Guide(matcher.deep_copy(), int(tokenizer.vocab_size))):
        raise GrammarError(
            f"the {what} matches nothing: llguidance compiles it to an empty language "
            f"({EMPTY[grammar.kind]}), so no output could satisfy it; give one that some "
            "output matches"
        )
    return matcher


def _matches_nothing(probe: Guide) -> bool:
    """Issue 37: `{"$ref": "#"}` compiles and validates, yet no string is in its language;
    its first mask allowed EOS alone and `doit run` printed an empty output, exit 0.
    llguidance tells it at that first mask: the matcher errs (NoExtensionBias) when no
    byte extends the empty prefix and the empty string is not in the language either. A
    language that is empty only because every derivation is endless (`a: "x" a`) is not
    caught here; generation runs out of tokens and says it is incomplete."""
    probe.allowed()
    return bool(probe.matcher.is_error())


def guides(
    grammar: Grammar, rows: int, tokenizer_json: str, vocab: int, eos: set[int]
) -> list[Guide]:
    """A fresh matcher per row; a grammar llguidance refuses raises GrammarError."""
    tokenizer = _tokenizer(tokenizer_json, vocab, tuple(sorted(eos)))
    prototype = _matcher(grammar, tokenizer)
    return [Guide(prototype.deep_copy(), int(tokenizer.vocab_size)) for _ in range(rows)]

"""Run a causal-LM bundle (text-generation, builders/causal_lm/): prefill and decode
with an explicit KV cache. Variants that draft extend it (runtime/speculative.py).

The runtime needs numpy, tokenizers and the engine's backend (runtime/backends.py:
onnxruntime, or torch for aoti and tensorrt), nothing from builders/: a bundle runs
on a machine that never built it. bundle.json says everything the
loop needs: the I/O names, the KV-cache layout, the tokenizer and the limits.

Batches are left-padded. Position ids count real tokens only (cumsum of the
attention mask, minus one), so a padded row computes exactly what it would alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from runtime.chat import Policy, Template, check_messages, texts
from runtime.format import TEXT_GENERATION, BundleError, read_meta
from runtime.processors import Decoding, Steering
from runtime.sampling import Sampler

TASK = TEXT_GENERATION
KEEP = "logits_to_keep"  # an input a graph may have (builders/causal_lm/export.py)
IMAGES = "image_features"  # a vision-language decoder's input (runtime/vlm.py feeds it)
# Weight precisions whose graphs quantize activations with calibrated static scales
# (of the recipe precisions kiln builds): a forward over other token boundaries, such as
# a resumed prefix, can round a near-tie the other way, so its tokens are not
# guaranteed to be a cold run's (the SmolLM2 fp8 record's prefix-reuse check generated
# other tokens than its cold run).
ACTIVATION_QUANTIZED = frozenset({"int8-sq", "fp8", "w4a8-awq", "nvfp4"})
# Weight-only precisions, whose onnxruntime engines run MatMulNBits at accuracy_level 4
# (builders/causal_lm/_nbits.py): the kernel quantizes activations to int8 at run time,
# and on an AVX-512 host its one-row and many-row paths round differently (the SmolLM2
# int8-wo record's prefix_reuse check generated other tokens than its cold run, while
# its chunked prefill was exact). Other backends dequantize the weights and are exact.
RUNTIME_QUANTIZED = frozenset({"int8-wo", "int4-awq"})


def prefix_reuse_refusal(meta: dict[str, Any]) -> str | None:
    """Why resuming a bundle's KV cache would not give a cold run's tokens, read from
    its bundle.json's precision and main engine's backend (onnxruntime where it names
    none); None where it does (fp32 and half-precision bundles, weight-only ones on a
    backend that dequantizes). The inductor engine keeps its cache in static buffers
    of its own (runtime/inductor.py), which a prefix cache of host arrays never holds:
    refused too, rather than accepted and never used."""
    precision = meta.get("precision") or {}
    weights, kv = precision.get("weights", "fp32"), precision.get("kv_cache", "auto")
    backend = ((meta.get("engines") or {}).get("main") or {}).get("backend", "onnxruntime")
    if backend == "inductor":
        return (
            "the inductor engine keeps its KV cache in its own static buffers on the "
            "device, which the runtime does not cut and resume: a cached prefix would "
            "never be reused"
        )
    if weights in ACTIVATION_QUANTIZED:
        return (
            f"this bundle's {weights} precision quantizes activations with static scales: "
            "a prefill resumed from a cached prefix is not guaranteed a cold run's tokens"
        )
    if weights in RUNTIME_QUANTIZED and backend == "onnxruntime":
        return (
            f"this bundle's {weights} engine quantizes activations to int8 at run time "
            "(MatMulNBits accuracy_level 4), and its one-token and many-token forwards "
            "round differently: a prefill resumed from a cached prefix is not guaranteed "
            "a cold run's tokens"
        )
    if kv != "auto":
        return (
            f"this bundle's KV cache is {kv}, quantized with static scales: a prefill "
            "resumed from a cached prefix is not guaranteed a cold run's tokens"
        )
    return None


class PrefixCache:
    """KV caches of earlier generations, by the token ids they cover, most recent
    first. A lookup takes the longest run of a prompt's first tokens one of them
    covers, always short of the whole prompt: the last token's forward gives the
    logits the first choice needs. Every cache axis named "seq" is cut to it (kiln
    exports only caches that grow along "seq", builders/causal_lm/_cache.py)."""

    def __init__(self, axes: list[int], entries: int = 4) -> None:
        if entries < 1:
            raise ValueError("a prefix cache keeps at least 1 entry")
        self.axes = axes  # each cached tensor's "seq" axis
        self.entries = entries
        self.kept: list[tuple[np.ndarray, list[np.ndarray]]] = []

    def lookup(self, prompt: list[int] | np.ndarray) -> tuple[int, list[np.ndarray] | None]:
        """(n, the cache of the prompt's first n tokens); (0, None) when none matches."""
        want = np.asarray(prompt, np.int64)
        best, found = 0, None
        for tokens, past in self.kept:
            limit = min(len(tokens), len(want) - 1)
            if limit <= best:
                continue  # it cannot beat what is found
            differ = tokens[:limit] != want[:limit]
            n = int(differ.argmax()) if differ.any() else limit
            if n > best:
                best, found = n, past
        if found is None:
            return 0, None
        # Cut to `best` along "seq": a copy (the engine takes contiguous tensors) unless
        # the entry holds exactly those tokens, which it then lends as it is.
        return best, [
            p
            if p.shape[a] == best
            else np.ascontiguousarray(p[(slice(None),) * a + (slice(0, best),)])
            for p, a in zip(found, self.axes, strict=True)
        ]

    def store(self, tokens: list[int], past: list[np.ndarray]) -> None:
        """Keep a copy of `past`, the cache after feeding `tokens`, as the most recent
        entry: an engine that keeps its cache in place writes the next generation into
        the arrays it returned (runtime/backends.py SharedCache)."""
        key = np.asarray(tokens, np.int64)
        older = [e for e in self.kept if len(e[0]) != len(key) or not np.array_equal(e[0], key)]
        self.kept = [(key, [np.array(p) for p in past]), *older][: self.entries]

    def clear(self) -> None:
        self.kept = []


@dataclass(frozen=True)
class Row:
    """One prompt of a batch with what it asked alone (Bundle.generate_rows): its
    new-token budget, its steering, and its sampler (greedy when None)."""

    prompt: list[int]
    max_new_tokens: int
    decoding: Decoding | None = None
    sampler: Sampler | None = None
    # a vision-language bundle's image features for the prompt's image tokens, in order
    # ([image tokens, hidden]; runtime/vlm.py makes them)
    images: np.ndarray | None = None


@dataclass
class Generation:
    tokens: list[list[int]]  # generated ids per prompt, up to and including EOS
    steps: int  # target forward passes after the prefill
    seconds: float
    first_token_seconds: float = 0.0  # from the call until the first token was chosen
    # generate_rows(strict=False): why each row whose grammar's output never completed
    incomplete: dict[int, str] = field(default_factory=dict)


class Bundle:
    """A causal-LM bundle: ordinary and lora variants (runtime/speculative.py drafts;
    runtime/vlm.py adds images)."""

    TASK = TASK

    def __init__(self, path: Path, threads: int | None = None) -> None:
        from tokenizers import Tokenizer

        from runtime.backends import open_engine

        self.path = Path(path)
        self.meta: dict[str, Any] = read_meta(self.path, self.TASK)
        self.session = open_engine(self.path, self.meta["engines"]["main"], threads)
        tok = self.meta["tokenizer"]
        self.tokenizer = Tokenizer.from_file(str(self.path / tok["file"]))
        self.eos = set(tok["eos"])
        self.pad = int(tok["pad"])
        self.bos = tok["bos"] if tok["add_bos"] else None
        # Each cached tensor's shape, as the export observed it: "batch" and "seq" mark
        # the axes that vary (MLA caches keys and values of different widths).
        self.cache_shapes = [e["shape"] for e in self.meta["io"]["kv_cache"]["entries"]]
        self.past_names = [e["past"] for e in self.meta["io"]["kv_cache"]["entries"]]
        # The cache's dtype, as the engine's graph takes it (float16 for compute fp16).
        self.cache_dtype = self.meta["io"]["kv_cache"].get("dtype", "float32")
        # logits and present.* only: a speculative target also outputs hidden states,
        # which runtime/speculative.py reads and ordinary decoding ignores.
        self.output_names = [
            v["name"]
            for v in self.meta["io"]["outputs"]
            if v["name"] == "logits" or v["name"].startswith("present.")
        ]
        # logits_to_keep: the graph computes logits for the last n positions only
        # (builders/causal_lm/export.py), which a generation's prefill asks for
        inputs = {v["name"]: v for v in self.meta["io"].get("inputs", [])}
        self.keeps_logits = KEEP in inputs
        # a vision-language decoder: image features merged at its image token; a forward
        # that feeds none passes 0 rows (builders/causal_lm/export.py)
        vision = self.meta.get("vision") or {}
        self.image_token: int | None = vision.get("image_token_id") if IMAGES in inputs else None
        self.video_token: int | None = None  # a vision bundle that takes videos sets it
        self.no_images = np.zeros((0, int(vision.get("hidden_size", 0))), np.float32)
        self.image_blocks = vision.get("image_attention") == "bidirectional"
        self.max_batch_size = self.meta["limits"]["max_batch_size"]
        self.max_seq_len = self.meta["limits"]["max_seq_len"]
        self.policy = Policy(self.meta.get("prompt_policy"))
        # Chunked prefill (build.prefill_chunk_len): 0 feeds a prompt in one pass.
        self.prefill_chunk_len = int(self.meta["limits"].get("prefill_chunk_len", 0))
        self.prefix_cache: PrefixCache | None = None  # enable_prefix_cache() turns it on
        self.last_reused = 0  # prompt tokens the last generation took from the prefix cache
        self._tokenizer_text: str | None = None

    # ------------------------------------------------------------ text

    def encode(self, text: str) -> list[int]:
        self.policy.check(text)
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return ([self.bos] if self.bos is not None else []) + ids

    @property
    def has_chat(self) -> bool:
        return "chat" in self.meta

    def encode_chat(
        self, messages: list[dict[str, Any]], thinking: bool | None = None
    ) -> list[int]:
        """A conversation's token ids, rendered through the checkpoint's chat template
        with the assistant's turn opened (transformers' apply_chat_template with
        add_generation_prompt). From then on generation also stops at the template's
        end-of-turn tokens."""
        text = self.render_chat(messages, thinking)
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def render_chat(self, messages: list[dict[str, Any]], thinking: bool | None = None) -> str:
        """The conversation as the chat template renders it (encode_chat's text)."""
        if not self.has_chat:
            raise BundleError(
                "this bundle carries no chat template (its checkpoint has none); "
                "give a plain prompt instead"
            )
        messages = check_messages(
            messages, parts=self.image_token is not None, videos=self.video_token is not None
        )
        for i, m in enumerate(messages):
            for text in texts(m["content"]):
                self.policy.check(text, f"message {i} ({m['role']})")
        text = Template(self.path, self.meta["chat"]).render(messages, thinking)
        self.eos |= set(self.meta["chat"].get("end_of_turn", []))
        return text

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode([i for i in ids if i not in self.eos]))

    # ------------------------------------------------------------ forward passes

    def _empty_cache(self, batch: int) -> list[np.ndarray]:
        return [
            np.zeros([{"batch": batch, "seq": 0}.get(d, d) for d in shape], self.cache_dtype)
            for shape in self.cache_shapes
        ]

    def forward(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        positions: np.ndarray,
        past: list[np.ndarray],
        keep: int = 0,
        images: np.ndarray | None = None,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """One forward: logits [batch, seq, vocab] (with `keep` > 0, of the last `keep`
        positions at least: all of them where the graph cannot leave any out) and the
        cache after it. `images`: the features of the image tokens in `ids`, row by row."""
        feeds = self.feeds(ids, mask, positions, past, keep, images)
        logits, *present = self.session.run(self.output_names, feeds)
        return logits, present

    def feeds(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        positions: np.ndarray,
        past: list[np.ndarray],
        keep: int = 0,
        images: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """A forward's graph inputs (builders/causal_lm/export.py's contract)."""
        feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        feeds.update(zip(self.past_names, past, strict=True))
        if self.keeps_logits:
            feeds[KEEP] = np.array(keep, np.int64)
        if self.image_token is not None:
            feeds[IMAGES] = self.no_images if images is None else images
        elif images is not None and len(images):
            self._check_images(ids, [images])  # refuses: no vision program
        return feeds

    def logits(
        self, ids: list[int], images: np.ndarray | None = None, generated: int = 0
    ) -> np.ndarray:
        """Teacher-forced logits [len(ids), vocab] of one sequence, in one prefill
        (`images`: the features of its image tokens, runtime/vlm.py). `generated`: how
        many of the last ids a generation made; an image token among them is text, as
        a decode step feeds it without pixels (the graph embeds an image token past the
        feature rows as itself), so only the ids before them are checked against
        `images`."""
        self._check_length(len(ids), 0)
        arr = np.asarray([ids], np.int64)
        self._check_images(arr[:, : len(ids) - generated], [images])
        mask = np.ones_like(arr)
        positions = np.arange(len(ids), dtype=np.int64)[None]
        prompt = len(ids) - generated  # the generated ids' positions step on, as decoding's
        positions = self.rope_positions(
            arr[:, :prompt], mask[:, :prompt], positions[:, :prompt], [images]
        )
        steps = np.arange(1, generated + 1).reshape(1, generated, *[1] * (positions.ndim - 2))
        positions = np.concatenate([positions, positions[:, -1:] + steps], axis=1)
        logits, _ = self.forward(arr, mask, positions, self._empty_cache(1), images=images)
        return logits[0]

    def rope_positions(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        positions: np.ndarray,
        images: list[np.ndarray | None],
    ) -> np.ndarray:
        """The position_ids a prompt's forwards feed: `positions` [batch, seq] as they
        are; a decoder that rotates by (t, h, w) positions makes them [batch, seq, 3]
        from each row's images (runtime/grid_vlm.py). Generation slices them along seq
        and steps the last one by 1 either way."""
        return positions

    def _check_images(self, ids: np.ndarray, images: list[np.ndarray | None]) -> None:
        """Each row's image tokens must have one feature row each: the graph writes the
        batch's k-th image token from feature row k."""
        if self.image_token is None:
            if any(f is not None and len(f) for f in images):
                raise BundleError("this bundle takes no images: it has no vision program")
            return
        for row, features in enumerate(images):
            tokens = int((ids[row] == self.image_token).sum())
            rows = 0 if features is None else len(features)
            if tokens != rows:
                raise BundleError(
                    f"prompt {row} has {tokens} image tokens but {rows} image feature rows; "
                    "give its images with the prompt (runtime/vlm.py expands each image's "
                    "placeholder to its tokens)"
                )

    def _chunk_images(
        self, ids: np.ndarray, images: list[np.ndarray | None] | None, used: list[int]
    ) -> np.ndarray | None:
        """The feature rows of the image tokens in `ids` (a chunk of the batch's
        prompts), row by row, from each row's features after the `used` ones already
        fed; `used` is advanced. None where the batch has no images."""
        if images is None or self.image_token is None:
            return None
        parts = []
        for row, features in enumerate(images):
            n = int((ids[row] == self.image_token).sum())
            if n:
                assert features is not None  # _check_images matched the counts
                parts.append(features[used[row] : used[row] + n])
                used[row] += n
        return np.concatenate(parts) if parts else self.no_images

    def _check_length(self, prompt: int, new: int) -> None:
        if prompt + new > self.max_seq_len:
            raise BundleError(
                f"a prompt of {prompt} tokens plus {new} new tokens exceeds the bundle's "
                f"max_seq_len of {self.max_seq_len}; shorten the prompt or rebuild with a "
                "larger build.max_seq_len"
            )

    # ------------------------------------------------------------ generation

    def _batch(
        self, prompts: list[list[int]], max_new_tokens: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The prompts left-padded into one batch: ids, attention mask, positions."""
        if not prompts or len(prompts) > self.max_batch_size:
            raise BundleError(
                f"batch of {len(prompts)} prompts; this bundle serves 1 to {self.max_batch_size}"
            )
        if any(len(p) == 0 for p in prompts):
            raise BundleError("empty prompt: nothing to condition on")
        width = max(len(p) for p in prompts)
        self._check_length(width, max_new_tokens)
        if len(prompts) == 1:  # no padding: the common single request, without the loop
            ids = np.asarray(prompts, np.int64)
            return ids, np.ones_like(ids), np.arange(width, dtype=np.int64)[None]
        batch = len(prompts)
        ids = np.full((batch, width), self.pad, np.int64)
        mask = np.zeros((batch, width), np.int64)
        for row, p in enumerate(prompts):
            ids[row, width - len(p) :] = p
            mask[row, width - len(p) :] = 1
        positions = np.maximum(mask.cumsum(axis=1) - 1, 0)
        return ids, mask, positions

    def generate(
        self, prompts: list[list[int]], max_new_tokens: int, sampler: Sampler | None = None
    ) -> Generation:
        """Generate for a batch of token-id prompts (left-padded into one batch)."""
        return self.generate_with(prompts, max_new_tokens, None, sampler)

    def generate_with(
        self,
        prompts: list[list[int]],
        max_new_tokens: int,
        decoding: Decoding | None,
        sampler: Sampler | None = None,
    ) -> Generation:
        """generate(), its next-token logits steered by `decoding` (runtime/processors.py:
        the common logits processors, the caller's own `(token_ids, logits) -> logits`
        hooks, and a grammar the output must match, runtime/guided.py). A grammar's
        output that has not ended when max_new_tokens run out raises BundleError."""
        sampler = sampler or Sampler()
        return self.generate_rows([Row(p, max_new_tokens, decoding, sampler) for p in prompts])

    def generate_rows(self, rows: list[Row], strict: bool = True) -> Generation:
        """One batch of prompts that each asked for their own budget, steering and
        sampler (a server's requests that arrived together): the batch steps until
        every row has ended or used its budget; a row that has fed the pad token from
        then on. A row's sampler draws for that row alone, so a seeded request draws
        what it would alone (its logits may differ in the last bits from a batch of one:
        left padding changes the sums' shapes). A row whose grammar's output did not
        complete raises BundleError, or with `strict` False is named in the result's
        `incomplete` (a server's batch: one request's failure is not the others')."""
        import time

        started = time.perf_counter()
        prompts = [r.prompt for r in rows]
        budgets = [r.max_new_tokens for r in rows]
        samplers = [r.sampler or Sampler() for r in rows]
        shared = all(s is samplers[0] for s in samplers)  # one draw for the whole batch
        longest = max(budgets, default=0)
        ids, mask, positions = self._batch(prompts, longest)
        batch = len(prompts)
        images = [r.images for r in rows]
        self._check_images(ids, images)
        positions = self.rope_positions(ids, mask, positions, images)
        pictured = any(f is not None and len(f) for f in images)
        # a prefix cache is keyed by token ids, which are the same for any image
        caching = self.prefix_cache is not None and batch == 1 and not pictured
        steering = None
        if any(r.decoding is not None and r.decoding.steers for r in rows):
            decodings = [r.decoding for r in rows]
            steering = Steering(decodings, prompts, self.eos, self._vocab(), self.tokenizer_json)
        reused, cached = 0, None
        if caching:
            assert self.prefix_cache is not None
            reused, cached = self.prefix_cache.lookup(ids[0])  # one prompt: no padding
        past = cached if cached is not None else self._empty_cache(batch)
        self.last_reused = reused
        logits, past = self._prefill(
            ids[:, reused:], mask, positions[:, reused:], past, images if pictured else None
        )
        out: list[list[int]] = [[] for _ in prompts]
        ended = [False] * batch  # the row met an end of sequence
        finished = [b < 1 for b in budgets]  # ... or used its budget
        width = mask.shape[1]
        # every step's mask, made once: step i feeds its first width + i + 1 columns
        # (contiguous for one prompt; a batch's are copied per step)
        masks = np.ones((batch, width + longest), np.int64)
        masks[:, :width] = mask
        last_pos = positions[:, -1:].copy()
        fed = np.empty((batch, 1), np.int64)
        steps = 0
        first_token = 0.0
        # the engine's lean decode step where it has one (runtime/backends.py
        # SharedCache.step): its cache stays in place, read back once at the end
        engine: Any = self.session
        stepping = hasattr(engine, "step") and hasattr(engine, "presents")
        stepped = False
        for step in range(longest):
            last = logits[:, -1, :]
            if steering is not None:
                last = steering(last, np.array(finished))
            if shared:
                nxt = samplers[0](last).tolist()
            else:
                nxt = [
                    self.pad if finished[r] else int(s(last[r : r + 1])[0])
                    for r, s in enumerate(samplers)
                ]
            if step == 0:
                first_token = time.perf_counter() - started
            for row, token in enumerate(nxt):
                if not finished[row]:
                    out[row].append(token)
                    ended[row] = token in self.eos
                    if steering is not None:
                        steering.advance(row, token)
                    finished[row] = ended[row] or len(out[row]) >= budgets[row]
                if finished[row]:
                    nxt[row] = self.pad
            if all(finished):
                break
            fed[:, 0] = nxt  # a row that is done feeds the pad token
            mask = masks[:, : width + step + 1]
            if batch > 1:
                mask = np.ascontiguousarray(mask)
            last_pos += 1
            fast = engine.step(fed, mask, last_pos) if stepping else None
            if fast is not None:
                logits, stepped = fast, True
            else:
                if stepped:  # the cache the steps left, as a forward takes it
                    past, stepped = engine.presents(), False
                logits, past = self.forward(fed.copy(), mask, last_pos.copy(), past)
            steps += 1
        if stepped:
            past = engine.presents()
        incomplete = steering.incomplete(np.array(ended), budgets) if steering else {}
        if strict and incomplete:
            row, why = next(iter(incomplete.items()))
            raise BundleError(f"prompt {row}: {why}")
        if caching:  # the cache covers every fed token
            assert self.prefix_cache is not None
            self.prefix_cache.store(prompts[0] + out[0][:steps], past)
        return Generation(out, steps, time.perf_counter() - started, first_token, incomplete)

    def _prefill(
        self,
        ids: np.ndarray,
        mask: np.ndarray,
        positions: np.ndarray,
        past: list[np.ndarray],
        images: list[np.ndarray | None] | None = None,
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """The forward over a prompt's tokens after `past` (`mask` covers both): one pass,
        or with prefill_chunk_len set, one pass per chunk of that many tokens, each on
        the cache the ones before it left. Only the last position's logits are asked
        for, and only the last chunk's come back. `images`: each row's image features,
        fed with the chunk that holds their tokens; where the decoder's image tokens
        attend both ways (Gemma 3), a chunk ends before an image it would split."""
        chunk, width = self.prefill_chunk_len, ids.shape[1]
        used = [0] * ids.shape[0]
        if not chunk or width <= chunk:
            features = self._chunk_images(ids, images, used)
            return self.forward(ids, mask, positions, past, keep=1, images=features)
        before = mask.shape[1] - width
        whole = self.image_token if self.image_blocks else None
        for start, end in chunk_bounds(ids, chunk, whole):
            features = self._chunk_images(ids[:, start:end], images, used)
            logits, past = self.forward(
                ids[:, start:end],
                mask[:, : before + end],
                positions[:, start:end],
                past,
                keep=1,
                images=features,
            )
        return logits, past

    def enable_prefix_cache(self, entries: int = 4) -> PrefixCache:
        """Keep the KV cache of the last `entries` single-prompt generations: a prompt
        that starts with the tokens one of them fed (a system prompt, the chat so far)
        runs its prefill only for the tokens after them (`last_reused` says how many
        it skipped). Batches of several prompts always prefill in full. A bundle whose
        precision quantizes activations or the KV cache is refused
        (prefix_reuse_refusal): reuse there is not exact."""
        refusal = prefix_reuse_refusal(self.meta)
        if refusal is not None:
            raise BundleError(f"prefix cache refused: {refusal}")
        if any("seq" not in shape for shape in self.cache_shapes):
            raise BundleError("this bundle's cache has a tensor with no seq axis to cut")
        self.prefix_cache = PrefixCache(
            [shape.index("seq") for shape in self.cache_shapes], entries
        )
        return self.prefix_cache

    def _vocab(self) -> int:
        """The width of the graph's logits (a padded vocabulary included)."""
        return int(self.meta.get("vocab_size") or self.tokenizer.get_vocab_size())

    def tokenizer_json(self) -> str:
        """The tokenizer as JSON, serialized once (llguidance's view is cached by it)."""
        if self._tokenizer_text is None:
            self._tokenizer_text = str(self.tokenizer.to_str())
        return self._tokenizer_text


def chunk_bounds(ids: np.ndarray, chunk: int, whole: int | None = None) -> list[tuple[int, int]]:
    """[start, end) of each prefill chunk of `ids` [rows, width]: `chunk` tokens each,
    the last shorter. With `whole` (an image token whose runs attend both ways), a
    boundary inside a run of it in any row moves back to where that run starts, or,
    when the run starts at the chunk's own start, forward to where it ends: the chunk
    then holds the whole image, longer than `chunk`."""
    width = ids.shape[1]
    bounds, start = [], 0
    while start < width:
        end = min(start + chunk, width)
        if whole is not None:
            split = lambda b: bool(((ids[:, b - 1] == whole) & (ids[:, b] == whole)).any())  # noqa: E731
            back = end
            while start < back < width and split(back):
                back -= 1
            if back > start:
                end = back
            else:
                while end < width and split(end):
                    end += 1
        bounds.append((start, end))
        start = end
    return bounds

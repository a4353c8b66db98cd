"""The served recipes: each one's bundle found in the store (never built here: a
server that starts a build on its first request answers nothing for minutes), opened
once with runtime.open, and run in a worker thread per request.

A bundle runs one generation at a time (`Served.lock`): its engine keeps the KV cache
in place between steps (runtime/backends.py SharedCache), so two generations on one
bundle would write over each other's cache. Requests are not batched together; a
request waits for the one before it on the same recipe, and its stream starts when
its turn comes. Requests to different recipes run side by side.

Text reaches a stream as it is generated through a logits processor (the runtime's
`(token_ids, logits) -> logits` hook, runtime/processors.py): it sees the tokens so
far at every step, hands the new text on, ends the answer at a stop text (by leaving
only an end-of-sequence token), and raises Cancelled when the client left or the
request's time ran out. The runtime is imported inside functions, as in
kiln/commands/run.py: the core never imports it at module level."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kiln import hostinfo
from kiln.commands.workspace import catalog, plan_in, store
from kiln.errors import KilnError, Location
from kiln.serve.wire import ApiError
from kiln.store import unsupported

TEXT_TASKS = ("text-generation",)
EMBED_TASKS = ("feature-extraction",)


class Cancelled(Exception):
    """The client went away or the request ran out of time: generation stops."""


@dataclass
class Served:
    """One recipe's open bundle and what GET /v1/models says of it."""

    name: str
    task: str
    runner: Any  # a runtime runner: Bundle (or a subclass) or Embedder
    card: dict[str, Any]
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def steerable(self) -> bool:
        """Whether per-step hooks run: the ordinary loop's generate_with (kiln's `doit
        run` steers only these too); a drafting or inductor bundle generates whole."""
        import runtime

        return type(self.runner) is runtime.Bundle


def load(names: list[str], where: Location) -> dict[str, Served]:
    """Each named recipe's built bundle, opened; a recipe not built here, not known,
    or of a task the API does not serve is refused before the server listens."""
    import runtime
    from kiln.evidence import manifest
    from runtime import BundleError

    cat = catalog(save=False)
    here = hostinfo.host_class(hostinfo.host())
    served: dict[str, Served] = {}
    for name in names:
        if name not in cat.recipes:
            raise KilnError.one(f"no recipe {name!r}", where, "doit status lists them")
        recipe = cat.recipes[name]
        if recipe.task not in TEXT_TASKS + EMBED_TASKS:
            raise KilnError.one(
                f"{name} is a {recipe.task} recipe; the API serves text-generation "
                "(chat and completions) and feature-extraction (embeddings)",
                where,
            )
        p = plan_in(cat, name)
        key = p.step("bundle").key
        if not store().has(key):
            raise KilnError.one(
                f"{name} is not built here", where, f"build it first: doit build recipe={name}"
            )
        path = store().get(key).path
        found = unsupported.marker_of(path)
        if found is not None:
            raise KilnError.one(f"{name} is unsupported here: {found['reason']}", where)
        try:
            runner: Any = runtime.open(path)
        except BundleError as exc:
            raise KilnError.one(f"{name}: {exc}", where) from None
        record = manifest.passed_here(manifest.known(cat.paths, name), p)
        card = {
            "task": recipe.task,
            "verdict": record.verdict if record else "unvalidated",
            "host_class": here.label,
            "precision": recipe.precision.model_dump(mode="json", exclude_none=True),
        }
        if recipe.task in TEXT_TASKS:
            card["chat_template"] = bool(runner.has_chat)
        served[name] = Served(name, recipe.task, runner, card)
    return served


@dataclass
class Ask:
    """One generation, decided: its prompt's ids, budget, sampler, grammar and stops."""

    prompt: list[int]
    budget: int
    sampler: Any
    grammar: Any
    stops: list[str]


def sampler(temperature: float, top_p: float, seed: int | None) -> Any:
    from runtime import Sampler

    return Sampler(
        temperature=temperature, top_p=top_p, seed=secrets.randbits(32) if seed is None else seed
    )


def again(ask: Ask, body: Any, index: int) -> Ask:
    """The request's `index`-th answer (of `n`): the same ask, its sampler seeded
    seed + index (a random seed each without one), so seeded answers are reproducible
    and differ from each other when sampling."""
    from dataclasses import replace

    if index == 0:
        return ask
    seed = None if body.seed is None else body.seed + index
    return replace(ask, sampler=sampler(body.temperature, body.top_p, seed))


def budget(served: Served, prompt: int, asked: int | None, cap: int, param: str) -> int:
    """The new tokens a request may take: what it asked, within the server's cap and
    the bundle's max_seq_len; by default as many as both allow."""
    room = served.runner.max_seq_len - prompt
    if asked is not None and asked > cap:
        raise ApiError(400, f"max_tokens {asked} is over this server's cap of {cap}", "max_tokens")
    if room < 1 or (asked is not None and asked > room):
        raise ApiError(
            400,
            f"a prompt of {prompt} tokens plus {asked or 1} new tokens exceeds {served.name}'s "
            f"max_seq_len of {served.runner.max_seq_len}",
            param,
            "context_length_exceeded",
        )
    return asked if asked is not None else min(cap, room)


@dataclass
class Result:
    text: str
    finish: str  # "stop" (end of sequence or a stop text) or "length"
    prompt_tokens: int
    completion_tokens: int


class Tap:
    """The per-step hook: new text to `emit` as tokens come, cut at the first stop
    text; Cancelled when `cancelled` is set or `deadline` (time.monotonic) passed."""

    def __init__(
        self,
        served: Served,
        ask: Ask,
        emit: Callable[[str], None],
        cancelled: threading.Event,
        deadline: float,
    ) -> None:
        self.bundle, self.ask, self.emit = served.runner, ask, emit
        self.cancelled, self.deadline = cancelled, deadline
        self.sent = ""  # the text emitted so far
        self.cut = False  # a stop text was met: nothing more is emitted
        self.seen = 0

    def __call__(self, token_ids: Any, logits: Any) -> Any:
        if self.cancelled.is_set() or time.monotonic() > self.deadline:
            raise Cancelled
        new = token_ids[len(self.ask.prompt) :]
        if len(new) > self.seen:
            self.seen = len(new)
            self.feed(new.tolist(), final=False)
        if self.cut and self.ask.grammar is None:  # only an end of sequence may come now
            end = min(self.bundle.eos)
            logits = logits.copy()
            logits[:] = -float("inf")
            logits[end] = 0.0
        return logits

    def feed(self, tokens: list[int], final: bool) -> None:
        if self.cut:
            return
        text = self.bundle.decode(tokens)
        if not text.startswith(self.sent):  # a decoder that rewrote what it gave: wait
            return
        hits = [i for i in (text.find(s, max(0, len(self.sent) - len(s))) for s in self.ask.stops)]
        hits = [i for i in hits if i >= 0]
        if hits:
            self.cut, text = True, text[: min(hits)]
        elif not final:
            text = self._settled(text)
        if len(text) > len(self.sent):
            piece, self.sent = text[len(self.sent) :], text
            self.emit(piece)

    def _settled(self, text: str) -> str:
        """`text` less what may still change: a character whose bytes have not all come
        (U+FFFD), and an ending that could grow into a stop text."""
        text = text.rstrip("\ufffd")
        hold = max(
            (k for s in self.ask.stops for k in range(1, len(s)) if text.endswith(s[:k])),
            default=0,
        )
        return text[: len(text) - hold]


def generate(
    served: Served,
    ask: Ask,
    emit: Callable[[str], None],
    cancelled: threading.Event,
    deadline: float,
) -> Result:
    """Run one generation in this (worker) thread, the bundle's lock held."""
    from dataclasses import replace

    from runtime.processors import Decoding

    tap = Tap(served, ask, emit, cancelled, deadline)
    if not served.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
        raise Cancelled
    try:
        bundle = served.runner
        if served.steerable:
            decoding = replace(Decoding(grammar=ask.grammar), processors=(tap,))
            out = bundle.generate_with([ask.prompt], ask.budget, decoding, ask.sampler)
        else:
            out = bundle.generate([ask.prompt], ask.budget, ask.sampler)
    finally:
        served.lock.release()
    tokens = out.tokens[0]
    tap.feed(tokens, final=True)
    ended = bool(tokens) and tokens[-1] in bundle.eos
    return Result(tap.sent, "stop" if tap.cut or ended else "length", len(ask.prompt), len(tokens))


def embed(served: Served, texts: list[str]) -> tuple[Any, int]:
    """The texts' vectors [n, dim] and their token count, the bundle's lock held."""
    with served.lock:
        vectors = served.runner.embed(texts)
    tokens = sum(len(served.runner.encode(t)) for t in texts)
    return vectors, tokens

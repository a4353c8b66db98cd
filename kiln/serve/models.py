"""The served recipes: each one's bundle found in the store (never built here: a
server that starts a build on its first request answers nothing for minutes), opened
once with runtime.open, and run by one worker thread per recipe (`Batcher`).

A bundle's engine keeps the KV cache in place between steps (runtime/backends.py
SharedCache), so one generation runs on it at a time; requests that arrive together
decode as one batch instead. The worker takes every request waiting when it is free,
up to the bundle's max_batch_size, and runs them through Bundle.generate_rows, each
row with its own budget, sampler, grammar and hooks; a request that arrives during a
batch waits for the next one (static batching: a batch ends with its longest answer).
A bundle that generates whole (inductor, drafting: `Served.steerable`) runs its
requests one at a time. Requests to different recipes run side by side.

Text reaches a stream as it is generated through a logits processor (the runtime's
`(token_ids, logits) -> logits` hook, runtime/processors.py): it sees the tokens so
far at every step, hands the new text on, and ends the answer at a stop text, or when
the client left or the request's time ran out, by leaving only an end-of-sequence
token (a row under a grammar runs on to its end instead, unseen). The runtime is
imported inside functions, as in kiln/commands/run.py: the core never imports it at
module level."""

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
    batcher: Batcher = field(init=False)

    def __post_init__(self) -> None:
        self.batcher = Batcher(self)

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
    logprobs: int | None = None  # the likeliest tokens to list per position; None: none
    streamed: bool = True  # text goes out as it comes; else only the whole answer is read


@dataclass(frozen=True)
class Logprob:
    """One answer token's log probability under the model (its logits after the
    request's processors, before a grammar's mask), with the likeliest `top` tokens."""

    token: int
    logprob: float
    top: list[tuple[int, float]]


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
    logprobs: list[Logprob] | None = None


# A stream's sink: a piece of new text, and the logprobs of the tokens that made it.
Emit = Callable[[str, "list[Logprob]"], None]


def _log_softmax(logits: Any) -> Any:
    import numpy as np

    x = np.asarray(logits, np.float64)
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


class Tap:
    """The per-step hook: new text to `emit` as tokens come, cut at the first stop
    text; when `cancelled` is set or `deadline` (time.monotonic) passed, `gone`, and
    the row ends (where no grammar holds it)."""

    def __init__(
        self,
        served: Served,
        ask: Ask,
        emit: Emit,
        cancelled: threading.Event,
        deadline: float,
    ) -> None:
        self.bundle, self.ask, self.emit = served.runner, ask, emit
        self.cancelled, self.deadline = cancelled, deadline
        self.sent = ""  # the text emitted so far
        self.cut = False  # a stop text was met: nothing more is emitted
        self.gone = False  # the client left or the time ran out: nothing more is emitted
        self.seen = 0
        self.logged: list[Logprob] = []  # with ask.logprobs: one per token chosen so far
        self.attached = 0  # ... of which this many went out with emitted text
        self.pending: Any = None  # the log-probabilities the next token is drawn from

    def __call__(self, token_ids: Any, logits: Any) -> Any:
        if not self.gone and (self.cancelled.is_set() or time.monotonic() > self.deadline):
            self.gone = True
        new = token_ids[len(self.ask.prompt) :]
        if self.ask.logprobs is not None and not (self.cut or self.gone):
            self._log(new.tolist())
            self.pending = _log_softmax(logits)
        # the text so far, where a stream waits for it or a stop text may end it (a
        # whole answer without stops is decoded once, at the end)
        if len(new) > self.seen and not self.gone and (self.ask.streamed or self.ask.stops):
            self.seen = len(new)
            self.feed(new.tolist(), final=False)
        if (self.cut or self.gone) and self.ask.grammar is None:  # only an end of sequence
            end = min(self.bundle.eos)
            logits = logits.copy()
            logits[:] = -float("inf")
            logits[end] = 0.0
        return logits

    def _log(self, tokens: list[int]) -> None:
        """The newest token's entry, from the distribution it was drawn from."""
        if self.pending is None or len(tokens) != len(self.logged) + 1:
            return
        import numpy as np

        lp, k = self.pending, int(self.ask.logprobs or 0)
        best = np.argpartition(-lp, k)[:k] if 0 < k < lp.shape[-1] else np.arange(lp.shape[-1])
        top = sorted(((int(i), float(lp[i])) for i in best[:k]), key=lambda e: -e[1])
        self.logged.append(Logprob(tokens[-1], float(lp[tokens[-1]]), top))
        self.pending = None

    def feed(self, tokens: list[int], final: bool) -> None:
        if final and self.ask.logprobs is not None and not self.gone:
            self._log(tokens)  # the last token: no step came after it
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
        if len(text) > len(self.sent) or (final and self.attached < len(self.logged)):
            piece, self.sent = text[len(self.sent) :], text
            self.emit(piece, self.logged[self.attached :])
            self.attached = len(self.logged)

    def _settled(self, text: str) -> str:
        """`text` less what may still change: a character whose bytes have not all come
        (U+FFFD), and an ending that could grow into a stop text."""
        text = text.rstrip("\ufffd")
        hold = max(
            (k for s in self.ask.stops for k in range(1, len(s)) if text.endswith(s[:k])),
            default=0,
        )
        return text[: len(text) - hold]


@dataclass
class Job:
    """One request's generation, queued for its recipe's worker; `settled` is called
    (in the worker's thread) once it has a result or an error."""

    ask: Ask
    tap: Tap
    settled: Callable[[Job], None] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    result: Result | None = None
    error: BaseException | None = None

    def settle(self, result: Result | None = None, error: BaseException | None = None) -> None:
        if self.done.is_set():
            return
        self.result, self.error = result, error
        self.done.set()
        if self.settled is not None:
            self.settled(self)


class Batcher:
    """A served recipe's worker thread (started with its first request): it runs the
    requests waiting when it is free, up to the bundle's max_batch_size of them (one
    for a bundle that generates whole), as one batch, the bundle's lock held.
    `batches` counts the batches by size, for the benchmark and the tests."""

    def __init__(self, served: Served) -> None:
        self.served = served
        self.waiting: list[Job] = []
        self.ready = threading.Condition()
        self.thread: threading.Thread | None = None
        self.batches: dict[int, int] = {}

    def submit(self, job: Job) -> None:
        with self.ready:
            self.waiting.append(job)
            if self.thread is None:
                name = f"generate {self.served.name}"
                self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
                self.thread.start()
            self.ready.notify()

    def _loop(self) -> None:
        limit = int(getattr(self.served.runner, "max_batch_size", 1))
        if not self.served.steerable:
            limit = 1
        while True:
            with self.ready:
                while not self.waiting:
                    self.ready.wait()
                now, live = time.monotonic(), []
                for job in self.waiting:  # a client that left, or ran out of time, waiting
                    if job.tap.cancelled.is_set() or job.tap.deadline <= now:
                        job.settle(error=Cancelled())
                    else:
                        live.append(job)
                jobs, self.waiting = live[:limit], live[limit:]
            if jobs:
                self.batches[len(jobs)] = self.batches.get(len(jobs), 0) + 1
                self._run(jobs)

    def _run(self, jobs: list[Job]) -> None:
        from dataclasses import replace

        from runtime.causal_lm import Row
        from runtime.format import BundleError
        from runtime.processors import Decoding

        bundle = self.served.runner
        try:
            with self.served.lock:
                if self.served.steerable:
                    rows = [
                        Row(
                            j.ask.prompt,
                            j.ask.budget,
                            replace(Decoding(grammar=j.ask.grammar), processors=(j.tap,)),
                            j.ask.sampler,
                        )
                        for j in jobs
                    ]
                    out = bundle.generate_rows(rows, strict=False)
                else:
                    (job,) = jobs
                    out = bundle.generate([job.ask.prompt], job.ask.budget, job.ask.sampler)
        except BaseException as exc:  # the whole batch failed: each request says why
            for job in jobs:
                job.settle(error=exc)
            return
        for row, (job, tokens) in enumerate(zip(jobs, out.tokens, strict=True)):
            tap = job.tap
            if tap.gone:
                job.settle(error=Cancelled())
            elif row in out.incomplete:
                job.settle(error=BundleError(out.incomplete[row]))
            else:
                tap.feed(tokens, final=True)
                ended = bool(tokens) and tokens[-1] in bundle.eos
                finish = "stop" if tap.cut or ended else "length"
                logged = tap.logged if job.ask.logprobs is not None else None
                job.settle(Result(tap.sent, finish, len(job.ask.prompt), len(tokens), logged))


def submit(
    served: Served,
    ask: Ask,
    emit: Emit,
    cancelled: threading.Event,
    deadline: float,
    settled: Callable[[Job], None] | None = None,
) -> Job:
    """One generation, queued for the recipe's worker, which may batch it with others."""
    job = Job(ask, Tap(served, ask, emit, cancelled, deadline), settled)
    served.batcher.submit(job)
    return job


def generate(
    served: Served,
    ask: Ask,
    emit: Emit,
    cancelled: threading.Event,
    deadline: float,
) -> Result:
    """submit(), and this thread waits for its result until the deadline."""
    job = submit(served, ask, emit, cancelled, deadline)
    if not job.done.wait(timeout=max(0.0, deadline - time.monotonic())):
        cancelled.set()  # its row ends at the next step
        raise Cancelled
    if job.error is not None:
        raise job.error
    assert job.result is not None
    return job.result


def embed(served: Served, texts: list[str]) -> tuple[Any, int]:
    """The texts' vectors [n, dim] and their token count, the bundle's lock held."""
    with served.lock:
        vectors = served.runner.embed(texts)
    tokens = sum(len(served.runner.encode(t)) for t in texts)
    return vectors, tokens

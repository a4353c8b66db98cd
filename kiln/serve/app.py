"""The Starlette app: the OpenAI-compatible API at /v1 and the rendered site at /.

Why Starlette under uvicorn: generation runs in worker threads and answers stream as
server-sent events, so the server must be asynchronous (http.server, which previews
the site, gives a thread per connection and no way to stream from another thread
cleanly). Starlette is the small, well-kept ASGI toolkit FastAPI is built on, with
StreamingResponse and StaticFiles, and nothing more; uvicorn is its usual server and
shuts down gracefully on SIGTERM. The request bodies are checked with pydantic,
which kiln already uses (wire.py).

Every error is OpenAI's shape, {"error": {"message", "type", "param", "code"}}: 400
for a bad body (naming the field), 404 for an unknown model or path, 413 for a body
over the cap, 504 for a request out of time, 500 for anything else (the message only;
the traceback goes to the server's log, never to the client)."""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from kiln.serve import models, wire
from kiln.serve.wire import ApiError

log = logging.getLogger("kiln.serve")


DRAIN = 16  # a declared body up to this many times max_body is read before its 413


@dataclass(frozen=True)
class Limits:
    """What one request may ask: its body's bytes, its new tokens, its seconds."""

    max_body: int = 1 << 20  # 1 MiB: a long conversation is far less
    max_tokens: int = 1024
    timeout: float = 300.0


def app(served: dict[str, models.Served], site: Path | None, limits: Limits) -> Starlette:
    api = _Api(served, limits)
    routes: list[Any] = [
        Route("/v1/models", api.listing, methods=["GET"]),
        Route("/v1/models/{name}", api.one, methods=["GET"]),
        Route("/v1/chat/completions", api.chat, methods=["POST"]),
        Route("/v1/completions", api.completions, methods=["POST"]),
        Route("/v1/embeddings", api.embeddings, methods=["POST"]),
        Route("/v1/{rest:path}", api.unknown, methods=["GET", "POST"]),
    ]
    if site is not None:
        routes.append(Mount("/", StaticFiles(directory=site, html=True)))
    handlers: dict[Any, Callable[..., Any]] = {
        HTTPException: _http_error,
        Exception: _internal_error,
    }
    return Starlette(routes=routes, exception_handlers=handlers)


def _answer(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if not request.url.path.startswith("/v1"):  # the site's own 404s stay plain
        return Response(exc.detail, status_code=exc.status_code)
    return _answer(ApiError(exc.status_code, str(exc.detail), code="not_found"))


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.exception("internal error on %s", request.url.path)
    return _answer(ApiError(500, f"internal error: {exc}", kind="server_error"))


class _Api:
    def __init__(self, served: dict[str, models.Served], limits: Limits) -> None:
        self.served, self.limits = served, limits

    # ------------------------------------------------------------ listing

    def _listed(self, s: models.Served) -> dict[str, Any]:
        return {"id": s.name, "object": "model", "created": 0, "owned_by": "kiln", **s.card}

    async def listing(self, request: Request) -> Response:
        data = [self._listed(s) for s in self.served.values()]
        return JSONResponse({"object": "list", "data": data})

    async def one(self, request: Request) -> Response:
        try:
            return JSONResponse(self._listed(self._find(request.path_params["name"], None)))
        except ApiError as exc:
            return _answer(exc)

    async def unknown(self, request: Request) -> Response:
        return _answer(ApiError(404, f"no endpoint {request.url.path}", code="not_found"))

    def _find(self, name: str, tasks: tuple[str, ...] | None) -> models.Served:
        served = self.served.get(name)
        if served is None:
            known = ", ".join(sorted(self.served))
            raise ApiError(
                404,
                f"model {name!r} is not served here (served: {known})",
                "model",
                "model_not_found",
            )
        if tasks is not None and served.task not in tasks:
            raise ApiError(400, f"{name} is a {served.task} model", "model", "wrong_task")
        return served

    async def _body(self, request: Request, kind: type[Any]) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limits.max_body:
            # A client that sends its whole body before it reads (urllib, requests) would
            # see a closed connection, not the 413: a body up to DRAIN times the cap is
            # read and dropped first; a larger one is answered at once.
            if int(declared) <= DRAIN * self.limits.max_body:
                async for _chunk in request.stream():
                    pass
            raise ApiError(413, f"the body is over {self.limits.max_body} bytes", code="too_large")
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > self.limits.max_body:
                raise ApiError(
                    413, f"the body is over {self.limits.max_body} bytes", code="too_large"
                )
        return wire.parse(kind, bytes(raw))

    # ------------------------------------------------------------ generation

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, wire.ChatRequest, "chat.completion")

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, wire.CompletionRequest, "text_completion")

    async def _generate(self, request: Request, kind: type[Any], obj: str) -> Response:
        try:
            body = await self._body(request, kind)
            served = self._find(body.model, models.TEXT_TASKS)
            ask = await asyncio.to_thread(self._ask, served, body)
        except ApiError as exc:
            return _answer(exc)
        deadline = time.monotonic() + self.limits.timeout
        # `n` answers are n generations, each with its own seed
        runs = [_Run(served, models.again(ask, body, i), deadline) for i in range(body.n)]
        tag = "chatcmpl" if obj.startswith("chat") else "cmpl"
        head = _Head(wire.ident(tag), obj, body.model, served.runner.decode)
        if body.stream:
            return StreamingResponse(_events(runs, head), media_type="text/event-stream")
        try:  # all at once: they decode as one batch where the bundle batches
            results = list(await asyncio.gather(*(run.whole() for run in runs)))
        except ApiError as exc:
            return _answer(exc)
        prefix = body.text() if obj == "text_completion" and body.echo else ""
        return JSONResponse(head.whole([prefix + r.text for r in results], results))

    def _ask(self, served: models.Served, body: Any) -> models.Ask:
        """The request, decided in a worker thread (tokenizing is not free)."""
        from runtime import BundleError

        bundle, chat = served.runner, isinstance(body, wire.ChatRequest)
        param = "messages" if chat else "prompt"
        try:
            prompt = _chat_ids(bundle, body.turns()) if chat else bundle.encode(body.text())
        except (BundleError, ValueError) as exc:
            raise ApiError(400, str(exc), param) from None
        if not prompt:
            raise ApiError(400, "the prompt is empty", param)
        grammar = _grammar(served, body.response_format if chat else None)
        budget = models.budget(served, len(prompt), body.budget, self.limits.max_tokens, param)
        sampler = models.sampler(body.temperature, body.top_p, body.seed)
        if body.top is not None and not served.steerable:
            raise ApiError(
                400,
                f"{served.name} generates whole ({type(served.runner).__name__}): its steps' "
                "logits are not seen, so it gives no logprobs",
                "logprobs",
            )
        return models.Ask(prompt, budget, sampler, grammar, body.stops, body.top, body.stream)

    # ------------------------------------------------------------ embeddings

    async def embeddings(self, request: Request) -> Response:
        try:
            body = await self._body(request, wire.EmbeddingRequest)
            served = self._find(body.model, models.EMBED_TASKS)
            texts = body.texts()
            if not texts or any(not t for t in texts):
                raise ApiError(400, "input: give one or more non-empty texts", "input")
            vectors, tokens = await asyncio.to_thread(models.embed, served, texts)
        except ApiError as exc:
            return _answer(exc)
        data = []
        for i, v in enumerate(vectors):
            value: Any = v.astype("<f4").tolist()
            if body.encoding_format == "base64":
                value = base64.b64encode(v.astype("<f4").tobytes()).decode()
            data.append({"object": "embedding", "index": i, "embedding": value})
        use = {"prompt_tokens": tokens, "total_tokens": tokens}
        return JSONResponse({"object": "list", "data": data, "model": body.model, "usage": use})


def _chat_ids(bundle: Any, turns: list[dict[str, str]]) -> list[int]:
    """The conversation through the checkpoint's chat template; a bundle whose
    checkpoint has none (the tiny test models) gets it as plain text, one
    `role: content` line a turn, then `assistant:` (GET /v1/models says which)."""
    if bundle.has_chat:
        return list(bundle.encode_chat(turns))
    lines = [f"{t['role']}: {t['content']}" for t in turns]
    return list(bundle.encode("\n".join([*lines, "assistant:"])))


def _grammar(served: models.Served, fmt: wire.ResponseFormat | None) -> Any:
    """runtime.guided.Grammar for a JSON response_format (kiln's guided decoding)."""
    if fmt is None or fmt.type == "text":
        return None
    from runtime.guided import Grammar

    if not served.steerable:
        raise ApiError(
            400,
            f"{served.name} generates whole ({type(served.runner).__name__}); guided "
            "decoding runs on ordinary text-generation bundles",
            "response_format",
        )
    if fmt.type == "json_object":
        return Grammar.json_schema({"type": "object"})
    if fmt.json_schema is None:
        raise ApiError(400, "type json_schema needs a json_schema", "response_format.json_schema")
    try:
        return Grammar.json_schema(json.dumps(fmt.json_schema.schema_))
    except ValueError as exc:
        raise ApiError(400, str(exc), "response_format.json_schema.schema") from None


@dataclass(frozen=True)
class _Head:
    """What every answer of one request repeats: its id, object, time and model; and
    the bundle's decode, for the text of a logprob's tokens."""

    id: str
    object: str
    model: str
    decode: Callable[[list[int]], str]
    created: int = field(default_factory=wire.now)

    def _choice(
        self,
        text: str,
        finish: str | None,
        delta: bool,
        role: bool = True,
        index: int = 0,
        logprobs: list[models.Logprob] | None = None,
    ) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": index, "finish_reason": finish, "logprobs": None}
        if logprobs is not None:
            choice["logprobs"] = self._logprobs(logprobs)
        if self.object.startswith("chat"):
            message = {"role": "assistant", "content": text} if role else {"content": text}
            choice["delta" if delta else "message"] = message
        else:
            choice["text"] = text
        return choice

    def _logprobs(self, logged: list[models.Logprob]) -> dict[str, Any]:
        """OpenAI's logprobs object: chat's `content` list, or completions' columns."""
        word = functools.cache(lambda token: self.decode([token]))
        if self.object.startswith("chat"):

            def entry(token: int, logprob: float) -> dict[str, Any]:
                text = word(token)
                return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

            return {
                "content": [
                    {**entry(e.token, e.logprob), "top_logprobs": [entry(*t) for t in e.top]}
                    for e in logged
                ]
            }
        offsets, at = [], 0
        for e in logged:
            offsets.append(at)
            at += len(word(e.token))
        return {
            "tokens": [word(e.token) for e in logged],
            "token_logprobs": [e.logprob for e in logged],
            "top_logprobs": [_by_text(word, e.top) for e in logged],
            "text_offset": offsets,
        }

    def _top(self, chunk: bool) -> dict[str, Any]:
        obj = self.object + ".chunk" if chunk and self.object.startswith("chat") else self.object
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def whole(self, texts: list[str], results: list[models.Result]) -> dict[str, Any]:
        """One answer with a choice per result; the prompt's tokens are counted once."""
        made = sum(r.completion_tokens for r in results)
        return {
            **self._top(False),
            "choices": [
                self._choice(t, r.finish, False, index=i, logprobs=r.logprobs)
                for i, (t, r) in enumerate(zip(texts, results, strict=True))
            ],
            "usage": wire.usage(results[0].prompt_tokens, made),
        }

    def chunk(
        self,
        text: str,
        finish: str | None = None,
        role: bool = False,
        index: int = 0,
        logprobs: list[models.Logprob] | None = None,
    ) -> str:
        choice = self._choice(text, finish, True, role, index, logprobs)
        return f"data: {json.dumps({**self._top(True), 'choices': [choice]})}\n\n"


def _by_text(word: Callable[[int], str], top: list[tuple[int, float]]) -> dict[str, float]:
    """Completions' top_logprobs entry, keyed by text as OpenAI's is: two tokens of one
    text (two byte tokens of one unfinished character) keep the likelier."""
    out: dict[str, float] = {}
    for token, logprob in top:
        out.setdefault(word(token), logprob)
    return out


class _Run:
    """One generation, queued for its recipe's worker thread; its text comes back
    through a queue, its result through a future, both set from that thread."""

    def __init__(self, served: models.Served, ask: models.Ask, deadline: float) -> None:
        self.served, self.ask, self.deadline = served, ask, deadline
        self.cancelled = threading.Event()
        self.queue: asyncio.Queue[tuple[str, list[models.Logprob]] | None] = asyncio.Queue()
        self.loop = asyncio.get_running_loop()

    def _emit(self, piece: str, logprobs: list[models.Logprob]) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (piece, logprobs))

    def start(self) -> asyncio.Future[models.Result]:
        job: asyncio.Future[models.Result] = self.loop.create_future()

        def settle(done: models.Job) -> None:  # on the loop: the outcome, then the end
            if not job.done():
                if done.error is not None:
                    job.set_exception(done.error)
                else:
                    job.set_result(cast(models.Result, done.result))
            self.queue.put_nowait(None)

        def settled(done: models.Job) -> None:  # in the worker's thread
            self.loop.call_soon_threadsafe(settle, done)

        models.submit(self.served, self.ask, self._emit, self.cancelled, self.deadline, settled)
        return job

    async def whole(self) -> models.Result:
        try:
            return await _checked(self.start(), self.served.name, self.deadline)
        finally:
            self.cancelled.set()


async def _checked(job: asyncio.Future[models.Result], name: str, deadline: float) -> models.Result:
    """The job's result by the deadline, its failures as ApiErrors."""
    from runtime import BundleError

    try:
        left = max(0.0, deadline - time.monotonic())
        return await asyncio.wait_for(asyncio.shield(job), left)
    except (models.Cancelled, TimeoutError):
        raise ApiError(504, "the request ran out of time", code="timeout", kind="timeout") from None
    except (BundleError, ValueError) as exc:  # a grammar llguidance refused, an unfinished one
        raise ApiError(400, f"{name}: {exc}", code="generation_failed") from None


async def _events(runs: list[_Run], head: _Head) -> AsyncIterator[str]:
    """Server-sent events in OpenAI's chunk format: per choice (one after another, each
    chunk naming its index) the role, the text as it comes, the finish reason; then
    `data: [DONE]`. An error after the stream began is sent as an event of OpenAI's
    error shape. A client that leaves cancels the generation."""
    try:
        for index, run in enumerate(runs):
            job = run.start()
            if head.object.startswith("chat"):  # OpenAI's first chunk names the role
                yield head.chunk("", role=True, index=index)
            logprobs = run.ask.logprobs is not None
            while True:
                left = max(0.0, run.deadline - time.monotonic())
                try:
                    item = await asyncio.wait_for(run.queue.get(), left)
                except TimeoutError:
                    run.cancelled.set()
                    break
                if item is None:
                    break
                piece, logged = item
                yield head.chunk(piece, index=index, logprobs=logged if logprobs else None)
            try:
                result = await _checked(job, run.served.name, run.deadline)
            except ApiError as exc:
                yield f"data: {json.dumps(exc.body())}\n\n"
                break
            yield head.chunk("", result.finish, index=index)
        yield "data: [DONE]\n\n"
    finally:
        for run in runs:
            run.cancelled.set()

"""`doit serve recipe=NAMES` (issue 41, items 1-2): the OpenAI-compatible API, driven
by the official `openai` client against the running server on loopback, over the
session's built tiny recipes (random weights: only the grammar makes their text
valid JSON, so the tests assert shapes, limits and the grammar, never the words)."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import SLOW, World, free_port, heavy, make_world, serving

pytestmark = heavy

openai = pytest.importorskip("openai")

MODELS = ("tiny-llama", "tiny-qwen3")
SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "enum": ["yes", "no", "maybe"]},
        "sure": {"type": "boolean"},
    },
    "required": ["answer", "sure"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server(built: World) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`doit serve recipe=tiny-llama,tiny-qwen3 max_tokens=64`."""
    with serving(built, f"recipe={','.join(MODELS)}", "max_tokens=64") as served:
        yield served


@pytest.fixture(scope="module")
def client(server: tuple[str, subprocess.Popen[str]]) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server[0]}/v1", api_key="unused", timeout=SLOW, max_retries=0)


def test_models_lists_each_recipe_with_its_verdict_host_class_and_precision(
    client: openai.OpenAI,
) -> None:
    listed = {m.id: m.model_dump() for m in client.models.list()}
    assert sorted(listed) == sorted(MODELS)
    for card in listed.values():
        assert card["verdict"] == "pass" and card["host_class"]
        assert card["precision"]["weights"] == "fp32" and card["task"] == "text-generation"


def test_chat_answers_whole_and_streamed_alike_for_one_seed(client: openai.OpenAI) -> None:
    ask = {
        "model": "tiny-llama",
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 12,
        "temperature": 0.8,
        "top_p": 0.9,
        "seed": 7,
    }
    whole = client.chat.completions.create(**ask)
    choice = whole.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
    assert whole.usage and 0 < whole.usage.completion_tokens <= 12
    chunks = list(client.chat.completions.create(**ask, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == choice.finish_reason
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == choice.message.content  # the same seed, the same text


def test_completions_end_at_a_stop_text(client: openai.OpenAI) -> None:
    free = client.completions.create(
        model="tiny-qwen3", prompt="The quick brown fox", max_tokens=24, temperature=0
    )
    text = free.choices[0].text
    assert len(text) > 2
    stop = text[1:3]  # a text greedy decoding is known to reach
    cut = client.completions.create(
        model="tiny-qwen3", prompt="The quick brown fox", max_tokens=24, temperature=0, stop=stop
    )
    assert cut.choices[0].text == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    pieces = client.completions.create(
        model="tiny-qwen3",
        prompt="The quick brown fox",
        max_tokens=24,
        temperature=0,
        stop=[stop],
        stream=True,
    )
    assert "".join(c.choices[0].text for c in pieces) == cut.choices[0].text


def test_a_json_schema_response_format_gives_json_that_meets_it(client: openai.OpenAI) -> None:
    import jsonschema

    for seed in range(3):
        got = client.chat.completions.create(
            model="tiny-llama",
            messages=[{"role": "user", "content": "Is the sky blue?"}],
            max_tokens=64,
            temperature=1.0,
            seed=seed,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": SCHEMA, "strict": True},
            },
        )
        jsonschema.validate(json.loads(got.choices[0].message.content or ""), SCHEMA)


def test_n_answers_come_as_n_choices_whole_and_streamed(client: openai.OpenAI) -> None:
    """`n` answers: n choices, indexed, each seeded seed + index, so the same request
    gives the same choices again; a stream sends each choice's chunks under its index."""
    ask: dict[str, object] = {
        "model": "tiny-llama",
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 8,
        "temperature": 1.0,
        "seed": 7,
        "n": 3,
    }
    got = client.chat.completions.create(**ask)  # type: ignore[call-overload]
    assert [c.index for c in got.choices] == [0, 1, 2]
    texts = [c.message.content for c in got.choices]
    assert all(t for t in texts) and len(set(texts)) > 1  # seeds 7, 8, 9 sample apart
    again = client.chat.completions.create(**ask)  # type: ignore[call-overload]
    assert [c.message.content for c in again.choices] == texts
    assert got.usage is not None and got.usage.completion_tokens <= 3 * 8
    streamed: dict[int, str] = {}
    finished = set()
    for chunk in client.chat.completions.create(**ask, stream=True):  # type: ignore[call-overload]
        for c in chunk.choices:
            streamed[c.index] = streamed.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finished.add(c.index)
    assert [streamed[i] for i in range(3)] == texts and finished == {0, 1, 2}
    plain = client.completions.create(model="tiny-llama", prompt="Hi", max_tokens=4, n=2, seed=1)
    assert [c.index for c in plain.choices] == [0, 1]


def test_logprobs_are_the_bundles_own_log_probabilities_whole_and_streamed(
    client: openai.OpenAI, built: World
) -> None:
    """A completion's logprobs against the bundle's own logits through runtime.open
    (its first token's, over the prompt), the likeliest listed in order; a chat's
    streamed logprobs are its whole answer's, chunk by chunk."""
    import numpy as np

    import runtime

    bundle = runtime.open(built.artifact("tiny-llama", "bundle"))
    prompt = "The quick brown fox"
    got = client.completions.create(
        model="tiny-llama", prompt=prompt, max_tokens=6, temperature=0, logprobs=3
    )
    lp = got.choices[0].logprobs
    assert lp is not None and lp.token_logprobs and lp.top_logprobs and lp.tokens
    assert got.usage and len(lp.token_logprobs) == got.usage.completion_tokens
    logits = bundle.logits(bundle.encode(prompt))[-1].astype(np.float64)
    want = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    first = int(np.argmax(want))
    assert lp.tokens[0] == bundle.decode([first])
    assert lp.token_logprobs[0] == pytest.approx(want[first], abs=1e-4)
    tops = [sorted(want, reverse=True)[:3]]
    assert list(lp.top_logprobs[0].values()) == pytest.approx(tops[0], abs=1e-4)
    assert all(
        len(t) <= 3 and list(t.values()) == sorted(t.values(), reverse=True)
        for t in lp.top_logprobs
    )
    ask = {
        "model": "tiny-llama",
        "messages": [{"role": "user", "content": "Name a colour"}],
        "max_tokens": 12,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
    }
    whole = client.chat.completions.create(**ask)  # type: ignore[call-overload]
    content = whole.choices[0].logprobs.content
    assert len(content) == whole.usage.completion_tokens
    assert all(
        e.logprob <= 0 and e.logprob == pytest.approx(e.top_logprobs[0].logprob) for e in content
    )
    chunks = list(client.chat.completions.create(**ask, stream=True))  # type: ignore[call-overload]
    streamed = [e for c in chunks if c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [(e.token, e.logprob) for e in streamed] == [(e.token, e.logprob) for e in content]


@pytest.mark.parametrize(
    ("change", "status", "param"),
    [
        ({"temperature": -1}, 400, "temperature"),
        ({"top_p": 0}, 400, "top_p"),
        ({"max_tokens": 10_000}, 400, "max_tokens"),
        ({"model": "no-such-model"}, 404, "model"),
        ({"messages": []}, 400, "messages"),
        ({"top_logprobs": 2}, 400, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
    ],
)
def test_a_bad_request_gets_openais_error_shape_naming_the_field(
    client: openai.OpenAI, change: dict[str, object], status: int, param: str
) -> None:
    ask: dict[str, object] = {
        "model": "tiny-llama",
        "messages": [{"role": "user", "content": "Hello"}],
        "max_tokens": 4,
    }
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(**{**ask, **change})  # type: ignore[call-overload]
    assert caught.value.status_code == status
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == param
    assert error["message"] and error["type"] and "Traceback" not in error["message"]


def test_an_oversized_body_is_refused_with_413(server: tuple[str, subprocess.Popen[str]]) -> None:
    big = json.dumps({"model": "tiny-llama", "prompt": "x" * (2 << 20)}).encode()
    req = urllib.request.Request(f"{server[0]}/v1/completions", data=big, method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(req, timeout=SLOW)
    assert caught.value.code == 413
    assert json.loads(caught.value.read())["error"]["code"] == "too_large"


def test_32_concurrent_clients_each_get_a_complete_valid_answer(client: openai.OpenAI) -> None:
    """Bounded load on loopback: 32 threads, 96 requests (half streamed), both recipes."""

    def one(i: int) -> tuple[str, int]:
        model = MODELS[i % 2]
        ask = {
            "model": model,
            "messages": [{"role": "user", "content": f"Request {i}"}],
            "max_tokens": 16,
            "seed": i,
        }
        if i % 2:
            chunks = list(client.chat.completions.create(**ask, stream=True))  # type: ignore[call-overload]
            assert chunks[-1].choices[0].finish_reason in ("stop", "length")
            return "".join(c.choices[0].delta.content or "" for c in chunks), i
        got = client.chat.completions.create(**ask)  # type: ignore[call-overload]
        assert got.choices[0].finish_reason in ("stop", "length")
        assert got.usage and 0 < got.usage.completion_tokens <= 16
        return got.choices[0].message.content or "", i

    started = time.monotonic()
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(one, range(96), timeout=SLOW))
    seconds = time.monotonic() - started
    assert sorted(i for _, i in answers) == list(range(96))
    assert all(isinstance(text, str) for text, _ in answers)
    print(f"load: 32 clients, 96 requests (48 streamed), {seconds:.1f} s, {96 / seconds:.1f} req/s")


def test_serving_an_unbuilt_recipe_says_to_build_it(built: World, tmp_path: Path) -> None:
    env = {**built.env, "KILN_STORE": str(tmp_path / "empty-store")}
    done = subprocess.run(
        built.argv("serve", "recipe=tiny-llama", f"port={free_port()}"),
        env=env,
        capture_output=True,
        text=True,
        timeout=SLOW,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in said
    assert "tiny-llama is not built here" in said and "doit build recipe=tiny-llama" in said


def test_requests_that_arrive_together_decode_as_one_batch_each_as_it_would_alone(
    built: World,
) -> None:
    """The worker of a served recipe takes the requests waiting when it is free as one
    batch (tiny-llama serves batches of 4): three requests that queued behind a busy
    bundle run as one batch of three, each with its own budget, stop text and grammar,
    and each answers what it answers alone."""
    import runtime
    from kiln.serve import models
    from runtime.guided import Grammar

    bundle = runtime.open(built.artifact("tiny-llama", "bundle"))
    served = models.Served("tiny-llama", "text-generation", bundle, {})
    greedy = runtime.Sampler()
    grammar = Grammar.json_schema(json.dumps(SCHEMA))
    asks = [
        models.Ask(bundle.encode("Once upon a time"), 24, greedy, None, []),
        models.Ask(bundle.encode("The quick brown fox"), 9, greedy, None, []),
        models.Ask(bundle.encode("Answer in JSON:"), 48, greedy, grammar, []),
        models.Ask(bundle.encode("A list of colours:"), 32, greedy, None, ["e"]),
    ]

    def ask(a: models.Ask) -> models.Result:
        return models.generate(
            served, a, lambda piece, logged: None, threading.Event(), time.monotonic() + SLOW
        )

    alone = [ask(a) for a in asks]
    assert served.batcher.batches == {1: 4}
    pool = ThreadPoolExecutor(4)
    with served.lock:  # the bundle is busy: the worker holds the first, the rest queue
        first = pool.submit(ask, asks[0])
        while served.batcher.waiting:
            time.sleep(0.01)
        rest = [pool.submit(ask, a) for a in asks[1:]]
        while len(served.batcher.waiting) < 3:
            time.sleep(0.01)
    together = [first.result(timeout=SLOW)] + [f.result(timeout=SLOW) for f in rest]
    pool.shutdown()
    assert served.batcher.batches == {1: 5, 3: 1}
    assert together == alone
    assert alone[1].completion_tokens <= 9 and json.loads(alone[2].text).keys() == {
        "answer",
        "sure",
    }
    assert "e" not in alone[3].text and alone[3].finish == "stop"


def test_embeddings_are_the_bundles_own_vectors_as_floats_and_base64(
    tmp_path_factory: pytest.TempPathFactory, built: World
) -> None:
    """/v1/embeddings over the tiny BertModel recipe, built here: each input's vector
    is what runtime.open's embed gives for it, in either encoding."""
    import numpy as np

    import runtime

    world = make_world(tmp_path_factory.mktemp("embed"), built.hub, ("tiny-bert-embed",))
    world.doit("build", check=True)
    texts = ["a short one", "and a somewhat longer sentence than the first"]
    want = runtime.open(world.artifact("tiny-bert-embed", "bundle")).embed(texts)
    with serving(world, "recipe=tiny-bert-embed") as (base, _):
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        floats = client.embeddings.create(model="tiny-bert-embed", input=texts)
        packed = client.embeddings.create(
            model="tiny-bert-embed", input=texts, encoding_format="base64"
        )
        with pytest.raises(openai.NotFoundError):
            client.embeddings.create(model="tiny-llama", input=texts)
    got = np.array([d.embedding for d in floats.data], np.float32)
    assert [d.index for d in floats.data] == [0, 1] and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    for row, item in enumerate(packed.data):  # the client hands base64 back as it came
        vector: object = item.embedding
        if isinstance(vector, str):
            vector = np.frombuffer(base64.b64decode(vector), "<f4")
        np.testing.assert_array_equal(np.asarray(vector, np.float32), got[row])
    assert floats.usage.prompt_tokens > 0


def test_sigterm_stops_the_server_cleanly(server: tuple[str, subprocess.Popen[str]]) -> None:
    """Last in the module: it stops the module's server."""
    proc = server[1]
    proc.terminate()
    out, _ = proc.communicate(timeout=SLOW)
    assert proc.returncode == 0, out
    assert "stopped" in out and "Traceback" not in out

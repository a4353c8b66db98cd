"""`doit serve recipe=NAMES` (issue 41, items 1-2): the OpenAI-compatible API, driven
by the official `openai` client against the running server on loopback, over the
session's built tiny recipes (random weights: only the grammar makes their text
valid JSON, so the tests assert shapes, limits and the grammar, never the words)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import SLOW, World, heavy

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(built: World) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """`doit serve recipe=tiny-llama,tiny-qwen3` as a user starts it; its base URL."""
    port = _free_port()
    proc = subprocess.Popen(
        [*built.argv("serve", f"recipe={','.join(MODELS)}", f"port={port}", "max_tokens=64")],
        env=built.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SLOW
    while True:
        try:
            with urllib.request.urlopen(f"{base}/v1/models", timeout=5):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(
                    f"doit serve did not come up: {proc.communicate()[0]}"
                ) from None
            time.sleep(0.2)
    yield base, proc
    if proc.poll() is None:
        proc.terminate()
        proc.communicate(timeout=SLOW)


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


@pytest.mark.parametrize(
    ("change", "status", "param"),
    [
        ({"temperature": -1}, 400, "temperature"),
        ({"top_p": 0}, 400, "top_p"),
        ({"max_tokens": 10_000}, 400, "max_tokens"),
        ({"model": "no-such-model"}, 404, "model"),
        ({"messages": []}, 400, "messages"),
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
        built.argv("serve", "recipe=tiny-llama", f"port={_free_port()}"),
        env=env,
        capture_output=True,
        text=True,
        timeout=SLOW,
    )
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "Traceback" not in said
    assert "tiny-llama is not built here" in said and "doit build recipe=tiny-llama" in said


def test_sigterm_stops_the_server_cleanly(server: tuple[str, subprocess.Popen[str]]) -> None:
    """Last in the module: it stops the module's server."""
    proc = server[1]
    proc.terminate()
    out, _ = proc.communicate(timeout=SLOW)
    assert proc.returncode == 0, out
    assert "stopped" in out and "Traceback" not in out

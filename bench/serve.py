"""`doit serve`'s OpenAI API against the same bundle through runtime.open in-process.

    .venv/bin/python bench/serve.py [--recipes tiny-llama,smollm2-135m-instruct]
                                    [--requests 24] [--max-tokens 32]

The recipes must be built in the repository's store (`doit build recipe=NAME`). For
each recipe, in this one run:
  * in-process: runtime.open(bundle), `--requests` greedy completions of a fixed
    prompt, one after another: seconds per request and tokens/s (the anchor);
  * through `doit serve recipe=...` on loopback, with the official openai client:
    the same completions (/v1/completions, temperature 0) at 1, 4 and 16 concurrent
    clients: requests/s and tokens/s; at one client the server's overhead per request
    (its seconds per request minus the anchor's); and the time to the first streamed
    token.
Targets (issue 41): the server adds <= 5 ms per request on tiny-llama at one client;
16 concurrent clients get >= 2x one client's tokens/s on a bundle with max_batch_size
>= 4 (the server decodes the requests waiting together as one batch: the batch sizes it
ran are printed, from what `doit serve` says when it stops). Timings on a shared 2-core
machine move run to run: compare the sides of one run. The load average is printed with
the figures.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"


def bundle_path(name: str) -> Path:
    sys.path.insert(0, str(ROOT))
    from kiln.commands.workspace import plan_of, store

    found = store()
    key = plan_of(name).step("bundle").key
    if not found.has(key):
        sys.exit(f"{name} is not built: .venv/bin/doit build recipe={name}")
    return Path(found.get(key).path)


def in_process(name: str, requests: int, max_tokens: int) -> tuple[float, float]:
    """(seconds per request, tokens/s) of greedy completions, one after another."""
    import runtime

    bundle = runtime.open(bundle_path(name))
    ids = bundle.encode(PROMPT)
    bundle.generate([ids], max_tokens)  # warm
    tokens, started = 0, time.perf_counter()
    for _ in range(requests):
        tokens += len(bundle.generate([ids], max_tokens).tokens[0])
    seconds = time.perf_counter() - started
    return seconds / requests, tokens / seconds


def start(recipes: list[str]) -> tuple[subprocess.Popen[str], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    doit = [sys.executable, "-m", "doit", "-f", str(ROOT / "dodo.py"), "serve"]
    proc = subprocess.Popen(
        [*doit, f"recipe={','.join(recipes)}", f"port={port}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/v1/models", timeout=5):
                return proc, base
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    proc.kill()
    sys.exit("doit serve did not come up")


def through_server(
    client: object, name: str, clients: int, requests: int, max_tokens: int
) -> tuple[float, float, float]:
    """(seconds per request at this concurrency, requests/s, tokens/s)."""

    def one(_: int) -> tuple[float, int]:
        t = time.perf_counter()
        got = client.completions.create(  # type: ignore[attr-defined]
            model=name, prompt=PROMPT, max_tokens=max_tokens, temperature=0
        )
        return time.perf_counter() - t, got.usage.completion_tokens

    one(0)  # warm
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        done = list(pool.map(one, range(requests)))
    seconds = time.perf_counter() - started
    tokens = sum(n for _, n in done)
    return sum(t for t, _ in done) / len(done), requests / seconds, tokens / seconds


def first_token(client: object, name: str, max_tokens: int) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        stream = client.completions.create(  # type: ignore[attr-defined]
            model=name, prompt=PROMPT, max_tokens=max_tokens, temperature=0, stream=True
        )
        for _chunk in stream:
            best = min(best, time.perf_counter() - t)
            break
        for _chunk in stream:
            pass
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recipes", default="tiny-llama")
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    import openai

    recipes = args.recipes.split(",")
    anchors = {r: in_process(r, args.requests, args.max_tokens) for r in recipes}
    proc, base = start(recipes)
    try:
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        load = os.getloadavg()[0]
        print(
            f"{args.requests} completions of {args.max_tokens} tokens per run; load average "
            f"{load:.1f} on {os.cpu_count()} cores"
        )
        for r in recipes:
            per, rate = anchors[r]
            print(f"{r}:")
            print(f"  runtime.open in-process   {per * 1000:8.1f} ms/request  {rate:8.1f} tokens/s")
            one_rate = None
            for clients in (1, 4, 16):
                latency, rps, tps = through_server(
                    client, r, clients, args.requests, args.max_tokens
                )
                one_rate = tps if clients == 1 else one_rate
                extra = ""
                if clients == 1:
                    extra = f"  overhead {(latency - per) * 1000:+.1f} ms/request (target <= 5)"
                elif one_rate:
                    extra = f"  {tps / one_rate:.2f}x one client's tokens/s"
                print(
                    f"  doit serve, {clients:2d} client(s)  {latency * 1000:8.1f} ms/request  "
                    f"{tps:8.1f} tokens/s  {rps:6.1f} req/s{extra}"
                )
            ttft = first_token(client, r, args.max_tokens)
            print(f"  time to first streamed token {ttft * 1000:.1f} ms (best of 5)")
    finally:
        proc.terminate()
        said, _ = proc.communicate(timeout=60)
        print("\n".join(line.strip() for line in said.splitlines() if "batches run" in line))


if __name__ == "__main__":
    main()

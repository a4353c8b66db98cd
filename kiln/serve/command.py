"""`doit serve [recipe=NAMES]`: the site on 127.0.0.1:`port`; with recipes, the
OpenAI-compatible API at /v1 beside it (app.py), under uvicorn, until Ctrl-C or
SIGTERM, which stop it cleanly: requests in flight finish, then the process exits 0."""

from __future__ import annotations

import signal
from types import FrameType

import uvicorn

from kiln.commands.variables import WHERE
from kiln.commands.workspace import selected
from kiln.errors import KilnError, Location
from kiln.paths import Paths
from kiln.site import serve as site_serve

LOOPBACK = site_serve.HOST


def command(
    port: int,
    recipe: str | None = None,
    host: str = LOOPBACK,
    max_tokens: int = 1024,
    max_body: int = 1 << 20,
    timeout: float = 300.0,
) -> None:
    site = Paths.from_env().site
    if not recipe:
        if host != LOOPBACK:
            raise KilnError.one(
                "the site preview listens on 127.0.0.1 only", Location(WHERE, key_path=("host",))
            )
        site_serve.serve(site, port)
        return
    from kiln.serve import app, models

    served = models.load(selected(recipe), Location(WHERE, key_path=("recipe",)))
    limits = app.Limits(max_body=max_body, max_tokens=max_tokens, timeout=timeout)
    asgi = app.app(served, site if (site / "index.html").is_file() else None, limits)
    config = uvicorn.Config(
        asgi,
        host=host,
        port=port,
        log_level="warning",
        timeout_keep_alive=5,
        timeout_graceful_shutdown=int(timeout),
    )
    server = _Server(config)
    base = f"http://{host}:{port}"
    print(f"   serving {site} at {base}/ and the API for {', '.join(served)} at {base}/v1")
    print("   Ctrl-C or SIGTERM stops it", flush=True)
    try:
        server.run()
    except SystemExit:  # uvicorn exits when it cannot bind; its log said why
        raise KilnError.one(
            f"cannot listen on {host}:{port}",
            None,
            f"pick another port: doit serve port={port + 1}",
        ) from None
    for name, one in served.items():  # what batching did, for whoever tunes a deployment
        sizes = ", ".join(f"{n} x {size}" for size, n in sorted(one.batcher.batches.items()))
        if sizes:
            print(f"   {name}: batches run (count x requests): {sizes}", flush=True)
    print("   stopped", flush=True)


class _Server(uvicorn.Server):
    """uvicorn's server, less its re-raising of the signal that stopped it: it shuts
    down gracefully, then raises SIGTERM again with the default handler, which would
    kill doit before it reports the task (exit -15 instead of 0)."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True  # a second Ctrl-C: stop without waiting
        self.should_exit = True

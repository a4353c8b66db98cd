"""Serve a rendered site on 127.0.0.1 with the standard library's http.server.

For previews (`doit serve`) and the browser tests; not a production server. Bound
to the loopback address only, so a preview is never exposed to the network.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kiln.errors import KilnError

HOST = "127.0.0.1"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def server(directory: Path, port: int = 0, quiet: bool = False) -> ThreadingHTTPServer:
    """A server for `directory` on 127.0.0.1:`port` (0: any free port), not yet serving."""
    handler = functools.partial(
        _Quiet if quiet else SimpleHTTPRequestHandler, directory=str(directory)
    )
    try:
        return ThreadingHTTPServer((HOST, port), handler)
    except OSError as exc:
        raise KilnError.one(
            f"cannot listen on {HOST}:{port}: {exc.strerror}",
            None,
            f"pick another port: doit serve port={port + 1}",
        ) from None


@contextmanager
def serving(directory: Path) -> Iterator[str]:
    """Serve `directory` in a background thread; yields the base URL."""
    httpd = server(directory, quiet=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{HOST}:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def serve(directory: Path, port: int) -> None:
    """Serve until interrupted (Ctrl-C)."""
    if not (directory / "index.html").is_file():
        raise KilnError.one(f"no site in {directory}", None, "run `doit site` first")
    httpd = server(directory, port)
    print(f"   serving {directory} at http://{HOST}:{httpd.server_address[1]}/ (Ctrl-C stops)")
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()


def command(port: int) -> None:
    """`doit serve`: the site of KILN_SITE on 127.0.0.1:`port`, until interrupted."""
    from kiln.paths import Paths

    serve(Paths.from_env().site, port)

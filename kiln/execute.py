"""Run one step: take its lock, reuse or build its artifact, publish it atomically.

This is the only place that calls builders. A builder is `builders.<kind>.build(
request, writer)`; it is imported here, inside the call, so the core never imports
the heavy libraries a builder uses.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kiln import unsupported
from kiln.errors import KilnError, Location
from kiln.plan import Step
from kiln.store import Store, Writer

T = TypeVar("T")


@dataclass(frozen=True)
class Request:
    """Everything a builder may know. Only `options` and `inputs` are in the key;
    `context` says where things are (caches, recorded hashes) and must never change
    what the builder produces."""

    kind: str
    key: str
    name: str
    options: dict[str, Any]
    inputs: dict[str, Path]
    context: dict[str, Any] = field(default_factory=dict)

    def error(self, cause: str, fix: str = "", where: str | None = None) -> KilnError:
        """An error the user can act on; builders raise it for bad input."""
        return KilnError.one(cause, Location(where) if where else None, fix)

    def log(self, message: str) -> None:
        print(f"   {self.kind}: {message}", file=sys.stderr, flush=True)

    def progress(self, items: Iterable[T], total: int, what: str) -> Iterator[T]:
        """Show progress on long work (rich, on stderr)."""
        from rich.console import Console
        from rich.progress import track

        console = Console(stderr=True)
        yield from track(
            items,
            description=f"   {self.kind}: {what}",
            total=total,
            console=console,
            transient=True,
        )


def run_step(step: Step, store: Store, context: dict[str, Any] | None = None) -> bool:
    """Make sure `step`'s artifact is in the store. Returns True if it was built here."""
    with store.lock(step.key, step.name):
        if store.has(step.key):
            return False  # another process built it while we waited
        inputs = {role: store.get(key).path for role, key in step.inputs.items()}
        request = Request(step.kind, step.key, step.name, step.options, inputs, context or {})
        started = time.monotonic()
        meta = {"kind": step.kind, "name": step.name, "material": step.material}
        upstream = next(filter(None, map(unsupported.marker_of, inputs.values())), None)
        if upstream is not None:  # nothing to build on: pass the reason on, run nothing
            with store.publish(step.key, meta) as writer:
                writer.write_json(unsupported.MARKER, upstream)
            return True
        builder: Callable[[Request, Writer], None] = importlib.import_module(
            f"builders.{step.kind}"
        ).build
        try:
            with store.publish(step.key, meta) as writer:
                builder(request, writer)
        except unsupported.Unsupported as exc:
            with store.publish(step.key, meta) as writer:
                writer.write_json(unsupported.MARKER, unsupported.marker(exc.reason, step.name))
            request.log(f"unsupported here: {exc.reason}")
            return True
        request.log(f"done in {time.monotonic() - started:.1f} s -> {step.key[:12]}")
        return True

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

from kiln.errors import KilnError, Location, Unsupported
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

    def unsupported(self, reason: str) -> Unsupported:
        """This host cannot do the step; builders raise it with the exact reason."""
        return Unsupported(reason)

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
    """Make sure `step`'s artifact is in the store. Returns True if it was built here.

    Raises Unsupported, leaving a note in the store and no artifact, when this host
    cannot run the step or one of its inputs."""
    for key in step.inputs.values():
        reason = store.unsupported(key)
        if reason is not None and not store.has(key):
            store.mark_unsupported(step.key, reason)
            raise Unsupported(reason)
    try:
        return _build(step, store, context)
    except Unsupported as exc:
        store.mark_unsupported(step.key, exc.reason)
        raise


def _build(step: Step, store: Store, context: dict[str, Any] | None) -> bool:
    store.clear_unsupported(step.key)
    with store.lock(step.key, step.name):
        if store.has(step.key):
            return False  # another process built it while we waited
        inputs = {role: store.get(key).path for role, key in step.inputs.items()}
        request = Request(step.kind, step.key, step.name, step.options, inputs, context or {})
        builder: Callable[[Request, Writer], None] = importlib.import_module(
            f"builders.{step.kind}"
        ).build
        started = time.monotonic()
        meta = {"kind": step.kind, "name": step.name, "material": step.material}
        with store.publish(step.key, meta) as writer:
            builder(request, writer)
        request.log(f"done in {time.monotonic() - started:.1f} s -> {step.key[:12]}")
        return True

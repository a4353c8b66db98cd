"""Run one step: take its lock, reuse or build its artifact, publish it atomically.

This is the only place that calls builders. A builder is a module with `build(request,
writer)`, the one that kiln.plan.toolchain.builder_module names for the step (the same
rule the step's code digest follows); it is imported here, inside the call, so the
core never imports the heavy libraries a builder uses.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kiln.errors import KilnError, Location
from kiln.plan import toolchain
from kiln.plan.step import Step
from kiln.store import Store, api, unsupported

T = TypeVar("T")


@dataclass(frozen=True)
class Request:
    """Everything a builder may know (the kiln.store.api.Request protocol). Only
    `options` and `inputs` are in the key; `context` says where things are (caches,
    recorded hashes) and must never change what the builder produces."""

    kind: str
    key: str
    name: str
    options: dict[str, Any]
    inputs: dict[str, Path]
    context: dict[str, Any] = field(default_factory=dict)
    origin: tuple[str, ...] = ()  # the recipe key the step comes from (Step.origin)

    def error(
        self, cause: str, fix: str = "", where: str | None = None, key: str | None = None
    ) -> KilnError:
        """An error the user can act on; builders raise it for bad input. `key`: the
        key of the step's checkpoint to blame (e.g. "repo"), instead of the step's own."""
        if key is not None:
            section = self.origin[:1] if self.origin[:1] == ("model",) else self.origin[:2]
            return KilnError.one(cause, Location(where or "", key_path=(*section, key)), fix)
        return KilnError.one(cause, Location(where) if where else None, fix)

    def unsupported(self, reason: str) -> unsupported.Unsupported:
        """This host cannot do the step (no TensorRT, no CUDA for NVFP4, ...); builders
        raise it with the exact reason and run_step publishes the marker."""
        return unsupported.Unsupported(reason)

    def log(self, message: str) -> None:
        print(f"   {self.kind}: {message}", file=sys.stderr, flush=True)

    def progress(self, items: Iterable[T], total: int, what: str) -> Iterator[T]:
        """Show progress on long work (rich, on stderr)."""
        from rich.console import Console
        from rich.progress import track

        console = Console(stderr=True)
        if not console.is_terminal:  # a log file gets no redrawn bar, and no blank line
            yield from items
            return
        yield from track(
            items,
            description=f"   {self.kind}: {what}",
            total=total,
            console=console,
            transient=True,
        )


@dataclass(frozen=True)
class Graph:
    """The steps a build knows (by key) and the context each one runs with, so that a
    step can rebuild an input it finds corrupt."""

    steps: Mapping[str, Step]
    context: Callable[[Step], dict[str, Any]]


def run_step(
    step: Step, store: Store, context: dict[str, Any] | None = None, graph: Graph | None = None
) -> bool:
    """Make sure `step`'s artifact is in the store. Returns True if it was built here."""
    refuse_damaged(step, store, graph)
    with store.lock(step.key, step.name):
        if store.has(step.key):
            return False  # another process built it while we waited
        _build(step, store, context or {}, graph, {})
        return True


def remeasure(
    step: Step,
    store: Store,
    context: dict[str, Any],
    run: dict[str, Any],
    graph: Graph | None = None,
) -> bool:
    """Measure again, even when the store holds a measurement: a replay re-measures.

    Only for steps whose output is a measurement of their inputs (validate). The new
    artifact replaces the old one under the same key, since the inputs did not
    change; `run` ({"run": id, "attempt": n}) goes into its record, not its key.
    Recipes sharing the step within one replay run share one measurement. Returns
    True if it was measured here."""
    with store.lock(step.key, step.name):
        if store.has(step.key) and store.get(step.key).record().get("run") == run["run"]:
            return False
        _build(step, store, context, graph, run, replace=True)
        return True


def _build(
    step: Step,
    store: Store,
    context: dict[str, Any],
    graph: Graph | None,
    extra: dict[str, Any],
    replace: bool = False,
) -> None:
    inputs = {role: _sound_input(key, store, graph) for role, key in step.inputs.items()}
    request = Request(step.kind, step.key, step.name, step.options, inputs, context, step.origin)
    started, cpu = time.monotonic(), time.process_time()
    meta = {"kind": step.kind, "name": step.name, "material": step.material, **extra}
    upstream = next(filter(None, map(unsupported.marker_of, inputs.values())), None)
    if upstream is not None:  # nothing to build on: pass the reason on, run nothing
        with store.publish(step.key, meta, replace) as writer:
            writer.write_json(unsupported.MARKER, upstream)
        return
    module = toolchain.builder_module(step.kind, step.options)
    builder: Callable[[api.Request, api.Writer], None] = importlib.import_module(module).build
    try:
        with store.publish(step.key, meta, replace) as writer:
            builder(request, writer)
            # Sealed into the artifact record: a replay compares step durations.
            meta["seconds"] = round(time.monotonic() - started, 3)
    except unsupported.Unsupported as exc:
        with store.publish(step.key, meta, replace) as writer:
            writer.write_json(unsupported.MARKER, unsupported.marker(exc.reason, step.name))
        request.log(f"unsupported here: {exc.reason}")
        return
    seconds = time.monotonic() - started
    entry = {"key": step.key, "kind": step.kind, "name": step.name, "seconds": seconds}
    # This process's CPU time during the step (all its threads): on a shared machine
    # wall seconds say little, and bench/parallel_build.py shows both.
    entry["cpu_seconds"] = round(time.process_time() - cpu, 3)
    store.journal(entry)
    request.log(f"done in {seconds:.1f} s -> {step.key[:12]}")


def refuse_damaged(step: Step, store: Store, graph: Graph | None = None) -> None:
    """An artifact whose files no longer match its sealed record is never used. In a
    build (`graph`: the steps it can remake) it is reported with both digests,
    removed and built again; anywhere else (`doit run`'s bundle) it is refused with
    both digests and the repair command."""
    bad = store.trusted(step.key) if store.has(step.key) else []
    if not bad:
        return
    what = f"the {step.kind} artifact {step.key[:12]} ({step.name})"
    damage = "; ".join(map(str, bad))
    if graph is None:
        raise KilnError.one(
            f"{what} does not match its sealed record: {damage}",
            Location(str(store.object_dir(step.key))),
            "`doit verify repair=1` removes it (and any other damaged artifact); then "
            "`doit build` remakes it",
        )
    with store.lock(step.key, step.name):
        if store.has(step.key) and store.damage(step.key):
            print(
                f"   {step.kind}: artifact {step.key[:12]} is corrupt ({damage}): "
                "removing it and building it again",
                file=sys.stderr,
                flush=True,
            )
            store.remove(step.key)


_VERIFIED: set[Path] = set()


def _sound_input(key: str, store: Store, graph: Graph | None) -> Path:
    """The path of an input artifact, verified (sizes, then sha256) before use.

    A corrupt input is removed and rebuilt when the graph knows its step; otherwise
    the build stops rather than build on bad bytes. Tiny artifacts hash in
    milliseconds; a real checkpoint costs seconds, so each is hashed once per process."""
    path = store.object_dir(key)
    if store.has(key) and (path in _VERIFIED or not store.trusted(key)):
        _VERIFIED.add(path)  # once per process: a checkpoint feeds several steps
        return path
    step = graph.steps.get(key) if graph else None
    if step is None or graph is None:
        bad = [str(d) for d in store.damage(key)] if store.has(key) else ["(missing)"]
        raise KilnError.one(
            f"input artifact {key[:12]} is corrupt or missing: {'; '.join(bad)}",
            Location(str(store.object_dir(key))),
            "`doit verify repair=1` removes a damaged artifact; then build the recipe again",
        )
    run_step(step, store, graph.context(step), graph)
    return store.get(key).path

"""A tensor-parallel inductor bundle (build.tensor_parallel N, issue 42): N rank
processes, each running the bundle's own runner over its own weight shard, in lockstep.

    bundle = runtime.open(path)        # a Sharded<Runner>: starts the N ranks
    bundle.generate(prompts, 32)       # every rank runs it; rank 0's answer comes back

runtime.open of such a bundle returns a controller, an instance of the runner the
bundle would have unsplit (InductorBundle, InductorSpeculativeBundle: isinstance and
`expect` hold), that holds no engine. Each rank is a fresh process (multiprocessing's
spawn) that joins a torch.distributed group (gloo on CPU; NCCL on CUDA, one GPU per
rank, NCCL_NVLS_ENABLE=0) through a FileStore in a temporary folder (no port to pick),
opens the bundle there with the runner runtime.open chose (its InductorEngine reads
weights.rank<r>.safetensors alone, runtime/inductor.py), and then serves the
controller's calls from a pipe. A public method of the runner called on the controller
is sent to every rank with its arguments (pickled), and every rank runs it: the
programs' all-reduces (builders/causal_lm/backends/_shards.py) need every rank in
every step, and since every rank holds the same reduced hidden state and the whole
output projection, every rank computes the same logits and chooses the same tokens,
so the ranks stay in step with no other message. Rank 0's return value is the call's.
Any other attribute read (meta, eos, max_batch_size, last_stats, ...) is rank 0's
value at the time; assigning one on the controller reaches no rank. A sampler passed
in is copied into each rank, so its generator does not advance in the caller's copy.

A rank that exits (killed, out of memory) fails the call in progress, or the next one,
with a BundleError that names it, as soon as its process ends (the controller waits
on the ranks' pipes and process sentinels together): the others are stopped and the
controller is closed. A rank whose peer died mid-collective gets gloo's "connection
closed" at once; a peer that hangs alive is bounded by the group's TIMEOUT.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import shutil
import tempfile
import weakref
from multiprocessing import connection
from pathlib import Path
from typing import Any, ClassVar

from runtime.format import BundleError

RANK_ENV = "KILN_TP_RANK"  # set in a rank's process: runtime.open there opens its shard
# A collective that waits this long for a peer fails (gloo's and NCCL's timeout).
TIMEOUT = 300.0
# Seconds to start the ranks and load (compile) their engines.
LOAD_TIMEOUT = 1800.0
# After one rank reports an error, how long the others have to report theirs (the same
# error, raised by the same code on the same inputs) before the group counts as broken.
GRACE = 10.0


def in_rank() -> bool:
    """Whether this process is a rank of a tensor-parallel group."""
    return RANK_ENV in os.environ


class Ranks:
    """The N rank processes of one engine, their pipes and their group's store."""

    def __init__(self, world: int, device: str, target: tuple[Any, ...]) -> None:
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.world = world
        self.folder = tempfile.mkdtemp(prefix="kiln-tp-")
        store = os.path.join(self.folder, "store")
        backend = "nccl" if device == "cuda" else "gloo"
        self.pipes: list[Any] = []
        self.processes: list[Any] = []
        self.closed = ""  # why, once closed
        for rank in range(world):
            mine, theirs = context.Pipe()
            process = context.Process(
                target=_serve,
                args=(rank, world, backend, store, target, theirs),
                name=f"kiln-tp-rank{rank}",
                daemon=True,
            )
            process.start()
            theirs.close()
            self.pipes.append(mine)
            self.processes.append(process)
        self._finalizer = weakref.finalize(self, _stop, self.processes, self.pipes, self.folder)
        self.ready: list[dict[str, Any]] = self.gather("loading", LOAD_TIMEOUT)

    @property
    def pids(self) -> list[int]:
        return [int(p.pid) for p in self.processes]

    def call(self, what: str, message: tuple[Any, ...]) -> Any:
        """`message` to every rank; rank 0's answer."""
        if self.closed:
            raise BundleError(f"this tensor-parallel bundle is closed: {self.closed}")
        for rank, pipe in enumerate(self.pipes):
            try:
                pipe.send(message)
            except (BrokenPipeError, ConnectionError, OSError):
                self._died(rank, what)
        return self.gather(what, None)[0]

    def gather(self, what: str, timeout: float | None) -> list[Any]:
        """Every rank's answer to the message just sent, in rank order. A rank that
        exits first closes the group (BundleError naming it); an error a rank reports
        is raised once every rank has answered, or after GRACE seconds (then the
        group is closed: the others may be waiting in a collective)."""
        import time

        answers: dict[int, tuple[Any, ...]] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        sentinels = {p.sentinel: r for r, p in enumerate(self.processes)}
        pipes = {id(p): r for r, p in enumerate(self.pipes)}
        while len(answers) < self.world:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            errors = [a for a in answers.values() if a[0] == "error"]
            if errors:
                left = GRACE if left is None else min(left, GRACE)
            waiting = [self.pipes[r] for r in range(self.world) if r not in answers]
            ready = connection.wait(waiting + list(sentinels), left)
            if not ready:
                if errors:
                    self.close(f"rank(s) stopped answering after an error: {errors[0][2]}")
                    raise BundleError(errors[0][2])
                self.close(f"{what} took over {timeout:.0f} s")
                raise BundleError(f"tensor-parallel ranks did not finish {what} in {timeout:.0f} s")
            for item in ready:
                if id(item) in pipes:
                    rank = pipes[id(item)]
                    try:
                        answers[rank] = self.pipes[rank].recv()
                    except (EOFError, OSError):
                        self._died(rank, what)
            for item in ready:
                if item in sentinels and sentinels[item] not in answers:
                    self._died(sentinels[item], what)
        errors = [a for a in answers.values() if a[0] == "error"]
        if errors:
            raise (
                BundleError(errors[0][2])
                if errors[0][1] == "BundleError"
                else RuntimeError(f"rank {errors[0][3]}: {errors[0][1]}: {errors[0][2]}")
            )
        return [answers[r][1] for r in range(self.world)]

    def _died(self, rank: int, what: str) -> None:
        process = self.processes[rank]
        process.join(1.0)
        code = process.exitcode
        how = (
            f"was killed by signal {-code}" if code is not None and code < 0 else f"exited ({code})"
        )
        why = f"rank {rank} of {self.world} (pid {process.pid}) {how} during {what}"
        self.close(why)
        raise BundleError(
            f"{why}: the tensor-parallel bundle cannot go on without it and is closed; "
            "open the bundle again (runtime.open) to start its ranks afresh"
        )

    def close(self, why: str = "closed by its owner") -> None:
        """Stop every rank (they exit at once; any still running is terminated)."""
        if not self.closed:
            self.closed = why
            self._finalizer()


def _stop(processes: list[Any], pipes: list[Any], folder: str) -> None:
    for pipe in pipes:
        with contextlib.suppress(BrokenPipeError, ConnectionError, OSError):
            pipe.send(("close",))
    for process in processes:
        process.join(2.0)
        if process.is_alive():
            process.kill()
            process.join(2.0)
    for pipe in pipes:
        pipe.close()
    shutil.rmtree(folder, ignore_errors=True)


def _serve(
    rank: int, world: int, backend: str, store: str, target: tuple[Any, ...], pipe: Any
) -> None:
    """A rank's process: join the group, open the bundle (or engine), answer calls."""
    os.environ[RANK_ENV] = str(rank)
    try:
        opened, ready = _open(rank, world, backend, store, target)
    except BaseException as exc:  # reported to the controller, which raises it
        pipe.send(("error", type(exc).__name__, str(exc), rank))
        return
    pipe.send(("ok", ready))
    while True:
        try:
            message = pipe.recv()
        except (EOFError, OSError):  # the controller is gone
            break
        if message[0] == "close":
            break
        kind, name, args, kwargs = message
        try:
            value = getattr(opened, name)
            out = value(*args, **kwargs) if kind == "call" else value
            pipe.send(("ok", out if rank == 0 else None))
        except BaseException as exc:
            pipe.send(("error", type(exc).__name__, str(exc), rank))
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _open(
    rank: int, world: int, backend: str, store: str, target: tuple[Any, ...]
) -> tuple[Any, dict[str, Any]]:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    if backend == "nccl":
        # NVLink SHARP multicast off: it needs fabric permissions the lent hosts lack
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        torch.cuda.set_device(rank)
    dist.init_process_group(
        backend,
        store=dist.FileStore(store, world),
        rank=rank,
        world_size=world,
        timeout=timedelta(seconds=TIMEOUT),
    )
    if target[0] == "engine":  # the engine step's compile and check (backends/_kernels.py)
        from runtime.inductor import InductorEngine

        _, file, meta, compile_here = target
        engine = InductorEngine(Path(file), meta, None, compile_here=compile_here)
        ready = {"kernels": engine.kernels, "threads": torch.get_num_threads()}
        return engine, {**ready, "graphs": engine.graph_files}
    import importlib

    _, path, threads, named = target  # the runner runtime.open chose: "module:Class"
    module, _, cls = named.partition(":")
    runner: Any = getattr(importlib.import_module(module), cls)(Path(path), threads)
    return runner, {"kernels": getattr(runner.session, "kernels", {})}


class Sharded:
    """The controller's half of a runner class (see the module docstring): mixed in
    before the runner, it never runs the runner's __init__ and holds no engine."""

    _ranks: Ranks
    _classes: ClassVar[dict[type, type]] = {}

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("_") or name in Sharded.__dict__:
            return object.__getattribute__(self, name)
        found = inspect.getattr_static(type(self), name, None)
        if inspect.isfunction(found):  # a method of the runner: every rank runs it
            return functools.partial(object.__getattribute__(self, "_call"), name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:
        """An attribute the controller does not hold: rank 0's."""
        if name.startswith("__"):
            raise AttributeError(name)
        return self._ranks.call(f"reading {name}", ("get", name, (), {}))

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self._ranks.call(name, ("call", name, args, kwargs))

    @property
    def world_size(self) -> int:
        return self._ranks.world

    @property
    def rank_pids(self) -> list[int]:
        """The ranks' process ids, in rank order."""
        return self._ranks.pids

    def shutdown(self) -> None:
        """Stop the ranks now (they also stop when the controller is collected)."""
        self._ranks.close()


def open_sharded(path: Path, threads: int | None, runner: type, meta: dict[str, Any]) -> Any:
    """The controller of a tensor-parallel bundle whose runner is `runner` (module
    docstring); its ranks are started and loaded when this returns."""
    cls = Sharded._classes.get(runner)
    if cls is None:
        cls = type(f"Sharded{runner.__name__}", (Sharded, runner), {})
        Sharded._classes[runner] = cls
    engine = meta["engines"]["main"]
    controller: Any = object.__new__(cls)
    controller._ranks = Ranks(
        int(engine["tensor_parallel"]),
        engine["provider"],
        ("bundle", str(path), threads, f"{runner.__module__}:{runner.__qualname__}"),
    )
    return controller

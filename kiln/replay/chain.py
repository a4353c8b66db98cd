"""Run one recipe's chain of steps for a replay, wherever it runs (here or a Ray worker).

Each step that has to run runs in its own child process (`python -m
kiln.replay.step`), so a step can be timed out and killed, and a crash cannot take
the replay down. Infrastructure errors (the child timed out, was killed, or hit an
OSError) are retried up to `retries` times; a build error (a KilnError, a builder
bug) is not, and quality is judged later by the driver, so it is never retried.

Steps already in the (shared) store are not rebuilt; validate is always measured
again (`execute.remeasure`). Every start of the chain and every retry takes the
next attempt number of the recipe in this run, from files in the run directory
(shared like the store), so a chain restarted by Ray after its worker died counts
too; the validate artifact records the attempt that measured it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from kiln import paths, proc
from kiln.plan import toolchain
from kiln.plan.step import Step
from kiln.replay.hostclass import this_host
from kiln.store import Store

Status = Literal["measured", "build-fail", "infra-fail", "unsupported"]
INFRA_EXIT = 75  # EX_TEMPFAIL: the child hit an OSError
BUILD_EXIT = 3  # a KilnError or a builder bug: retrying gives the same result


@dataclass(frozen=True)
class RunSpec:
    """What every chain of one replay run shares."""

    run_id: str
    run_dir: str  # shared like the store: attempt counters live here
    store: str
    hub: str
    timeout: float  # seconds per step
    retries: int  # extra tries after an infrastructure error
    pythonpath: str = str(paths.ROOT)


@dataclass
class ChainResult:
    recipe: str
    status: Status
    message: str = ""
    attempt: int = 1  # the attempt that produced the measurement
    built: list[str] = field(default_factory=list)  # step kinds built by this chain
    reused: list[str] = field(default_factory=list)  # step kinds found in the store
    host: dict[str, Any] = field(default_factory=dict)  # where the chain ran
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def next_attempt(run_dir: Path, recipe: str) -> int:
    """1 on the first call for `recipe` in this run, 2 on the next, ... across processes
    and machines sharing `run_dir` (O_EXCL creation is atomic)."""
    folder = run_dir / "attempts"
    folder.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        try:
            fd = os.open(folder / f"{recipe}.{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            n += 1
            continue
        os.write(fd, f"{os.uname().nodename} {os.getpid()}\n".encode())
        os.close(fd)
        return n


def attempts_started(run_dir: Path, recipe: str) -> int:
    return len(list((run_dir / "attempts").glob(f"{recipe}.*")))


def _toolchain_mismatch(steps: list[Step]) -> str:
    """A worker whose libraries or builder code differ from the driver's would build
    artifacts under keys that do not describe them: refuse, never lie in the cache."""
    tools = toolchain.current()
    for s in steps:
        mine = tools.material(s.kind, s.options)
        theirs = {"libraries": s.material["libraries"], "code": s.material["code"]}
        if mine != theirs:
            return (
                f"this worker's toolchain for {s.kind} differs from the driver's "
                f"({mine} vs {theirs}); install the same kiln checkout and libraries"
            )
    return ""


def _run_child(step: Step, spec: RunSpec, context: dict[str, Any], attempt: int) -> tuple[str, str]:
    """Run one step in a child process -> (outcome, message); outcome is "built",
    "reused", "infra" or "build"."""
    run_dir = Path(spec.run_dir)
    result = run_dir / "results" / f"{step.key[:16]}.{os.getpid()}.{attempt}.json"
    result.parent.mkdir(parents=True, exist_ok=True)
    request = {
        "step": {
            "kind": step.kind,
            "name": step.name,
            "options": step.options,
            "inputs": step.inputs,
            "material": step.material,
            "origin": list(step.origin),
            "role": step.role,
        },
        "store": spec.store,
        "context": context,
        "run": {"run": spec.run_id, "attempt": attempt} if step.kind == "validate" else None,
        "result": str(result),
        "parent": os.getpid(),
    }
    env = {**os.environ, "PYTHONPATH": spec.pythonpath}
    child = proc.start([sys.executable, "-m", "kiln.replay.step"], env=env)
    try:  # communicate, not stdin.write: a child killed before it reads is no EPIPE here
        child.communicate(json.dumps(request).encode(), timeout=spec.timeout)
    except proc.TimeoutExpired:
        proc.kill_group(child)
        return "infra", f"{step.kind} timed out after {spec.timeout:g} s"
    code = child.returncode
    if code < 0:
        return "infra", f"{step.kind} was killed by signal {-code}"
    data = json.loads(result.read_text()) if result.is_file() else {}
    if code == 0:
        return ("built" if data.get("built") else "reused"), ""
    message = data.get("message") or f"{step.kind} exited with status {code}"
    return ("infra" if code == INFRA_EXIT else "build"), message


def run_chain(
    recipe: str, steps: list[Step], contexts: dict[str, dict[str, Any]], spec: RunSpec
) -> dict[str, Any]:
    """Build what is missing, measure again, and say what happened (never raises for
    a recipe's failure: one recipe's failure never stops the others)."""
    started = time.monotonic()
    result = _chain(recipe, steps, contexts, spec)
    result.seconds = round(time.monotonic() - started, 3)
    return result.to_dict()


def _chain(
    recipe: str, steps: list[Step], contexts: dict[str, dict[str, Any]], spec: RunSpec
) -> ChainResult:
    run_dir = Path(spec.run_dir)
    out = ChainResult(recipe, "measured", host=this_host())
    attempt = next_attempt(run_dir, recipe)
    store = Store(Path(spec.store))
    todo = [s for s in steps if s.kind == "validate" or not store.has(s.key)]
    mismatch = _toolchain_mismatch(todo)
    if mismatch:
        out.status, out.message = "infra-fail", mismatch
        return out
    for step in steps:
        if step not in todo:
            out.reused.append(step.kind)
            continue
        for tried in range(spec.retries + 1):
            if tried:
                attempt = next_attempt(run_dir, recipe)
                time.sleep(min(2.0 * tried, 10.0))  # let a transient problem pass
            outcome, message = _run_child(step, spec, contexts.get(step.key, {}), attempt)
            if outcome in ("built", "reused"):
                (out.built if outcome == "built" else out.reused).append(step.kind)
                break
            print(f"   replay: {recipe}: {message} (attempt {attempt})", file=sys.stderr)
            if outcome == "build":
                out.status, out.message = "build-fail", f"{step.name}: {message}"
                return out
        else:
            out.status = "infra-fail"
            out.message = f"{step.name}: {message}; gave up after {spec.retries + 1} tries"
            return out
    validate = store.get(next(s.key for s in steps if s.kind == "validate")).record()
    out.attempt = int(validate.get("attempt", attempt))
    return out

"""The replay driver: select, run every chain (here or on Ray), record, compare, report.

The driver is the only writer of manifests and the report; chains (local or on Ray
workers) only build into the shared store and return results. It plans and gets
the hub ready through kiln.commands.build and records through kiln.evidence.record.
"""

from __future__ import annotations

import datetime
import os
import secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln.catalog import Catalog
from kiln.commands import build, workspace
from kiln.errors import KilnError
from kiln.evidence import manifest, record
from kiln.plan.step import Plan
from kiln.replay import report
from kiln.replay.chain import RunSpec, run_chain
from kiln.replay.compare import Outcome, Settings, classify, exit_code, previous
from kiln.replay.hostclass import host_class, this_host
from kiln.replay.jobs import Job, resources
from kiln.replay.select import select
from kiln.schema import Evidence
from kiln.store import Store


@dataclass(frozen=True)
class Options:
    recipes: str | None = None
    tags: str | None = None
    changed_since: str | None = None
    shard: str | None = None
    executor: str = "local"
    address: str | None = None
    report: Path = Path(".kiln/replay")
    timeout: float = 3600.0  # per step, seconds
    retries: int = 2  # extra tries after an infrastructure error
    ray_timeout: float = 6 * 3600.0  # the whole fan-out
    settings: Settings = field(default_factory=Settings)


def command(
    recipes: str | None,
    recipe: str | None,
    tags: str | None,
    changed_since: str | None,
    shard: str | None,
    executor: str,
    address: str | None,
    report: str,
    timeout: float,
    retries: int,
    ray_timeout: float,
    slower: float,
    slower_min_s: float,
) -> tuple[int, Path]:
    """`doit replay`, on the catalog of KILN_ROOT: (exit code, report path)."""
    opts = Options(
        recipes=recipes or recipe,
        tags=tags,
        changed_since=changed_since,
        shard=shard,
        executor=executor,
        address=address,
        report=Path(report),
        timeout=timeout,
        retries=retries,
        ray_timeout=ray_timeout,
        settings=Settings(slower=slower, slower_min_s=slower_min_s),
    )
    return replay(workspace.catalog(), opts)


def brief(exc: KilnError) -> str:
    """Each problem on one line (no snippets): for reports."""
    return "; ".join(p.render().splitlines()[0] for p in exc.problems)


def _durations(p: Plan, store: Store) -> dict[str, float]:
    out = {}
    for s in p.steps:
        seconds = store.get(s.key).record().get("seconds") if store.has(s.key) else None
        if seconds is not None:
            out[s.kind if s.role == "model" else f"{s.role}:{s.kind}"] = float(seconds)
    return out


def _history(cat: Catalog, name: str) -> list[Evidence]:
    try:
        found = manifest.read(cat.paths.manifest(name))
    except KilnError:
        return []
    return list(found.evidence) if found else []


def _jsonable(context: dict[str, Any]) -> dict[str, Any]:
    """A step's context as JSON for its child (kiln.replay.step turns the paths back)."""

    def plain(v: Any) -> Any:
        return (
            str(v) if isinstance(v, Path) else [plain(x) for x in v] if isinstance(v, tuple) else v
        )

    return {k: plain(v) for k, v in context.items()}


def _plan_all(
    cat: Catalog, names: list[str], opts: Options
) -> tuple[list[Job], dict[str, Plan], dict[str, Outcome]]:
    jobs, plans, early = [], {}, {}
    for name in names:
        if name not in cat.recipes:
            file = cat.paths.rel(cat.paths.recipes / f"{name}.yaml")
            why = brief(KilnError(cat.problems.get(file, [])))
            early[name] = Outcome(name, "build-fail", f"invalid recipe: {why}")
            continue
        try:
            p = workspace.plan_in(cat, name)
        except KilnError as exc:
            early[name] = Outcome(name, "unsupported-here", brief(exc))
            continue
        if not build.fetchable_here(p):  # a checkpoint missing is a failure, as in build
            pins = ", ".join(s.name.removeprefix("fetch ") for s in p.steps if s.kind == "fetch")
            why = f"{pins} is not in the hub cache {cat.paths.hub}, and KILN_HUB_ONLINE is unset"
            fix = (
                f"fetch it once (KILN_HUB_ONLINE=1 doit build recipe={name}), or replay without it"
            )
            early[name] = Outcome(name, "build-fail", f"{why}; {fix}")
            continue
        need = resources(cat.recipes[name])
        if opts.executor == "local" and need.gpus:
            early[name] = Outcome(
                name,
                "unsupported-here",
                f"needs {need.gpus} GPU(s) of {cat.recipes[name].build.target}; the local "
                "executor runs cpu recipes only: use executor=ray with such a node",
            )
            continue
        contexts = {s.key: _jsonable(build.context(name, s, cat.paths)) for s in p.steps}
        jobs.append(Job(name, list(p.steps), contexts, need))
        plans[name] = p
    return jobs, plans, early


def _execute(jobs: list[Job], spec: RunSpec, opts: Options) -> list[dict[str, Any]]:
    if opts.executor == "ray":
        from kiln.replay import ray_executor

        return ray_executor.run(jobs, spec, opts.address, opts.ray_timeout)
    results = []
    for i, job in enumerate(jobs, 1):
        print(f"replay [{i}/{len(jobs)}] {job.recipe}", flush=True)
        results.append(run_chain(job.recipe, job.steps, job.contexts, spec))
    return results


def _outcome(
    cat: Catalog, result: dict[str, Any], p: Plan, store: Store, history: list[Evidence]
) -> Outcome:
    name = result["recipe"]
    base = {"seconds": float(result.get("seconds", 0.0)), "built": result.get("built", [])}
    if result["status"] == "measured":
        extra = {
            "attempt": result["attempt"],
            "durations": _durations(p, store),
            "scope": "nightly",
        }
        try:
            evidence = record.record(cat, store, name, p, extra)
        except KilnError as exc:  # e.g. a manifest that no longer parses: this recipe only
            reason = f"measured, but its manifest could not be updated: {brief(exc)}"
            return Outcome(name, "not-run", reason, infra=True, attempt=result["attempt"], **base)
        cls = host_class(evidence.host)
        return Outcome(
            name,
            evidence.verdict,
            evidence.reason,
            evidence=evidence,
            previous=previous(history, cls),
            attempt=evidence.attempt,
            host_class=cls,
            **base,
        )
    cls = host_class(result["host"]) if result.get("host") else ""
    last = previous(history, cls or None) or previous(history, None)
    verdict = {"build-fail": "build-fail", "unsupported": "unsupported-here"}.get(
        result["status"], "not-run"
    )
    return Outcome(
        name,
        verdict,
        result["message"],
        infra=result["status"] == "infra-fail",
        previous=last,
        attempt=result.get("attempt"),
        host_class=cls,
        **base,
    )


def replay(cat: Catalog, opts: Options) -> tuple[int, Path]:
    """Run the replay; returns (exit code, report path)."""
    if opts.executor not in ("local", "ray"):
        raise KilnError.one(f"executor={opts.executor!r}", None, "use executor=local or ray")
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    names = select(cat, opts.recipes, opts.tags, opts.changed_since, opts.shard)
    jobs, plans, early = _plan_all(cat, names, opts)
    build.prepare(list(plans.values()))
    store = Store(cat.paths.store)
    run_id = f"{started.replace(':', '')}-{secrets.token_hex(4)}"
    spec = RunSpec(
        run_id=run_id,
        run_dir=str(cat.paths.store / "replay" / run_id),
        store=str(cat.paths.store),
        hub=str(cat.paths.hub),
        timeout=opts.timeout,
        retries=opts.retries,
    )
    histories = {name: _history(cat, name) for name in names}
    clock = time.monotonic()
    try:
        results = _execute(jobs, spec, opts)
    finally:
        shutil.rmtree(spec.run_dir, ignore_errors=True)
    wall = time.monotonic() - clock
    outcomes = dict(early)
    for r in results:
        outcomes[r["recipe"]] = _outcome(cat, r, plans[r["recipe"]], store, histories[r["recipe"]])
    ordered = []
    for name in names:
        o = outcomes[name]
        if o.previous is None and not o.evidence:
            o.previous = previous(histories[name], None)
        th = cat.recipes[name].validation.thresholds if name in cat.recipes else None
        ordered.append(classify(o, cat.thresholds.get(th) if th else None, opts.settings))
    header = {
        "started": started,
        "executor": opts.executor + (f" at {opts.address}" if opts.address else ""),
        "selection": _describe(opts) or "all recipes",
        "recipes": str(len(names)),
        "wall time": f"{wall:.1f} s",
        "driver": host_class(this_host()),
    }
    folder = opts.report if opts.report.is_absolute() else cat.paths.root / opts.report
    path = report.write(folder, ordered, header, os.uname().nodename)
    return exit_code(ordered), path


def _describe(opts: Options) -> str:
    parts = [
        ("recipes", opts.recipes),
        ("tags", opts.tags),
        ("changed_since", opts.changed_since),
        ("shard", opts.shard),
    ]
    return " ".join(f"{k}={v}" for k, v in parts if v)

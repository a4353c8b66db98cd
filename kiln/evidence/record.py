"""Judge a validation against the recipe's gates and append it to manifests/<recipe>.json.

The one writer of evidence: `doit build` records the run it built, `doit replay`
the run it re-measured (with the attempt and step durations). A manifest is written
last, under a lock, and only when every artifact it names is in the store.
"""

from __future__ import annotations

from typing import Any

from kiln import hostinfo
from kiln.canonical import key_of
from kiln.catalog import Catalog
from kiln.catalog.yaml import read_json
from kiln.errors import KilnError, Location
from kiln.evidence import gates as gates_mod
from kiln.evidence import manifest
from kiln.evidence.lock import lock
from kiln.plan.step import Plan, Step
from kiln.schema import Evidence, GatesRef
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


def _gates(cat: Catalog, name: str) -> GatesRef:
    which = cat.recipe(name).validation.thresholds
    return gates_mod.ref(which, cat.thresholds[which])


def find_recorded(cat: Catalog, store: Store, name: str, p: Plan) -> Evidence | None:
    """The manifest's record of the run in the store, under this exact lock and judged
    under the recipe's current gates; None when it has none (then record() appends
    one: for edited gates, the same metrics judged again, no step rerun)."""
    if not all(store.has(s.key) for s in p.steps):
        return None
    validate = p.step("validate")
    date = measured(cat, store, validate, name)["date"]
    return manifest.find_evidence(
        cat.paths.manifest(name), validate.key, date, lock(store, p), _gates(cat, name)
    )


def record(
    cat: Catalog, store: Store, name: str, p: Plan, extra: dict[str, Any] | None = None
) -> Evidence:
    """Judge the validation against the recipe's gates and append the evidence.
    `extra`: what a replay adds (attempt, step durations, scope "nightly"); otherwise
    the scope is the environment's (kiln.hostinfo.scope: "ci" in CI, else "local")."""
    validate = p.step("validate")
    found = measured(cat, store, validate, name)
    judged_by = _gates(cat, name)
    thresholds = cat.thresholds[cat.recipe(name).validation.thresholds]
    gates, verdict, reason = gates_mod.judge(thresholds, found["metrics"])
    if "unsupported" in found:  # no metrics were measured, and none are claimed
        gates, verdict, reason = [], "unsupported-here", found["unsupported"]
    evidence = Evidence(
        date=found["date"],
        host=found["host"],
        backend=found["backend"],
        step_key=validate.key,
        metrics=found["metrics"],
        gates=gates,
        verdict=verdict,
        reason=reason,
        thresholds=judged_by,
        features=found.get("features"),
        **{"scope": hostinfo.scope(), **(extra or {})},  # a replay says "nightly"
    )
    path = cat.paths.manifest(name)
    # Concurrent builds of one recipe record one run once (issue 7), and a manifest
    # never names an artifact that is not there (it is written last).
    with store.lock(key_of({"manifest": str(path.resolve())}), f"manifest {name}"):
        done = manifest.find_evidence(path, validate.key, found["date"], lock(store, p), judged_by)
        if done is not None:
            print(f"   {name}: this run is already recorded in {cat.paths.rel(path)}")
            _decided(done)
            return done
        absent = [s.name for s in p.steps if not store.has(s.key)]
        if absent:
            raise KilnError.one(f"not writing the manifest: {', '.join(absent)} missing")
        manifest.record(path, name, lock(store, p), evidence)
    print(f"   {name}: {verdict}{' (' + reason + ')' if reason else ''} -> {cat.paths.rel(path)}")
    _decided(evidence)
    return evidence


def _decided(evidence: Evidence) -> None:
    """The gates that decided the verdict, each with its value, bound and n: what the
    validate step's own line (token match, max |dlogit|: diagnostics) does not say."""
    for gate in evidence.gates:
        print(f"     gate {gates_mod.shown(gate)}")

"""manifests/<recipe>.json: the lock (what was built, exactly) and the evidence.

Canonical JSON with a schema_version. The lock holds nothing that varies between
two clean builds (no dates, no hosts), so they give identical locks; provenance
lives in the evidence records. A manifest is written last, atomically, after every
artifact it names exists.

A manifest is the current state, not a log (as dvc.lock is): its lock, and at most
one record per (host class, scope), the newest. Recording one replaces the record of
its host class and scope, and drops the records of other builds made on the same kind
of host (CPU or GPU): they describe a lock this one replaced. A GPU recipe's CPU
record (unsupported-here) stays beside its GPU records, and the other way round.
History is git's, and for the ci and nightly scopes a capped line per run in
manifests/history/<recipe>.jsonl, which the site plots.

The same file shape holds what a build here did not publish: the store's
evidence/<catalog>/<recipe>.json (kiln.paths.Paths.local_evidence). `known()` is
what this checkout knows of a recipe, the two together; `headline()` the record that
decides its verdict: of the lock's build, the best scope (nightly, then ci, then
local), the newest of that scope.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kiln import hostinfo
from kiln.canonical import pretty
from kiln.catalog.yaml import load_json_model
from kiln.errors import KilnError
from kiln.fsio import atomic_write
from kiln.paths import Paths
from kiln.schema import Evidence, Lock, Manifest

# Scopes by the weight of their evidence: a headline never goes to a lighter one while
# a heavier one holds a record of the same build.
SCOPES = ("nightly", "ci", "local")
HISTORY_LINES = 60  # per recipe: about two months of nightlies


def read(path: Path, display: str | None = None) -> Manifest | None:
    if not path.exists():
        return None
    found = load_json_model(Manifest, path, display)
    lock = with_roles(found.lock)
    return found if lock is found.lock else found.model_copy(update={"lock": lock})


def with_roles(lock: Lock) -> Lock:
    """The lock with every step's role. A lock written before steps recorded their
    role names the checkpoint in each step's name (`fetch kiln-tiny/llama-draft@8b5204f`):
    the role is the one whose checkpoint (`repo@rev7`) it cites, else the model's, as
    the planner names them. A step that records its role keeps it."""
    if all("role" in s.model_fields_set for s in lock.steps):
        return lock
    pins = {c.label: role for role, c in lock.companions.items()}
    pins[lock.model.label] = "model"  # a tie is the model's
    steps = [
        s
        if "role" in s.model_fields_set
        else s.model_copy(
            update={"role": next((pins[w] for w in s.name.split() if w in pins), "model")}
        )
        for s in lock.steps
    ]
    return lock.model_copy(update={"steps": steps})


def scope(evidence: Evidence) -> str:
    """The scope of a record: as recorded, or 'local' for a record made before scopes
    were recorded (every one of those came from a person's `doit build`)."""
    return evidence.scope or "local"


def write(path: Path, manifest: Manifest) -> None:
    atomic_write(path, pretty(manifest.model_dump(mode="json")))


def slot(evidence: Evidence) -> tuple[str, str]:
    """What a manifest holds one record of: (host class, scope)."""
    return hostinfo.host_class(evidence.host).key, scope(evidence)


def record(path: Path, recipe: str, lock: Lock, evidence: Evidence) -> Manifest:
    """Record one evidence record, refreshing the lock: it replaces the record of its
    host class and scope and the records of other builds on its kind of host, and goes
    last (the newest)."""
    current = read(path)
    kept = [
        e
        for e in (current.evidence if current else [])
        if slot(e) != slot(evidence) and not superseded(e, evidence)
    ]
    manifest = Manifest(schema_version=1, recipe=recipe, lock=lock, evidence=[*kept, evidence])
    write(path, manifest)
    return manifest


def superseded(old: Evidence, new: Evidence) -> bool:
    """A record of another build than `new`'s, made on the same kind of host."""
    kind = hostinfo.host_class(new.host).kind
    return old.step_key != new.step_key and hostinfo.host_class(old.host).kind == kind


def validate_key(lock: Lock) -> str | None:
    """The key of the lock's validate step: which build the lock is."""
    return next((s.key for s in lock.steps if s.kind == "validate"), None)


def headline(found: Manifest | None) -> Evidence | None:
    """The record that decides a recipe's verdict: of the lock's build (its validate
    step), the one of the heaviest scope, the newest of that scope; with none of the
    lock's build, the newest record."""
    if found is None or not found.evidence:
        return None
    key = validate_key(found.lock)
    return best([e for e in found.evidence if e.step_key == key] or found.evidence)


def best(records: list[Evidence]) -> Evidence | None:
    """Of these records (oldest first), the newest of the heaviest scope."""
    if not records:
        return None
    rank = {name: i for i, name in enumerate(SCOPES)}
    weight = min(rank.get(scope(e), len(SCOPES)) for e in records)
    return [e for e in records if rank.get(scope(e), len(SCOPES)) == weight][-1]


def passed_here(found: Manifest | None, p: Any) -> Evidence | None:
    """The record that decides the plan's current build (its validate step) on this
    host class: the heaviest scope's, the newest of it (`best`); None when there is none.
    `p`: a kiln.plan.step.Plan."""
    key = p.step("validate").key
    here = hostinfo.host_class(hostinfo.host())
    mine = [
        e
        for e in (found.evidence if found else [])
        if e.step_key == key and hostinfo.host_class(e.host) == here
    ]
    return best(mine)


def known(paths: Paths, recipe: str, display: str | None = None) -> Manifest | None:
    """What this checkout knows of a recipe: its published manifest joined with the
    store's records of builds here that were not published (`joined`). Raises
    KilnError for an unreadable published manifest."""
    return joined(read(paths.manifest(recipe), display), paths, recipe)


def joined(published: Manifest | None, paths: Paths, recipe: str) -> Manifest | None:
    """`published` (the manifest, already read) and the records of builds here that
    were not published (the store's), those last. The lock is the published one unless
    the newest record is a build here of another lock (the working tree's recipe, built
    and not published). An unreadable local file is left out (the store's own file: a
    later build rewrites it)."""
    try:
        local = read(paths.local_evidence(recipe))
    except KilnError:
        local = None
    if local is None:
        return published
    if published is None:
        return local
    ours = [e for e in local.evidence if e not in published.evidence]
    newest = max([*published.evidence, *ours], key=lambda e: e.date, default=None)
    lock = local.lock if newest is not None and newest in ours else published.lock
    return published.model_copy(update={"lock": lock, "evidence": [*published.evidence, *ours]})


def history_path(paths: Paths, recipe: str) -> Path:
    return paths.manifests / "history" / f"{recipe}.jsonl"


def history_line(evidence: Evidence) -> dict[str, Any]:
    """One run, compactly: when, where (host class), scope, which build, the verdict
    and every metric."""
    return {
        "date": evidence.date,
        "host": evidence.host.model_dump(mode="json", exclude_none=True),
        "scope": scope(evidence),
        "step_key": evidence.step_key,
        "thresholds": evidence.thresholds.sha256[:16] if evidence.thresholds else None,
        "verdict": evidence.verdict,
        "metrics": evidence.metrics,
    }


def append_history(paths: Paths, recipe: str, evidence: Evidence) -> None:
    """Append the run to the recipe's history (ci and nightly scopes only), keeping the
    newest HISTORY_LINES lines."""
    path = history_path(paths, recipe)
    lines = read_history_lines(path)
    lines = [*lines, json.dumps(history_line(evidence), sort_keys=True)][-HISTORY_LINES:]
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, "".join(f"{line}\n" for line in lines).encode())


def read_history_lines(path: Path) -> list[str]:
    """The history file's lines that parse as JSON objects; a damaged line is dropped
    (the file is a plot's data, never a verdict's)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in text.splitlines()[-2 * HISTORY_LINES :]:
        try:
            ok = isinstance(json.loads(line), dict)
        except ValueError:
            ok = False
        if ok:
            out.append(line)
    return out[-HISTORY_LINES:]


def history(paths: Paths, recipe: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in read_history_lines(history_path(paths, recipe))]

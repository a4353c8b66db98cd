"""manifests/<recipe>.json: the lock (what was built, exactly) and the evidence.

Canonical JSON with a schema_version. The lock holds nothing that varies between
two clean builds (no dates, no hosts), so they give identical locks; provenance
lives in the evidence records. A manifest is written last, atomically, after every
artifact it names exists.
"""

from __future__ import annotations

from pathlib import Path

from kiln.canonical import pretty
from kiln.catalog.yaml import load_json_model
from kiln.fsio import atomic_write
from kiln.schema import Evidence, Lock, Manifest


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


def record(path: Path, recipe: str, lock: Lock, evidence: Evidence) -> Manifest:
    """Append one evidence record, refreshing the lock."""
    current = read(path)
    history = list(current.evidence) if current else []
    manifest = Manifest(schema_version=1, recipe=recipe, lock=lock, evidence=[*history, evidence])
    write(path, manifest)
    return manifest

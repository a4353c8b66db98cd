"""A manifest is the current state (issue 43): at most one record per (host class,
scope), the headline is the heaviest scope's record of the lock's build, a person's
build records into the store unless published, and the history that the site plots
is a capped file only ci and nightly runs append to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kiln import hostinfo
from kiln.errors import KilnError
from kiln.evidence import manifest
from kiln.paths import ROOT, Paths
from kiln.schema import Evidence, Manifest

SHIPPED = manifest.read(ROOT / "manifests" / "tiny-llama.json")
assert SHIPPED is not None and SHIPPED.evidence
BASE = SHIPPED.evidence[-1]
KEY = manifest.validate_key(SHIPPED.lock)
assert KEY is not None


def run(date: str, scope: str, cores: int = 2, **update: object) -> Evidence:
    host = BASE.host.model_copy(update={"cores": cores, "gpu": None})
    fields = {"date": date, "scope": scope, "host": host, "step_key": KEY, **update}
    return BASE.model_copy(update=fields)


def recorded(tmp_path: Path, *runs: Evidence) -> Manifest:
    path = tmp_path / "m.json"
    found = None
    for r in runs:
        found = manifest.record(path, "tiny-llama", SHIPPED.lock, r)
    assert found is not None and manifest.read(path) == found
    return found


def test_a_record_replaces_its_host_class_and_scope_and_goes_last(tmp_path: Path) -> None:
    local = run("2026-12-01T00:00:00+00:00", "local")
    ci = run("2026-12-02T00:00:00+00:00", "ci")
    other = run("2026-12-03T00:00:00+00:00", "local", cores=16)  # another host class
    again = run("2026-12-04T00:00:00+00:00", "local")
    found = recorded(tmp_path, local, ci, other, again)
    assert found.evidence == [ci, other, again]
    slots = [manifest.slot(e) for e in found.evidence]
    assert len(set(slots)) == len(slots)  # one per (host class, scope)
    gpu_host = BASE.host.model_copy(update={"gpu": "NVIDIA H100 80GB HBM3"})
    gpu = run("2026-12-04T12:00:00+00:00", "local", host=gpu_host, step_key="d" * 64)
    assert recorded(tmp_path, gpu).evidence == [ci, other, again, gpu]
    # another build on a CPU supersedes every CPU record of the builds before it; the
    # GPU's record of its own build stays (a CPU cannot replace it)
    rebuilt = run("2026-12-05T00:00:00+00:00", "ci", step_key="f" * 64)
    assert recorded(tmp_path, rebuilt).evidence == [gpu, rebuilt]


def test_the_headline_is_the_heaviest_scope_of_the_locks_build(tmp_path: Path) -> None:
    ci = run("2026-12-02T00:00:00+00:00", "ci", verdict="pass")
    local = run("2026-12-04T00:00:00+00:00", "local", verdict="quality-fail", cores=8)
    found = recorded(tmp_path, ci, local)
    assert manifest.headline(found) == ci  # a newer person's build never replaces it
    nightly = run("2026-12-01T00:00:00+00:00", "nightly", cores=4)
    assert manifest.headline(found.model_copy(update={"evidence": [nightly, ci, local]})) == nightly
    # a record of another build (the lock's validate step is not its) is not the headline
    old = run("2026-12-06T00:00:00+00:00", "nightly", step_key="e" * 64)
    assert manifest.headline(found.model_copy(update={"evidence": [ci, local, old]})) == ci
    assert manifest.headline(found.model_copy(update={"evidence": []})) is None


def test_known_adds_the_stores_unpublished_records(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "catalog")
    published = paths.manifest("tiny-llama")
    published.parent.mkdir(parents=True)
    ci = run("2026-12-02T00:00:00+00:00", "ci")
    manifest.record(published, "tiny-llama", SHIPPED.lock, ci)
    assert manifest.known(paths, "tiny-llama") == manifest.read(published)
    mine = run("2026-12-03T00:00:00+00:00", "local")
    local = paths.local_evidence("tiny-llama")
    local.parent.mkdir(parents=True)
    manifest.record(local, "tiny-llama", SHIPPED.lock, mine)
    both = manifest.known(paths, "tiny-llama")
    assert both is not None and both.evidence == [ci, mine]
    assert manifest.headline(both) == ci
    local.write_text("{not json")  # the store's own file: left out, never an error
    assert manifest.known(paths, "tiny-llama") == manifest.read(published)
    published.write_text("{not json")  # the published one is the user's: an error
    with pytest.raises(KilnError):
        manifest.known(paths, "tiny-llama")


def test_local_evidence_is_the_stores_and_per_catalog(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("KILN_STORE", str(tmp_path / "store"))
    a, b = Paths(tmp_path / "a"), Paths(tmp_path / "b")
    assert a.local_evidence("x").is_relative_to(tmp_path / "store" / "evidence")
    assert a.local_evidence("x") != b.local_evidence("x")


@pytest.mark.parametrize(
    ("env", "scope", "expected"),
    [
        ({}, "local", False),
        ({}, "ci", True),
        ({}, "nightly", True),
        ({"KILN_PUBLISH": "1"}, "local", True),
        ({"KILN_PUBLISH": "0"}, "ci", False),
        ({"KILN_PUBLISH": " Yes "}, "local", True),
    ],
)
def test_what_publishes(env: dict[str, str], scope: str, expected: bool) -> None:
    assert hostinfo.publishes(scope, env) is expected


def test_a_bad_publish_value_is_a_located_error() -> None:
    with pytest.raises(KilnError, match="KILN_PUBLISH='maybe' is not 1 or 0"):
        hostinfo.publishes("local", {"KILN_PUBLISH": "maybe"})


def test_history_is_capped_compact_and_survives_a_damaged_line(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    for day in range(manifest.HISTORY_LINES + 5):
        manifest.append_history(paths, "tiny-llama", run(f"2026-10-{day:03d}", "nightly"))
    lines = manifest.history_path(paths, "tiny-llama").read_text().splitlines()
    assert len(lines) == manifest.HISTORY_LINES
    assert json.loads(lines[0])["date"] == "2026-10-005"  # the oldest went first
    assert max(len(line) for line in lines) < 2_000  # a line per run, not a record
    path = manifest.history_path(paths, "tiny-llama")
    path.write_text(path.read_text() + "{torn\n")
    assert len(manifest.history(paths, "tiny-llama")) == manifest.HISTORY_LINES
    assert manifest.history(paths, "absent") == []

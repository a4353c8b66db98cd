"""`doit status`: one line per recipe, its verdict here and on other host classes, stale
or not, built here or not, read from the committed manifests (issue 43)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import copy_catalog, shipped_gpu

from kiln import hostinfo
from kiln.evidence import manifest
from kiln.schema import Evidence, Manifest


def test_status_reads_each_manifests_latest_record_per_host_class(tmp_path: Path) -> None:
    world = copy_catalog(tmp_path)
    doc = json.loads(world.doit("status", "format=json", check=True).stdout)
    rows = {r["recipe"]: r for r in doc["recipes"]}
    this = hostinfo.host_class(hostinfo.host())
    assert doc["host_class"] == this.label
    recipes = sorted(p.stem for p in (world.root / "recipes").glob("*.yaml"))
    assert sorted(rows) == recipes  # every recipe, with a manifest or not
    for name, row in rows.items():
        path = world.root / "manifests" / f"{name}.json"
        if not path.exists():
            assert row["manifest"] == "none" and row["here"] is None and not row["elsewhere"]
            continue
        evidence = Manifest.model_validate_json(path.read_text()).evidence
        by_class: dict[str, list[Evidence]] = {}
        for e in evidence:
            by_class.setdefault(hostinfo.host_class(e.host).label, []).append(e)
        latest = {label: manifest.best(records) for label, records in by_class.items()}
        here = latest.pop(this.label, None)
        record = (
            None
            if here is None
            else {"verdict": here.verdict, "scope": manifest.scope(here), "date": here.date}
            | {"published": True}
        )
        assert row["here"] == record, name
        assert set(row["elsewhere"]) == set(latest), name
        assert row["built_here"] is False  # a fresh store holds nothing
    gpu = rows["tiny-llama-fp8-h200"]
    assert gpu["elsewhere"][shipped_gpu()]["verdict"] == "pass" and gpu["stale"]


def test_status_text_is_one_line_per_recipe_and_a_total(tmp_path: Path) -> None:
    world = copy_catalog(tmp_path)
    out = world.doit("status", "recipe=tiny-llama,tiny-llama-fp8-h200", check=True).stdout
    lines = [line for line in out.splitlines() if not line.startswith(".  ")]
    assert lines[0].startswith("recipe") and "built here" in lines[0]
    assert lines[1].startswith("tiny-llama ") and lines[2].startswith("tiny-llama-fp8-h200 ")
    assert f"pass on {shipped_gpu()}" in lines[2]
    assert lines[-1].startswith("2 recipes; ")


def test_an_unreadable_manifest_is_said_so(tmp_path: Path) -> None:
    world = copy_catalog(tmp_path)
    (world.root / "manifests" / "tiny-llama.json").write_text("{ not json")
    doc = json.loads(world.doit("status", "recipe=tiny-llama", "format=json", check=True).stdout)
    assert doc["recipes"][0]["manifest"] == "unreadable"

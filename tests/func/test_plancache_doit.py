"""What doit does with the plan cache (kiln/commands/plancache.py; the cache itself:
tests/unit/test_plancache.py): read-only commands write no cache, and a no-op
`doit build` of a finished build imports no pydantic, PyYAML or catalog, runs nothing,
and still sees an edited manifest."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys

import pytest
from conftest import PLANNED, ROOT, SLOW, World

from kiln import catalog
from kiln.commands import workspace
from kiln.paths import Paths
from kiln.store import Store

RUN = re.compile(r"^\.  ", re.MULTILINE)  # doit prints ".  title" for a task it runs
RECIPES = PLANNED


@pytest.fixture
def world(planning_world: World) -> World:
    return planning_world


def test_read_only_commands_write_no_build_cache(world: World) -> None:
    for args in (("plan", "recipe=tiny-llama"), ("check",)):
        proc = world.doit(*args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert not (world.store / "cache" / "stat.json").exists(), args
        assert not (world.store / "cache" / "plans").exists(), args


# ---------------------------------------------------------------- a no-op build


def finish(world: World) -> None:
    """Put every planned artifact into the store and record every manifest, as a
    finished build leaves them (what bench/noop_build.py does, for these recipes)."""
    from kiln.evidence import record
    from kiln.store.unsupported import MARKER

    cat = catalog.load(Paths(world.root))
    store = Store(world.store)
    plans = [workspace.plan_in(cat, name) for name in sorted(cat.recipes)]
    for p in plans:
        shipped = json.loads((ROOT / "manifests" / f"{p.recipe}.json").read_text())
        evidence = shipped["evidence"][-1]
        for s in p.steps:
            if store.has(s.key):
                continue
            meta = {"kind": s.kind, "name": s.name, "material": s.material}
            with store.publish(s.key, meta) as w:
                if s.kind == "fetch":
                    config = json.dumps({"architectures": ["LlamaForCausalLM"]}).encode()
                    w.write_bytes("checkpoint/config.json", config)
                    entry = {"path": "config.json", "sha256": hashlib.sha256(config).hexdigest()}
                    pin = {k: s.options[k] for k in ("repo", "revision")}
                    w.write_json("files.json", {**pin, "files": [{**entry, "size": len(config)}]})
                elif s.kind == "validate" and evidence["verdict"] == "unsupported-here":
                    marker = {k: evidence[k] for k in ("reason", "date", "host")}
                    w.write_json(MARKER, {"step": s.name, **marker})
                elif s.kind == "validate":
                    fields = ("date", "host", "backend", "metrics")
                    w.write_json("evidence.json", {k: evidence[k] for k in fields})
                else:
                    w.write_bytes("artifact.bin", s.key.encode())
        record.record(cat, store, p.recipe, p)


def imported(world: World, *args: str) -> tuple[str, set[str]]:
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *world.argv(*args)[1:]],
        env={**world.env, "KILN_HUB_ONLINE": "1"},
        capture_output=True,
        text=True,
        timeout=SLOW,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert names
    return proc.stdout, names


def test_a_no_op_build_imports_no_catalog_runs_nothing_and_sees_an_edited_manifest(
    world: World,
) -> None:
    finish(world)
    out, names = imported(world, "build")  # plans, and caches the plans and the records
    assert not RUN.search(out), out
    out, names = imported(world, "build")
    assert not RUN.search(out), out
    assert {"kiln.commands.plancache", "kiln.store"} <= names
    assert not {"pydantic", "yaml", "kiln.catalog", "kiln.schema", "filelock"} & names

    manifest = world.root / "manifests" / "tiny-qwen3.json"
    data = json.loads(manifest.read_text())
    data["evidence"] = data["evidence"][:-1]  # the run's record is gone
    manifest.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    out, names = imported(world, "build")
    assert ".  manifest  tiny-qwen3" in out, out  # recorded again
    assert "pydantic" in names  # asked find_recorded, which reads the manifest
    assert len(RUN.findall(out)) == 1, out

"""`doit gc` removes what no build can need, and only that; `dry_run=1` lists it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, make_world
from samples import sample_manifest

from kiln import catalog
from kiln.canonical import key_of
from kiln.evidence import manifest
from kiln.plan import plan, toolchain
from kiln.store import Store

HOLD = """
import sys, time
from pathlib import Path
from kiln.store import Store
with Store(Path(sys.argv[1])).lock(sys.argv[2], "a build in progress"):
    print("holding", flush=True)
    time.sleep(600)
"""


def publish(store: Store, key: str) -> None:
    with store.publish(key, {"kind": "test", "name": key[:6]}) as w:
        w.write_bytes("data.bin", key.encode())


def test_gc_removes_stale_and_unreferenced_entries_and_keeps_the_rest(tmp_path: Path) -> None:
    world = make_world(tmp_path, tmp_path / "hub", ("tiny-llama",))
    store = Store(world.store)
    cat = catalog.load(catalog.Paths(world.root))
    recipe = cat.recipe("tiny-llama")
    planned = plan("tiny-llama", recipe, cat.prompts["default"], toolchain.current()).steps[0].key
    in_manifest = sample_manifest(3)
    manifest.write(world.root / "manifests" / "tiny-llama.json", in_manifest)
    locked = in_manifest.lock.steps[0].key
    unreferenced, stale, live, partial = (key_of(n) for n in ("u", "s", "l", "p"))
    for key in (planned, locked, unreferenced):
        publish(store, key)
    (store.root / "tmp" / f"{stale}.abc").mkdir()
    (store.root / "tmp" / f"{live}.def").mkdir()
    (store.object_dir(partial)).mkdir(parents=True)
    old_tmp = world.root / "manifests" / ".tiny-llama.json.old.tmp"
    new_tmp = world.root / "manifests" / ".tiny-llama.json.new.tmp"
    for f in (old_tmp, new_tmp):
        f.write_text("{")
    os.utime(old_tmp, (time.time() - 600, time.time() - 600))

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(store.root), live],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        everything = {str(p) for p in tmp_path.rglob("*")}
        dry = world.doit("gc", "dry_run=1", check=True).stdout
        assert everything <= {str(p) for p in tmp_path.rglob("*")}  # nothing removed
        removable = [
            store.root / "tmp" / f"{stale}.abc",
            store.object_dir(unreferenced),
            store.object_dir(partial),
            old_tmp,
        ]
        for path in removable:
            assert f"would remove {path} " in dry, dry
        assert "gc: would remove 4 entries" in dry
        world.doit("gc", check=True)
    finally:
        holder.kill()
        holder.wait()
    assert not any(p.exists() for p in removable)
    assert store.has(planned) and store.has(locked) and new_tmp.exists()
    assert (store.root / "tmp" / f"{live}.def").exists()  # its build was still running
    assert store.verify(planned) == [] and store.verify(locked) == []


def test_gc_refuses_when_a_manifest_is_unreadable(tmp_path: Path) -> None:
    world = make_world(tmp_path, tmp_path / "hub", ("tiny-llama",))
    publish(Store(world.store), key_of("kept"))
    (world.root / "manifests" / "tiny-llama.json").write_text("{not json")
    proc = world.doit("gc")
    assert proc.returncode != 0 and "not collecting garbage" in proc.stdout + proc.stderr
    assert Store(world.store).has(key_of("kept"))


def test_gc_dry_run_yes_removes_nothing_and_a_bad_bool_is_refused(tmp_path: Path) -> None:
    """`dry_run=yes` is a bool like `dry_run=1`: it lists and never deletes. Anything
    that is not a bool, and any misspelt name, stops gc before it looks."""
    world = make_world(tmp_path, tmp_path / "hub", ("tiny-llama",))
    store = Store(world.store)
    unreferenced = key_of("unreferenced")
    publish(store, unreferenced)
    dry = world.doit("gc", "dry_run=yes", check=True).stdout
    assert f"would remove {store.object_dir(unreferenced)} " in dry and store.has(unreferenced)
    for args, message in (
        (("dry_run=maybe",), "command line: dry_run: 'maybe' is not a bool"),
        (("dryrun=1",), "unknown variable 'dryrun' for gc; did you mean 'dry_run'?"),
    ):
        proc = world.doit("gc", *args)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and message in out and "Traceback" not in out, out
        assert store.has(unreferenced)
    world.doit("gc", "dry_run=no", check=True)
    assert not store.has(unreferenced)

"""`doit verify` re-hashes the store and the checkpoint files against the locks, with
an exit code per finding; a build that needs a corrupt artifact rebuilds it."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, World, heavy

from kiln.schema import Manifest
from kiln.store import Store
from kiln.store.verify import audit

pytestmark = heavy


def copy_world(built: World, base: Path) -> World:
    """A private copy of the built catalog and store, to damage freely."""
    world = World(root=base / "catalog", hub=built.hub, store=base / "store")
    shutil.copytree(built.root, world.root, symlinks=True, ignore=shutil.ignore_patterns(".doit*"))
    shutil.copytree(built.store, world.store, symlinks=True)
    for p in world.root.glob("manifests/*.json"):
        if not (world.root / "recipes" / f"{p.stem}.yaml").exists():
            p.unlink()  # left by other tests' recipes; keep this world to the two tiny ones
    world.doit("gc", check=True)
    return world


def flip(path: Path, offset: int) -> bytes:
    """Flip one bit of one byte, as a failing disk or a stray write would."""
    path.chmod(0o644)
    data = path.read_bytes()
    damaged = bytearray(data)
    damaged[offset] ^= 0x01
    path.write_bytes(bytes(damaged))
    return data


def manifests_of(world: World) -> dict[str, Manifest]:
    return {
        f"manifests/{p.name}": Manifest.model_validate_json(p.read_text())
        for p in sorted((world.root / "manifests").glob("*.json"))
    }


def test_verify_exit_codes_say_what_was_found(built: World, tmp_path: Path) -> None:
    world = copy_world(built, tmp_path)
    clean = world.doit("verify")
    assert clean.returncode == 0 and " 0 corrupt, 0 partial, 0 missing, 0 extra" in clean.stdout

    stale = world.store / "tmp" / f"{'ab' * 32}.x1y2z3"
    stale.mkdir(parents=True)
    assert world.doit("verify").returncode == 6  # extra

    store = Store(world.store)
    fetch, export = (s["key"] for s in world.manifest("tiny-llama")["lock"]["steps"][:3:2])
    store.remove(export)
    missing = world.doit("verify")
    assert missing.returncode == 5 and f"[{export[:12]}] is not in the store" in missing.stdout

    flip(store.get(fetch).path / "checkpoint" / "config.json", 10)
    corrupt = world.doit("verify")
    assert corrupt.returncode == 4  # the most serious finding wins
    assert "config.json" in corrupt.stdout and "Traceback" not in corrupt.stdout


def test_a_flipped_bit_in_any_file_of_any_artifact_is_detected(
    built: World, tmp_path: Path
) -> None:
    world = copy_world(built, tmp_path)
    store = Store(world.store)
    manifests = manifests_of(world)
    rng = random.Random(7)
    keys = list(store.keys())
    files = sorted(p for key in keys for p in store.get(key).path.rglob("*") if p.is_file())
    assert len(files) > 20
    for path in files:
        original = flip(path, rng.randrange(path.stat().st_size))
        report = audit(store, manifests, [])
        assert report.corrupt or report.partial, path
        path.write_bytes(original)
    assert audit(store, manifests, []).exit_code() in (0, 6)
    print(f"\nintegrity: {len(files)} files flipped one bit each, {len(files)} detected")


def test_a_tampered_checkpoint_in_the_store_shows_both_digests(
    built: World, tmp_path: Path
) -> None:
    """Even when the artifact's own record was rewritten to match, the lock catches it."""
    world = copy_world(built, tmp_path)
    store = Store(world.store)
    lock = world.manifest("tiny-llama")["lock"]
    art = store.get(lock["steps"][0]["key"])
    config = art.path / "checkpoint" / "config.json"
    recorded = next(f["sha256"] for f in lock["model"]["files"] if f["path"] == "config.json")
    flip(config, 5)
    got = hashlib.sha256(config.read_bytes()).hexdigest()
    record_path = art.path / ".kiln-artifact.json"
    record = json.loads(record_path.read_text())
    record["files"]["checkpoint/config.json"] = got
    record.pop("sha256", None)  # what an older kiln wrote: no digest of the record
    record_path.chmod(0o644)
    record_path.write_text(json.dumps(record))
    assert store.verify(art.key) == []  # the record alone no longer tells
    out = world.doit("verify")
    assert out.returncode == 4
    assert f"the lock says sha256 {recorded}, the store has {got}" in out.stdout


def test_a_build_that_needs_a_corrupt_artifact_removes_and_rebuilds_it(
    built: World, tmp_path: Path
) -> None:
    world = copy_world(built, tmp_path)
    store = Store(world.store)
    steps = {s["kind"]: s["key"] for s in world.manifest("tiny-llama")["lock"]["steps"]}
    onnx = store.get(steps["onnx"])
    model = max((p for p in onnx.path.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    flip(model, model.stat().st_size // 2)
    store.remove(steps["engine"])  # so the build needs the onnx artifact
    out = world.doit("build", "recipe=tiny-llama", check=True)
    text = out.stdout + out.stderr
    assert f"artifact {steps['onnx'][:12]} is corrupt" in text
    assert "removing it and building it again" in text
    assert store.verify(steps["onnx"]) == [] and store.verify(steps["engine"]) == []
    journal = [json.loads(line)["kind"] for line in (world.store / "log" / "builds.jsonl").open()]
    assert journal[-2:] == ["onnx", "engine"]
    assert world.manifest("tiny-llama")["lock"] == built.manifest("tiny-llama")["lock"]
    assert world.doit("verify").returncode == 0


@pytest.mark.parametrize("victim", ["fetch", "validate"])
def test_repair_removes_a_damaged_artifact_for_the_next_build(
    built: World, tmp_path: Path, victim: str
) -> None:
    world = copy_world(built, tmp_path)
    store = Store(world.store)
    key = next(
        s["key"] for s in world.manifest("tiny-llama")["lock"]["steps"] if s["kind"] == victim
    )
    path = next(p for p in store.get(key).path.rglob("*") if p.is_file() and p.suffix == ".json")
    flip(path, 3)
    assert world.doit("verify", "repair=1").returncode == 4
    assert not store.has(key)
    assert world.doit("verify").returncode == 5  # missing now, until the next build


def test_manifests_sharing_a_step_with_a_build_are_not_missing(
    built: World, tmp_path: Path
) -> None:
    """After `doit build recipe=tiny-llama`, a committed manifest that shares its fetch
    and reference but whose other steps this store never built is not damage (issue
    43: verify counted 92 such 'missing' lines and exited 5 on a healthy store). Only a
    step the store built (log/builds.jsonl) and lost is missing."""
    world = copy_world(built, tmp_path)
    for folder, ext in (("recipes", "yaml"), ("manifests", "json")):
        shutil.copy(ROOT / folder / f"tiny-llama-fp8.{ext}", world.root / folder)
    shared = {s["key"] for s in world.manifest("tiny-llama")["lock"]["steps"]}
    other = {s["key"] for s in world.manifest("tiny-llama-fp8")["lock"]["steps"]}
    assert shared & other and other - shared  # it shares some steps, and not all
    proc = world.doit("verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "missing:" not in proc.stdout
    bundle = next(
        s["key"] for s in world.manifest("tiny-llama")["lock"]["steps"] if s["kind"] == "bundle"
    )
    Store(world.store).remove(bundle)
    lost = world.doit("verify")
    assert lost.returncode == 5 and f"[{bundle[:12]}] is not in the store" in lost.stdout
    assert lost.stdout.count("is not in the store") == 1  # the one this store built


def test_a_fresh_clone_is_not_built_here_not_damaged(built: World, tmp_path: Path) -> None:
    """Manifests from elsewhere and an empty store: one summary line, exit 0."""
    world = copy_world(built, tmp_path)
    shutil.rmtree(world.store)
    proc = world.doit("verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("not built here: 2 manifests") == 1
    assert "missing:" not in proc.stdout and "is not in the store" not in proc.stdout
    report = json.loads(world.doit("verify", "format=json").stdout)
    assert report["exit"] == 0 and len(report["not_built_here"]) == 2
    assert report["missing"] == [] and report["corrupt"] == []


def test_verify_prints_both_digests_of_a_corrupt_artifact(built: World, tmp_path: Path) -> None:
    world = copy_world(built, tmp_path)
    store = Store(world.store)
    engine = next(
        s["key"] for s in world.manifest("tiny-llama")["lock"]["steps"] if s["kind"] == "engine"
    )
    path = next(p for p in store.get(engine).path.rglob("*.onnx"))
    recorded = hashlib.sha256(path.read_bytes()).hexdigest()
    flip(path, 100)
    now = hashlib.sha256(path.read_bytes()).hexdigest()
    proc = world.doit("verify")
    assert proc.returncode == 4
    assert f"the record says sha256 {recorded}, the file has {now}" in proc.stdout


def test_verify_rehashes_the_hub_cache_of_every_locked_checkpoint(
    built: World, tmp_path: Path
) -> None:
    """A flipped byte in a mirrored checkpoint blob is reported, with both digests,
    before any fetch reads it."""
    world = copy_world(built, tmp_path)
    hub = tmp_path / "hub"
    shutil.copytree(built.hub, hub, symlinks=True)
    world = World(root=world.root, hub=hub, store=world.store)
    clean = world.doit("verify")
    assert clean.returncode == 0, clean.stdout
    counted = int(clean.stdout.split("; ")[-1].split()[0])
    assert counted >= 10  # both tiny checkpoints' files
    lock = world.manifest("tiny-llama")["lock"]["model"]
    repo_dir = hub / f"models--{lock['repo'].replace('/', '--')}"
    config = repo_dir / "snapshots" / lock["revision"] / "config.json"
    flip(config.resolve(), 5)
    got = hashlib.sha256(config.read_bytes()).hexdigest()
    expected = next(f["sha256"] for f in lock["files"] if f["path"] == "config.json")
    proc = world.doit("verify")
    assert proc.returncode == 4, proc.stdout
    assert f"config.json: the lock says sha256 {expected}, the hub cache has {got}" in proc.stdout
    assert f"its blob is named {expected}: the file changed; delete it and fetch again" in (
        proc.stdout
    )


def git_blob_sha1(data: bytes) -> str:
    """The name the hub gives a blob that is not in LFS: git's digest of it."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.mark.parametrize("named_by", ["sha256", "git-sha1"])
def test_an_edited_lock_is_told_apart_from_a_changed_hub_file(
    built: World, tmp_path: Path, named_by: str
) -> None:
    """Issue 37: with a digest edited in the lock, verify told the user to delete the
    good checkpoint file. The file still matches its blob's name (the hub's own digest:
    sha256 for an LFS file, git's sha1 for any other), so the lock is what changed."""
    world = copy_world(built, tmp_path)
    hub = tmp_path / "hub"
    shutil.copytree(built.hub, hub, symlinks=True)
    world = World(root=world.root, hub=hub, store=world.store)
    path = world.root / "manifests" / "tiny-llama.json"
    data = json.loads(path.read_text())
    lock = data["lock"]["model"]
    config = hub / f"models--{lock['repo'].replace('/', '--')}" / "snapshots"
    config = config / lock["revision"] / "config.json"
    good = hashlib.sha256(config.read_bytes()).hexdigest()
    if named_by == "git-sha1":  # the blob as the hub names a file kept in git
        blob = config.resolve()
        renamed = blob.with_name(git_blob_sha1(blob.read_bytes()))
        blob.rename(renamed)
        config.unlink()
        config.symlink_to(os.path.relpath(renamed, config.parent))
    next(f for f in lock["files"] if f["path"] == "config.json")["sha256"] = "0" * 64
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")

    proc = world.doit("verify")
    assert proc.returncode == 4, proc.stdout
    hub_line = next(line for line in proc.stdout.splitlines() if "hub cache" in line)
    assert (
        f"the file matches its blob name, the hub's own digest of it ({config.resolve().name})"
        in hub_line
    )
    assert "the manifest's lock was edited, not the file; keep the file and restore " in hub_line
    assert "manifests/tiny-llama.json from git" in hub_line and "delete" not in hub_line
    store_line = next(line for line in proc.stdout.splitlines() if "the store has" in line)
    assert f"the store has {good}, as the fetch artifact's sealed record does" in store_line
    assert "delete" not in store_line

    world.doit("build", "recipe=tiny-llama", check=True)  # the fix it names: the lock again
    assert world.manifest("tiny-llama")["lock"] == built.manifest("tiny-llama")["lock"]
    assert world.doit("verify").returncode == 0


def test_a_flipped_byte_in_a_stored_engine_is_never_used(built: World, tmp_path: Path) -> None:
    """doit run refuses it with both digests and the repair command; doit build does not
    call it up to date: it says so, with both digests, and remakes it."""
    world = copy_world(built, tmp_path)
    store = Store(world.store)
    steps = {s["kind"]: s["key"] for s in world.manifest("tiny-llama")["lock"]["steps"]}
    path = max(
        (p for p in store.get(steps["engine"]).path.rglob("*") if p.is_file()),
        key=lambda p: p.stat().st_size,
    )
    recorded = hashlib.sha256(path.read_bytes()).hexdigest()
    flip(path, path.stat().st_size // 3)
    got = hashlib.sha256(path.read_bytes()).hexdigest()

    run = world.doit("run", "recipe=tiny-llama", "prompt=Hello", "max_new_tokens=4")
    out = run.stdout + run.stderr
    assert run.returncode != 0 and "Traceback" not in out, out
    assert f"the record says sha256 {recorded}, the file has {got}" in out
    assert "doit verify repair=1" in out

    build = world.doit("build", "recipe=tiny-llama", check=True)
    text = build.stdout + build.stderr
    assert f"artifact {steps['engine'][:12]} is corrupt" in text and got in text
    assert store.verify(steps["engine"]) == []
    assert (
        world.doit("run", "recipe=tiny-llama", "prompt=Hello", "max_new_tokens=4").returncode == 0
    )

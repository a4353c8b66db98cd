"""The store is contained (issue 37): a symbolic link anywhere in its layout is damage.

gc, verify and repair act on real folders and regular files only. Each layout below
links one part of a built store (tmp/, locks/, an artifact's entry, its shard, its
record) to a folder or file outside that holds canary files. Every canary must come
through gc, verify and repair byte for byte; verify must exit non-zero naming the link
and its target; repair must remove the link and only the link; and a build must make
the artifact again rather than call a linked one up to date.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import World, heavy

from kiln.canonical import key_of
from kiln.errors import KilnError
from kiln.store import BLOB_MIN, RECORD, Store, gc
from kiln.store.verify import audit

LAYOUTS = ("tmp", "locks", "entry", "shard", "record")
ARTIFACT = ("entry", "shard", "record")  # the layouts a build must remake
HOURS_AGO = time.time() - 2 * 3600  # older than anything gc waits for


def private_world(built: World, base: Path) -> World:
    """A copy of the built catalog and store of tiny-llama alone, to damage freely."""
    world = World(root=base / "catalog", hub=built.hub, store=base / "store")
    shutil.copytree(built.root, world.root, symlinks=True, ignore=shutil.ignore_patterns(".doit*"))
    shutil.copytree(built.store, world.store, symlinks=True)
    for p in world.root.glob("manifests/*.json"):
        if p.stem != "tiny-llama":
            p.unlink()
    for p in world.root.glob("recipes/*.yaml"):
        if p.stem != "tiny-llama":
            p.unlink()
    world.doit("gc", check=True)  # what other tests' recipes left in the shared store
    return world


def engine_key(world: World) -> str:
    steps = world.manifest("tiny-llama")["lock"]["steps"]
    return str(next(s["key"] for s in steps if s["kind"] == "engine"))


def canary(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (HOURS_AGO, HOURS_AGO))


def plant(world: World, layout: str, outside: Path) -> Path:
    """Move the layout's part of the store to `outside`, link it back, and put canaries
    beside what moved, named as what gc removes would be; return the link."""
    store = Store(world.store)
    entry = store.object_dir(engine_key(world))
    link = {
        "tmp": world.store / "tmp",
        "locks": world.store / "locks",
        "entry": entry,
        "shard": entry.parent,
        "record": entry / RECORD,
    }[layout]
    target = outside / layout
    target.parent.mkdir(parents=True)
    for folder in (entry, link):
        if folder.is_dir():
            folder.chmod(0o755)  # an entry is read-only: renaming it rewrites its '..'
    if layout == "record":
        entry.chmod(0o755)
        shutil.copyfile(link, target)
        link.unlink()
    elif link.exists():
        os.rename(link, target)
    else:
        target.mkdir()
    link.symlink_to(target)
    if layout == "record":
        canary(outside / "canary.txt", "beside the record")
    else:
        canary(target / f"{'ab' * 32}.holiday" / "photo.jpg", "a stale temp dir, by name")
        canary(target / "notes.txt", "no key in the name, and old")
        canary(target / ".notes.swp.tmp", "what an interrupted write leaves, by name")
        os.utime(target / f"{'ab' * 32}.holiday", (HOURS_AGO, HOURS_AGO))
    return link


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under `folder`: its bytes and mode."""
    return {
        p.relative_to(folder).as_posix(): (p.read_bytes(), p.stat().st_mode)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@heavy
@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_link_in_the_store_is_named_never_followed_and_repair_removes_only_it(
    built: World, tmp_path: Path, layout: str
) -> None:
    world = private_world(built, tmp_path)
    outside = tmp_path / "outside"
    link = plant(world, layout, outside)
    named = f"{link} is a symbolic link to {outside / layout}"
    before = snapshot(outside)
    assert len(before) >= 2

    verify = world.doit("verify")
    assert verify.returncode == 4, verify.stdout + verify.stderr
    assert f"link: {named}; kiln never follows a link in its store" in verify.stdout
    assert "extra:" not in verify.stdout  # what the linked folder holds is not the store's
    assert snapshot(outside) == before

    collect = world.doit("gc")
    out = collect.stdout + collect.stderr
    assert collect.returncode != 0 and f"not collecting garbage: {named}" in out, out
    assert "Traceback" not in out and "removed" not in out
    assert snapshot(outside) == before

    repair = world.doit("verify", "repair=1")
    assert repair.returncode == 4, repair.stdout + repair.stderr
    assert f"removed the link {link} (only the link: {outside / layout} is untouched)" in (
        repair.stdout
    )
    assert not link.is_symlink()
    assert snapshot(outside) == before

    world.doit("build", check=True)
    world.doit("gc", check=True)
    clean = world.doit("verify")
    assert clean.returncode == 0, clean.stdout
    assert " 0 corrupt, 0 partial, 0 missing, 0 extra, 0 links" in clean.stdout
    assert snapshot(outside) == before


@heavy
@pytest.mark.parametrize("layout", ARTIFACT)
def test_a_build_makes_a_linked_artifact_again_and_never_calls_it_up_to_date(
    built: World, tmp_path: Path, layout: str
) -> None:
    """No repair first: the build alone replaces the link (only the link)."""
    world = private_world(built, tmp_path)
    outside = tmp_path / "outside"
    link = plant(world, layout, outside)
    before = snapshot(outside)
    store, key = Store(world.store), engine_key(world)
    assert not store.has(key)

    build = world.doit("build", "recipe=tiny-llama", check=True)
    step = [line for line in build.stdout.splitlines() if f"[{key[:12]}]" in line]
    assert step and step[0].startswith(".  engine"), build.stdout  # it ran: "--" is up to date
    assert store.has(key) and store.verify(key) == []
    entry = store.object_dir(key)
    assert not any(p.is_symlink() for p in (entry.parent, entry, entry / RECORD))
    assert snapshot(outside) == before and link.parent.exists()
    world.doit("gc", check=True)  # it refuses while any link is left
    assert world.doit("verify").returncode == 0


def publish(store: Store, key: str, data: bytes) -> None:
    with store.publish(key, {"kind": "test", "name": key[:6]}) as w:
        w.write_bytes("data.bin", data)


def test_a_linked_lock_file_is_refused_by_a_build_verify_and_gc(tmp_path: Path) -> None:
    """filelock opens a lock file without following a link; kiln says which link it is
    instead of a bare ELOOP, and gc leaves the key's artifact alone."""
    store, key = Store(tmp_path / "store"), key_of("locked")
    publish(store, key, b"x")
    precious = tmp_path / "precious.txt"
    precious.write_text("not kiln's")
    (store.root / "locks").mkdir()
    store.lock_path(key).symlink_to(precious)
    named = f"is a symbolic link to {precious}"
    with pytest.raises(KilnError, match=named), store.lock(key, "a build"):
        pass
    report = audit(store, {}, [])
    assert report.exit_code() == 4 and f"{store.lock_path(key)} {named}" in report.render()
    with pytest.raises(KilnError, match=f"not collecting garbage: {store.lock_path(key)} {named}"):
        gc.collect(store, keep=set())
    assert store.has(key) and precious.read_text() == "not kiln's"


def test_a_linked_blob_index_is_neither_read_nor_written_through(tmp_path: Path) -> None:
    """Large files are shared through blobs/<sha256>, which names the published file
    holding the bytes: an index linked out is not trusted to name one, so the next
    artifact with the same bytes keeps its own copy, and verify names the link."""
    store = Store(tmp_path / "store")
    data = os.urandom(BLOB_MIN)
    publish(store, key_of("first"), data)
    index = next((store.root / "blobs").glob("*/*"))
    outside = tmp_path / "index"
    names = index.read_bytes()  # objects/<shard>/<first key>/data.bin
    outside.write_bytes(names)
    index.unlink()
    index.symlink_to(outside)

    publish(store, key_of("second"), data)
    second = store.get(key_of("second")).file("data.bin")
    assert second.stat().st_nlink == 1  # not linked to the holder the outside file names
    assert outside.read_bytes() == names and index.is_symlink()
    report = audit(store, {}, [key_of("first"), key_of("second")])
    assert report.exit_code() == 4 and f"{index} is a symbolic link to {outside}" in report.render()

"""Large identical files are stored once: a file of BLOB_MIN bytes or more that another
published artifact holds byte for byte becomes a hardlink of it, and every artifact
still verifies its own files (kiln/store/__init__.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from kiln.canonical import key_of
from kiln.store import BLOB_MIN, Store


def publish(store: Store, name: str, payload: bytes) -> Path:
    key = key_of({"test": name})
    with store.publish(key, {"kind": "test", "name": name}) as w:
        w.write_bytes("weights.bin", payload)
        w.write_bytes("small.txt", b"same small bytes")
    return store.get(key).path


def test_a_duplicate_large_file_is_a_hardlink_and_a_small_one_is_not(tmp_path: Path) -> None:
    store = Store(tmp_path)
    big = os.urandom(BLOB_MIN + 7)
    a, b = publish(store, "a", big), publish(store, "b", big)
    other = publish(store, "c", os.urandom(BLOB_MIN))
    assert os.path.samefile(a / "weights.bin", b / "weights.bin")
    assert not os.path.samefile(a / "weights.bin", other / "weights.bin")
    assert not os.path.samefile(a / "small.txt", b / "small.txt")  # below BLOB_MIN: copied
    assert (a / "weights.bin").stat().st_nlink == 2  # no third link kept anywhere
    assert (b / "weights.bin").read_bytes() == big
    assert not store.damage(a.name) and not store.damage(b.name)


def test_a_file_a_builder_linked_from_its_input_is_sealed_as_it_is(tmp_path: Path) -> None:
    """The bundle step links its engine's weights in (builders/common/files.py): sealing
    keeps that link and adds no file (a rename of one link over another of the same
    file does nothing, which once left a stray .link file: a corrupt artifact)."""
    store = Store(tmp_path)
    a = publish(store, "a", os.urandom(BLOB_MIN))
    key = key_of({"test": "linked"})
    with store.publish(key, {"kind": "test", "name": "linked"}) as w:
        os.link(a / "weights.bin", w.path("weights.bin"))
    b = store.get(key).path
    assert sorted(p.name for p in b.iterdir() if not p.name.startswith(".kiln")) == ["weights.bin"]
    assert os.path.samefile(a / "weights.bin", b / "weights.bin")
    assert not store.damage(b.name)


def test_damage_to_shared_bytes_shows_in_every_holder_and_is_never_linked_again(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path)
    big = os.urandom(BLOB_MIN)
    a, b = publish(store, "a", big), publish(store, "b", big)
    target = a / "weights.bin"
    target.chmod(stat.S_IWUSR | stat.S_IRUSR)
    with target.open("r+b") as fh:
        fh.write(b"\x00")
    damaged = [d.file for d in store.damage(a.name)], [d.file for d in store.damage(b.name)]
    assert damaged == (["weights.bin"], ["weights.bin"])
    c = publish(store, "c", big)  # the holder no longer hashes to its name: a copy stays
    assert not os.path.samefile(c / "weights.bin", a / "weights.bin")
    assert not store.damage(c.name)


def test_removing_one_holder_keeps_the_others_whole(tmp_path: Path) -> None:
    store = Store(tmp_path)
    big = os.urandom(BLOB_MIN)
    a, b = publish(store, "a", big), publish(store, "b", big)
    store.remove(a.name)
    assert not a.exists()
    assert (b / "weights.bin").read_bytes() == big and not store.damage(b.name)
    c = publish(store, "c", big)  # the index names a removed holder: c holds its own copy
    assert (c / "weights.bin").read_bytes() == big and not store.damage(c.name)

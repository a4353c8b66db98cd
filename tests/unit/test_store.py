"""The store publishes atomically, verifies what it holds and keeps writers inside."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kiln import hostinfo
from kiln.canonical import key_of
from kiln.errors import KilnError
from kiln.store import EVIDENCE, RECORD, Store

KEY = key_of("some step")


def test_publish_makes_a_complete_read_only_artifact(tmp_path: Path) -> None:
    store = Store(tmp_path)
    with store.publish(KEY, {"kind": "test"}) as w:
        w.write_bytes("a/b.bin", b"payload")
        w.write_json("meta.json", {"x": 1})
    art = store.get(KEY)
    assert (art.path / "a" / "b.bin").read_bytes() == b"payload"
    assert set(art.record()["files"]) == {"a/b.bin", "meta.json"}
    assert store.verify(KEY) == []
    assert not os.stat(art.path / "a" / "b.bin").st_mode & 0o222
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_failed_build_publishes_nothing_and_leaves_no_temp(tmp_path: Path) -> None:
    store = Store(tmp_path)
    with pytest.raises(RuntimeError), store.publish(KEY, {}) as w:
        w.write_bytes("half.bin", b"half")
        raise RuntimeError("killed halfway")
    assert not store.has(KEY)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_flipped_byte_is_detected(tmp_path: Path) -> None:
    store = Store(tmp_path)
    with store.publish(KEY, {}) as w:
        w.write_bytes("weights.bin", bytes(range(256)))
    target = store.get(KEY).path / "weights.bin"
    target.chmod(0o644)
    data = bytearray(target.read_bytes())
    data[100] ^= 0x01
    target.write_bytes(bytes(data))
    assert store.verify(KEY) == ["weights.bin"]


def test_evidence_is_stamped_with_date_and_host_by_the_core(tmp_path: Path) -> None:
    store = Store(tmp_path)
    backend = {"name": "onnxruntime", "version": "1.0", "device": "CPUExecutionProvider"}
    with store.publish(KEY, {"kind": "validate"}) as w:
        # a builder cannot stamp its own provenance: the core's date and host win
        w.evidence({"token_match_rate": 1.0}, ["a", "b"], backend, date="1999", quantized_on="x")
    data = json.loads((store.get(KEY).path / EVIDENCE).read_text())
    assert set(data) == {"date", "host", "backend", "metrics", "outputs", "quantized_on"}
    assert data["host"] == hostinfo.host() and data["date"] != "1999"
    assert data["date"].endswith("+00:00") and len(data["date"]) == len("2026-12-01T09:00:00+00:00")
    assert (data["backend"], data["metrics"], data["outputs"]) == (
        backend,
        {"token_match_rate": 1.0},
        ["a", "b"],
    )


@pytest.mark.parametrize("name", ["../escape", "/etc/passwd", "a/../../b", "."])
def test_a_writer_cannot_leave_its_artifact(tmp_path: Path, name: str) -> None:
    store = Store(tmp_path)
    with pytest.raises(KilnError), store.publish(KEY, {}) as w:
        w.write_bytes(name, b"x")
    assert not store.has(KEY)


@pytest.mark.parametrize("key", ["../../etc", "ABC", "0" * 63, "g" * 64])
def test_keys_are_64_lowercase_hex(tmp_path: Path, key: str) -> None:
    with pytest.raises(KilnError):
        Store(tmp_path).has(key)


def test_the_record_is_written_before_the_artifact_appears(tmp_path: Path) -> None:
    store = Store(tmp_path)
    with store.publish(KEY, {"kind": "k"}) as w:
        w.write_bytes("f", b"1")
        assert not store.has(KEY)
    assert (store.object_dir(KEY) / RECORD).is_file()


def test_trust_is_cheap_once_verified_and_never_blind(tmp_path: Path) -> None:
    """Store.trusted: after one full check of an artifact older than the racy window,
    an unchanged artifact is trusted by the lstat of its entries alone; a flipped
    byte, an added file or a rewrite that keeps the size are all damage again."""
    import time

    from kiln import statcache

    store = Store(tmp_path)
    with store.publish(KEY, {}) as w:
        w.write_bytes("weights.bin", bytes(range(256)))
    assert store.trusted(KEY) == []  # too new to remember: checked in full
    assert store._stats is not None and store._stats.recall("artifact-stamp/1", KEY) is None
    time.sleep(statcache.RACY_NS / 1e9 + 0.2)
    assert store.trusted(KEY) == []
    assert store._stats.recall("artifact-stamp/1", KEY) is not None  # remembered now
    reads = store._stats.reads
    assert store.trusted(KEY) == [] and store._stats.reads == reads  # nothing read
    target = store.get(KEY).path / "weights.bin"
    target.chmod(0o644)
    original = target.read_bytes()
    target.write_bytes(original[:100] + bytes([original[100] ^ 1]) + original[101:])
    (bad,) = store.trusted(KEY)
    assert bad.file == "weights.bin" and bad.expected and bad.got and bad.expected != bad.got
    assert str(bad) == f"weights.bin: the record says sha256 {bad.expected}, the file has {bad.got}"
    target.write_bytes(original)
    assert store.trusted(KEY) == []
    # root writes into the read-only directory; anyone else would chmod it first
    (store.get(KEY).path / "extra.bin").write_bytes(b"x")
    assert [d.file for d in store.trusted(KEY)] == ["extra.bin"]


def test_preload_imports_the_wanted_kinds_modules_once_and_skips_a_missing_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What `doit -n` imports in the parent before forking (kiln.store.execute.preload,
    builders/preload.py): the modules of the kinds still to build, each once; one that
    is not installed is left to its step to report. The probes are modules of this
    test's own, which nothing else in the process can have imported."""
    import sys

    from builders import preload as table
    from kiln.plan import toolchain
    from kiln.store import execute

    assert set(table.PRELOAD) <= set(toolchain.LIBRARIES)  # kinds that exist
    probe, other = f"kiln_probe_{tmp_path.name}_a", f"kiln_probe_{tmp_path.name}_b"
    for name in (probe, other):
        (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(table.PRELOAD, "probe", ("kiln_no_such_module", probe))
    monkeypatch.setitem(table.PRELOAD, "other", (other,))
    try:
        assert execute.preload(["probe"]) == [probe]
        assert probe in sys.modules and other not in sys.modules  # not a wanted kind
        assert execute.preload(["probe"]) == []  # already imported: nothing to do
    finally:
        for name in (probe, other):
            sys.modules.pop(name, None)

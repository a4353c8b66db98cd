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


def test_preload_imports_what_the_code_of_several_kinds_imports_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What `doit -n` imports in the parent before forking more workers than it has
    cores (kiln.store.workers): the libraries the builder closures of steps of two kinds
    or more import, lazily or not, each once; what one kind alone imports is left to
    its worker, and a library that is not installed to its step to report. Read from
    builders written here; the probes are modules of this test's own, which nothing
    else in the process can have imported."""
    import sys

    from kiln.plan.step import Step
    from kiln.store import workers

    shared, alone = f"kiln_probe_{tmp_path.name}_a", f"kiln_probe_{tmp_path.name}_b"
    lib = tmp_path / "lib"
    (lib / shared).mkdir(parents=True)
    (lib / shared / "__init__.py").write_text("VALUE = 1\n")
    (lib / shared / "sub.py").write_text("VALUE = 2\n")
    (lib / f"{alone}.py").write_text("VALUE = 3\n")
    code = tmp_path / "code" / "builders" / "embed"
    code.mkdir(parents=True)
    for init in (code / "__init__.py", code.parent / "__init__.py"):
        init.write_text("")
    helper = f"import json\n\ndef f():\n    import {shared}.sub\n    import kiln_no_such_module\n"
    (code / "_helper.py").write_text(helper)
    (code / "export.py").write_text(f"def build(r, w):\n    import {shared}\n")
    (code / "onnx.py").write_text("from builders.embed import _helper\n")
    (code / "engine.py").write_text(f"import kiln_no_such_module\nimport {alone}\n")
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.setenv("KILN_STORE", str(tmp_path / "store"))
    options = {"task": "feature-extraction"}
    steps = [Step(k, k, options, {}, {"k": k}) for k in ("export", "onnx", "engine", "onnx")]
    root = tmp_path / "code"

    assert workers.shared_libraries(steps, root) == ["kiln_no_such_module", shared]
    try:
        assert workers.preload(iter(steps), workers.cores(), root) == []  # a core each
        assert shared not in sys.modules
        assert workers.preload(iter(steps), workers.cores() + 1, root) == [shared]
        assert alone not in sys.modules  # one kind's own: its worker imports it
        assert workers.preload(iter(steps), workers.cores() + 1, root) == []  # done once
    finally:
        for name in (shared, f"{shared}.sub", alone):
            sys.modules.pop(name, None)

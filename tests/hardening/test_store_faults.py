"""The publish path under a failing disk and under SIGKILL at every system call.

Faults are injected around the real store code: `os.mkdir`, `os.write`, `os.fsync`,
`os.rename` and `os.replace` raise ENOSPC or EIO from their n-th call on (a full or
failing disk stays full or failing). Kills are real: a forked child publishes and
SIGKILLs itself just before its n-th such call. Either way the store must verify
clean afterwards and the next publish must succeed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from samples import sample_manifest

from kiln.canonical import key_of
from kiln.errors import KilnError
from kiln.evidence import manifest
from kiln.store import Store, gc
from kiln.store.verify import audit

KEY = key_of("fault injection")
OPS = ("mkdir", "write", "fsync", "rename", "replace")


def publish_sample(store: Store) -> None:
    with store.publish(KEY, {"kind": "test", "name": "sample"}) as w:
        w.write_bytes("a/weights.bin", bytes(range(256)) * 64)
        w.write_json("meta.json", {"x": 1})
        w.write_bytes("b/c/deep.txt", b"deep")


@contextlib.contextmanager
def syscalls(on_call: Callable[[str, int], None]) -> Iterator[Counter[str]]:
    """Call `on_call(op, n)` before the n-th call (0-based) of each watched os function."""
    counts: Counter[str] = Counter()
    originals = {op: getattr(os, op) for op in OPS}

    def wrap(op: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            n = counts[op]
            counts[op] += 1
            on_call(op, n)
            return originals[op](*args, **kwargs)

        return call

    for op in OPS:
        setattr(os, op, wrap(op))
    try:
        yield counts
    finally:
        for op, fn in originals.items():
            setattr(os, op, fn)


def calls_in_a_clean_publish(tmp_path: Path) -> Counter[str]:
    with syscalls(lambda op, n: None) as counts:
        publish_sample(Store(tmp_path / "count"))
    return Counter(dict(counts))


def assert_store_is_sound(store: Store) -> None:
    report = audit(store, {}, [KEY])
    assert report.corrupt == [] and report.partial == [], report.render()
    if store.has(KEY):
        assert store.verify(KEY) == []


def fault_cases(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, int, int]]:
    counts = calls_in_a_clean_publish(tmp_path_factory.mktemp("c"))
    return [
        (op, n, code) for op in OPS for n in range(counts[op]) for code in (errno.ENOSPC, errno.EIO)
    ]


def test_every_write_fsync_rename_and_mkdir_of_a_publish_is_covered(tmp_path: Path) -> None:
    counts = calls_in_a_clean_publish(tmp_path)
    assert all(counts[op] > 0 for op in ("mkdir", "write", "fsync", "rename")), counts


def test_enospc_or_eio_at_any_call_leaves_a_sound_store_and_a_clear_error(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    cases = fault_cases(tmp_path_factory)
    for i, (op, at, code) in enumerate(cases):
        store = Store(tmp_path / f"s{i}")

        def fail(called: str, n: int, op: str = op, at: int = at, code: int = code) -> None:
            if called == op and n >= at:
                raise OSError(code, os.strerror(code))

        with pytest.raises(KilnError) as info, syscalls(fail):
            publish_sample(store)
        message = str(info.value)
        assert f"({errno.errorcode[code]})" in message, (op, at, message)
        assert "Traceback" not in message
        assert_store_is_sound(store)
        assert not any((store.root / "tmp").glob("*")), (op, at, "temp dir left behind")
        publish_sample(store) if not store.has(KEY) else None
        assert store.verify(KEY) == []
    print(f"\nfault injection: {len(cases)} faults (ENOSPC, EIO at each call of {OPS})")


def test_sigkill_before_any_call_of_a_publish_leaves_a_sound_store(tmp_path: Path) -> None:
    total = sum(calls_in_a_clean_publish(tmp_path).values())
    published = 0
    for at in range(total + 1):
        store = Store(tmp_path / f"k{at}")
        seen = [0]

        def die(_op: str, _n: int, at: int = at, seen: list[int] = seen) -> None:
            if seen[0] == at:
                os.kill(os.getpid(), signal.SIGKILL)
            seen[0] += 1

        pid = os.fork()
        if pid == 0:  # the child publishes and is killed mid-way
            with syscalls(die):
                publish_sample(store)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
        assert killed or at == total, (at, status)
        assert_store_is_sound(store)
        published += store.has(KEY)
        gc.collect(store, keep={KEY})
        assert not any((store.root / "tmp").glob("*"))
        if not store.has(KEY):
            publish_sample(store)
        assert store.verify(KEY) == []
    assert 0 < published < total + 1  # kills landed both before and after the rename
    print(f"\npublish kills: {total} SIGKILLs, {published - 1} left a whole artifact, 0 corrupt")


def test_sigkill_during_a_manifest_write_leaves_the_old_or_the_new_manifest(
    tmp_path: Path,
) -> None:
    path = tmp_path / "manifests" / "tiny.json"
    old, new = sample_manifest(1), sample_manifest(2)
    manifest.write(path, old)
    for at in range(8):
        seen = [0]

        def die(_op: str, _n: int, at: int = at, seen: list[int] = seen) -> None:
            if seen[0] == at:
                os.kill(os.getpid(), signal.SIGKILL)
            seen[0] += 1

        pid = os.fork()
        if pid == 0:
            with syscalls(die):
                manifest.write(path, new)
            os._exit(0)
        os.waitpid(pid, 0)
        assert manifest.read(path) in (old, new), at
        manifest.write(path, old)

"""kiln.statcache: file digests by stat (git's index rule), values derived by content.

A second process with an unchanged file reads nothing; any change a stat can show
(size, mtime, ctime, inode) is seen, and so is a same-size edit in the clock tick the
entry was taken in (racily clean: confirmed by the bytes until it is old enough)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from kiln import statcache
from kiln.statcache import RACY_NS, StatCache


def _age(path: Path, seconds: float = 10) -> None:
    """Age a file's mtime past the racy window, as any file not written this very
    second is (its ctime cannot be set: the caches below use a window of 0 for it)."""
    old = path.stat().st_mtime_ns - int(seconds * 1e9)
    os.utime(path, ns=(old, old))


def _cache(tmp_path: Path, racy_ns: int = 0) -> StatCache:
    (tmp_path / "store").mkdir(exist_ok=True)
    return StatCache(statcache.path_in(tmp_path / "store"), racy_ns)


def test_a_digest_is_the_bytes_sha256_and_an_unchanged_file_is_not_read_again(
    tmp_path: Path,
) -> None:
    f = tmp_path / "a.txt"
    f.write_bytes(b"hello")
    _age(f)
    first = _cache(tmp_path)
    assert first.digest(f) == hashlib.sha256(b"hello").hexdigest()
    assert first.reads == 1
    first.save()
    again = _cache(tmp_path)  # another process
    assert again.digest(f) == hashlib.sha256(b"hello").hexdigest()
    assert again.reads == 0
    assert (tmp_path / "store" / "cache" / ".gitignore").read_bytes() == statcache.IGNORE


def test_every_change_a_stat_shows_is_seen(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_bytes(b"one")
    _age(f)
    cache = _cache(tmp_path)
    cache.digest(f)
    cache.save()
    mtime = f.stat().st_mtime_ns
    # same size, the mtime put back (cp -p, touch -d): ctime and the bytes still differ
    f.write_bytes(b"two")
    os.utime(f, ns=(mtime, mtime))
    assert _cache(tmp_path).digest(f) == hashlib.sha256(b"two").hexdigest()
    # replaced by another file (a new inode)
    g = tmp_path / "b.txt"
    g.write_bytes(b"six")
    os.utime(g, ns=(mtime, mtime))
    g.replace(f)
    assert _cache(tmp_path).digest(f) == hashlib.sha256(b"six").hexdigest()


def test_a_racy_entry_is_confirmed_by_the_bytes_until_it_is_old_enough(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_bytes(b"one")
    cache = _cache(tmp_path, RACY_NS)
    cache.digest(f)  # cached in the same tick the file was written
    cache.save()
    entry = json.loads((tmp_path / "store/cache/stat.json").read_bytes().partition(b"\n")[2])
    _size, mtime, ctime, _ino, cached, _ = entry["files"][str(f)]
    assert cached - max(mtime, ctime) < RACY_NS
    # An edit that a stat cannot see: same size, same mtime, ctime and inode kept too
    # (as a coarse clock would stamp them). Only the bytes tell.
    entry["files"][str(f)][5] = hashlib.sha256(b"old").hexdigest()
    body = json.dumps(entry).encode()
    head = json.dumps({"format": statcache.FORMAT, "sha256": hashlib.sha256(body).hexdigest()})
    (tmp_path / "store/cache/stat.json").write_bytes(head.encode() + b"\n" + body)
    racy = _cache(tmp_path, RACY_NS)
    assert racy.digest(f) == hashlib.sha256(b"one").hexdigest()
    assert racy.reads >= 1


def test_a_cache_file_that_does_not_check_out_is_a_miss(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_bytes(b"one")
    _age(f)
    cache = _cache(tmp_path)
    cache.digest(f)
    cache.save()
    path = tmp_path / "store/cache/stat.json"
    data = path.read_bytes()
    sha = hashlib.sha256(b"one").hexdigest().encode()
    tampered = data.replace(sha, hashlib.sha256(b"two").hexdigest().encode())
    assert tampered != data
    for bad in (tampered, b"{}\n{}", b"garbage", data[:-5]):
        path.write_bytes(bad)
        fresh = _cache(tmp_path)
        assert fresh.digest(f) == hashlib.sha256(b"one").hexdigest() and fresh.reads == 1


def test_derived_values_are_made_once_per_content(tmp_path: Path) -> None:
    f = tmp_path / "a.py"
    f.write_bytes(b"import os\n")
    _age(f)
    made: list[bytes] = []

    def make(data: bytes) -> list[str]:
        made.append(data)
        return [data.decode().split()[1]]

    first = _cache(tmp_path)
    assert first.derive(f, "imports/1", make) == ["os"]
    first.save()
    assert _cache(tmp_path).derive(f, "imports/1", make) == ["os"]
    assert made == [b"import os\n"]
    f.write_bytes(b"import sys\n")
    assert _cache(tmp_path).derive(f, "imports/1", make) == ["sys"]
    assert _cache(tmp_path).derive(f, "imports/2", make) == ["sys"]  # a new method misses
    assert len(made) == 3


def test_nothing_is_written_unless_saved_and_changed(tmp_path: Path) -> None:
    f = tmp_path / "a.txt"
    f.write_bytes(b"one")
    _age(f)
    cache = _cache(tmp_path)
    cache.digest(f)
    assert not (tmp_path / "store" / "cache").exists()  # a read-only command never saves
    cache.save()
    stamp = (tmp_path / "store/cache/stat.json").stat().st_mtime_ns
    unchanged = _cache(tmp_path)
    unchanged.digest(f)
    unchanged.save()
    assert (tmp_path / "store/cache/stat.json").stat().st_mtime_ns == stamp
    gone = StatCache(statcache.path_in(tmp_path / "no-store"))
    gone.digest(f)
    gone.save()
    assert not (tmp_path / "no-store").exists()  # a store is never made by its cache


def test_a_fifo_is_never_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    try:
        _cache(tmp_path).digest(fifo)
    except OSError as exc:
        assert "not a regular file" in str(exc)
    else:
        raise AssertionError("a FIFO was digested")


def test_concurrent_savers_keep_each_others_entries(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    for f in (a, b):
        f.write_bytes(f.name.encode())
        _age(f)
    one, two = _cache(tmp_path), _cache(tmp_path)  # both read the cache before either saved
    one.digest(a)
    two.digest(b)
    one.save()
    two.save()
    both = _cache(tmp_path)
    both.digest(a), both.digest(b)
    assert both.reads == 0

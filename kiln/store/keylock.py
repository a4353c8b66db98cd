"""Per-key build locks that say who holds them.

The lock is filelock's FileLock (flock on Linux): the kernel releases it when the
holding process dies, even by SIGKILL, so a killed build never leaves a lock that
blocks forever. Next to each lock, `<key>.holder.json` names the holder (pid, host,
what it builds, since when), so a waiting build can say whom it waits for. The
sidecar is only information: a stale one (its holder was killed) is overwritten by
the next holder and never decides anything.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from kiln.canonical import pretty
from kiln.errors import KilnError, Location
from kiln.fsio import atomic_write


def holder_path(lock: Path) -> Path:
    return lock.with_name(lock.stem + ".holder.json")


def read_holder(lock: Path) -> dict[str, Any] | None:
    from kiln.store import read_object

    try:
        return read_object(holder_path(lock))
    except ValueError:
        return None


def describe_holder(lock: Path) -> str:
    info = read_holder(lock)
    if not info:
        return "another process (it has not said who it is yet)"
    since = time.strftime("%H:%M:%S", time.localtime(float(info.get("since", 0))))
    alive = ""
    if info.get("host") == socket.gethostname() and not _alive(int(info.get("pid", 0))):
        alive = ", no longer running: the lock is free once the OS notices"
    return f"pid {info.get('pid')} on {info.get('host')} ({info.get('what')}, since {since}{alive})"


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def try_hold(path: Path) -> FileLock | None:
    """The lock if nobody holds it now, else None (never waits). A lock file that is a
    symbolic link is refused with its target (filelock opens with O_NOFOLLOW, which
    fails with a bare ELOOP): `<store>/locks/<file>`, never followed (issue 37)."""
    if path.is_symlink():
        from kiln.store.links import refusal

        cause, fix = refusal(path, path.parent.parent)
        raise KilnError.one(cause, Location(str(path)), fix)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    return lock


@contextlib.contextmanager
def hold(path: Path, what: str, timeout: float) -> Iterator[None]:
    """Hold the lock at `path` while building `what`; wait for it, saying for whom."""
    lock = try_hold(path)
    if lock is None:
        print(f"waiting for {what}: lock {path} is held by {describe_holder(path)}", flush=True)
        lock = FileLock(path)
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise KilnError.one(
                f"gave up waiting for {path} after {timeout:.0f} s; "
                f"held by {describe_holder(path)}",
                Location(str(path)),
                "check that build; a killed build's lock is released by the OS",
            ) from None
    info = {"pid": os.getpid(), "host": socket.gethostname(), "what": what, "since": time.time()}
    with contextlib.suppress(OSError):  # the sidecar is a courtesy: never fail a build for it
        atomic_write(holder_path(path), pretty(info))
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            holder_path(path).unlink()
        lock.release()

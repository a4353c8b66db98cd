"""Per-key locks: a waiting build says which lock it waits on and who holds it, and
a lock whose holder was SIGKILLed does not block anyone (the OS drops flock)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, SLOW

from kiln.canonical import key_of
from kiln.store import Store
from kiln.store.keylock import holder_path

KEY = key_of("locked step")
WHAT = "export kiln-tiny/llama@86b0c01"
HOLD = """
import sys, time
from pathlib import Path
from kiln.store import Store
with Store(Path(sys.argv[1])).lock(sys.argv[2], sys.argv[3], timeout=float(sys.argv[4])):
    print("holding", flush=True)
    time.sleep(float(sys.argv[5]))
print("released", flush=True)
"""


def locker(store: Path, timeout: float, hold_for: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, str(store), KEY, WHAT, str(timeout), str(hold_for)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_a_waiter_names_the_holder_and_a_killed_holder_does_not_block_it(
    tmp_path: Path,
) -> None:
    holder = locker(tmp_path, 60, 3600)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    lock = Store(tmp_path).lock_path(KEY)
    assert f'"pid": {holder.pid}' in holder_path(lock).read_text()

    waiter = locker(tmp_path, SLOW, 0)
    assert waiter.stdout is not None
    waiting = waiter.stdout.readline()
    assert f"waiting for {WHAT}: lock {lock} is held by pid {holder.pid}" in waiting
    assert socket.gethostname() in waiting and WHAT in waiting.split("held by", 1)[1]

    os.kill(holder.pid, signal.SIGKILL)  # no chance to release anything itself
    holder.wait()
    rest, _ = waiter.communicate(timeout=SLOW)  # a hang detector, not a timing claim
    assert waiter.returncode == 0
    assert rest.splitlines() == ["holding", "released"]
    assert not holder_path(lock).exists()  # the waiter took over and cleaned up


def test_a_stale_holder_file_does_not_make_anyone_wait(tmp_path: Path) -> None:
    holder = locker(tmp_path, 60, 3600)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert holder_path(Store(tmp_path).lock_path(KEY)).exists()  # left behind by the kill
    after = locker(tmp_path, 0.5, 0)
    out, _ = after.communicate(timeout=SLOW)
    assert after.returncode == 0 and "waiting" not in out, out

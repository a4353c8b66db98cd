"""Load each YAML file given on the command line in its own forked child, as a recipe,
and print one JSON line per file: the error, the seconds the load took (wall-clock and
the child's CPU time) and the child's peak RSS (both from wait4, so the child's own).

Run as a script by tests/hardening/test_hostile.py, so nothing pytest or torch loaded inflates
the numbers. The parent imports the loader once; children only load."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from kiln.catalog.yaml import load_yaml_model
from kiln.errors import KilnError
from kiln.schema import Recipe

HANG = 120.0  # seconds; a child still running then is killed and reported as hung


def child(path: Path, out: int) -> None:
    started = time.perf_counter()
    try:
        load_yaml_model(Recipe, path, f"recipes/{path.name}")
        result = {"outcome": "loaded", "message": ""}
    except KilnError as exc:
        result = {"outcome": "error", "message": str(exc)}
    except BaseException:
        result = {"outcome": "traceback", "message": traceback.format_exc()}
    result["seconds"] = time.perf_counter() - started
    os.write(out, json.dumps(result).encode())
    os._exit(0)


def probe(path: Path) -> dict[str, object]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        child(path, write)
    os.close(write)
    deadline = time.monotonic() + HANG
    while True:
        done, _status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, _status, usage = os.wait4(pid, 0)
            break
        time.sleep(0.005)
    with os.fdopen(read, "rb") as fh:
        raw = fh.read()
    result = json.loads(raw) if raw else {"outcome": "hung", "message": "", "seconds": HANG}
    cpu = usage.ru_utime + usage.ru_stime  # the child's own CPU time, whatever the load
    return {"file": path.name, "rss_mb": usage.ru_maxrss / 1024, "cpu_seconds": cpu, **result}


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(json.dumps(probe(Path(name))), flush=True)

"""`python -m kiln.replay.step`: run one step in a child process (see chain.py).

Reads a JSON request on stdin and writes {"built": bool} or {"message": ...} to the
request's result file. Exit 0: done; 3: a build error (not retried); 75: an OSError
(infrastructure, retried).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from kiln.errors import KilnError
from kiln.plan.step import Step
from kiln.replay.chain import BUILD_EXIT, INFRA_EXIT
from kiln.store import Store, atomic_write
from kiln.store.execute import remeasure, run_step

PR_SET_PDEATHSIG = 1  # prctl(2): signal this process when its parent dies


def _die_with_parent(parent: int) -> None:
    """A killed worker must not leave its step running (and holding the key's lock)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the timeout still bounds the step
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(INFRA_EXIT)


def _step(data: dict[str, Any]) -> Step:
    return Step(
        kind=data["kind"],
        name=data["name"],
        options=data["options"],
        inputs=data["inputs"],
        material=data["material"],
        origin=tuple(data["origin"]),
        role=data["role"],
    )


# The context keys that hold paths (kiln.commands.build.context), sent as text.
PATHS = ("hub", "root", "packages")


def _paths(context: dict[str, Any]) -> dict[str, Any]:
    for key in PATHS:
        if key in context:
            context[key] = Path(context[key])
    if "never" in context:
        context["never"] = tuple(Path(p) for p in context["never"])
    return context


def main() -> int:
    request = json.loads(sys.stdin.read())
    _die_with_parent(request["parent"])
    result = Path(request["result"])
    step = _step(request["step"])
    store = Store(Path(request["store"]))
    context = _paths(dict(request["context"]))
    try:
        if request["run"]:
            built = remeasure(step, store, context, request["run"])
        else:
            built = run_step(step, store, context)
    except KilnError as exc:
        atomic_write(result, json.dumps({"message": str(exc)}).encode())
        return BUILD_EXIT
    except OSError as exc:
        atomic_write(result, json.dumps({"message": f"{type(exc).__name__}: {exc}"}).encode())
        return INFRA_EXIT
    except Exception as exc:  # a builder bug: same inputs, same bug, so no retry
        traceback.print_exc()
        atomic_write(result, json.dumps({"message": f"{type(exc).__name__}: {exc}"}).encode())
        return BUILD_EXIT
    atomic_write(result, json.dumps({"built": built}).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())

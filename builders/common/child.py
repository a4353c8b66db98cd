"""A builder's work in a fresh Python process: nothing of the build's own process (its
imported modules, Inductor's in-memory caches, its GPU memory) takes part.

    result = run_json("builders.causal_lm._determinism", [str(job)], timeout=1800.0)

runs `python -m MODULE ARGS` at the repository's root, through kiln.proc (the ARGS
after `--`), and returns the last line of its standard output as JSON; a process that
fails, or prints nothing, raises ChildFailed with its exit status and the last lines of
its standard error. The inductor engine's compile and check (backends/_kernels.py) and
the determinism feature (causal_lm/_determinism.py) run this way.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from kiln import proc

ROOT = Path(__file__).resolve().parents[2]
TAIL = 12  # lines of a failed process's standard error kept in the error


class ChildFailed(RuntimeError):
    def __init__(self, module: str, status: int, tail: list[str]) -> None:
        super().__init__(f"{module} failed (exit {status}):\n" + "\n".join(tail))
        self.status, self.tail = status, tail


def run_json(
    module: str, args: list[str], timeout: float, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """`python -m module args` in a fresh process, with `env` over this one's; its
    result. proc.TimeoutExpired past `timeout` seconds."""
    environ = {
        **os.environ,
        **(env or {}),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = proc.run([sys.executable, "-m", module], args, timeout=timeout, cwd=ROOT, env=environ)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise ChildFailed(module, done.returncode, done.stderr.strip().splitlines()[-TAIL:])
    result: dict[str, Any] = json.loads(lines[-1])
    return result

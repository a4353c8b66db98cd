"""Where a run happened, for evidence: CPU, cores, OS, Python and the GPU if any.

The GPU comes from `nvidia-smi` (no torch: the core never imports it). Every
evidence record takes its host from here: measured runs (builders/causal_lm/validate.py and
the task validators) and runs that end `unsupported-here` before anything was
measured.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from typing import Any


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name() -> str | None:
    """The first NVIDIA GPU's name, or None where there is none (or no driver)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out else None


def host() -> dict[str, Any]:
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count() or 1,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "gpu": gpu_name(),
    }

"""Where and when a run happened, for evidence: CPU, cores, OS, Python and the GPU if any.

The GPU comes from `nvidia-smi` (no torch: the core never imports it). Every
evidence record is stamped from here, by the core: measured runs (a validate
step's evidence.json, kiln.store.Writer.evidence) and runs that end
`unsupported-here` before anything was measured (kiln.store.unsupported.marker).
Builders never import it.
"""

from __future__ import annotations

import datetime
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


def stamp() -> dict[str, Any]:
    """When (UTC, to the second) and where: the provenance every evidence record carries."""
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": host(),
    }

"""Host class: which evidence records are comparable.

Two records are compared only when they ran on the same host class: the same CPU
model and the same GPU model (or both none). Core count, OS and Python are left
out: they change timings, not what an fp32 kernel computes, and the step keys
already pin every library that does.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from kiln.schema import Host


def host_class(host: Host | dict[str, Any]) -> str:
    data = host.model_dump() if isinstance(host, Host) else host
    return f"{data.get('cpu') or 'unknown CPU'} + {data.get('gpu') or 'no GPU'}"


def _cpu_model() -> str:
    # The same source builders/validate.py reads, so the classes agree.
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def this_host() -> dict[str, Any]:
    """Where a chain runs (reported even when nothing could be measured)."""
    return {"cpu": _cpu_model(), "gpu": None, "node": os.uname().nodename}

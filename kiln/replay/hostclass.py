"""Host class: which evidence records are comparable.

Two records are compared only when they ran on the same host class: the same CPU
model and the same GPU model (or both none). Core count, OS and Python are left
out: they change timings, not what an fp32 kernel computes, and the step keys
already pin every library that does.
"""

from __future__ import annotations

import os
from typing import Any

from kiln import hostinfo
from kiln.schema import Host


def host_class(host: Host | dict[str, Any]) -> str:
    data = host.model_dump() if isinstance(host, Host) else host
    return f"{data.get('cpu') or 'unknown CPU'} + {data.get('gpu') or 'no GPU'}"


def this_host() -> dict[str, Any]:
    """Where a chain runs (reported even when nothing could be measured)."""
    return {"cpu": hostinfo.cpu_name(), "gpu": None, "node": os.uname().nodename}

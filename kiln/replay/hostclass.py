"""Host class: which evidence records are comparable.

Two records are compared only when they ran on the same host class, named as the
site, `doit status` and the API name it (kiln.hostinfo.host_class, issue 43): the
GPU model when the run had one, else the CPU model and its core count. OS and Python
are left out: the step keys already pin every library that changes what is computed.
"""

from __future__ import annotations

import os
from typing import Any

from kiln import hostinfo
from kiln.schema import Host


def host_class(host: Host | dict[str, Any]) -> str:
    data = host.model_dump() if isinstance(host, Host) else host
    return hostinfo.host_class(data).label


def this_host() -> dict[str, Any]:
    """Where a chain runs (reported even when nothing could be measured)."""
    return {
        "cpu": hostinfo.cpu_name(),
        "cores": os.cpu_count() or 1,
        "gpu": None,
        "node": os.uname().nodename,
    }

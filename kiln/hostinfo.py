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
import re
import shutil
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

from kiln import proc
from kiln.errors import KilnError, Location


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
        done = proc.run([smi, "--query-gpu=name", "--format=csv,noheader"], timeout=20)
    except (OSError, proc.TimeoutExpired):
        return None
    out = done.stdout.strip() if done.returncode == 0 else ""
    return out.splitlines()[0].strip() if out else None


def host() -> dict[str, Any]:
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count() or 1,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "gpu": gpu_name(),
    }


class HostClass(NamedTuple):
    """Where evidence was validated, as the site groups it: the GPU model when the run
    had one, else the CPU model and its core count (throughput differs by cores)."""

    key: str  # "gpu:NVIDIA H200" or "cpu:AMD EPYC:2": stable, for URLs and the API
    label: str  # "NVIDIA H200" or "AMD EPYC, 2 cores"
    short: str  # "H200" or "EPYC ×2": a matrix column header
    kind: str  # "gpu" or "cpu"


_NOISE = re.compile(r"\((R|TM|tm|r)\)|\b(Intel|AMD|NVIDIA|Processor|CPU|Core\(TM\))\b|@.*$")


def _shorten(name: str) -> str:
    short = " ".join(_NOISE.sub(" ", name).split())
    return short or name


def host_class(host: Any) -> HostClass:
    """The host class of an evidence record's host (a schema Host or its dict)."""
    data: Mapping[str, Any] = host if isinstance(host, Mapping) else vars(host)
    gpu, cpu = data.get("gpu"), str(data.get("cpu") or "unknown CPU")
    if gpu:
        return HostClass(f"gpu:{gpu}", str(gpu), _shorten(str(gpu)), "gpu")
    cores = int(data.get("cores") or 0)
    return HostClass(
        f"cpu:{cpu}:{cores}", f"{cpu}, {cores} cores", f"{_shorten(cpu)} ×{cores}", "cpu"
    )


def scope(environ: Mapping[str, str] | None = None) -> Literal["ci", "local"]:
    """The scope of a record this process makes: 'ci' where the environment says CI
    (CI set to anything but '', '0' or 'false', as CI services set it), else 'local'.
    `doit replay` records 'nightly' itself."""
    value = (os.environ if environ is None else environ).get("CI", "")
    return "ci" if value.strip().lower() not in ("", "0", "false", "no") else "local"


PUBLISH = "KILN_PUBLISH"
PUBLISHED_SCOPES = ("nightly", "ci")  # the registered jobs: theirs publish by default
_FLAGS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def publishes(scope: str, environ: Mapping[str, str] | None = None) -> bool:
    """Does a record of this scope go into manifests/ (kiln.evidence.record)? KILN_PUBLISH
    (what `doit build publish=` sets) decides where it is set; else the ci and nightly
    scopes do, and a person's build (local) records into the store."""
    env = os.environ if environ is None else environ
    value = env.get(PUBLISH, "").strip().lower()
    if value in _FLAGS:
        return _FLAGS[value]
    if value:
        raise KilnError.one(
            f"{PUBLISH}={env[PUBLISH]!r} is not 1 or 0",
            Location("environment"),
            f"{PUBLISH}=1 publishes into manifests/, {PUBLISH}=0 records into the store only",
        )
    return scope in PUBLISHED_SCOPES


def stamp() -> dict[str, Any]:
    """When (UTC, to the second) and where: the provenance every evidence record carries."""
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": host(),
    }

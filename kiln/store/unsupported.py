"""unsupported-here: a recipe this host or this kiln cannot build, said exactly.

A builder raises `request.unsupported(reason)` (an `Unsupported`) when it finds,
from the real inputs, that it cannot build a correct artifact (a recurrent cache
the export cannot carry, a kernel the host lacks). The step then publishes a marker
artifact holding only the reason, steps downstream of a marker publish the same
marker without running, and the manifest records verdict `unsupported-here` with
that reason and no metrics. The build of the other recipes goes on, and nothing
pretends to have passed.

Light: no heavy imports. Builders never import it: they reach it through the
request (kiln.store.api).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kiln import hostinfo

MARKER = "unsupported-here.json"


class Unsupported(Exception):  # named after the verdict it produces
    """This recipe cannot be built here; `reason` says exactly why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def marker_of(artifact: Path) -> dict[str, Any] | None:
    """The marker of an unsupported artifact, or None for a real one."""
    path = artifact / MARKER
    if not path.is_file():
        return None
    from kiln.store import read_object

    return read_object(path)


def marker(reason: str, step: str) -> dict[str, Any]:
    """What an unsupported step publishes: the reason, where it was found, and when
    and where it was found (the evidence record needs both)."""
    return {"reason": reason, "step": step, **hostinfo.stamp()}  # names the GPU (nvidia-smi)

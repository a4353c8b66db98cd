"""Unsupported: what a builder raises when this host or this kiln cannot build a
recipe, with the exact reason. The build records verdict `unsupported-here` with
that reason as evidence instead of failing, and never records a pass.

Kept tiny and free of heavy imports so the core can name it without importing
builders (kiln/unsupported.py catches it by this name).
"""

from __future__ import annotations

MARKER = "unsupported-here.json"


class Unsupported(Exception):  # noqa: N818 - the verdict's name, not an error kind
    """This recipe cannot be built here; `reason` says exactly why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

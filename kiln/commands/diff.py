"""`doit diff base=REV`: what a PR changes, as Markdown (kiln/commands/review.py)."""

from __future__ import annotations

from kiln.commands import review
from kiln.errors import KilnError
from kiln.paths import Paths


def diff(base: str | None) -> None:
    if not base:
        raise KilnError.one("no base revision", None, "doit diff base=origin/main")
    root = Paths.from_env().root
    print(review.diff(base, root, root), end="")

"""Which support-matrix cell a recipe's evidence counts for: architecture x precision x
variant x backend. The site's matrix (kiln/site/matrix.py) places each built recipe in
its cell; `doit diff` says which cells a change makes gain or lose evidence.

The architecture is the lock's (what fetch found) when the recipe has been built,
else the one the recipe declares (`model.architecture`), else "unknown".
"""

from __future__ import annotations

from typing import NamedTuple

from kiln.schema import Lock, Recipe

AXES = ("precision", "variant", "backend")  # the matrix's columns, outermost first
UNKNOWN = "unknown"


class CellKey(NamedTuple):
    architecture: str
    precision: str
    variant: str
    backend: str

    @property
    def column(self) -> tuple[str, str, str]:
        return self.precision, self.variant, self.backend

    def __str__(self) -> str:
        return " × ".join(self)


def column(recipe: Recipe) -> tuple[str, str, str]:
    """The matrix column of a recipe, one value per axis of AXES."""
    return recipe.precision.weights, recipe.execution.variant, backend_label(recipe)


def backend_label(recipe: Recipe) -> str:
    """The backend, with the world size of a tensor-parallel engine ("inductor tp2"):
    a split engine's evidence is its own cell, as it proves the split, not the
    unsplit engine (issue 42)."""
    tp = recipe.build.tensor_parallel
    return recipe.build.backend if tp == 1 else f"{recipe.build.backend} tp{tp}"


def cell(recipe: Recipe, lock: Lock | None = None) -> CellKey:
    """The cell of a recipe; `lock`: its manifest's, when that records the recipe's pin."""
    pinned = lock is not None and lock.model.pin == recipe.model.pin
    architecture = lock.model.architecture if lock is not None and pinned else None
    return CellKey(architecture or recipe.model.architecture or UNKNOWN, *column(recipe))

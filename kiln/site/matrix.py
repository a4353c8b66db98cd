"""The support matrix, generated from evidence.

Rows are architectures (from each lock), columns are precision x variant x backend
(every value some recipe in the catalog declares); which cell a recipe counts for is
kiln/evidence/cells.py's rule, shared with `doit diff`. A cell is decided by the latest
evidence of the built recipes it covers:

* any failure decides it, the worst first (build-fail, then quality-fail): a
  combination is not "supported" while one of its recipes fails;
* otherwise a pass decides it;
* otherwise unsupported-here (the host could not run it);
* with no evidence, or only not-run records, the cell is "untested". An untested
  combination is never shown as supported.

Every cell that some record decides links to that record on its recipe page.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from kiln.evidence.cells import AXES, cell, column
from kiln.site.view import Entry

UNTESTED = "untested"
# Deciding order: the first verdict present among a cell's recipes decides it.
PRECEDENCE = ("build-fail", "quality-fail", "pass", "unsupported-here", "not-run")


@dataclass(frozen=True)
class Cell:
    column: tuple[str, str, str]
    verdict: str  # pass, quality-fail, build-fail, unsupported-here or untested
    decided_by: Entry | None  # the recipe whose latest evidence decides the cell
    entries: list[Entry]  # every built recipe in the cell

    @property
    def href(self) -> str | None:
        return self.decided_by.evidence_url if self.decided_by else None

    @property
    def title(self) -> str:
        if not self.entries:
            return "no evidence for this combination"
        names = ", ".join(f"{e.name}: {e.verdict}" for e in self.entries)
        return f"decided by {self.decided_by.name if self.decided_by else '-'}; {names}"


@dataclass(frozen=True)
class Row:
    architecture: str
    cells: list[Cell]


@dataclass(frozen=True)
class Matrix:
    columns: list[tuple[str, str, str]]
    rows: list[Row]
    unplaced: list[Entry]  # not built: their architecture is unknown until a build

    def header(self) -> list[list[tuple[str, int]]]:
        """Three header rows (precision, variant, backend) as (label, colspan)."""
        levels = [sorted({c[i] for c in self.columns}) for i in range(len(AXES))]
        out = []
        for depth in range(len(AXES)):
            span = 1
            for level in levels[depth + 1 :]:
                span *= len(level)
            prefixes = itertools.product(*levels[: depth + 1])
            out.append([(p[-1], span) for p in prefixes])
        return out

    def row(self, architecture: str) -> Row | None:
        return next((r for r in self.rows if r.architecture == architecture), None)


def _decide(column: tuple[str, str, str], found: list[Entry]) -> Cell:
    for verdict in PRECEDENCE:
        deciding = [e for e in found if e.verdict == verdict]
        if deciding:
            latest = max(deciding, key=lambda e: e.latest.date if e.latest else "")
            shown = UNTESTED if verdict == "not-run" else verdict
            return Cell(column, shown, latest, found)
    return Cell(column, UNTESTED, None, found)


def matrix(items: list[Entry]) -> Matrix:
    values = [sorted({column(e.recipe)[i] for e in items}) for i in range(len(AXES))]
    columns = [(p, v, b) for p, v, b in itertools.product(*values)]
    built = [e for e in items if e.latest and e.architecture]
    by_cell: dict[tuple[str, tuple[str, str, str]], list[Entry]] = {}
    for e in built:
        key = cell(e.recipe, e.manifest.lock if e.manifest else None)  # the lock's architecture
        by_cell.setdefault((key.architecture, key.column), []).append(e)
    rows = [
        Row(arch, [_decide(c, by_cell.get((arch, c), [])) for c in columns])
        for arch in sorted({e.architecture for e in built if e.architecture})
    ]
    return Matrix(columns, rows, [e for e in items if not (e.latest and e.architecture)])

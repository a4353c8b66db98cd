"""The support matrix, and the grid machinery any matrix view of evidence shares.

A grid has rows (architectures), column groups (a precision; or a precision x
variant x backend; or, for a later view, a runtime feature) and, inside each group,
one column per host class that some evidence of that group ran on (kiln.hostinfo):
a pass on an H200 and a pass on a 2-core CPU are two facts, never one. A group no
evidence reaches keeps one empty column, which the page hides unless asked.

A cell holds the claims (kiln/site/view.py: the latest record of a recipe's current
build on one host class) that fall in it, and is decided by them:

* any failure decides it, the worst first (build-fail, then quality-fail): a
  combination is not "supported" while one of its recipes fails;
* otherwise a pass decides it;
* otherwise unsupported-here (the host could not run it);
* with no claims, or only not-run records, the cell is "untested". An untested
  combination is never shown as supported.

A cell says how many of its claims agree ("pass (1 of 2; 1 unsupported-here)") and
links to the record that decides it. The page's matrix (`support()`) is architecture
x precision for one variant (and optionally one backend); the API's (`matrix()`)
covers every precision x variant x backend a recipe declares.

A page lists the architectures with evidence beyond fp32 first (`View.sections`):
every recipe starts at fp32, so those few rows are the answer to "what passes at
fp8, and where?", and they were rows 16 and 24 of 29 when sorted by name (issue 44).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kiln.evidence.cells import AXES, cell, column
from kiln.hostinfo import HostClass
from kiln.schema import WEIGHTS
from kiln.site.view import TEXT, Claim, Entry, slug

UNTESTED = "untested"
ORDINARY = "ordinary"
BASELINE = "fp32"  # the precision every recipe is built at first: the reference
# Deciding order: the first verdict present among a cell's claims decides it.
PRECEDENCE = ("build-fail", "quality-fail", "pass", "unsupported-here", "not-run")
Group = tuple[str, ...]  # a column group's key: ("fp8",) or ("fp8", "ordinary", "onnxruntime")


def decide(claims: list[Claim]) -> tuple[str, Claim | None]:
    """The verdict of a set of claims and the claim that decides it (the latest record
    among those with the deciding verdict)."""
    for verdict in PRECEDENCE:
        deciding = [c for c in claims if c.verdict == verdict]
        if deciding:
            latest = max(deciding, key=lambda c: c.record.date)
            return (UNTESTED if verdict == "not-run" else verdict), latest
    return UNTESTED, None


@dataclass(frozen=True)
class Column:
    group: Group
    host: HostClass | None  # None: the group's one empty column (no evidence reaches it)

    @property
    def empty(self) -> bool:
        return self.host is None

    @property
    def label(self) -> str:
        """The group and the host, for a card or a screen reader: 'fp8 on NVIDIA H200'."""
        where = f" on {self.host.label}" if self.host else ""
        return f"{' · '.join(self.group)}{where}"


@dataclass(frozen=True)
class Cell:
    column: Column
    claims: list[Claim]
    verdict: str = field(init=False)  # pass, quality-fail, build-fail, unsupported-here, untested
    decided_by: Claim | None = field(init=False)

    def __post_init__(self) -> None:
        verdict, by = decide(self.claims)
        object.__setattr__(self, "verdict", verdict)
        object.__setattr__(self, "decided_by", by)

    @property
    def entries(self) -> list[Entry]:
        """Every recipe with a claim in the cell, once each, by name."""
        return sorted({c.entry.name: c.entry for c in self.claims}.values(), key=lambda e: e.name)

    @property
    def href(self) -> str | None:
        return self.decided_by.href if self.decided_by else None

    @property
    def counts(self) -> dict[str, int]:
        """Claims per verdict, the deciding verdict first."""
        found = Counter(UNTESTED if c.verdict == "not-run" else c.verdict for c in self.claims)
        return dict(sorted(found.items(), key=lambda kv: (kv[0] != self.verdict, kv[0])))

    @property
    def tally(self) -> str:
        """'1 of 2; 1 unsupported-here' when more than one claim, else ''."""
        if len(self.claims) < 2:
            return ""
        counts = self.counts
        text = f"{counts.get(self.verdict, 0)} of {len(self.claims)}"
        others = [f"{n} {v}" for v, n in counts.items() if v != self.verdict]
        return "; ".join([text, *others])

    @property
    def label(self) -> str:
        """'pass', or 'pass (1 of 2; 1 unsupported-here)'."""
        return f"{self.verdict} ({self.tally})" if self.tally else self.verdict

    @property
    def scopes(self) -> list[str]:
        return sorted({c.scope for c in self.claims})

    @property
    def stale(self) -> list[Entry]:
        """Recipes in the cell whose manifest `doit check` calls stale."""
        return [e for e in self.entries if e.stale]

    @property
    def title(self) -> str:
        if not self.claims:
            return f"{self.column.label}: no evidence"
        names = ", ".join(
            f"{c.entry.name}: {c.verdict} ({c.scope}{', stale' if c.entry.stale else ''})"
            for c in self.claims
        )
        by = self.decided_by.entry.name if self.decided_by else "-"
        return f"{self.column.label}: decided by {by}; {names}"


@dataclass(frozen=True)
class Row:
    key: str  # the architecture
    cells: list[Cell]

    @property
    def architecture(self) -> str:
        return self.key

    def decided(self) -> list[Cell]:
        return [c for c in self.cells if c.claims]


@dataclass(frozen=True)
class Grid:
    """Rows x column groups, one column per host class present in a group."""

    axis: str  # what a group is: "precision", or "precision × variant × backend"
    columns: list[Column]
    rows: list[Row]

    def groups(self) -> list[tuple[Group, int, bool]]:
        """The header's first row: (group, how many columns, no evidence at all)."""
        out = []
        for group, cols in itertools.groupby(self.columns, key=lambda c: c.group):
            found = list(cols)
            out.append((group, len(found), all(c.empty for c in found)))
        return out

    @property
    def hosts(self) -> list[HostClass]:
        """Every host class that some column names, in column order, once each."""
        return list({c.host.key: c.host for c in self.columns if c.host}.values())

    def row(self, key: str) -> Row | None:
        return next((r for r in self.rows if r.key == key), None)

    def column_cells(self, col: Column) -> list[Cell]:
        i = self.columns.index(col)
        return [r.cells[i] for r in self.rows]


def _host_order(h: HostClass) -> tuple[int, str]:
    return (0 if h.kind == "gpu" else 1), h.label  # GPUs first: fewer, and the rarer fact


def grid(axis: str, groups: Iterable[Group], placed: Iterable[tuple[str, Group, Claim]]) -> Grid:
    """A grid from claims placed at (row, group): every group of `groups` (in order)
    gets a column per host class its claims ran on, or one empty column."""
    by_cell: dict[tuple[str, Group, str], list[Claim]] = {}
    hosts: dict[Group, dict[str, HostClass]] = {}
    for row, group, claim in placed:
        by_cell.setdefault((row, group, claim.host.key), []).append(claim)
        hosts.setdefault(group, {})[claim.host.key] = claim.host
    columns = []
    for group in groups:
        present = sorted(hosts.get(group, {}).values(), key=_host_order)
        columns += [Column(group, h) for h in present] or [Column(group, None)]
    rows = sorted({row for row, _, _ in by_cell})
    return Grid(
        axis,
        columns,
        [
            Row(
                r,
                [
                    Cell(c, by_cell.get((r, c.group, c.host.key), []) if c.host else [])
                    for c in columns
                ],
            )
            for r in rows
        ],
    )


def _architecture(e: Entry) -> str:
    return cell(e.recipe, e.manifest.lock if e.manifest else None).architecture


def inputs(items: Iterable[Entry]) -> dict[str, str]:
    """Each architecture a matrix row names -> the input its recipes take (kiln.site.view
    modality; "audio, text" were its recipes to differ)."""
    found: dict[str, set[str]] = {}
    for e in items:
        if e.claims:
            found.setdefault(_architecture(e), set()).add(e.facets["modality"])
    return {arch: ", ".join(sorted(taken)) for arch, taken in found.items()}


def _claims(
    items: Iterable[Entry], group: Callable[[Entry], Group]
) -> list[tuple[str, Group, Claim]]:
    return [(_architecture(e), group(e), c) for e in items for c in e.claims]


@dataclass(frozen=True)
class Section:
    """A run of a page's rows under one heading (a `<tbody>` of its own)."""

    title: str
    rows: list[Row]


def beyond_baseline(row: Row) -> bool:
    """Some cell of the row holds evidence at a precision other than fp32."""
    return any(c.claims and c.column.group[0] != BASELINE for c in row.cells)


@dataclass(frozen=True)
class View:
    """One page of the support matrix: a variant, a backend or every backend, and an
    input modality or every one."""

    variant: str
    backend: str | None
    grid: Grid
    modality: str | None = None

    @property
    def sections(self) -> list[Section]:
        """The rows with evidence beyond fp32 first, then the rest; by name in each."""
        first = [r for r in self.grid.rows if beyond_baseline(r)]
        rest = [r for r in self.grid.rows if not beyond_baseline(r)]
        found = [(f"Evidence beyond {BASELINE}", first), (f"{BASELINE} evidence only", rest)]
        return [Section(title, rows) for title, rows in found if rows]

    @property
    def url(self) -> str:
        if (self.variant, self.backend, self.modality) == (ORDINARY, None, None):
            return "matrix.html"
        taking = f"-{slug(self.modality)}-input" if self.modality else ""
        return f"matrix/{self.variant}-{self.backend or 'any'}{taking}.html"


def precisions(items: list[Entry]) -> list[str]:
    """Every precision a recipe declares, in the schema's order (widest first)."""
    declared = {e.recipe.precision.weights for e in items}
    return [p for p in WEIGHTS if p in declared] + sorted(declared - set(WEIGHTS))


def _chosen(e: Entry, variant: str, backend: str | None, modality: str | None) -> bool:
    return (
        e.recipe.execution.variant == variant
        and (backend is None or e.recipe.build.backend == backend)
        and (modality is None or e.facets["modality"] == modality)
    )


def support(
    items: list[Entry],
    variant: str = ORDINARY,
    backend: str | None = None,
    modality: str | None = None,
) -> Grid:
    """Architecture x precision for one variant (one backend, or every backend; one
    input modality, or every one)."""
    chosen = [e for e in items if _chosen(e, variant, backend, modality)]
    return grid(
        "precision",
        [(p,) for p in precisions(items)],
        _claims(chosen, lambda e: (e.recipe.precision.weights,)),
    )


def modalities(items: list[Entry], variant: str, backend: str | None = None) -> list[str]:
    """The input modalities with evidence for a variant (and backend), text first: the
    choices of a page's modality filter, offered where there are two or more."""
    found = {e.facets["modality"] for e in items if e.claims and _chosen(e, variant, backend, None)}
    return sorted(found, key=lambda m: (m != TEXT, m))


def views(items: list[Entry]) -> list[View]:
    """The matrix pages: ordinary first, then each variant with evidence; for each,
    every backend together and, where more than one has evidence, each backend alone;
    and each of those pages for each input modality alone, where it has evidence of
    more than one (issue 40: "which image-input architectures pass?")."""
    evidenced = [e for e in items if e.claims]
    variants = sorted({e.recipe.execution.variant for e in evidenced} | {ORDINARY})
    out = []
    for v in sorted(variants, key=lambda v: (v != ORDINARY, v)):
        backends = sorted(
            {e.recipe.build.backend for e in evidenced if e.recipe.execution.variant == v}
        )
        for b in [None, *(backends if len(backends) > 1 else [])]:
            out.append(View(v, b, support(items, v, b)))
            taken = modalities(items, v, b)
            if len(taken) > 1:
                out += [View(v, b, support(items, v, b, m), m) for m in taken]
    return out


@dataclass(frozen=True)
class Choice:
    """One link of a matrix page's filter: its text, its page, and whether it is this one."""

    text: str
    url: str
    current: bool


def filters(pages: list[View], here: View) -> list[tuple[str, list[Choice]]]:
    """A page's filters, each (label, choices): the variant; where there is more than
    one choice, the backend (keeping the page's modality where that page exists) and
    the input modality (on the page's backend)."""

    def find(variant: str, backend: str | None, modality: str | None) -> View | None:
        key = (variant, backend, modality)
        return next((v for v in pages if (v.variant, v.backend, v.modality) == key), None)

    variants = [
        Choice(v.variant, v.url, v.variant == here.variant)
        for v in pages
        if v.backend is None and v.modality is None
    ]
    backends = []
    for v in pages:
        if v.variant == here.variant and v.modality is None:
            target = find(v.variant, v.backend, here.modality) or v
            backends.append(Choice(v.backend or "any", target.url, v.backend == here.backend))
    taking = [
        Choice(v.modality or "any", v.url, v.modality == here.modality)
        for v in pages
        if (v.variant, v.backend) == (here.variant, here.backend)
    ]
    found = [("Backend", backends), ("Modality", taking)]
    return [("Variant", variants), *((k, c) for k, c in found if len(c) > 1)]


@dataclass(frozen=True)
class Matrix:
    """Every precision x variant x backend a recipe declares (the API's matrix)."""

    columns: list[tuple[str, str, str]]
    rows: list[Row]  # one aggregate cell per column, over every host class
    by_host: Grid  # the same, one column per host class
    unplaced: list[Entry]  # not built: their architecture is unknown until a build

    def row(self, architecture: str) -> Row | None:
        return next((r for r in self.rows if r.key == architecture), None)

    def hosts(self, architecture: str, col: tuple[str, str, str]) -> list[Cell]:
        row = self.by_host.row(architecture)
        if row is None:
            return []
        return [c for c in row.cells if c.column.group == col and c.claims]


def matrix(items: list[Entry]) -> Matrix:
    values = [sorted({column(e.recipe)[i] for e in items}) for i in range(len(AXES))]
    columns = [(p, v, b) for p, v, b in itertools.product(*values)]
    placed = _claims(items, lambda e: column(e.recipe))
    by_host = grid(" × ".join(AXES), columns, placed)
    claims: dict[tuple[str, Group], list[Claim]] = {}
    for row, group, claim in placed:
        claims.setdefault((row, group), []).append(claim)
    rows = [
        Row(
            arch,
            [Cell(Column(col, None), claims.get((arch, col), [])) for col in columns],
        )
        for arch in sorted({row for row, _, _ in placed})
    ]
    unplaced = [e for e in items if not e.claims]
    return Matrix(columns, rows, by_host, unplaced)

"""The coverage table: every architecture of the reference support matrix x verdict.

Data: catalog/architectures.yaml (kiln.catalog.architectures) plus the manifests,
which alone decide a verdict: a recipe with no manifest is "not built", never a pass.
docs/coverage.md ends with the table `markdown(rows())` renders (`--write` refreshes
it; tests/builds/test_breadth.py fails when it is stale), and the site renders that
page into its manual.

Each row says what the architecture takes as input (issue 40): the modality
(kiln.site.view) of its recipes' task, or, for an architecture with no recipe, of
the task catalog/architectures.yaml names for it (text where it names none).
"""

from __future__ import annotations

from dataclasses import dataclass

from kiln.catalog import Catalog, architectures
from kiln.errors import KilnError
from kiln.evidence import manifest
from kiln.site.view import MODALITIES, TEXT, UNREADABLE, modality, why_unreadable

NOT_BUILT = "not built here"
IMAGES = MODALITIES["image-text-to-text"]  # "image+text"


@dataclass(frozen=True)
class Cell:
    recipe: str
    verdict: str  # the last evidence's verdict, NOT_BUILT, or UNREADABLE
    reason: str
    evidence: str | None  # manifest path relative to the catalog root


@dataclass(frozen=True)
class Row:
    architecture: str
    family: str
    tiny: Cell | None
    real: tuple[Cell, ...]
    status: str  # "tiny" when a tiny recipe exists, "companion", else the yaml's status
    reason: str
    modality: str  # what it takes as input: text, image+text, audio

    @property
    def verdict(self) -> str:
        """The tiny recipe's verdict, or the status when there is no tiny recipe."""
        return self.tiny.verdict if self.tiny else self.status


def _cell(cat: Catalog, recipe: str) -> Cell:
    path = cat.paths.manifest(recipe)
    try:
        found = manifest.read(path, cat.paths.rel(path))
    except KilnError as exc:  # not "not built here": it may hold evidence (issue 37)
        return Cell(recipe, UNREADABLE, why_unreadable(exc), cat.paths.rel(path))
    if found is None or not found.evidence:
        return Cell(recipe, NOT_BUILT, "", None)
    last = manifest.headline(found)
    assert last is not None  # found.evidence is not empty
    return Cell(recipe, last.verdict, last.reason, cat.paths.rel(path))


def _modality(cat: Catalog, a: architectures.Architecture) -> str:
    """What the architecture takes as input: its recipes' (by their task), else the
    table's task for it, else text."""
    tasks = {cat.recipes[n].task for n in (a.tiny, a.companion_in, *a.real) if n in cat.recipes}
    if tasks:
        return ", ".join(sorted({modality(t) for t in tasks}))
    return modality(a.task) if a.task else TEXT


def rows(cat: Catalog) -> list[Row]:
    table = architectures.load(cat.paths.root)
    out = []
    for a in table.architectures:
        tiny = a.tiny or a.companion_in  # a companion's verdict is its variant recipe's
        out.append(
            Row(
                architecture=a.name,
                family=a.family,
                tiny=_cell(cat, tiny) if tiny else None,
                real=tuple(_cell(cat, r) for r in a.real),
                status="tiny"
                if a.tiny
                else "companion"
                if a.companion_in
                else (a.status or "not-built"),
                reason=a.reason,
                modality=_modality(cat, a),
            )
        )
    return out


def counts(table: list[Row]) -> dict[str, int]:
    """Architectures per tiny verdict (or per status when there is no tiny recipe)."""
    out: dict[str, int] = {}
    for r in table:
        out[r.verdict] = out.get(r.verdict, 0) + 1
    return dict(sorted(out.items()))


def _link(cell: Cell) -> str:
    """A verdict linking its manifest, relative to docs/ (the page the table is in)."""
    text = cell.verdict if cell.evidence is None else f"[{cell.verdict}](../{cell.evidence})"
    return f"`{cell.recipe}`: {text}"


def markdown(table: list[Row]) -> str:
    """The coverage page's table: one line per architecture, each verdict linking its evidence."""
    lines = [
        "| architecture | family | input | tiny recipe: verdict | real recipes | why not |",
        "|---|---|---|---|---|---|",
    ]
    for r in table:
        tiny = _link(r.tiny) if r.tiny else r.status
        real = ", ".join(_link(c) for c in r.real) or "-"  # no <br>: the site renders no raw HTML
        why = r.tiny.reason if r.tiny and r.tiny.verdict != "pass" else r.reason
        taking = f"**{r.modality}**" if r.modality != TEXT else r.modality
        cells = [r.architecture, r.family or "-", taking, tiny, real, why.replace("|", "/")]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


PAGE = "docs/coverage.md"
# The page's last section is the table: everything after this heading is generated.
# (Not an HTML comment marker: the site renders Markdown with raw HTML off, issue 38.)
HEADING = "\n## The table\n"


def summary(table: list[Row]) -> str:
    """The coverage line: architectures per verdict, then how many take images and
    what their verdicts are ("...; 10 take images: 1 pass, 9 not-built")."""
    line = ", ".join(f"{n} {verdict}" for verdict, n in counts(table).items())
    images = [r for r in table if IMAGES in r.modality]
    if images:
        theirs = ", ".join(f"{n} {verdict}" for verdict, n in counts(images).items())
        line += f"; {len(images)} take{'s' if len(images) == 1 else ''} images: {theirs}"
    return line + "."


def section(table: list[Row]) -> str:
    """What follows HEADING: the coverage line, then the table."""
    return f"\n{summary(table)}\n\n{markdown(table)}"


def write(cat: Catalog) -> bool:
    """Rewrite the coverage page's table from the manifests; True if it changed."""
    path = cat.paths.root / PAGE
    text = path.read_text(encoding="utf-8")
    new = text[: text.index(HEADING) + len(HEADING)] + section(rows(cat))
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


if __name__ == "__main__":
    import sys

    from kiln import catalog

    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: python -m kiln.site.coverage --write  (refreshes {PAGE})")
    print(f"{PAGE} updated" if write(catalog.load()) else f"{PAGE} up to date")

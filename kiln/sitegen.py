"""Recipes + manifests -> the static Models & Recipes site.

jinja2 with autoescape on and StrictUndefined: data is always escaped, and a
template that names a missing value fails the build instead of printing nothing.
The site shows only what manifests prove: a recipe without evidence is "not built".
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln import manifest
from kiln.catalog import Catalog
from kiln.errors import KilnError
from kiln.schema import Evidence, Manifest, Recipe, Thresholds
from kiln.store import atomic_write

SITE = Path(__file__).resolve().parent.parent / "site"
TEMPLATES = SITE / "templates"
STATIC = SITE / "static"


@dataclass(frozen=True)
class Entry:
    """One recipe as the site shows it."""

    name: str
    recipe: Recipe
    thresholds: Thresholds
    manifest: Manifest | None

    @property
    def latest(self) -> Evidence | None:
        return self.manifest.evidence[-1] if self.manifest and self.manifest.evidence else None

    @property
    def verdict(self) -> str:
        return self.latest.verdict if self.latest else "not built"


def entries(catalog: Catalog) -> list[Entry]:
    out = []
    for name, recipe in sorted(catalog.recipes.items()):
        path = catalog.paths.manifest(name)
        try:
            found = manifest.read(path, catalog.paths.rel(path))
        except KilnError:
            found = None  # `doit check` reports it; the site shows "not built"
        out.append(Entry(name, recipe, catalog.thresholds[recipe.validation.thresholds], found))
    return out


def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["short"] = lambda s, n=12: str(s)[:n]
    env.filters["num"] = lambda v: "—" if v is None else f"{v:.6g}"
    return env


def build(catalog: Catalog, out: Path) -> list[Path]:
    """Render every page into `out`; returns the pages written."""
    env = _environment()
    items = entries(catalog)
    written = []
    pages: list[tuple[str, str, dict[str, Any]]] = [
        ("index.html", "index.html", {"entries": items})
    ]
    pages += [(f"recipes/{e.name}.html", "recipe.html", {"e": e}) for e in items]
    for rel, template, context in pages:
        depth = rel.count("/")
        html = env.get_template(template).render(root="../" * depth, **context)
        atomic_write(out / rel, html.encode())
        written.append(out / rel)
    static = out / "static"
    if static.exists():
        shutil.rmtree(static)
    shutil.copytree(STATIC, static)
    print(f"   site: {len(written)} pages -> {out}")
    return written

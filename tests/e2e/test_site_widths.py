"""No page of the site scrolls sideways (issue 44): every page `doit site` renders from
the committed catalog, measured in chromium at a laptop's 1366x900 and a phone's
390x844 (the document's scrollWidth is at most the viewport's width).

A table wider than the screen either fits (the matrix and the features group their
columns), turns into cards on a phone, or scrolls inside its own box; a long word
wraps. The widest page of each page type at each width lands in
test-artifacts/widths.txt, the table issue 44 asks for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from browser import ARTIFACTS, launch
from conftest import copy_catalog

from kiln.site.serve import serving

VIEWPORTS = {"1366x900": (1366, 900), "390x844": (390, 844)}
# Pages under these folders are one page type each ("recipes/*"); the rest are their own.
FOLDERS = ("recipes", "models", "architectures", "browse", "docs", "matrix", "features", "api")

Widths = dict[str, dict[str, int]]  # viewport -> page -> document scrollWidth


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed catalog and manifests, rendered by `doit site` as a user renders it."""
    world = copy_catalog(tmp_path_factory.mktemp("widths"))
    world.doit("site", check=True)
    return world.root / "_site"


@pytest.fixture(scope="module")
def widths(site: Path) -> Widths:
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    found: Widths = {}
    with serving(site) as base:
        browser: Any
        for browser in launch():
            for name, (width, height) in VIEWPORTS.items():
                context = browser.new_context(
                    viewport={"width": width, "height": height}, is_mobile=width < 500
                )
                page = context.new_page()
                found[name] = {}
                for rel in pages:
                    page.goto(base + rel)
                    found[name][rel] = page.evaluate("document.documentElement.scrollWidth")
                context.close()
    return found


def page_type(rel: str) -> str:
    top, _, rest = rel.partition("/")
    if top in FOLDERS and rest != "index.html":
        return f"{top}/*"
    return rel


def widest(widths: Widths) -> dict[str, tuple[int, dict[str, int]]]:
    """Each page type: how many pages it has and its widest page's width at each viewport."""
    out = {}
    for kind in sorted({page_type(rel) for found in widths.values() for rel in found}):
        at = {
            name: [w for rel, w in found.items() if page_type(rel) == kind]
            for name, found in widths.items()
        }
        out[kind] = (len(next(iter(at.values()))), {name: max(ws) for name, ws in at.items()})
    return out


def test_no_page_scrolls_sideways_on_a_laptop_or_a_phone(widths: Widths, site: Path) -> None:
    on_disk = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    for name, (width, _) in VIEWPORTS.items():
        assert set(widths[name]) == on_disk  # every page, not a sample
        assert {rel: w for rel, w in widths[name].items() if w > width} == {}, name
    lines = [f"{'page type':<26}{'pages':>6}" + "".join(f"{n:>11}" for n in VIEWPORTS)]
    for kind, (count, at) in widest(widths).items():
        lines.append(f"{kind:<26}{count:>6}" + "".join(f"{at[n]:>8} px" for n in VIEWPORTS))
    ARTIFACTS.mkdir(exist_ok=True)
    report = f"document scrollWidth of the widest page of each type ({len(on_disk)} pages)\n"
    (ARTIFACTS / "widths.txt").write_text(report + "\n".join(lines) + "\n")
    print(report + "\n".join(lines))


def test_every_page_type_is_measured(widths: Widths) -> None:
    """The types this test exists for are all there: a catalog copy missing its matrix
    views, feature views or recipe pages would pass the width test by measuring less."""
    kinds = set(widest(widths))
    expected = {"index.html", "matrix.html", "features.html", "api/index.html"}
    expected |= {f"{folder}/*" for folder in FOLDERS if folder != "api"}
    expected |= {"models/index.html", "architectures/index.html", "docs/index.html"}
    assert expected <= kinds, expected - kinds

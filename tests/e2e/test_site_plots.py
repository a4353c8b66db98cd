"""Issue 44, items 3 to 6, in a real browser (headless Debian chromium via playwright):
a recipe's plots inform (one series per host class and scope, one marker per new
build, rounded scales in the metric's unit that fit the card, each metric's meaning,
the headline value with its host class, scope and date); a gate explains itself for
the recipe's model family; the catalog's first phone screen shows a search box and
recipes, its facet filters folded behind one summary; and axe finds nothing on these
pages. The site is rendered from the committed catalog, with a history for tiny-llama
of two host classes, three scopes and two builds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from browser import axe_source, launch
from conftest import World, copy_catalog

from kiln import catalog
from kiln import site as sitegen
from kiln.evidence.manifest import headline, read
from kiln.evidence.manifest import scope as scope_of
from kiln.hostinfo import host_class
from kiln.schema import METRICS, UNITS
from kiln.site.serve import serving

LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
RECIPE = "recipes/tiny-llama.html"
REAL = "recipes/smollm2-135m-instruct-int4-awq.html"
TINY = "recipes/tiny-llama-int4-awq.html"
AXE_JS = """async () => (await axe.run(document,
  {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa']}, resultTypes: ['violations']}))
  .violations.map(v => v.id + ' (' + v.impact + ')')"""
SI = {"k": 1e3, "M": 1e6, "G": 1e9, "": 1.0}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The shipped catalog; tiny-llama gets a history of eight runs on two host classes
    in two scopes, the last five of another build."""
    world = copy_catalog(tmp_path_factory.mktemp("plots"))
    record = json.loads((world.root / "manifests" / "tiny-llama.json").read_text())
    host = record["evidence"][-1]["host"]
    big = {**host, "cores": 16}
    lines = []
    for day, where, scope, key, scale in (
        (1, host, "nightly", "a", 1.0),
        (2, big, "nightly", "a", 1.5),
        (3, host, "ci", "a", 1.1),
        (4, host, "nightly", "b", 0.9),
        (5, big, "nightly", "b", 1.6),
        (6, host, "ci", "b", 0.95),
        (7, big, "nightly", "b", 1.55),
        (8, host, "nightly", "b", 0.97),
    ):
        metrics = {
            k: v * scale if "per_s" in k else v * (1 + day / 100) if "diff" in k else v
            for k, v in record["evidence"][-1]["metrics"].items()
        }
        lines.append(
            {
                "date": f"2026-11-0{day}T00:00:00+00:00",
                "host": where,
                "scope": scope,
                "step_key": key * 64,
                "thresholds": None,
                "verdict": "pass",
                "metrics": metrics,
            }
        )
    history = world.root / "manifests" / "history" / "tiny-llama.jsonl"
    history.parent.mkdir(exist_ok=True)
    history.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return world


def runs(world: World) -> list[dict[str, Any]]:
    """What the tiny-llama page plots: its history's lines and its manifest's records."""
    path = world.root / "manifests" / "history" / "tiny-llama.jsonl"
    past = [json.loads(line) for line in path.read_text().splitlines()]
    records = json.loads((world.root / "manifests" / "tiny-llama.json").read_text())["evidence"]
    for r in records:
        r["scope"] = r.get("scope") or "local"
    return sorted([*past, *records], key=lambda e: e["date"])


@pytest.fixture(scope="module")
def base(world: World) -> Iterator[str]:
    out = world.root / "_site"
    sitegen.build(catalog.load(catalog.Paths(world.root)), out)
    with serving(out) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch()


@pytest.fixture(scope="module", params=[LAPTOP, PHONE], ids=["1366", "390"])
def context(request: pytest.FixtureRequest, browser: Any) -> Iterator[Any]:
    viewport = request.param
    context = browser.new_context(viewport=viewport, is_mobile=viewport is PHONE)
    yield context
    context.close()


def value_of(label: str) -> float:
    """A tick label's value: '53k tokens/s' -> 53000, '2.63e-6' -> 2.63e-06."""
    number = label.split(" ")[0]
    found = re.fullmatch(r"(-?[0-9.]+(?:e-?[0-9]+)?)([kMG]?)", number)
    assert found, label
    return float(found[1]) * SI[found[2]]


def test_plots_have_rounded_unit_scales_that_fit_one_series_per_host_and_scope(
    context: Any, base: str, world: World
) -> None:
    page = context.new_page()
    page.goto(base + RECIPE)
    history = runs(world)
    assert len(history) >= 8 and page.locator("figure.plot").count() >= 5
    assert page.locator("figure.plot line.break").count() == 0  # no wall of dashed lines
    for figure in page.locator("figure.plot").all():
        metric = figure.locator(".metric").inner_text()
        measured = [e for e in history if metric in e["metrics"]]
        values = [e["metrics"][metric] for e in measured]
        box = figure.bounding_box()
        ticks = figure.locator("text.tick").all()
        for tick in ticks:
            t = tick.bounding_box()
            assert t["x"] >= box["x"] and t["x"] + t["width"] <= box["x"] + box["width"], metric
        labels = [t.text_content() for t in ticks]
        assert all(len(label) <= 14 for label in labels), labels
        if metric in UNITS:
            assert all(label.endswith(UNITS[metric]) for label in labels), labels
        if f"{min(values):.6g}" == f"{max(values):.6g}":  # below display precision: flat
            assert len(labels) == 1 and figure.locator(".scale").inner_text().startswith("flat")
            assert len({c.get_attribute("cy") for c in figure.locator("circle.dot").all()}) == 1
        else:  # each tick is the value it stands for, and the scale covers every run
            top, bottom = (value_of(label) for label in labels)
            assert bottom <= min(values) and max(values) <= top
            assert top - bottom <= (max(values) - min(values)) * 1.25
        series = {(host_class(e["host"]).key, e["scope"]) for e in measured}
        dots = {c.get_attribute("class").split()[1] for c in figure.locator("circle.dot").all()}
        assert len(dots) == len(series) == figure.locator(".series .key:not(.chg)").count()
        assert figure.locator(".meaning").inner_text() == METRICS[metric]


def test_a_new_build_is_one_marker_and_the_headline_names_its_host_scope_and_date(
    context: Any, base: str, world: World
) -> None:
    page = context.new_page()
    page.goto(base + RECIPE)
    history = runs(world)
    changed_to = set()
    for key in {(host_class(e["host"]).key, e["scope"]) for e in history}:
        mine = [e for e in history if (host_class(e["host"]).key, e["scope"]) == key]
        changed_to |= {b["step_key"] for a, b in pairwise(mine) if a["step_key"] != b["step_key"]}
    assert changed_to == {"b" * 64}  # three series moved to build b: one marker
    manifest = read(world.root / "manifests" / "tiny-llama.json")
    assert manifest is not None
    decides = headline(manifest)
    assert decides is not None
    where = f"{host_class(decides.host).short} · {scope_of(decides)} · {decides.date[:10]}"
    for figure in page.locator("figure.plot").all():
        assert figure.locator("path.change").count() == len(changed_to)
        assert figure.locator("path.change title").text_content().startswith("rebuilt")
        value = figure.locator(".headline-value")
        assert value.inner_text().startswith("headline ") and where in value.inner_text()
        assert figure.locator("circle.dot.headline").count() == 1


def test_a_real_models_gates_never_give_the_tiny_models_rationale(context: Any, base: str) -> None:
    page = context.new_page()
    for rel, family, other in (
        (REAL, "For real checkpoints", "random-weight"),
        (TINY, "For kiln's tiny models", "For real checkpoints"),
    ):
        page.goto(base + rel)
        rows = page.locator("table.gates tbody tr")
        why = [row.locator("td").last.inner_text() for row in rows.all()]
        agreement = rows.filter(has_text="next_token_agreement").locator("td").last
        assert family in agreement.inner_text()
        assert all(other not in w for w in why)


def test_the_catalogs_first_phone_screen_shows_search_and_recipes_filters_folded(
    browser: Any, base: str
) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True)
    page = context.new_page()
    page.goto(base + "index.html")
    search = page.locator("#f-q").bounding_box()
    assert search is not None and search["y"] + search["height"] <= PHONE["height"]
    names = page.locator("#catalog tbody tr a.name").all()[:3]
    tops = [n.bounding_box()["y"] for n in names]
    assert sum(1 for y in tops if y + 20 <= PHONE["height"]) >= 2, tops  # the first recipes
    assert not page.locator("#f-precision").is_visible()  # folded behind one summary
    page.locator("#facet-filters > summary").click()
    page.select_option("#f-precision", "fp8")
    assert page.locator("#active").inner_text() == "(1 set)"
    context.close()
    wide = browser.new_context(viewport=LAPTOP).new_page()
    wide.goto(base + "index.html")
    assert wide.locator("#f-precision").is_visible()  # a wide screen opens it
    wide.context.close()
    # Without JavaScript the summary's form stays hidden; the recipes come first and the
    # "Browse by" pages filter, so nothing folds and nothing needs a script.
    bare = browser.new_context(viewport=PHONE, java_script_enabled=False).new_page()
    bare.goto(base + "index.html")
    assert not bare.locator("#filters").is_visible()
    first = bare.locator("#catalog tbody tr a.name").first.bounding_box()
    assert first is not None and first["y"] < PHONE["height"]
    bare.context.close()


@pytest.mark.parametrize("rel", [RECIPE, REAL, "index.html"])
def test_axe_finds_no_violation_on_plots_gates_and_the_catalog(
    context: Any, base: str, rel: str
) -> None:
    page = context.new_page()
    page.goto(base + rel)
    if rel == "index.html" and context.pages[0].viewport_size["width"] < 500:
        page.locator("#facet-filters > summary").click()  # the folded form too
    page.evaluate(f"{axe_source()}\n;true")
    assert page.evaluate(AXE_JS) == []
    page.close()


def test_the_plot_screenshots(context: Any, base: str) -> None:
    """For the record: a recipe's plots and the catalog's first screen, in test-artifacts/."""
    from browser import ARTIFACTS

    ARTIFACTS.mkdir(exist_ok=True)
    page = context.new_page()
    width = page.viewport_size["width"]
    page.goto(base + RECIPE)
    page.locator(".plots").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / f"plots-{width}.png"))
    page.goto(base + "index.html")
    path = Path(ARTIFACTS / f"catalog-{width}.png")
    page.screenshot(path=str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

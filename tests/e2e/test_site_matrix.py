"""The site answers its readers' questions, in a real browser (issue 16): headless
Debian chromium via playwright, against the site rendered from the committed
recipes and manifests (no build needed), served on 127.0.0.1.

One site, one browser and one load of each page per viewport, shared by every test
here: the matrix at 1366 px (the fp8 question) and 390 px (one card per
architecture), the catalog, a recipe page with plots and an unsupported-here page.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from browser import axe_source, launch
from conftest import ROOT, World, copy_catalog, shipped_gpu

from kiln import __version__, catalog
from kiln import site as sitegen
from kiln.hostinfo import host_class
from kiln.site.serve import serving

LAPTOP = {"width": 1366, "height": 768}
PHONE = {"width": 390, "height": 844}
PAGES = (
    "matrix.html",
    "index.html",
    "recipes/tiny-llama.html",
    "recipes/tiny-llama-aoti-h200.html",
)
AXE_JS = """async () => (await axe.run(document,
  {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa']}, resultTypes: ['violations']}))
  .violations.filter(v => v.impact === 'serious' || v.impact === 'critical').map(v => v.id)"""


@dataclass
class Loaded:
    """Every page of PAGES loaded once in one viewport, kept open."""

    base: str
    pages: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    widths: dict[str, int] = field(default_factory=dict)
    axe: dict[str, list[str]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The shipped catalog, and for tiny-llama a nightly history of its own: five runs
    on two host classes, the last two of another build (issue 43: the plots read the
    history ci and nightly runs append beside the manifest's records)."""
    world = copy_catalog(tmp_path_factory.mktemp("matrix"))
    record = manifests(world)["tiny-llama"]["evidence"][-1]
    big = {**record["host"], "cores": 16}
    lines = []
    for day, host, key, scale in (
        (1, record["host"], "a" * 64, 1.0),
        (2, big, "a" * 64, 1.5),
        (3, record["host"], "a" * 64, 1.1),
        (4, record["host"], "b" * 64, 0.9),
        (5, big, "b" * 64, 1.6),
    ):
        metrics = {k: v * scale if "per_s" in k else v for k, v in record["metrics"].items()}
        lines.append(
            {
                "date": f"2026-11-0{day}T00:00:00+00:00",
                "host": host,
                "scope": "nightly",
                "step_key": key,
                "thresholds": None,
                "verdict": "pass",
                "metrics": metrics,
            }
        )
    history = world.root / "manifests" / "history" / "tiny-llama.jsonl"
    history.parent.mkdir()
    history.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return world


def runs(world: World, name: str) -> list[dict[str, Any]]:
    """What a recipe page plots: its history's lines and its manifest's records."""
    path = world.root / "manifests" / "history" / f"{name}.jsonl"
    past = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return sorted([*past, *manifests(world)[name]["evidence"]], key=lambda e: e["date"])


@pytest.fixture(scope="module")
def site(world: World) -> Path:
    out = world.root / "_site"
    sitegen.build(catalog.load(catalog.Paths(world.root)), out)
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch()


def _load(browser: Any, base: str, viewport: dict[str, int], axe: str) -> Loaded:
    context = browser.new_context(viewport=viewport, is_mobile=viewport is PHONE)
    loaded = Loaded(base)
    for rel in PAGES:
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m, e=errors: e.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc, e=errors: e.append(str(exc)))
        page.goto(base + rel)
        loaded.pages[rel], loaded.errors[rel] = page, errors
        loaded.widths[rel] = page.evaluate("document.documentElement.scrollWidth")
        if rel == "matrix.html":
            page.evaluate(f"{axe}\n;true")
            loaded.axe[rel] = page.evaluate(AXE_JS)
    return loaded


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    with serving(site) as url:
        yield url


@pytest.fixture(scope="module")
def laptop(browser: Any, served: str) -> Iterator[Loaded]:
    loaded = _load(browser, served, LAPTOP, axe_source())
    yield loaded
    next(iter(loaded.pages.values())).context.close()


@pytest.fixture(scope="module")
def phone(browser: Any, served: str) -> Iterator[Loaded]:
    loaded = _load(browser, served, PHONE, axe_source())
    yield loaded
    next(iter(loaded.pages.values())).context.close()


def manifests(world: World) -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in (world.root / "manifests").glob("*.json")}


def fp8_passes_from_manifests(world: World) -> set[tuple[str, str]]:
    """(architecture, host class) of every ordinary fp8 recipe whose latest record of
    its current build on that host passes: read off the manifests, not the site."""
    cat = catalog.load(catalog.Paths(world.root))
    out = set()
    for name, m in manifests(world).items():
        r = cat.recipes.get(name)
        if r is None or r.precision.weights != "fp8" or r.execution.variant != "ordinary":
            continue
        if m["lock"]["model"].get("revision") != r.model.pin.get("revision"):
            continue
        key = m["evidence"][-1]["step_key"]
        latest: dict[str, str] = {}
        for ev in m["evidence"]:
            if ev["step_key"] == key:
                latest[host_class(ev["host"]).label] = ev["verdict"]
        arch = m["lock"]["model"]["architecture"]
        out |= {(arch, host) for host, verdict in latest.items() if verdict == "pass"}
    return out


def test_which_architectures_pass_at_fp8_and_on_which_host(
    laptop: Loaded, world: World, site: Path
) -> None:
    page = laptop.pages["matrix.html"]
    # no sideways scroll: neither the page nor the matrix's own box
    assert laptop.widths["matrix.html"] <= LAPTOP["width"]
    wrap = page.evaluate(
        "(() => { const w = document.querySelector('.matrix-wrap');"
        " return [w.scrollWidth, w.clientWidth]; })()"
    )
    assert wrap[0] <= wrap[1], wrap
    answer = set()
    for cell in page.locator("#matrix td.cell[data-label^='fp8 on ']").all():
        box = cell.bounding_box()
        assert box is not None and box["x"] + box["width"] <= LAPTOP["width"]  # on screen
        if cell.locator("a").count() and cell.locator("a").inner_text() == "pass":
            arch = cell.locator("xpath=../th").inner_text().replace("\n", "")
            host = cell.get_attribute("data-label").removeprefix("fp8 on ")
            answer.add((arch, host))
            href = cell.locator("a").get_attribute("href")
            record = next(
                h["record"]
                for h in json.loads(
                    (site / "api" / "recipes" / f"{Path(href.split('#')[0]).stem}.json").read_text()
                )["history"]
                if h["url"] == href
            )
            assert record["verdict"] == "pass" and host_class(record["host"]).label == host
    assert answer == fp8_passes_from_manifests(world)
    assert ("LlamaForCausalLM", shipped_gpu()) in answer  # the GPU run is its own column
    cpus = {h for _, h in answer if not h.startswith("NVIDIA")}
    assert cpus, answer  # and a CPU host class's column too (whichever host built them)
    # a cell says how many of its recipes agree, and never counts unsupported as a pass
    labels = [t.inner_text() for t in page.locator("#matrix td.cell .n").all()]
    assert any("unsupported-here" in t for t in labels)
    assert all(t.startswith("(") and " of " in t for t in labels)
    # empty precisions are hidden until asked for
    empty = page.locator("#matrix th.group.empty")
    if empty.count():
        assert not empty.first.is_visible()
        page.check("#show-empty")
        assert empty.first.is_visible()
        page.uncheck("#show-empty")
    # the header row and the names column stay put while the matrix scrolls
    sticky = page.evaluate(
        "[getComputedStyle(document.querySelector('#matrix thead')).position,"
        " getComputedStyle(document.querySelector('#matrix tbody th')).position]"
    )
    assert sticky == ["sticky", "sticky"]


def test_the_matrix_is_one_card_per_architecture_on_a_phone(phone: Loaded) -> None:
    page = phone.pages["matrix.html"]
    assert phone.widths["matrix.html"] <= PHONE["width"]
    rows = page.locator("#matrix tbody tr")
    assert rows.count() > 10
    assert page.evaluate(
        "getComputedStyle(document.querySelector('#matrix tbody tr')).display"
    ) == ("block")
    llama = page.locator("#matrix tbody tr", has=page.locator("th", has_text="LlamaForCausalLM"))
    shown = [c for c in llama.first.locator("td.cell").all() if c.is_visible()]
    labels = [
        c.evaluate("e => getComputedStyle(e, '::before').content").strip('"') for c in shown
    ]  # each line of the card names its precision and host
    assert f"fp8 on {shipped_gpu()}" in labels, labels
    assert any(label.startswith("fp8 on ") and "cores" in label for label in labels), labels
    assert all(c.locator("a").count() for c in shown)  # only cells with evidence
    for card in rows.all()[:5]:
        box = card.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]


def test_stale_badges_say_what_doit_check_says(laptop: Loaded, world: World, site: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "doit", "-f", str(ROOT / "dodo.py"), "check", "format=json"],
        env=world.env,
        capture_output=True,
        text=True,
        check=True,
        cwd=world.root,
    )
    stale = {x["recipe"]: x for x in json.loads(proc.stdout)["stale"]}
    listing = json.loads((site / "api" / "recipes.json").read_text())["recipes"]
    assert {r["name"] for r in listing if r["stale"]} == set(stale)
    for r in listing:
        if r["name"] in stale:
            assert r["stale_reason"]["summary"] == stale[r["name"]]["summary"]
            assert r["stale_reason"]["command"] == f"doit build recipe={r['name']}"
        else:
            assert r["stale_reason"] is None
    index = laptop.pages["index.html"]
    badged = {
        row.locator("a.name").inner_text()
        for row in index.locator("#catalog tbody tr").all()
        if row.locator(".stale").count()
    }
    assert badged == set(stale)
    if stale:  # a stale recipe's page says why and how to rebuild it
        name = sorted(stale)[0]
        page = index.context.new_page()
        page.goto(laptop.base + f"recipes/{name}.html")
        notice = page.inner_text("#stale")
        assert stale[name]["summary"] in notice and f"doit build recipe={name}" in notice
        assert page.locator("h1 .stale").is_visible()
        page.close()


def test_plots_have_a_rounded_scale_one_series_per_host_class_and_scope_and_build_markers(
    laptop: Loaded, world: World
) -> None:
    page = laptop.pages["recipes/tiny-llama.html"]
    history = runs(world, "tiny-llama")
    assert len(history) >= 6
    for figure in page.locator("figure.plot").all():
        metric = figure.locator(".metric").inner_text()
        measured = [e for e in history if metric in e["metrics"]]
        values = [e["metrics"][metric] for e in measured]
        series = {(host_class(e["host"]).key, e.get("scope") or "local") for e in measured}
        ticks = [t.text_content() for t in figure.locator("text.tick").all()]
        scale = figure.locator(".scale").inner_text()
        if f"{min(values):.6g}" == f"{max(values):.6g}":  # below display precision: flat
            assert len(ticks) == 1 and scale.startswith("flat")
            ys = {c.get_attribute("cy") for c in figure.locator("circle.dot").all()}
            assert len(ys) == 1
        else:  # rounded outward (tests/e2e/test_site_plots.py checks the values)
            assert len(ticks) == 2 and ticks[0] != ticks[1] and all(len(t) <= 14 for t in ticks)
        dots = {c.get_attribute("class").split()[1] for c in figure.locator("circle.dot").all()}
        assert len(dots) == len(series)
    keys = [e["step_key"] for e in history]
    changed = sum(1 for a, b in pairwise(keys) if a != b)
    assert changed and page.locator("figure.plot").first.locator("path.change").count() >= 1
    assert page.locator("figure.plot line.break").count() == 0  # a marker, not a line per rebuild


def test_an_unsupported_page_gives_its_reason_once_and_says_what_would_run_it(
    laptop: Loaded, world: World
) -> None:
    page = laptop.pages["recipes/tiny-llama-aoti-h200.html"]
    history = manifests(world)["tiny-llama-aoti-h200"]["evidence"]
    reason = history[-1]["reason"]
    assert page.inner_text("main").count(reason) == 1
    notice = page.inner_text("#unsupported")
    assert reason in notice and shipped_gpu() in notice and "tiny-llama-aoti" in notice
    rows = page.locator("table.evidence tbody tr")
    assert rows.count() <= len(history)  # identical records share a row
    assert all(page.locator(f"#evidence-{i}").count() == 1 for i in range(len(history)))
    assert "0 of 0 gates met" not in page.inner_text("main")


def test_the_catalog_puts_evidence_first_shows_verdicts_and_counts_follow_filters(
    laptop: Loaded,
) -> None:
    page = laptop.pages["index.html"]
    order = ["pass", "quality-fail", "build-fail", "unsupported-here", "not-run", "not built"]
    verdicts = [r.get_attribute("data-verdict") for r in page.locator("#catalog tbody tr").all()]
    assert verdicts == sorted(verdicts, key=order.index) and verdicts[0] == "pass"
    header = page.locator("#catalog thead th", has_text="Verdict").bounding_box()
    assert header is not None and header["x"] + header["width"] <= LAPTOP["width"]
    page.select_option("#f-precision", "fp8")
    shown = [r for r in page.locator("#catalog tbody tr").all() if r.is_visible()]
    passing = sum(1 for r in shown if r.get_attribute("data-verdict") == "pass")
    option = page.locator("#f-verdict option[value='pass']").inner_text()
    assert option == f"pass ({passing})"
    page.select_option("#f-verdict", "pass")
    hosts = {
        r.get_attribute("data-host")
        for r in page.locator("#catalog tbody tr").all()
        if r.is_visible()
    }
    assert shipped_gpu() in hosts  # the GPU run is named where the recipe is listed
    page.select_option("#f-verdict", "")
    page.select_option("#f-precision", "")


def test_every_page_says_what_made_it_and_none_overflows_or_logs_errors(
    laptop: Loaded, phone: Loaded
) -> None:
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    for loaded, viewport in ((laptop, LAPTOP), (phone, PHONE)):
        for rel, page in loaded.pages.items():
            made = page.inner_text("#made")
            assert f"kiln {__version__}" in made and " UTC" in made, rel
            assert commit and commit in made, rel
            assert loaded.widths[rel] <= viewport["width"], (rel, viewport)
            assert loaded.errors[rel] == [], rel
        assert loaded.axe == {"matrix.html": []}

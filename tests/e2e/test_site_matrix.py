"""The site answers its readers' questions, in a real browser (issue 16): headless
Debian chromium via playwright, against the site rendered from the committed
recipes and manifests (no build needed), served on 127.0.0.1.

One site, one browser and one load of each page per viewport, shared by every test
here: the matrix at 1366x900 (the fp8 question, answered at a glance: issue 44) and
390 px (one card per architecture), the runtime features, the catalog, a recipe page
with plots and an unsupported-here page; and issue 40's: the matrix of the
architectures that take images, and a vision-language recipe's page with its
validation images and answers.
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

LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
PAGES = (
    "matrix.html",
    "features.html",
    "index.html",
    "recipes/tiny-llama.html",
    "recipes/tiny-llama-aoti-h200.html",
    "recipes/tiny-llava.html",
    "matrix/ordinary-any-image-text-input.html",
)
AXED = (
    "matrix.html",
    "features.html",
    "index.html",
    "recipes/tiny-llava.html",
    "matrix/ordinary-any-image-text-input.html",
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
        if rel in AXED:
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


def current_verdicts(world: World) -> Iterator[tuple[str, str, str, str]]:
    """(architecture, precision, host class, verdict) of the latest record of each ordinary
    recipe's current build on each host class: read off the manifests, not the site."""
    cat = catalog.load(catalog.Paths(world.root))
    for name, m in manifests(world).items():
        r = cat.recipes.get(name)
        if r is None or r.execution.variant != "ordinary":
            continue
        if m["lock"]["model"].get("revision") != r.model.pin.get("revision"):
            continue
        key = m["evidence"][-1]["step_key"]
        latest: dict[str, str] = {}
        for ev in m["evidence"]:
            if ev["step_key"] == key:
                latest[host_class(ev["host"]).label] = ev["verdict"]
        arch = m["lock"]["model"]["architecture"]
        for host, verdict in latest.items():
            yield arch, r.precision.weights, host, verdict


def fp8_passes_from_manifests(world: World) -> set[tuple[str, str]]:
    """(architecture, host class) whose fp8 cell passes: every ordinary fp8 recipe of
    that architecture whose latest record of its current build is from that host
    passes there (a cell reads its recipes' worst verdict)."""
    cells = cells_from_manifests(world)
    return {(arch, host) for (arch, p, host), v in cells.items() if p == "fp8" and v == "pass"}


def cells_from_manifests(world: World) -> dict[tuple[str, str, str], str]:
    """(architecture, precision, host class) -> what its cell must read: the worst of its
    recipes' verdicts there (a failure, else pass, else unsupported-here, else untested)."""
    worst = ("build-fail", "quality-fail", "pass", "unsupported-here", "not-run")
    found: dict[tuple[str, str, str], str] = {}
    for arch, precision, host, verdict in current_verdicts(world):
        cell = (arch, precision, host)
        if cell not in found or worst.index(verdict) < worst.index(found[cell]):
            found[cell] = verdict
    return {k: "untested" if v == "not-run" else v for k, v in found.items()}


# The table's ancestors that scroll or clip, up to the page: the page's own scroll must
# be the only one (issue 44: an inner box hid the rows and their headers from each other).
SCROLLERS_JS = """sel => { const out = [];
  for (let e = document.querySelector(sel).parentElement; e && e !== document.body; e = e.parentElement) {
    const s = getComputedStyle(e);
    if (s.overflowX !== 'visible' || s.overflowY !== 'visible') out.push(e.tagName + '.' + e.className);
  }
  return out; }"""
# A row as the reader sees it: its name's box, the header's, and for each shown cell what
# it reads and its two column headers (the precision, through the colspans, and the host).
ROW_JS = """tr => {
  const table = tr.closest('table'), [groups, hosts] = table.tHead.rows;
  const box = e => { const r = e.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
  const groupOf = i => { let n = 0;
    for (const th of Array.from(groups.cells).slice(1)) { n += th.colSpan; if (i < n) return th; } };
  const reads = td => { const a = td.querySelector('a');
    return a ? a.innerText : td.querySelector('.visually-hidden') ? 'untested' : td.innerText.trim(); };
  return {arch: tr.cells[0].querySelector('a').innerText.replace(/\\n/g, ''), name: box(tr.cells[0]), head: box(table.tHead),
    cells: Array.from(tr.cells).slice(1).filter(td => td.offsetParent !== null).map(td => {
      const group = groupOf(td.cellIndex - 1), host = hosts.cells[td.cellIndex - 1];
      const abbr = host.querySelector('abbr');
      return {label: td.dataset.label, reads: reads(td), group: group.innerText, groupBox: box(group),
              host: abbr ? abbr.title : '', hostBox: box(host)}; })}; }"""
# Each text node of each name (the pieces between <wbr>s) and how many lines it spans.
NAME_PIECES_JS = """sel => Array.from(document.querySelectorAll(sel)).map(a => {
  const pieces = Array.from(a.childNodes).filter(n => n.nodeType === Node.TEXT_NODE).map(n => {
    const range = document.createRange(); range.selectNodeContents(n);
    return [n.textContent, new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top))).size]; });
  return [a.innerText.replace(/\\n/g, ''), pieces, a.getClientRects().length]; })"""


def on_screen(box: dict[str, float], viewport: dict[str, int]) -> bool:
    """Inside the viewport, to the pixel (a scroll lands on fractions of one)."""
    return (
        box["top"] >= -1
        and box["left"] >= -1
        and box["bottom"] <= viewport["height"] + 1
        and box["right"] <= viewport["width"] + 1
    )


def test_which_architectures_pass_at_fp8_and_on_which_host(
    laptop: Loaded, world: World, site: Path
) -> None:
    page = laptop.pages["matrix.html"]
    # no sideways scroll, and one scrolling context: no box of its own around the table
    assert laptop.widths["matrix.html"] <= LAPTOP["width"]
    assert page.evaluate(SCROLLERS_JS, "#matrix") == []
    answer = set()
    for cell in page.locator("#matrix td.cell[data-label^='fp8 on ']").all():
        box = cell.bounding_box()
        assert box is not None and box["x"] + box["width"] <= LAPTOP["width"]  # on screen
        if cell.locator("a").count() and cell.locator("a").inner_text() == "pass":
            arch = cell.locator("xpath=../th/a").inner_text().replace("\n", "")
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
    gpu = page.locator(f"#matrix td.cell[data-label='fp8 on {shipped_gpu()}']")
    assert gpu.count() > 0  # the GPU run is its own column
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


def test_each_row_keeps_its_column_headers_in_view_and_reads_the_manifests(
    laptop: Loaded, world: World
) -> None:
    """Issue 44: at 1366x900, the rows with evidence beyond fp32 come first, and any row
    scrolled to the bottom of the screen still shows, above each of its cells, the
    precision and host that cell is about; the cell reads what the manifests say."""
    page = laptop.pages["matrix.html"]
    expected = cells_from_manifests(world)
    beyond = sorted({arch for arch, precision, _ in expected if precision != "fp32"})
    first = page.locator("#matrix tbody").first.locator("th[scope=row] a").all()
    assert [th.inner_text().replace("\n", "") for th in first] == beyond
    assert "LlamaForCausalLM" in beyond  # the fp8 answer is in the first rows
    checked = 0
    for tr in page.locator("#matrix tbody tr:not(.section)").all():
        tr.evaluate(
            "tr => window.scrollTo(0, tr.getBoundingClientRect().bottom + scrollY - innerHeight)"
        )
        seen = tr.evaluate(ROW_JS)
        assert on_screen(seen["name"], LAPTOP) and on_screen(seen["head"], LAPTOP), seen["arch"]
        assert seen["name"]["top"] >= seen["head"]["bottom"] - 1  # not beneath the header
        for c in seen["cells"]:
            precision, host = c["label"].split(" on ", 1)
            assert (c["group"], c["host"]) == (precision, host), c
            assert on_screen(c["groupBox"], LAPTOP) and on_screen(c["hostBox"], LAPTOP), c
            assert c["reads"] == expected.get((seen["arch"], precision, host), "untested"), c
            checked += int(c["reads"] != "untested")
    assert checked == len(expected)  # every cell with evidence was seen and read
    page.evaluate("window.scrollTo(0, 0)")


def test_the_names_column_stays_on_a_sideways_scroll(laptop: Loaded) -> None:
    """Narrower than the matrix, the page scrolls sideways and the names stay at its left."""
    page = laptop.pages["matrix.html"].context.new_page()
    page.set_viewport_size({"width": 880, "height": 900})
    page.goto(laptop.base + "matrix.html")
    assert page.evaluate("document.documentElement.scrollWidth") > 880  # it does scroll
    page.evaluate("window.scrollTo(document.documentElement.scrollWidth, 0)")
    llama = page.locator("#matrix th[scope=row]", has_text="LlamaForCausalLM")
    box = llama.bounding_box()
    assert box is not None and 0 <= box["x"] < 1 and page.evaluate("scrollX") > 0
    page.close()


def test_architecture_names_break_only_between_words(laptop: Loaded) -> None:
    """A name wraps at a <wbr> between its words, never inside one: each piece keeps to
    one line, and "CausalLM" is one piece (issue 44: "AfmoeForCausal / LM")."""
    page = laptop.pages["matrix.html"]
    names = page.evaluate(NAME_PIECES_JS, "#matrix th[scope=row] a")
    for name, pieces, _ in names:
        assert "".join(text for text, _ in pieces) == name
        assert all(lines == 1 for _, lines in pieces), (name, pieces)
        if name.endswith("CausalLM"):
            assert pieces[-1][0] == "CausalLM", pieces
    assert any(lines > 1 for _, _, lines in names)  # some do wrap, so the pieces were tested


def test_the_features_fit_the_laptop_with_every_backend_under_its_feature(
    laptop: Loaded, site: Path
) -> None:
    """Issue 44: 26 feature x backend columns made the page 1,476 px wide, BART's one
    Yes clipped. One group per feature (every backend, or one per page) fits."""
    page = laptop.pages["features.html"]
    assert laptop.widths["features.html"] <= LAPTOP["width"]
    assert page.evaluate(SCROLLERS_JS, "#features") == []
    boxes = [c.bounding_box() for c in page.locator("#features td.cell").all() if c.is_visible()]
    assert boxes and all(b is not None and b["x"] + b["width"] <= LAPTOP["width"] for b in boxes)
    bart = page.locator("#features tbody tr", has=page.locator("th", has_text="BartFor"))
    assert bart.locator("td.cell a", has_text="Yes").count() >= 1
    lead = page.locator("main p.lead").bounding_box()
    assert lead is not None and lead["height"] < 4 * 27  # a short introduction
    # the checkbox of the empty columns sits on the first line of its label
    toggled = sorted(
        p for p in (site / "features").glob("*.html") if 'id="show-empty"' in p.read_text()
    )
    assert toggled, "no per-backend page hides a column"
    other = page.context.new_page()
    other.goto(laptop.base + toggled[0].relative_to(site).as_posix())
    box = other.locator("#show-empty").bounding_box()
    first = other.locator("p.toggle label span").evaluate(
        "e => { const r = e.getClientRects()[0]; return {top: r.top, bottom: r.bottom}; }"
    )
    assert box is not None and first["top"] <= box["y"] + box["height"] / 2 <= first["bottom"]
    assert other.evaluate("document.documentElement.scrollWidth") <= LAPTOP["width"]
    other.close()


def test_the_features_are_one_card_per_architecture_on_a_phone(phone: Loaded) -> None:
    page = phone.pages["features.html"]
    assert phone.widths["features.html"] <= PHONE["width"]
    assert page.evaluate(
        "getComputedStyle(document.querySelector('#features tbody tr')).display"
    ) == ("block")
    lines = page.locator("main p.lead").evaluate(
        "e => e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight)"
    )
    assert lines <= 5, lines  # not 7 lines of method before the first card
    for card in page.locator("#features tbody tr").all()[:5]:
        box = card.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]


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
        assert loaded.axe == {rel: [] for rel in AXED}


# ---------------------------------------------------------------- issue 40: modality


def test_the_modality_filter_narrows_the_catalog_and_counts_follow_it(
    laptop: Loaded, world: World
) -> None:
    from kiln.site.view import modality

    cat = catalog.load(catalog.Paths(world.root))
    takes = {name: modality(r.task) for name, r in cat.recipes.items()}
    images = sorted(n for n, m in takes.items() if m == "image+text")
    assert "tiny-llava" in images
    page = laptop.pages["index.html"]
    page.select_option("#f-modality", "image+text")
    shown = [r for r in page.locator("#catalog tbody tr").all() if r.is_visible()]
    assert sorted(r.locator("a.name").inner_text() for r in shown) == images
    assert all(r.locator(".tag.input").inner_text() == "image+text input" for r in shown)
    assert page.inner_text("#count") == f"Showing {len(images)} of {len(takes)} recipes."
    assert "modality=image%2Btext" in page.url  # a shareable link
    # each other filter's counts follow it: no image-text-to-text recipe is fp8
    assert page.locator("#f-precision option[value='fp8']").inner_text() == "fp8 (0)"
    page.select_option("#f-modality", "")
    page.select_option("#f-precision", "fp8")
    option = page.locator("#f-modality option[value='image+text']").inner_text()
    assert option == "image+text (0)"
    page.select_option("#f-precision", "")
    audio = sum(1 for m in takes.values() if m == "audio")
    assert page.locator("#f-modality option[value='audio']").inner_text() == f"audio ({audio})"


def test_the_matrix_marks_image_input_rows_and_filters_them_by_input(laptop: Loaded) -> None:
    page = laptop.pages["matrix.html"]
    llava = page.locator("#matrix tbody tr", has=page.locator("th a", has_text="Llava"))
    assert llava.locator("th .tag.input").inner_text() == "image+text input"
    assert llava.locator("th .tag.input").is_visible()
    llama = page.locator("#matrix tbody tr", has=page.locator("th a", has_text="LlamaForCausalLM"))
    assert llama.first.locator(".tag.input").count() == 0  # text alone is not marked
    inputs = page.locator("nav.matrix-filters div", has_text="Modality")
    assert [a.inner_text() for a in inputs.locator("a").all()][:2] == ["any", "text"]
    assert inputs.locator("a[aria-current=page]").inner_text() == "any"
    other = page.context.new_page()
    other.goto(page.url)
    other.locator("nav.matrix-filters div", has_text="Modality").locator(
        "a", has_text="image+text"
    ).click()
    assert other.url.endswith("matrix/ordinary-any-image-text-input.html")
    rows = other.locator("#matrix th[scope=row] a").all()
    assert sorted(r.inner_text().replace("\n", "") for r in rows) == [
        "Gemma3ForConditionalGeneration",
        "Idefics3ForConditionalGeneration",
        "InternVLForConditionalGeneration",
        "LlavaForConditionalGeneration",
        "Qwen2VLForConditionalGeneration",
        "Qwen2_5_VLForConditionalGeneration",
        "Qwen3VLForConditionalGeneration",
    ]
    current = other.locator("nav.matrix-filters a[aria-current=page]").all()
    assert [a.inner_text() for a in current] == ["ordinary", "any", "image+text"]
    assert "taking image+text input" in other.inner_text("#showing")
    llava_row = other.locator("#matrix tbody tr", has=other.locator("th a", has_text="Llava"))
    cell = llava_row.locator("td.cell a", has_text="pass").first
    assert cell.get_attribute("href").startswith("../recipes/tiny-llava")
    other.close()


def test_the_vlm_page_shows_each_validation_image_with_its_questions_and_answers(
    laptop: Loaded, phone: Loaded, world: World
) -> None:
    from kiln.errors import printable
    from kiln.plan import VALIDATION_IMAGES

    answers = manifests(world)["tiny-llava"]["evidence"][-1]["answers"]
    page = laptop.pages["recipes/tiny-llava.html"]
    figures = page.locator("#images ~ ul.asked figure").all()
    assert len(figures) == len(VALIDATION_IMAGES)
    for figure, name in zip(figures, VALIDATION_IMAGES, strict=True):
        img = figure.locator("img")
        assert img.is_visible() and img.get_attribute("alt") == f"Validation image {name}"
        loaded = img.evaluate("i => i.complete && i.naturalWidth > 0 && i.naturalHeight > 0")
        assert loaded, name  # the copy in the site, not a broken link
        box = img.bounding_box()
        assert box is not None and 90 <= box["height"] <= 100  # drawn at 6rem, not 32 px
        asked = [a for a in answers if a["image"] == name]
        questions = [q.inner_text() for q in figure.locator("dt").all()]
        said = [d.inner_text() for d in figure.locator("dd").all()]
        assert questions == [a["prompt"] for a in asked]
        assert said == [printable(a["answer"]).strip() for a in asked]
    record = page.locator("#images + p a").get_attribute("href")
    assert record == f"#evidence-{len(manifests(world)['tiny-llava']['evidence']) - 1}"
    cards = phone.pages["recipes/tiny-llava.html"].locator("ul.asked figure").all()
    for card in cards:  # one card per image on a phone, inside the screen
        box = card.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]

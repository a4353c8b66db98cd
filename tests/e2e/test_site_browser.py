"""The site in a real browser: headless Debian chromium via playwright, against the site
`doit site` renders from freshly built manifests, served on 127.0.0.1.

Pages render, filters work with and without JavaScript, every internal link
resolves, axe-core finds no serious or critical WCAG 2 A/AA violation in either
colour scheme, and no page overflows a phone's width. Screenshots land in
test-artifacts/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import ARTIFACTS, Crawl, axe_source, crawl, launch
from conftest import World, heavy

from kiln.site.serve import serving

pytestmark = heavy
PHONE = {"width": 375, "height": 812}
LAPTOP = {"width": 1280, "height": 900}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch()


@pytest.fixture(scope="module")
def base(built_site: Path) -> Iterator[str]:
    with serving(built_site) as url:
        yield url


@pytest.fixture(scope="module")
def light(browser: Any, base: str) -> Crawl:
    """Every page at laptop width in the light scheme, with axe."""
    context = browser.new_context(viewport=LAPTOP, color_scheme="light")
    try:
        return crawl(context, base, axe_source())
    finally:
        context.close()


@pytest.fixture(scope="module")
def dark_phone(browser: Any, base: str) -> tuple[Crawl, dict[str, int]]:
    """Every page on a phone in the dark scheme, with axe; and each page's scroll width."""
    context = browser.new_context(viewport=PHONE, color_scheme="dark", is_mobile=True)
    try:
        result = crawl(context, base, axe_source())
        page = context.new_page()
        widths = {}
        for url in result.pages:
            page.goto(url)
            widths[result.rel(url)] = page.evaluate("document.documentElement.scrollWidth")
        return result, widths
    finally:
        context.close()


def visible_recipes(page: Any) -> list[str]:
    return [
        row.locator("a.name").inner_text()
        for row in page.locator("#catalog tbody tr").all()
        if row.is_visible()
    ]


def test_every_page_renders_and_every_internal_link_resolves(
    light: Crawl, built_site: Path
) -> None:
    on_disk = {p.relative_to(built_site).as_posix() for p in built_site.rglob("*.html")}
    crawled = {light.rel(u) for u in light.pages}
    assert crawled == on_disk, "pages nothing links to, or links to pages that do not exist"
    fetched = {light.rel(u) for u in light.resources}
    assert {p.relative_to(built_site).as_posix() for p in built_site.rglob("*.json")} <= fetched
    assert light.broken == []
    assert all(r.status == 200 for r in light.pages.values())
    assert {light.rel(u): r.errors for u, r in light.pages.items() if r.errors} == {}
    report = f"crawled {len(light.pages)} pages, {len(light.resources)} other files, "
    report += f"checked {light.links_checked} links, {len(light.broken)} broken\n"
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "crawl.txt").write_text(report)
    print(report)


def test_no_page_has_inline_event_handlers_or_foreign_scripts(light: Crawl) -> None:
    for url, report in light.pages.items():
        assert report.handlers == [], url
        assert all(s.endswith("static/filter.js") for s in report.scripts), url
    assert any(r.scripts for r in light.pages.values())  # the index does load its script


def serious(violations: list[dict[str, Any]]) -> list[str]:
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in violations
        if v["impact"] in ("serious", "critical")
    ]


def test_axe_finds_no_serious_violations_in_light_or_dark(
    light: Crawl, dark_phone: tuple[Crawl, dict[str, int]]
) -> None:
    dark, _ = dark_phone
    found = {}
    for scheme, result in (("light", light), ("dark", dark)):
        for url, report in result.pages.items():
            if serious(report.axe):
                found[f"{scheme} {result.rel(url)}"] = serious(report.axe)
    assert found == {}
    total = sum(len(r.axe) for r in [*light.pages.values(), *dark.pages.values()])
    line = f"axe wcag2a+wcag2aa: {len(light.pages) + len(dark.pages)} page loads, "
    line += f"{total} violations (minor/moderate included), 0 serious or critical\n"
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "axe.txt").write_text(line)
    print(line)


def test_no_page_is_wider_than_a_phone(dark_phone: tuple[Crawl, dict[str, int]]) -> None:
    _, widths = dark_phone
    assert widths and {p: w for p, w in widths.items() if w > PHONE["width"]} == {}


def test_filters_with_javascript(browser: Any, base: str, built: World) -> None:
    llama_arch = built.manifest("tiny-llama")["lock"]["model"]["architecture"]
    page = browser.new_context(viewport=LAPTOP).new_page()
    page.goto(base + "index.html")
    assert page.locator("#filters").is_visible()
    assert visible_recipes(page) == ["tiny-llama", "tiny-qwen3"]
    page.fill("#f-q", "QWEN")
    assert visible_recipes(page) == ["tiny-qwen3"]
    assert page.inner_text("#count") == "Showing 1 of 2 recipes."
    assert page.url.endswith("?q=QWEN")
    page.fill("#f-q", "")
    page.select_option("#f-architecture", llama_arch)
    assert visible_recipes(page) == ["tiny-llama"]
    page.fill("#f-q", "qwen")  # Llama architecture and "qwen": nothing matches
    assert visible_recipes(page) == [] and page.locator("#empty").is_visible()
    page.click("button[type=reset]")
    page.wait_for_function("document.querySelectorAll('#catalog tbody tr:not([hidden])').length")
    assert visible_recipes(page) == ["tiny-llama", "tiny-qwen3"]
    page.goto(base + "index.html?precision=fp32&q=tiny-llama")  # a shared, filtered link
    assert page.input_value("#f-precision") == "fp32"
    assert visible_recipes(page) == ["tiny-llama"]
    page.context.close()


def test_filters_without_javascript_use_one_page_per_facet_value(
    browser: Any, base: str, built: World
) -> None:
    qwen_arch = built.manifest("tiny-qwen3")["lock"]["model"]["architecture"]
    context = browser.new_context(viewport=LAPTOP, java_script_enabled=False)
    page = context.new_page()
    page.goto(base + "index.html")
    assert not page.locator("#filters").is_visible()  # the JS form stays out of the way
    assert visible_recipes(page) == ["tiny-llama", "tiny-qwen3"]
    page.locator("#browse a", has_text=qwen_arch).click()
    assert "/browse/architecture/" in page.url
    assert visible_recipes(page) == ["tiny-qwen3"]
    # Every facet link leads to a page listing exactly the recipes with that value.
    page.goto(base + "index.html")
    links = page.locator("#browse section")
    checked = 0
    for section in links.all():
        facet = section.locator("h3").inner_text().lower()
        for link in section.locator("a").all():
            value, count = link.inner_text().rsplit(maxsplit=1)
            target = context.new_page()
            target.goto(base + link.get_attribute("href"))
            rows = target.locator("#catalog tbody tr")
            assert rows.count() == int(count)
            assert {r.get_attribute(f"data-{facet}") for r in rows.all()} == {value}
            target.close()
            checked += 1
    assert checked >= 8  # 7 facets; two architectures
    context.close()


def test_screenshots_of_the_index_and_a_recipe_page(browser: Any, base: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    shots = []
    for scheme, viewport, tag in (("light", LAPTOP, "laptop"), ("dark", PHONE, "phone")):
        context = browser.new_context(viewport=viewport, color_scheme=scheme)
        page = context.new_page()
        for rel, name in (("index.html", "index"), ("recipes/tiny-llama.html", "recipe")):
            page.goto(base + rel)
            path = ARTIFACTS / f"{name}-{tag}-{scheme}.png"
            page.screenshot(path=str(path), full_page=True)
            shots.append(path)
        context.close()
    for path in shots:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_the_recipe_page_shows_the_lock_and_plots_the_evidence(
    browser: Any, base: str, built: World
) -> None:
    m = built.manifest("tiny-llama")
    page = browser.new_context(viewport=LAPTOP).new_page()
    page.goto(base + "recipes/tiny-llama.html")
    assert page.locator("h1").inner_text().startswith("tiny-llama")
    body = page.inner_text("main")
    assert m["lock"]["model"]["revision"] in body
    assert all(f["sha256"] in body for f in m["lock"]["model"]["files"])
    metrics = set(m["evidence"][-1]["metrics"])
    plotted = {t.inner_text() for t in page.locator("figure.plot .metric").all()}
    assert plotted == metrics
    dots = page.locator("figure.plot circle.dot")
    assert dots.count() == sum(len(e["metrics"]) for e in m["evidence"])
    assert dots.first.bounding_box() is not None  # drawn, not just present
    last = len(m["evidence"]) - 1
    page.locator("h1 a.verdict").click()  # the verdict links to its evidence record
    assert page.url.endswith(f"#evidence-{last}")
    assert page.locator(f"#evidence-{last}").is_visible()
    page.context.close()

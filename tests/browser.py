"""A real browser for the site tests: Debian's /usr/bin/chromium driven by playwright,
axe-core from npm (node_modules/, pinned in package.json), and a crawler.

Outside CI a missing browser skips the browser tests; in CI (env CI set) it fails
them, loudly: `make install-browser` is what installs chromium and axe-core.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit

import pytest
from conftest import ROOT

CHROMIUM = Path(os.environ.get("KILN_CHROMIUM", "/usr/bin/chromium"))
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
ARTIFACTS = ROOT / "test-artifacts"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# A page's state in one round trip, read once it has loaded: every element's on*
# attributes (what came out of the page, not what we meant), its scripts, links, ids,
# embeds, and whether a payload ran.
STATE_JS = """() => ({
  handlers: Array.from(document.querySelectorAll('*')).flatMap(el =>
    Array.from(el.attributes).filter(a => a.name.toLowerCase().startsWith('on'))
      .map(a => el.tagName + '[' + a.name + ']')),
  scripts: Array.from(document.scripts).map(s => s.getAttribute('src') || '<inline>'),
  links: Array.from(document.querySelectorAll('a[href], link[href], script[src]'))
    .map(e => e.getAttribute('href') || e.getAttribute('src')),
  ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
  pwned: typeof window.__pwned,
  embeds: document.querySelectorAll('iframe, img').length,
})"""
AXE_JS = """async () => await axe.run(document,
  {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa']}, resultTypes: ['violations']})"""


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the browser tests (make install-browser)")
    pytest.skip(reason)


def launch() -> Iterator[Any]:
    """A headless chromium for the session."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed (pip install -e '.[dev]')")
    if not CHROMIUM.exists():
        unavailable(f"{CHROMIUM} is missing (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        yield browser
        browser.close()


def axe_source() -> str:
    if not AXE.exists():
        unavailable(f"{AXE} is missing (npm ci)")
    return AXE.read_text()


@dataclass
class PageReport:
    url: str
    status: int
    links: list[str]  # absolute URLs, fragment included
    ids: set[str]
    handlers: list[str]
    scripts: list[str]
    errors: list[str]  # console errors and uncaught exceptions (CSP violations land here)
    axe: list[dict[str, Any]] = field(default_factory=list)
    pwned: str = "undefined"  # typeof window.__pwned once loaded: a payload that ran sets it
    embeds: int = 0  # iframe and img elements (the site has none; a payload could add one)


@dataclass
class Crawl:
    base: str
    pages: dict[str, PageReport] = field(default_factory=dict)
    resources: dict[str, int] = field(default_factory=dict)  # non-HTML URL -> status
    links_checked: int = 0
    broken: list[str] = field(default_factory=list)

    def rel(self, url: str) -> str:
        return url.removeprefix(self.base)


def _visit(page: Any, url: str, axe: str | None) -> PageReport:
    response = page.goto(url)
    state = page.evaluate(STATE_JS)
    report = PageReport(
        url=url,
        status=response.status if response else 0,
        links=[urljoin(url, href) for href in state["links"]],
        ids=set(state["ids"]),
        handlers=state["handlers"],
        scripts=state["scripts"],
        errors=[],  # the crawl's listeners fill them
        pwned=state["pwned"],
        embeds=state["embeds"],
    )
    if axe is not None:
        # Evaluated through the DevTools protocol, which the page's CSP (no inline
        # scripts) does not govern; add_script_tag would be blocked by it.
        page.evaluate(f"{axe}\n;true")
        report.axe = page.evaluate(AXE_JS)["violations"]
    return report


def crawl(context: Any, base: str, axe: str | None = None) -> Crawl:
    """Visit every page reachable from index.html; fetch every other linked file; check
    every link, fragments included (an #evidence-3 link needs an element with that id).
    One tab visits them all, one after another (a tab each took 3/4 of the time)."""
    result = Crawl(base)
    queue = [urljoin(base, "index.html")]
    page = context.new_page()
    errors: list[str] = []  # the page being visited's console errors and exceptions
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    while queue:
        url = queue.pop()
        if url in result.pages:
            continue
        errors.clear()
        result.pages[url] = report = _visit(page, url, axe)
        report.errors = list(errors)
        for link in report.links:
            target = urldefrag(link).url
            if urlsplit(target).netloc != urlsplit(base).netloc:
                continue
            if target.endswith((".html", "/")):
                queue.append(target)
            elif target not in result.resources:
                result.resources[target] = context.request.get(target).status
    page.close()
    for report in result.pages.values():
        for link in report.links:
            result.links_checked += 1
            problem = _check(result, report.url, link)
            if problem:
                result.broken.append(f"{result.rel(report.url)} -> {result.rel(link)}: {problem}")
    return result


def _check(result: Crawl, source: str, link: str) -> str | None:
    target, fragment = urldefrag(link)
    if urlsplit(target).netloc != urlsplit(result.base).netloc:
        return "leaves the site"
    if target in result.pages:
        status = result.pages[target].status
        if status != 200:
            return f"HTTP {status}"
        if fragment and fragment not in result.pages[target].ids:
            return f"no element with id {fragment!r}"
        return None
    status = result.resources.get(target, 0)
    return None if status == 200 else f"HTTP {status}"


class Tags(HTMLParser):
    """Every start tag of a page with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags_of(page: Path) -> list[tuple[str, dict[str, str | None]]]:
    parser = Tags()
    parser.feed(page.read_text())
    return parser.tags

"""The manual: the README is a front door, docs/ holds one page per topic, bench/README.md
the figures, and the site renders them all (issue 38).

Links are checked twice: in the Markdown, as GitHub resolves them (every relative link
names a file that exists, every #fragment of a Markdown file one of its headings), and
in the rendered pages, as the site's crawl resolves them (every href names a page or
file of the site, every fragment an id on it)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urljoin

import pytest
from conftest import ROOT, copy_catalog

from kiln import catalog
from kiln import site as sitegen
from kiln.paths import Paths
from kiln.site import docs

MARKDOWN = sorted(docs.files())  # README.md, docs/*.md, bench/README.md


def parsed(rel: str) -> list:  # type: ignore[type-arg]
    return docs.markdown().parse((ROOT / rel).read_text(encoding="utf-8"))


# ---------------------------------------------------------------- the README


def test_the_readme_starts_with_the_two_commands_and_stays_short() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move a topic to docs/"
    assert lines[0] == "# kiln"
    first_block = readme.split("```")[1]
    assert first_block.startswith("sh\nmake demo ") and "\nmake test " in first_block
    assert "## Contents" in readme


def test_the_readme_says_tiny_llama_is_random_and_names_the_real_chat_model() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    front = readme[: readme.index("## Contents")]
    assert "tiny-llama's weights are random" in front
    assert "doit build recipe=smollm2-135m-instruct" in front
    assert 'doit run recipe=smollm2-135m-instruct chat=1 prompt="' in front
    assert (ROOT / "recipes" / "smollm2-135m-instruct.yaml").is_file()


def test_make_demo_says_so_too() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    demo = makefile[makefile.index("\ndemo:") : makefile.index("\nlint:")]
    assert "weights are random" in demo and "not language" in demo
    assert "doit build recipe=smollm2-135m-instruct" in demo
    assert "doit run recipe=smollm2-135m-instruct chat=1 prompt=" in demo


def test_the_layout_lists_docs_and_the_bench_figures() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout") :].split("```")[1]
    assert re.search(r"^docs/\s", layout, re.M), layout
    assert "bench/README.md" in layout


def test_the_readme_links_every_page_of_the_manual() -> None:
    linked = {docs.resolve(href, "README.md") for href in docs.links(parsed("README.md"))}
    files = {target for target, _ in filter(None, linked)}
    assert set(MARKDOWN) - {"README.md"} <= files


# ---------------------------------------------------------------- links, as GitHub sees them


@pytest.mark.parametrize("rel", MARKDOWN)
def test_every_relative_link_names_a_file_and_a_heading_that_exist(rel: str) -> None:
    broken = []
    for href in docs.links(parsed(rel)):
        found = docs.resolve(href, rel)
        if found is None:
            broken.append(f"{href}: leaves the repository (the site drops it; link a file)")
            continue
        target, fragment = found
        if not (ROOT / target).exists():
            broken.append(f"{href}: {target} does not exist")
        elif fragment and target.endswith(".md"):
            ids = {h[2] for h in docs.headings(parsed(target))}
            if fragment not in ids:
                broken.append(f"{href}: {target} has no heading #{fragment}")
    assert broken == []


def test_headings_get_githubs_anchors() -> None:
    assert docs.anchor("Reviewing a PR: `doit diff base=REV`") == "reviewing-a-pr-doit-diff-baserev"
    assert docs.anchor("unsupported-here on this project's machines") == (
        "unsupported-here-on-this-projects-machines"
    )
    tokens = docs.markdown().parse("# A\n\n## Same\n\n## Same\n")
    assert [h[2] for h in docs.headings(tokens)] == ["a", "same", "same-1"]


# ---------------------------------------------------------------- rendering


def render(text: str) -> str:
    pages = {"docs/x.md": "x.html", "docs/y.md": "y.html", "README.md": "index.html"}
    return str(docs.render("docs/x.md", text, pages, {"tiny-llama"}).html)


def test_raw_html_in_markdown_is_text() -> None:
    html = render(
        "# Title <script>alert(1)</script>\n\n<script>alert(2)</script>\n\n"
        "<img src=x onerror=alert(3)> and `<b>code</b>`\n"
    )
    assert "<script" not in html and "<img" not in html and "<b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html
    assert "<code>&lt;b&gt;code&lt;/b&gt;</code>" in html


def test_links_point_at_pages_of_the_site_or_are_dropped() -> None:
    html = render(
        "[other](y.md#a-b) [front](../README.md#commands) [here](#top) "
        "[evidence](../manifests/tiny-llama.json) [gone](../manifests/nope.json) "
        "[code](../kiln/site/docs.py) [off](https://example.com/) [js](javascript:alert(1)) "
        "![image](pic.png)\n"
    )
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert hrefs == ["y.html#a-b", "index.html#commands", "#top", "../recipes/tiny-llama.html"]
    for text in ("gone", "code", "off", "[js](javascript:alert(1))"):
        assert text in html  # the text stays, the link goes
    assert "<img" not in html


def test_headings_tables_and_code_are_shaped_for_the_site() -> None:
    html = render(
        "# The title\n\n## A `code` heading\n\n| a | b |\n|:-:|--:|\n| 1 | 2 |\n\n```sh\nx\n```\n"
    )
    assert '<h1 id="the-title">The title</h1>' in html
    assert '<h2 id="a-code-heading">A <code>code</code> heading</h2>' in html
    assert '<div class="table-wrap" tabindex="0">\n<table>' in html
    assert '<th class="align-center">a</th>' in html and '<td class="align-right">2</td>' in html
    assert "style=" not in html  # the pages' CSP refuses inline styles
    assert '<pre tabindex="0"><code class="language-sh">x\n</code></pre>' in html


# ---------------------------------------------------------------- the site


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(str(found["id"]))
        if tag in ("a", "link") and found.get("href"):
            self.hrefs.append(str(found["href"]))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("docs-site")
    world = copy_catalog(base)
    sitegen.build(catalog.load(catalog.Paths(world.root)), base / "site")
    return base / "site"


def read(page: Path) -> Page:
    parser = Page()
    parser.feed(page.read_text(encoding="utf-8"))
    return parser


def test_the_site_renders_every_page_of_the_manual_and_links_it_from_the_nav(site: Path) -> None:
    for rel, page in docs.files().items():
        html = (site / "docs" / page).read_text(encoding="utf-8")
        assert f"<code>{rel}</code>" in html, rel
    assert 'href="docs/index.html"' in (site / "index.html").read_text(encoding="utf-8")
    manual = read(site / "docs" / "index.html")
    assert {f"../docs/{p}" for p in docs.files().values()} <= set(manual.hrefs)  # its own nav


def test_every_link_of_the_manual_resolves_on_the_site(site: Path) -> None:
    broken = []
    for page in sorted((site / "docs").glob("*.html")):
        base = f"file://{page}"
        for href in read(page).hrefs:
            url, fragment = urldefrag(urljoin(base, href))
            assert url.startswith("file://"), f"{page.name}: {href} leaves the site"
            target = Path(url.removeprefix("file://"))
            if not target.is_file():
                broken.append(f"{page.name} -> {href}: no such file")
            elif fragment and fragment not in read(target).ids:
                broken.append(f"{page.name} -> {href}: no id {fragment!r}")
    assert broken == []


def test_the_manual_is_an_input_of_doit_site() -> None:
    inputs = set(sitegen.inputs(Paths(ROOT)))
    assert {ROOT / rel for rel in MARKDOWN} <= inputs


@pytest.mark.parametrize("rel", MARKDOWN)
def test_the_manual_uses_no_raw_html_which_the_site_would_show_as_text(rel: str) -> None:
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse((ROOT / rel).read_text("utf-8"))
    inline = [c for t in tokens for c in t.children or [] if c.type == "html_inline"]
    raw = [t.content for t in tokens if t.type == "html_block"] + [c.content for c in inline]
    assert raw == []

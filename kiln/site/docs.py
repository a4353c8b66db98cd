"""The manual on the site: README.md, docs/*.md and bench/README.md rendered as pages.

The Markdown files stay the one source (GitHub shows them as they are); the site
renders them under `docs/` so that a reader of the Models & Recipes site finds the
manual beside the catalog (issue 38). markdown-it-py's CommonMark preset with raw
HTML off, plus GitHub's tables: a `<script>` in a doc is text, and markdown-it
refuses `javascript:` links itself.

What a page changes from GitHub's rendering, and why:
- every heading gets GitHub's anchor as its id, so `docs/x.md#a-heading` works in
  both places;
- a link to another rendered file points at its page; a link to a manifest points at
  its recipe's page; any other link (a source file, a results file, another host)
  keeps its text and loses the link: the site is self-contained, and its crawl calls
  a link that leaves it broken;
- tables scroll in their own box and code blocks are focusable, as on every page of
  the site (a phone never scrolls sideways); a column's alignment is a class, since
  the pages' Content-Security-Policy refuses inline styles; images are not rendered.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kiln.paths import ROOT

if TYPE_CHECKING:  # imported where used: every doit command imports kiln.site
    from markdown_it import MarkdownIt
    from markdown_it.token import Token
    from markupsafe import Markup

FOLDER = "docs"  # where the pages live in the site
INDEX = "README.md"  # the front door is the manual's first page


def files(root: Path = ROOT) -> dict[str, str]:
    """Each rendered Markdown file (relative to `root`) -> its page name in FOLDER."""
    pages = {INDEX: "index.html"}
    pages.update({f"docs/{p.name}": f"{p.stem}.html" for p in sorted((root / "docs").glob("*.md"))})
    if (root / "bench" / "README.md").is_file():
        pages["bench/README.md"] = "bench.html"
    return pages


def sources(root: Path = ROOT) -> list[Path]:
    """The files the manual's pages read: part of `doit site`'s file_dep."""
    return [root / rel for rel in files(root) if (root / rel).is_file()]


@dataclass(frozen=True)
class Doc:
    source: str  # relative to the root, e.g. "docs/replay.md"
    page: str  # file name in FOLDER, e.g. "replay.html"
    title: str  # the first heading's text
    html: Markup  # the body, rendered with every text escaped

    @property
    def url(self) -> str:
        return f"{FOLDER}/{self.page}"


def anchor(text: str) -> str:
    """GitHub's id for a heading: lowercase, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def markdown() -> MarkdownIt:
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table").disable("image")
    md.add_render_rule("table_open", _table_open)
    md.add_render_rule("table_close", _table_close)
    md.add_render_rule("fence", _focusable("fence"))
    md.add_render_rule("code_block", _focusable("code_block"))
    return md


def _table_open(self: Any, tokens: list[Token], idx: int, options: Any, env: Any) -> str:
    return '<div class="table-wrap" tabindex="0">\n<table>\n'


def _table_close(self: Any, tokens: list[Token], idx: int, options: Any, env: Any) -> str:
    return "</table>\n</div>\n"


def _focusable(name: str) -> Any:
    """A code block is a box that scrolls sideways: keyboard users must reach it."""

    def rule(self: Any, tokens: list[Token], idx: int, options: Any, env: Any) -> str:
        from markdown_it.renderer import RendererHTML

        html: str = getattr(RendererHTML, name)(self, tokens, idx, options, env)
        return html.replace("<pre>", '<pre tabindex="0">', 1)

    return rule


def text_of(token: Token) -> str:
    """What an inline token reads as: its text and code, without the markup."""
    parts = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append(" ")
    return "".join(parts)


def headings(tokens: list[Token]) -> list[tuple[int, str, str]]:
    """(level, text, id) of every heading, ids made unique the way GitHub does."""
    seen: dict[str, int] = {}
    out = []
    for i, tok in enumerate(tokens):
        if tok.type != "heading_open":
            continue
        text = text_of(tokens[i + 1])
        base = anchor(text)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.append((int(tok.tag[1:]), text, base if n == 0 else f"{base}-{n}"))
    return out


def links(tokens: list[Token]) -> list[str]:
    """Every link target of a parsed file, in order."""
    return [
        str(child.attrs["href"])
        for tok in tokens
        for child in tok.children or []
        if child.type == "link_open"
    ]


def resolve(href: str, source: str) -> tuple[str, str] | None:
    """A relative link of `source` as (file relative to the root, fragment); None for a
    link to another host, or one that climbs out of the root."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc:
        return None
    if not parts.path:
        return source, parts.fragment
    target = posixpath.normpath(posixpath.join(posixpath.dirname(source), parts.path))
    if target == ".." or target.startswith("../"):
        return None
    return target, parts.fragment


def _site_href(href: str, source: str, pages: dict[str, str], recipes: set[str]) -> str | None:
    """Where a link of `source` points on the site (relative to FOLDER), or None."""
    found = resolve(href, source)
    if found is None:
        return None
    target, fragment = found
    tail = f"#{fragment}" if fragment else ""
    if target in pages:
        return f"{pages[target]}{tail}" if target != source else (tail or pages[target])
    folder, name = posixpath.split(target)
    stem, suffix = posixpath.splitext(name)
    if folder == "manifests" and suffix == ".json" and stem in recipes:
        return f"../recipes/{stem}.html"
    return None


def _prepare(tokens: list[Token], source: str, pages: dict[str, str], recipes: set[str]) -> None:
    """Ids on headings, links pointed at the site or dropped, alignment as a class."""
    ids = iter(h[2] for h in headings(tokens))
    for tok in tokens:
        if tok.type == "heading_open":
            tok.attrSet("id", next(ids))
        elif tok.type in ("th_open", "td_open") and "style" in tok.attrs:
            align = str(tok.attrs.pop("style")).removeprefix("text-align:")
            tok.attrSet("class", f"align-{align}")
        kept, dropping = [], False
        for child in tok.children or []:
            if child.type == "link_open":
                href = _site_href(str(child.attrs["href"]), source, pages, recipes)
                dropping = href is None
                if href is None:
                    continue
                child.attrSet("href", href)
            elif child.type == "link_close" and dropping:
                dropping = False
                continue
            kept.append(child)
        if tok.children is not None:
            tok.children = kept


def render(source: str, text: str, pages: dict[str, str], recipes: set[str]) -> Doc:
    """One file as a page; `pages` maps every rendered file to its page (links follow)."""
    from markupsafe import Markup

    md = markdown()
    tokens = md.parse(text)
    _prepare(tokens, source, pages, recipes)
    title = next((t for level, t, _ in headings(tokens) if level == 1), source)
    html = Markup(md.renderer.render(tokens, md.options, {}))  # escaped by markdown-it
    return Doc(source, pages[source], title, html)


def load(recipes: set[str], root: Path = ROOT) -> list[Doc]:
    """Every page of the manual, the README first; `recipes` are those the site has."""
    pages = files(root)
    return [
        render(rel, (root / rel).read_text(encoding="utf-8"), pages, recipes)
        for rel in pages
        if (root / rel).is_file()
    ]

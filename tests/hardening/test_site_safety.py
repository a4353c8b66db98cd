"""Nothing executable comes from data: HTML and script payloads injected into every
string a recipe, its thresholds and its manifest can carry are shown as text.

The payloads are injected into every string field the schema accepts them in (a
field with a pattern or an enum refuses them, which is its own protection), the site
is rendered, and every page is loaded in chromium with the page's CSP bypassed, so
that escaping alone has to hold: no payload runs, no element or attribute the clean
site lacks appears, no on* attribute, no script but the site's own.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from browser import crawl, launch, tags_of
from conftest import copy_catalog
from pydantic import BaseModel, ValidationError

from kiln import catalog, schema
from kiln import site as sitegen
from kiln.site.serve import serving

PAYLOAD = (
    '<script>window.__pwned="script {n}"</script>'
    "<img src=x onerror=\"window.__pwned='img {n}'\">"
    '"><svg onload="window.__pwned=\'svg {n}\'"></svg>'
    "'><iframe srcdoc=\"<script>parent.__pwned='iframe {n}'</script>\"></iframe>"
    '<a href="javascript:window.__pwned=1">x{n}</a>{{{{ 7*7 }}}}'
)
Path_ = tuple[str | int, ...]


def strings(data: Any, path: Path_ = ()) -> Iterator[Path_]:
    if isinstance(data, str):
        yield path
    elif isinstance(data, dict):
        for k, v in data.items():
            yield from strings(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from strings(v, (*path, i))


def put(data: Any, path: Path_, value: Any) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def inject(data: dict[str, Any], model: type[BaseModel]) -> list[str]:
    """Put a payload into every string of `data` that `model` accepts one in, and into
    every optional top-level field it does not set yet (tags, owners, limitations...
    as the schema grows). Returns the paths injected."""
    done = []
    valid: Callable[[], bool] = lambda: _valid(model, data)  # noqa: E731
    for path in list(strings(data)):
        old = _get(data, path)
        put(data, path, PAYLOAD.format(n=len(done)))
        if valid():
            done.append(".".join(map(str, path)))
        else:
            put(data, path, old)
    for name in set(model.model_fields) - set(data):
        for candidate in ([PAYLOAD.format(n=len(done))], PAYLOAD.format(n=len(done))):
            data[name] = candidate
            if valid():
                done.append(name)
                break
            del data[name]
    return done


def _get(data: Any, path: Path_) -> Any:
    for part in path:
        data = data[part]
    return data


def _valid(model: type[BaseModel], data: dict[str, Any]) -> bool:
    try:
        model.model_validate(data)
    except ValidationError:
        return False
    return True


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A clean site and the same site with payloads everywhere they fit."""
    base = tmp_path_factory.mktemp("safety")
    world = copy_catalog(base)
    clean = base / "clean"
    sitegen.build(catalog.load(catalog.Paths(world.root)), clean)
    injected: dict[str, list[str]] = {}
    for folder, suffix, model in (
        ("recipes", ".yaml", schema.Recipe),
        ("thresholds", ".yaml", schema.Thresholds),
        ("manifests", ".json", schema.Manifest),
    ):
        for path in sorted((world.root / folder).glob(f"*{suffix}")):
            text = path.read_text()
            data = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
            injected[f"{folder}/{path.name}"] = inject(data, model)
            dump = json.dumps(data) if suffix == ".json" else yaml.safe_dump(data)
            path.write_text(dump)
    evil = base / "evil"
    sitegen.build(catalog.load(catalog.Paths(world.root)), evil)
    return {"clean": clean, "evil": evil, "injected": injected}


def test_payloads_reach_every_free_text_field(sites: dict[str, Any]) -> None:
    injected = sites["injected"]
    assert "description" in injected["recipes/tiny-llama.yaml"]
    assert "description" in injected["thresholds/fp32-exact.yaml"]
    assert "lock.model.architecture" in injected["manifests/tiny-llama.json"]
    assert "evidence.0.host.cpu" in injected["manifests/tiny-llama.json"]
    assert "evidence.0.answers.0.prompt" in injected["manifests/tiny-llava.json"]
    page = (sites["evil"] / "recipes" / "tiny-llama.html").read_text()
    assert "&lt;script&gt;window.__pwned" in page  # shown, as text


def test_data_adds_no_element_or_attribute_the_clean_site_lacks(sites: dict[str, Any]) -> None:
    clean: Path = sites["clean"]
    evil: Path = sites["evil"]

    def vocabulary(site: Path) -> tuple[set[str], set[str]]:
        tags = [t for page in site.rglob("*.html") for t in tags_of(page)]
        return {t for t, _ in tags}, {a for _, attrs in tags for a in attrs}

    clean_tags, clean_attrs = vocabulary(clean)
    evil_tags, evil_attrs = vocabulary(evil)
    assert evil_tags <= clean_tags, evil_tags - clean_tags
    assert evil_attrs <= clean_attrs, evil_attrs - clean_attrs
    assert not {a for a in evil_attrs if a.startswith("on")}
    for page in evil.rglob("*.html"):
        for tag, attrs in tags_of(page):
            assert tag != "script" or str(attrs.get("src")).endswith("static/filter.js"), page
            for name in ("href", "src"):
                assert not str(attrs.get(name, "")).strip().lower().startswith("javascript:")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch()


def test_no_payload_runs_in_the_browser(browser: Any, sites: dict[str, Any]) -> None:
    # CSP bypassed: the page's policy would block inline scripts anyway, and the
    # point is to prove that escaping alone keeps them out.
    context = browser.new_context(bypass_csp=True)
    dialogs: list[str] = []
    context.on("page", lambda p: p.on("dialog", lambda d: dialogs.append(d.message)))
    clean: Path = sites["clean"]
    # the clean site's own images: a vision-language recipe's validation images (issue 40)
    own = {
        page.relative_to(clean).as_posix(): sum(t in ("img", "iframe") for t, _ in tags_of(page))
        for page in clean.rglob("*.html")
    }
    assert own["recipes/tiny-llava.html"] > 0 and own["recipes/tiny-llama.html"] == 0
    with serving(sites["evil"]) as base:
        result = crawl(context, base)  # every page loaded, its state read once loaded
        for url, report in result.pages.items():
            assert report.pwned == "undefined", url
            assert report.embeds == own.get(result.rel(url), 0), url
        page = context.new_page()
        page.goto(base + "index.html")
        page.fill("#f-q", "<script>")  # the search box matches the payload, as text
        assert page.locator("#catalog tbody tr:not([hidden])").count() >= 1
        assert page.evaluate("typeof window.__pwned") == "undefined"
        page.goto(base + "recipes/tiny-llama.html")
        assert "<script>window.__pwned" in page.inner_text("main")
    assert len(result.pages) > 10 and result.broken == []
    assert all(r.handlers == [] for r in result.pages.values())
    assert all(s.endswith("static/filter.js") for r in result.pages.values() for s in r.scripts)
    assert dialogs == []
    context.close()


def test_the_payload_catalog_is_still_valid(sites: dict[str, Any]) -> None:
    """The injected catalog loaded without problems: the payloads went through the
    schema, the way a reviewer-approved recipe would, not around it."""
    root = Path(sites["evil"]).parent / "catalog"
    cat = catalog.load(catalog.Paths(root))
    every = {p.stem for p in (root / "recipes").glob("*.yaml")}
    assert cat.problems == {} and set(cat.recipes) == every

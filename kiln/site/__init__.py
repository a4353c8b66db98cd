"""Recipes + manifests -> the static Models & Recipes site.

jinja2 with autoescape on and StrictUndefined: data is always escaped, and a
template that names a missing value fails the build instead of printing nothing.
The site shows only what manifests prove (kiln/site/view.py says how).

The site is rendered into a temp dir next to the output and swapped in, so pages of
deleted recipes disappear and a reader (`doit serve`) never sees half a site.
Pages carry no inline script or style and no event-handler attribute: one static
script enhances the index, and a Content-Security-Policy says so.

  __init__.py  build(): render every page into a temp dir, then swap it in
  view.py      what a page shows of a recipe and its manifest (only what evidence proves)
  matrix.py    the support matrix (architecture x precision x host class) and its grid machinery
  features.py  the runtime-features pages (architecture x feature x host class, per backend)
  api.py       the JSON API next to the pages
  plot.py      the metric sparklines
  images.py    a vision-language recipe's validation images, questions and answers
  coverage.py  the coverage table (architectures x verdict) in docs/coverage.md
  docs.py      the manual: README.md, docs/*.md and bench/README.md as pages under docs/
  serve.py     `doit serve`: a local preview server
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kiln import __version__, proc
from kiln.canonical import dumps
from kiln.catalog import Catalog
from kiln.errors import KilnError
from kiln.evidence.gates import bound
from kiln.evidence.manifest import scope as scope_of
from kiln.hostinfo import host_class
from kiln.paths import ROOT, Paths
from kiln.schema import METRICS, Evidence
from kiln.schema.recipe import family
from kiln.schema.thresholds import FAMILIES
from kiln.site import api
from kiln.site import docs as sitedocs
from kiln.site import features as sitefeatures
from kiln.site import images as siteimages
from kiln.site import plot as siteplot
from kiln.site import view as siteview
from kiln.site.features import LABELS, feature_grid
from kiln.site.features import rows as feature_rows
from kiln.site.matrix import Grid, Matrix, View, filters, matrix, views
from kiln.site.matrix import inputs as architecture_inputs

SITE = ROOT / "site"
TEMPLATES = SITE / "templates"
STATIC = SITE / "static"
SCHEMAS = ROOT / "schema"
API_SCHEMA = SCHEMAS / "site-api.schema.json"
# Copied next to the API so the API schema's relative $refs resolve on the site too.
API_SCHEMA_FILES = ("site-api", "recipe", "thresholds", "manifest")
MARKER = ".kiln-site"  # a folder we may replace holds this file
PageSpec = tuple[str, str, dict[str, Any]]


def sources() -> list[Path]:
    """Every file rendering reads besides the catalog's data: doit's file_dep for `site`."""
    here = Path(__file__).parent  # this package renders: every module of it counts
    code = [*here.glob("*.py"), *(here.parent / "schema").glob("*.py")]
    files = [*TEMPLATES.rglob("*"), *STATIC.rglob("*")]
    files += [SCHEMAS / f"{n}.schema.json" for n in API_SCHEMA_FILES]
    files += sitedocs.sources()  # the manual's pages
    return sorted(p for p in [*code, *files] if p.is_file())


def inputs(paths: Paths) -> list[Path]:
    """What `doit site` reads: the catalog's files (found by name, not loaded),
    `sources()`, and the code step keys hash (the planner, builders/, runtime/):
    the site badges what `doit check` calls stale, which they decide. doit's
    file_dep, so an unchanged site is not rendered again. A library upgrade alone
    is not seen here (it re-keys steps, which `doit check` sees): `doit site -a`."""
    keyed = [*(ROOT / "kiln" / "plan").rglob("*.py")]
    for folder in ("builders", "runtime"):
        keyed += [p for p in (ROOT / folder).rglob("*") if "__pycache__" not in p.parts]
    data = [
        *keyed,
        *paths.recipes.glob("*.yaml"),
        *paths.thresholds.glob("*.yaml"),
        *paths.prompts.glob("*.yaml"),
        *paths.manifests.glob("*.json"),
    ]
    return sorted({p for p in data if p.is_file()} | set(sources()))


def command() -> None:
    """`doit site`: the catalog of KILN_ROOT rendered into KILN_SITE."""
    from kiln.catalog import load

    paths = Paths.from_env()
    catalog = load(paths)
    if catalog.problems:  # a page never goes missing silently: fix the catalog first
        raise KilnError(catalog.all_problems())
    build(catalog, paths.site)


@dataclass(frozen=True)
class Made:
    """What made the site: kiln's version, the git commit of its code, and when."""

    version: str
    commit: str  # 12 hex digits, "+" when the work tree has uncommitted changes; or "unknown"
    date: str  # UTC, ISO 8601 to the second

    @staticmethod
    def now() -> Made:
        epoch = os.environ.get("SOURCE_DATE_EPOCH")  # reproducible builds pin the date
        when = datetime.fromtimestamp(int(epoch), UTC) if epoch else datetime.now(UTC)
        return Made(__version__, _commit(), when.isoformat(timespec="seconds"))


def _commit() -> str:
    try:
        head = proc.git_lines(ROOT, ["rev-parse", "--short=12", "HEAD"])
        dirty = (
            proc.run(
                ["git", "-C", str(ROOT), "diff", "--quiet", "HEAD"],
                ["kiln", "site", "schema"],
                timeout=30,
            ).returncode
            != 0
        )
    except (proc.Refused, OSError, proc.TimeoutExpired):
        return "unknown"
    return head[0] + ("+" if dirty else "") if head else "unknown"


@dataclass(frozen=True)
class Site:
    entries: list[siteview.Entry]
    facets: dict[str, list[siteview.FacetValue]]
    models: list[siteview.Group]
    architectures: list[siteview.Group]
    matrix: Matrix
    views: list[View]
    features: Grid  # the API's: a column group per feature and backend
    feature_views: list[sitefeatures.View]  # the pages': every backend, then each alone
    docs: list[sitedocs.Doc]
    made: Made
    inputs: dict[str, str]  # architecture -> the input its recipes take (a matrix row's mark)
    asked: dict[str, siteimages.Asked]  # image-text-to-text recipes: their validation images

    @property
    def catalog(self) -> list[siteview.Entry]:
        """The recipes in the catalog's order: by evidence, passing first."""
        return siteview.by_evidence(self.entries)

    def ordered(self, items: list[siteview.Entry]) -> list[siteview.Entry]:
        return siteview.by_evidence(items)

    def view_of(
        self, variant: str, backend: str | None, modality: str | None = None
    ) -> View | None:
        key = (variant, backend, modality)
        return next((v for v in self.views if (v.variant, v.backend, v.modality) == key), None)

    def input_of(self, architecture: str) -> str:
        """What a row's architecture takes: text, image+text, audio."""
        return self.inputs.get(architecture, siteview.TEXT)

    def model_url(self, repo: str) -> str:
        return next(f"models/{g.slug}.html" for g in self.models if g.key == repo)

    def architecture_url(self, architecture: str) -> str | None:
        found = (f"architectures/{g.slug}.html" for g in self.architectures)
        keys = (g.key for g in self.architectures)
        return next((url for url, k in zip(found, keys, strict=True) if k == architecture), None)


def view(catalog: Catalog) -> Site:
    items = siteview.entries(catalog)
    slugs = siteview.Slugs()
    return Site(
        entries=items,
        facets=siteview.facet_values(items, slugs),
        models=siteview.groups(items, "repo", slugs),
        architectures=siteview.groups(items, "architecture", slugs),
        matrix=matrix(items),
        views=views(items),
        features=feature_grid(items),
        feature_views=sitefeatures.views(items),
        docs=sitedocs.load({e.name for e in items}),
        made=Made.now(),
        inputs=architecture_inputs(items),
        asked={e.name: a for e in items if (a := siteimages.asked(e, catalog))},
    )


def _when(date: str) -> str:
    try:
        return datetime.fromisoformat(date).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return date


# Before a capitalised word (after a lower-case letter or digit, or after an acronym
# that follows one: "NemotronH|For") and after a hyphen; never inside an acronym, so
# "CausalLM" stays whole (issue 44: "AfmoeForCausal / LM" read as a broken word).
_WORD_BREAK = re.compile(r"(?<=[a-z0-9])(?=[A-Z][a-z])|(?<=[a-z0-9][A-Z])(?=[A-Z][a-z])|(?<=-)")


def _breakable(name: str) -> Any:
    """A name that may wrap only between its words ("Afmoe<wbr>For<wbr>CausalLM",
    "unsupported-<wbr>here"), escaped: the matrix's columns stay narrow."""
    from markupsafe import Markup, escape

    return Markup("<wbr>").join(escape(p) for p in _WORD_BREAK.split(name))


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
    env.filters["when"] = _when
    env.filters["slug"] = siteview.slug
    env.filters["scope_of"] = scope_of
    env.filters["breakable"] = _breakable
    env.globals.update(
        FACETS=siteview.FACETS,
        METRICS=METRICS,
        NAV=NAV,
        SCOPES=SCOPES,
        filters=filters,
        stale_of=api.stale_reason,
        scope_of=scope_of,
        zip=zip,
    )
    return env


SCOPES = {
    "ci": "a registered CI job",
    "nightly": "the nightly replay",
    "local": "a person's build",
}


@dataclass(frozen=True)
class Records:
    """Consecutive evidence records that say the same thing, shown as one row."""

    indexes: list[int]  # newest first
    record: Evidence  # the newest

    @property
    def first(self) -> int:
        return self.indexes[0]

    @property
    def older(self) -> list[int]:
        return self.indexes[1:]

    def dates(self, history: list[Evidence]) -> tuple[str, str]:
        return history[self.indexes[-1]].date, history[self.indexes[0]].date


def _same(ev: Evidence) -> str:
    """What makes two records identical on the page: all but the date and the keys."""
    data = ev.model_dump(mode="json", exclude={"date", "step_key", "thresholds", "durations"})
    data["host"] = host_class(ev.host).key
    return str(dumps(data))


def collapsed(history: list[Evidence]) -> list[Records]:
    """The evidence newest first, identical consecutive records in one row."""
    out: list[Records] = []
    for i in reversed(range(len(history))):
        if out and _same(history[i]) == _same(out[-1].record):
            out[-1].indexes.append(i)
        else:
            out.append(Records([i], history[i]))
    return out


def gate_rows(e: siteview.Entry) -> list[dict[str, Any]]:
    """Each gate with its statistics (whatever the Gate model carries beyond the bound)
    and what the latest evidence measured against it."""
    measured = {g.metric: g for g in e.latest.gates} if e.latest else {}
    kind = family(e.recipe.model.pin)
    rows = []
    for gate in e.thresholds.gates:
        data = gate.model_dump(mode="json")
        skip = ("metric", "direction", "threshold", "why", "why_by_family")
        stats = {k: v for k, v in data.items() if k not in skip and v is not None}
        result = measured.get(gate.metric)
        b = bound(gate, e.thresholds)  # a statistical gate's threshold is derived
        derived = f" (z-test; α {b.alpha:.3g}, θ {b.theta:.3g})" if b.theta is not None else ""
        rows.append(
            {
                "metric": gate.metric,
                "meaning": METRICS.get(gate.metric, ""),
                "rule": f"{'≥' if gate.direction == 'higher' else '≤'} {b.threshold:.6g}{derived}",
                "stats": stats,
                "why": gate.why,
                # a rationale of this recipe's model family only (issue 44: a real
                # model's page never explains its gate with the tiny models)
                "family_why": gate.why_by_family.get(kind, ""),
                "family": FAMILIES[kind],
                "value": result.value if result else None,
                "passed": result.passed if result else None,
            }
        )
    return rows


def _headline_label(e: siteview.Entry) -> str | None:
    """The plot label ("#3") of the record that decides the verdict."""
    return next((f"#{i}" for i, ev in enumerate(e.history) if ev is e.latest), None)


def _recipe_page(site: Site, e: siteview.Entry) -> dict[str, Any]:
    return {
        "e": e,
        "asked": site.asked.get(e.name),
        "random_weights": family(e.recipe.model.pin) == "tiny",
        "gates": gate_rows(e),
        "plots": siteplot.plots(siteplot.runs(e.history, e.past), _headline_label(e)),
        "plot_size": (siteplot.WIDTH, siteplot.HEIGHT),
        "records": collapsed(e.history),
        "limitations": e.strings("known_limitations"),
        "tags": e.strings("tags"),
        "owners": e.strings("owners"),
    }


def pages(site: Site) -> Iterator[PageSpec]:
    """(path, template, context) of every page."""
    yield "index.html", "index.html", {"entries": site.catalog, "selected": None}
    for facet, values in site.facets.items():
        for fv in values:
            chosen = [e for e in site.catalog if e.facets[facet] == fv.value]
            yield fv.url(facet), "index.html", {"entries": chosen, "selected": (facet, fv)}
    for v in site.views:
        yield v.url, "matrix.html", {"view": v}
    for features in site.feature_views:
        yield features.url, "features.html", {"view": features}
    yield "models/index.html", "groups.html", {"kind": "models", "groups": site.models}
    for g in site.models:
        yield f"models/{g.slug}.html", "model.html", {"g": g}
    groups = {"kind": "architectures", "groups": site.architectures}
    yield "architectures/index.html", "groups.html", groups
    for g in site.architectures:
        yield f"architectures/{g.slug}.html", "architecture.html", {"g": g}
    for e in site.entries:
        yield e.url, "recipe.html", _recipe_page(site, e)
    yield "api/index.html", "api.html", {}
    for d in site.docs:
        yield d.url, "doc.html", {"doc": d}


def _json(site: Site) -> Iterator[tuple[str, Any]]:
    yield "api/recipes.json", api.recipes(site.entries)
    for e in site.entries:
        yield f"api/recipes/{e.name}.json", api.detail(e)
    yield "api/matrix.json", api.matrix(site.matrix)
    rows = feature_rows(site.features)
    features_api = {"api_version": api.API_VERSION, "features": list(LABELS.values())}
    yield "api/features.json", {**features_api, "rows": rows}


NAV = {
    "index.html": "Catalog",
    "matrix.html": "Support matrix",
    "features.html": "Runtime features",
    "models/index.html": "Models",
    "architectures/index.html": "Architectures",
    "api/index.html": "JSON API",
    "docs/index.html": "Manual",
}


def _section(rel: str) -> str:
    """The nav entry a page belongs to: matrix/*.html to the matrix, features/*.html to
    the features; recipe and browse pages belong to the catalog."""
    top = rel.split("/")[0].removesuffix(".html")
    return next((h for h in NAV if h.split("/")[0].removesuffix(".html") == top), "index.html")


def render(site: Site, out: Path) -> list[Path]:
    """Write every page, the API and the static files into `out` (an empty folder)."""
    env = _environment()
    written = []
    for rel, template, context in pages(site):
        root = "../" * rel.count("/")
        page = {"root": root, "here": rel, "section": _section(rel), "site": site}
        html = env.get_template(template).render(**page, **context)
        written.append(_write(out / rel, html.encode()))
    for rel, data in _json(site):
        _write(out / rel, dumps(data) + b"\n")  # compact: 1,000 recipes are 30 MB indented
    (out / "api" / "schema").mkdir(parents=True)
    for name in (f"{n}.schema.json" for n in API_SCHEMA_FILES):
        shutil.copyfile(SCHEMAS / name, out / "api" / "schema" / name)
    shutil.copytree(STATIC, out / "static")
    siteimages.copy(list(site.asked.values()), out)
    (out / MARKER).write_text("rendered by kiln; `doit site` replaces this folder\n")
    return written


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _publish(tmp: Path, out: Path) -> None:
    """Swap the freshly rendered folder in for the old one."""
    ours = (out / MARKER).exists() or (out / "index.html").exists()  # or rendered before markers
    if out.exists() and any(out.iterdir()) and not ours:
        raise KilnError.one(
            f"{out} exists and is not a site kiln rendered; refusing to replace it",
            None,
            "point KILN_SITE at an empty or a kiln-rendered folder",
        )
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.exists():
        os.replace(out, old)
    os.replace(tmp, out)
    if old.exists():
        shutil.rmtree(old)


def build(catalog: Catalog, out: Path) -> list[Path]:
    """Render the whole site into `out`; returns the HTML pages written (under `out`)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.new-"))
    try:
        site = view(catalog)
        written = render(site, tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it 0700; a served site must be readable
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    print(f"   site: {len(written)} pages, {len(catalog.recipes)} recipes -> {out}")
    _warn_unreadable(site.entries)
    return [out / p.relative_to(tmp) for p in written]


def _warn_unreadable(entries: list[siteview.Entry]) -> None:
    """Name every manifest the site could not read (issue 37: it was shown as "not
    built", without a word). The site still renders: one bad manifest hides no other
    recipe, and `doit check` fails on it."""
    bad = [e for e in entries if e.unreadable]
    if not bad:
        return
    print(
        f"   site: {len(bad)} manifest{'s' if len(bad) != 1 else ''} could not be read; "
        "their recipes' pages say 'manifest unreadable':",
        file=sys.stderr,
    )
    for e in bad:
        print(f"     {e.unreadable}", file=sys.stderr)

"""`doit site` never hides an unreadable manifest (issue 37): a manifest that is not JSON,
fails the schema or belongs to another recipe was rendered as "not built" without a
word. Now stderr names each file and why, and every page that shows the recipe's
evidence state says "manifest unreadable" (the recipe page with the reason); the site
still renders, exit 0, since `doit check` is what fails on it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from conftest import ROOT, World, copy_catalog
from markupsafe import escape
from site_api import api_validator

from kiln import catalog
from kiln.site import coverage

BROKEN_JSON = "manifests/tiny-llama.json:1:3: invalid JSON: Expecting property name"
BAD_VERDICT = "manifests/tiny-qwen3.json: evidence -> 0 -> verdict: '<b>great</b>' is not"
OTHERS = "manifests/tiny-mistral.json: it is the manifest of recipe 'tiny-llama', not"


def _broken(tmp_path: Path) -> World:
    """The repository's catalog with three manifests broken three ways."""
    world = copy_catalog(tmp_path)
    manifests = world.root / "manifests"
    shutil.copy(manifests / "tiny-llama.json", manifests / "tiny-mistral.json")
    (manifests / "tiny-llama.json").write_text("{ not json")
    data = json.loads((manifests / "tiny-qwen3.json").read_text())
    data["evidence"][0]["verdict"] = "<b>great</b>"  # the reason quotes it: escaped
    (manifests / "tiny-qwen3.json").write_text(json.dumps(data))
    return world


def _badges(html: str, name: str) -> list[str]:
    """The verdict badges next to the links to `name`'s page."""
    link = re.escape(f'recipes/{name}.html"')
    return re.findall(link + r'.*?class="verdict v-[a-z-]+"[^>]*>([^<]+)<', html, re.S)[:1]


def test_doit_site_names_each_unreadable_manifest_and_the_pages_say_so(tmp_path: Path) -> None:
    world = _broken(tmp_path)
    proc = world.doit("site")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "site: 3 manifests could not be read" in proc.stderr
    for says in (BROKEN_JSON, BAD_VERDICT, OTHERS):
        assert says in proc.stderr, proc.stderr
    site = world.root / "_site"
    for name, says in (("tiny-llama", BROKEN_JSON), ("tiny-qwen3", BAD_VERDICT), ("tiny-mistral", OTHERS)):  # fmt: skip
        page = (site / "recipes" / f"{name}.html").read_text()
        assert f"<strong>Manifest unreadable:</strong> {escape(says)}" in page, name
        assert 'class="verdict v-manifest-unreadable">manifest unreadable<' in page
        assert "no evidence is recorded" not in page and ">not built<" not in page
        assert "<b>great" not in page
    index = (site / "index.html").read_text()
    assert _badges(index, "tiny-llama") == ["manifest unreadable"]
    assert _badges(index, "tiny-qwen3-sdpa") != ["manifest unreadable"]  # its own manifest reads
    assert 'data-verdict="manifest unreadable"' in index  # the verdict filter has the value
    for page in ("matrix.html", "architectures/index.html"):  # where the unplaced are listed
        html = (site / page).read_text()
        assert _badges(html, "tiny-llama") == ["manifest unreadable"], page
        assert escape(BROKEN_JSON) in html, page


def test_the_api_stays_valid_and_says_not_built_with_no_evidence(tmp_path: Path) -> None:
    """The API's Verdict has no "manifest unreadable": there the recipe proves nothing,
    as it always said, and its host and scope facets say why."""
    world = _broken(tmp_path)
    world.doit("site", check=True)
    listing = json.loads((world.root / "_site" / "api" / "recipes.json").read_text())
    api_validator("RecipeList").validate(listing)
    llama = next(r for r in listing["recipes"] if r["name"] == "tiny-llama")
    assert (llama["verdict"], llama["evidence"], llama["facets"]["verdict"]) == (
        "not built",
        None,
        "not built",
    )
    assert llama["facets"]["host"] == "manifest unreadable"


def test_doit_check_fails_on_what_the_site_shows_as_unreadable(tmp_path: Path) -> None:
    world = _broken(tmp_path)
    proc = world.doit("check")
    assert proc.returncode == 1
    assert "manifests/tiny-llama.json:1:3: invalid JSON" in proc.stdout + proc.stderr


def test_the_coverage_table_says_unreadable_not_not_built(tmp_path: Path) -> None:
    world = _broken(tmp_path)
    (world.root / "catalog").mkdir()
    shutil.copy(ROOT / "catalog" / "architectures.yaml", world.root / "catalog")
    table = coverage.rows(catalog.load(catalog.Paths(world.root)))
    cells = {c.recipe: c for r in table for c in (r.tiny, *r.real) if c is not None}
    llama = cells["tiny-llama"]
    assert (llama.verdict, llama.evidence) == ("manifest unreadable", "manifests/tiny-llama.json")
    assert llama.reason.startswith(BROKEN_JSON)

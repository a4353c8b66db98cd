"""Reading the site's JSON API in tests: its schema's validators, and the evidence
record a page link points at."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import referencing
from conftest import ROOT


def api_validator(name: str) -> jsonschema.Draft202012Validator:
    """A validator for one $def of schema/site-api.schema.json, resolving its $refs to
    kiln's other schemas the way a script reading the published site would."""
    registry: referencing.Registry = referencing.Registry()
    for path in (ROOT / "schema").glob("*.schema.json"):
        resource = referencing.Resource.from_contents(json.loads(path.read_text()))
        registry = registry.with_resource(path.name, resource)
    schema = {"$ref": f"site-api.schema.json#/$defs/{name}"}
    return jsonschema.Draft202012Validator(schema, registry=registry)


def record_at(site: Path, url: str) -> dict[str, object]:
    """The evidence record an 'recipes/<name>.html#evidence-<i>' link points at."""
    page, anchor = url.split("#")
    name = Path(page).stem
    detail = json.loads((site / "api" / "recipes" / f"{name}.json").read_text())
    found = [h["record"] for h in detail["history"] if h["url"] == url]
    assert len(found) == 1, f"{url} names no evidence record"
    assert (site / page).read_text().count(f'id="{anchor}"') == 1
    return found[0]  # type: ignore[no-any-return]

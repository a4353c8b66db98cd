"""The site's JSON API: the same facts as the HTML, for scripts.

    api/recipes.json            every recipe: checkpoint, facets, verdict, evidence link
    api/recipes/<name>.json     one recipe: the recipe as loaded, gates, lock, evidence
    api/matrix.json             the support matrix, cell by cell

Documented by schema/site-api.schema.json (copied to api/schema/ with the schemas it
references); a test validates every emitted file against it. URLs are relative to
the site root. Nothing here varies between two builds of the same inputs (no build
time), so an unchanged catalog gives identical files.
"""

from __future__ import annotations

from typing import Any

from kiln.site.matrix import Matrix
from kiln.site.view import Entry

API_VERSION = 1


def summary(e: Entry) -> dict[str, Any]:
    return {
        "name": e.name,
        "description": e.recipe.description,
        "url": e.url,
        "api": f"api/recipes/{e.name}.json",
        "checkpoint": {**e.recipe.model.pin, "described": e.recipe.model.described},
        "architecture": e.architecture,
        "facets": dict(e.facets),
        "verdict": e.verdict,
        "evidence": e.evidence_url,
        "evidence_count": len(e.history),
        "latest_date": e.latest.date if e.latest else None,
        "stale": e.stale,
    }


def recipes(items: list[Entry]) -> dict[str, Any]:
    return {"api_version": API_VERSION, "recipes": [summary(e) for e in items]}


def detail(e: Entry) -> dict[str, Any]:
    return {
        "api_version": API_VERSION,
        **summary(e),
        "recipe": e.recipe.model_dump(mode="json"),
        "thresholds": {
            "name": e.recipe.validation.thresholds,
            "content": e.thresholds.model_dump(mode="json"),
        },
        "lock": e.manifest.lock.model_dump(mode="json") if e.manifest else None,
        "history": [
            {"url": f"{e.url}#evidence-{i}", "record": ev.model_dump(mode="json")}
            for i, ev in enumerate(e.history)
        ],
    }


def matrix(m: Matrix) -> dict[str, Any]:
    return {
        "api_version": API_VERSION,
        "columns": [{"precision": p, "variant": v, "backend": b} for p, v, b in m.columns],
        "rows": [
            {
                "architecture": row.architecture,
                "cells": [
                    {
                        "verdict": c.verdict,
                        "evidence": c.href,
                        "recipes": [e.name for e in c.entries],
                    }
                    for c in row.cells
                ],
            }
            for row in m.rows
        ],
        "not_built": [e.name for e in m.unplaced],
    }

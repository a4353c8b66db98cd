"""The site's JSON API: the same facts as the HTML, for scripts.

    api/recipes.json            every recipe: checkpoint, facets, verdict, evidence link
    api/recipes/<name>.json     one recipe: the recipe as loaded, gates, lock, evidence
    api/matrix.json             the support matrix, cell by cell, each cell per host class

Documented by schema/site-api.schema.json (copied to api/schema/ with the schemas it
references); a test validates every emitted file against it. URLs are relative to
the site root. Nothing here varies between two builds of the same inputs (no build
time), so an unchanged catalog gives identical files.
"""

from __future__ import annotations

from typing import Any

from kiln.hostinfo import HostClass
from kiln.site.matrix import Cell, Matrix
from kiln.site.view import Entry

API_VERSION = 1


def host(h: HostClass | None) -> dict[str, str] | None:
    return {"key": h.key, "label": h.label, "kind": h.kind} if h else None


def stale_reason(e: Entry) -> dict[str, str] | None:
    """Why `doit check` calls the manifest stale, and what makes it current."""
    s = e.stale_reason
    if s is not None:
        return {"cause": s.cause, "summary": s.summary, "command": s.command, "verb": s.verb}
    if e.pin_moved:
        why = "the manifest records another checkpoint pin than the recipe declares"
        return {
            "cause": "recipe",
            "summary": why,
            "command": f"doit build recipe={e.name}",
            "verb": "rebuild",
        }
    return None


def summary(e: Entry) -> dict[str, Any]:
    return {
        "name": e.name,
        "description": e.recipe.description,
        "url": e.url,
        "api": f"api/recipes/{e.name}.json",
        "checkpoint": {**e.recipe.model.pin, "described": e.recipe.model.described},
        "architecture": e.architecture,
        # The API's Verdict has no "manifest unreadable" (schema/site-api.schema.json):
        # here such a recipe is "not built", as `evidence` null says; the pages say why.
        "facets": {**e.facets, "verdict": e.verdict},
        "verdict": e.verdict,
        "evidence": e.evidence_url,
        "evidence_count": len(e.history),
        "latest_date": e.latest.date if e.latest else None,
        "stale": e.stale,
        "stale_reason": stale_reason(e),
        "host": host(e.host),
        "scope": e.scope,
        "validated_on": [
            {"host": host(c.host), "verdict": c.verdict, "scope": c.scope, "evidence": c.href}
            for c in e.claims
        ],
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


def _cell(c: Cell) -> dict[str, Any]:
    return {
        "verdict": c.verdict,
        "label": c.label,
        "counts": c.counts,
        "evidence": c.href,
        "recipes": [e.name for e in c.entries],
        "scopes": c.scopes,
        "stale": [e.name for e in c.stale],
    }


def matrix(m: Matrix) -> dict[str, Any]:
    return {
        "api_version": API_VERSION,
        "columns": [{"precision": p, "variant": v, "backend": b} for p, v, b in m.columns],
        "hosts": [host(h) for h in m.by_host.hosts],
        "rows": [
            {
                "architecture": row.architecture,
                "cells": [
                    {
                        **_cell(c),
                        "hosts": [
                            {"host": host(h.column.host), **_cell(h)} for h in m.hosts(row.key, col)
                        ],
                    }
                    for col, c in zip(m.columns, row.cells, strict=True)
                ],
            }
            for row in m.rows
        ],
        "not_built": [e.name for e in m.unplaced],
    }

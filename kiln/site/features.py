"""The runtime-features view: architecture x runtime feature, per backend and host class.

The reference support matrix rates each architecture on runtime features. Here a
feature is "Yes" only where an evidence record proves it, and the cell links to that
record; everything else reads "untested", never a guess:

* guided decoding, logits post-processors, prefix (KV-cache) reuse, chunked prefill,
  sliding-window attention and beam search come from the `features` of the evidence
  record (the validate step ran the feature and compared it with transformers or with
  a cold run: its `check` says what; for sliding-window attention, a validated prompt
  longer than the window, whose bundle logits past it match the fp32 reference that
  the window visibly changes there);
* CUDA graph comes from the GPU engine's evidence: an inductor bundle validated on a
  CUDA device replays its decode step in a CUDA graph (runtime/inductor_lm.py
  captures it on every CUDA load), so a passing record there proves it.

A record whose feature check ran and failed makes the cell "fails". A page shows
architecture x feature for every backend, or for one (`views()`, as the support
matrix's pages do); the API keeps one column group per feature and backend. The cells reuse
the support matrix's grid (kiln/site/matrix.py): claims are the same latest records of
each recipe's current build, per host class, so a stale or superseded record proves
nothing here either.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kiln.site.matrix import Grid, Group, _architecture, grid
from kiln.site.view import Claim, Entry

# (evidence name, what the reference matrix calls it), in the reference matrix's order
FEATURES = (
    ("cuda_graph", "CUDA graph"),
    ("chunked_prefill", "Chunked prefill"),
    ("prefix_reuse", "KV-cache reuse"),
    ("sliding_window", "Sliding-window attention"),
    ("logits_processors", "Logits post-processor"),
    ("guided_decoding", "Guided decoding"),
    ("beam_search", "Beam search (encoder-decoder)"),
    ("determinism", "Same greedy tokens in every process"),
)
LABELS = dict(FEATURES)
CUDA_GRAPH_CHECK = (
    "the inductor bundle's decode step ran as a CUDA graph replay on this GPU (the runtime "
    "captures it on every CUDA load) and the record's gates passed"
)


@dataclass(frozen=True)
class Proof:
    proved: bool
    check: str
    metrics: dict[str, float]


@dataclass(frozen=True)
class FeatureClaim(Claim):
    """A record's claim about one feature: pass where it proved it, quality-fail where
    the feature's check ran and failed."""

    feature: str = ""
    proof: Proof | None = None

    @property
    def verdict(self) -> str:
        return "pass" if self.proof is not None and self.proof.proved else "quality-fail"


def proofs(claim: Claim) -> dict[str, Proof]:
    """The features one claim's record proves (or tried and failed)."""
    record = claim.record
    found: dict[str, Proof] = {}
    for name, p in (getattr(record, "features", None) or {}).items():
        found[name] = Proof(bool(p.proved), str(p.check), dict(p.metrics))
    backend = record.backend or {}
    on_cuda = backend.get("name") == "inductor" and backend.get("device") == "cuda"
    if on_cuda and record.verdict == "pass":
        found["cuda_graph"] = Proof(True, CUDA_GRAPH_CHECK, {})
    return found


def backend_of(e: Entry) -> str:
    return str(e.recipe.build.backend)


def feature_claims(items: list[Entry]) -> Iterator[tuple[Entry, FeatureClaim]]:
    """Each recipe's claims about each runtime feature its records speak of."""
    for e in items:
        for c in e.claims:
            for name, proof in proofs(c).items():
                if name in LABELS:
                    yield e, FeatureClaim(c.entry, c.index, c.record, c.host, name, proof)


def feature_grid(items: list[Entry]) -> Grid:
    """Architecture x (feature, backend): one column per host class with evidence (the API's)."""
    found = list(feature_claims(items))
    backends = sorted({backend_of(e) for e, _ in found})
    placed = [(_architecture(e), (LABELS[fc.feature], backend_of(e)), fc) for e, fc in found]
    groups: list[Group] = [(label, b) for _, label in FEATURES for b in backends]
    if not backends:
        groups = [(label,) for _, label in FEATURES]
    return grid("runtime feature × backend", groups, placed)


def support(items: list[Entry], backend: str | None = None) -> Grid:
    """Architecture x feature for one backend or every backend, one column per host class:
    a page's grid. Every backend in one group per feature made 26 columns, 1,476 px wide
    at 1366 (issue 44); a cell of every backend is decided as the matrix's cells are."""
    placed: list[tuple[str, Group, Claim]] = [
        (_architecture(e), (LABELS[fc.feature],), fc)
        for e, fc in feature_claims(items)
        if backend is None or backend_of(e) == backend
    ]
    return grid("runtime feature", [(label,) for _, label in FEATURES], placed)


@dataclass(frozen=True)
class View:
    """One page of the runtime features: every backend, or one."""

    backend: str | None
    grid: Grid

    @property
    def url(self) -> str:
        return "features.html" if self.backend is None else f"features/{self.backend}.html"


def views(items: list[Entry]) -> list[View]:
    """Every backend together first; each backend alone where more than one has evidence."""
    backends = sorted({backend_of(e) for e, _ in feature_claims(items)})
    alone = [View(b, support(items, b)) for b in backends] if len(backends) > 1 else []
    return [View(None, support(items)), *alone]


def rows(g: Grid) -> list[dict[str, Any]]:
    """The API's form: per architecture, each (feature, backend, host) with evidence."""
    out = []
    for row in g.rows:
        cells = []
        for c in row.cells:
            if not c.claims:
                continue
            by = c.decided_by
            proof = by.proof if isinstance(by, FeatureClaim) else None
            cells.append(
                {
                    "feature": c.column.group[0],
                    "backend": c.column.group[1] if len(c.column.group) > 1 else None,
                    "host": c.column.host.label if c.column.host else None,
                    "verdict": "yes" if c.verdict == "pass" else "fails",
                    "evidence": c.href,
                    "check": proof.check if proof else None,
                    "metrics": proof.metrics if proof else {},
                    "recipes": [e.name for e in c.entries],
                }
            )
        out.append({"architecture": row.key, "cells": cells})
    return out

"""`doit diff base=REV [format=markdown|json]`: what a PR changes, for its review.

The comparison is kiln/commands/diffing.py's (what each field below means); this
prints it as Markdown (a PR comment) or as one JSON document (a bot), and fails
when the change adds problems.

Exit status: 0 when nothing new is wrong (whatever changed), 1 when the working tree
has problems the base did not (`error: ... new problems` on stderr with
format=json), and 1 with an `error:` line and no report when the diff cannot run
(an unknown revision, a bad variable).

format=json prints:

    {"base": "origin/main",
     "summary": {"added": 0, "changed": 1, "removed": 0, "invalid": 0, "buildable": 78},
     "recipes": [{
        "name": "tiny-llama-draft",
        "status": "changed",       # added | added (invalid) | changed | changed (now invalid)
                                   # | changed (now valid) | changed (still invalid) | removed
        "fields": [{"path": "execution.max_draft_len", "old": 4, "new": 3,
                    "old_yaml": "4", "new_yaml": "3"}],     # old/new null: not set
        "steps": [{"kind": "bundle", "role": "model", "name": "bundle tiny-llama-draft",
                   "key": "<64 hex>", "reasons": ["options.speculative.max_draft_len: 4 -> 3"],
                   "shared_with": null}],  # a base recipe that already plans this key
        "total_steps": 11,
        "stale_evidence": [{"manifest": "manifests/tiny-llama-draft.json", "verdict": "pass",
                            "host": "cpu", "device": "AMD EPYC", "date": "2026-12-01T...",
                            "already_stale": false}],
        "matrix": {"gains": [], "loses": [{"cell": {"architecture": "LlamaForCausalLM",
                   "precision": "fp32", "variant": "draft", "backend": "onnxruntime"},
                   "recipe": "tiny-llama-draft", "evidence": "pass"}]},
        "problems": []}],          # the recipe's errors now, as in new_problems
     "new_problems": [{"file": "recipes/x.yaml", "line": 3, "column": 5,
                       "key_path": ["build", "backend"], "cause": "...", "fix": "...",
                       "text": "<rendered as doit check prints it>"}]}

A gained cell's "evidence" is "planned" until the recipe is measured there.
"""

from __future__ import annotations

import json
import re
import textwrap
from typing import Any

from kiln.commands import diffing
from kiln.errors import KilnError, Problem
from kiln.evidence import review
from kiln.paths import Paths

WIDTH = 100  # Markdown source lines are wrapped here; rendered, they join again


def diff(base: str | None, format: str = "markdown") -> None:
    if not base:
        raise KilnError.one("no base revision", None, "doit diff base=origin/main")
    root = Paths.from_env().root
    report = diffing.compare(base, root, root)
    if format == "json":
        print(json.dumps(as_json(report), indent=2, ensure_ascii=False))
    else:
        print(markdown(report), end="")
    if report.new_problems:
        n = len(report.new_problems)
        where = "new_problems" if format == "json" else "listed above"
        raise KilnError.one(
            f"the change adds {n} new problem{'s' * (n != 1)} ({where})",
            None,
            f"fix {'them' if n != 1 else 'it'}: `doit check` shows the same",
        )


# ---------------------------------------------------------------- Markdown


def code(text: str) -> str:
    """`text` as one inline code span, whatever backticks it holds."""
    run = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (run + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def plain(text: str) -> str:
    """Text from a data file (a host name, a date) that Markdown shows as written."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"([\\`*_\[\]|#~!])", r"\\\1", text)


def block(text: str) -> str:
    """`text` as a fenced block, whatever fences it holds."""
    run = max((len(m) for m in re.findall(r"^`{3,}", text, flags=re.M)), default=2)
    fence = "`" * (run + 1)
    return f"{fence}\n{text}\n{fence}"


def wrap(text: str, indent: str = "  ") -> str:
    """One logical line wrapped at WIDTH (between words, never inside one)."""
    return textwrap.fill(
        text,
        WIDTH,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def field_lines(changes: list[review.Change]) -> list[str]:
    """`path: old -> new`; a change too long for a line shows old and new wrapped."""
    out = []
    for c in changes:
        line = str(c)
        if len(line) <= WIDTH:
            out.append(line)
            continue
        out.append(f"{c.path}:")
        for label, value in (("old", c.old), ("new", c.new)):
            out.append(wrap(f"  {label}: {review.shown(value)}", indent=" " * 7))
    return out


def _unchanged_file(r: diffing.RecipeChange) -> str:
    source = f"the recipe it extends (`{r.extends}`)" if r.extends else "the files its steps read"
    return wrap(f"`recipes/{r.name}.yaml` itself is unchanged: this comes from {source}.")


def _step_lines(r: diffing.RecipeChange) -> list[str]:
    if r.status.startswith("added"):
        built = [b.step.kind for b in r.steps]
        return [
            f"Builds {', '.join(built) or 'nothing new'}"
            f" ({r.total_steps - len(built)} of {r.total_steps} steps already exist)."
        ]
    if not r.steps:
        return ["Rebuilds nothing."]
    out = [f"Rebuilds {len(r.steps)} of {r.total_steps} steps:", ""]
    for b in r.steps:
        why = "; ".join(code(reason) for reason in b.reasons)
        shared = f" (the same step as in `{b.shared_with}`)" if b.shared_with else ""
        s = b.step
        out.append(wrap(f"- {s.kind} ({s.role}) `{s.key[:12]}`{shared}: {why}"))
    return out


def _evidence_lines(r: diffing.RecipeChange) -> list[str]:
    out = []
    if r.stale_evidence:
        out += ["", "Evidence that stops counting:", ""]
        for e in r.stale_evidence:
            again = " (its lock was already stale at base)" if e.already_stale else ""
            fix = (
                f"; rebuild with `doit build recipe={r.name}`"
                if not r.invalid and r.status != "removed"
                else ""
            )
            out.append(
                wrap(
                    f"- `{e.manifest}`: {e.record.verdict} on {e.host} ({plain(e.device)}), "
                    f"{plain(e.record.date)}{again}{fix}"
                )
            )
    if r.gains or r.loses:
        out += ["", "Support matrix:", ""]
        for verb, entries in (("loses", r.loses), ("gains", r.gains)):
            for c in entries:
                what = "a planned entry" if c.evidence == "planned" else f"its {c.evidence}"
                out.append(wrap(f"- {code(str(c.cell))} {verb} {what} ({c.recipe})"))
    return out


def _problem_lines(problems: list[Problem]) -> list[str]:
    return [block(p.render()) for p in problems]


def markdown(report: diffing.Report) -> str:
    """The report as a PR comment."""
    counts = report.summary
    lines = [f"## kiln diff: {code(report.base)} → working tree", ""]
    lines.append(
        f"**{counts['added']} added, {counts['changed']} changed, {counts['removed']} removed, "
        f"{counts['invalid']} invalid** (of {report.buildable} buildable recipes)."
    )
    for r in report.recipes:
        lines += ["", f"### {r.status.capitalize()}: `{r.name}`"]
        if not r.file_changed:
            lines += ["", _unchanged_file(r)]
        if r.fields:
            lines += ["", "Fields:", "", block("\n".join(field_lines(r.fields)))]
        if r.total_steps:
            lines += ["", *_step_lines(r)]
        if r.problems:
            lines += ["", "Errors:", "", *_problem_lines(r.problems)]
        lines += _evidence_lines(r)
    n = len(report.new_problems)
    lines += ["", f"### New problems: {n}", ""]
    shown = {diffing.problem_id(p) for r in report.recipes for p in r.problems}
    rest = [p for p in report.new_problems if diffing.problem_id(p) not in shown]
    if n > len(rest):
        lines += [
            f"{n - len(rest)} shown with {'its' if n - len(rest) == 1 else 'their'} recipe above."
        ]
    lines += _problem_lines(rest) or ([] if n else ["None."])
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- JSON


def as_json(report: diffing.Report) -> dict[str, Any]:
    """The report as one JSON document (the shape in this module's docstring)."""
    return {
        "base": report.base,
        "summary": {**report.summary, "buildable": report.buildable},
        "recipes": [_recipe_json(r) for r in report.recipes],
        "new_problems": [problem_json(p) for p in report.new_problems],
    }


def problem_json(p: Problem) -> dict[str, Any]:
    where = p.location
    return {
        "file": where.file if where else None,
        "line": where.line if where else None,
        "column": where.column if where else None,
        "key_path": list(where.key_path) if where else [],
        "cause": p.cause,
        "fix": p.fix,
        "text": p.render(),
    }


def _value(value: Any) -> Any:
    return None if value is review.UNSET else value


def _cell_json(entry: diffing.CellEntry) -> dict[str, Any]:
    return {"cell": entry.cell._asdict(), "recipe": entry.recipe, "evidence": entry.evidence}


def _recipe_json(r: diffing.RecipeChange) -> dict[str, Any]:
    return {
        "name": r.name,
        "status": r.status,
        "file_changed": r.file_changed,
        "fields": [
            {
                "path": c.path,
                "old": _value(c.old),
                "new": _value(c.new),
                "old_yaml": review.shown(c.old),
                "new_yaml": review.shown(c.new),
            }
            for c in r.fields
        ],
        "steps": [
            {
                "kind": b.step.kind,
                "role": b.step.role,
                "name": b.step.name,
                "key": b.step.key,
                "reasons": b.reasons,
                "shared_with": b.shared_with,
            }
            for b in r.steps
        ],
        "total_steps": r.total_steps,
        "stale_evidence": [
            {
                "manifest": e.manifest,
                "verdict": e.record.verdict,
                "host": e.host,
                "device": e.device,
                "date": e.record.date,
                "already_stale": e.already_stale,
            }
            for e in r.stale_evidence
        ],
        "matrix": {
            "gains": [_cell_json(c) for c in r.gains],
            "loses": [_cell_json(c) for c in r.loses],
        },
        "problems": [problem_json(p) for p in r.problems],
    }

"""The replay report: Markdown for people, JUnit XML for any CI, JSON for tools.

JUnit mapping: one <testcase> per recipe; a regression is a <failure>, an
infrastructure failure an <error>, a recipe that cannot run here is <skipped> with
the reason. Findings that are not failures (fixes, moves the better way, slower
steps) go to the test case's <system-out>.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from kiln.canonical import pretty
from kiln.replay.compare import Outcome, as_dict, exit_code
from kiln.store import atomic_write

EXIT_MEANING = {0: "all good", 1: "regressions", 2: "infrastructure failure"}


def _section(title: str, lines: list[str]) -> list[str]:
    return [f"### {title}", "", *(lines or ["none"]), ""]


def markdown(outcomes: list[Outcome], header: dict[str, str]) -> str:
    code = exit_code(outcomes)
    lines = [f"## kiln replay: {EXIT_MEANING[code]} (exit {code})", ""]
    lines += [f"- {k}: {v}" for k, v in header.items()] + [""]
    lines += ["| recipe | verdict | previous | change | attempt | time | host class |"]
    lines += ["|---|---|---|---|---|---|---|"]
    for o in outcomes:
        prev = o.previous.verdict if o.previous else "(none)"
        flag = " ⚠" if o.regression or o.infra else ""
        lines.append(
            f"| {o.recipe}{flag} | {o.verdict} | {prev} | {o.change or '-'} | "
            f"{o.attempt or '-'} | {o.seconds:.1f} s | {o.host_class or '-'} |"
        )
    lines.append("")
    lines += _section(
        "Verdict changes",
        [f"- {o.recipe}: {o.verdict_change}" for o in outcomes if o.verdict_change],
    )
    lines += _section(
        "New failures",
        [f"- {o.recipe}: {o.verdict}: {o.reason}" for o in outcomes if o.change == "new failure"],
    )
    lines += _section("Fixes", [f"- {o.recipe}" for o in outcomes if o.change == "fix"])
    lines += _section(
        "Metric moves beyond θ", [f"- {o.recipe}: {m}" for o in outcomes for m in o.moves]
    )
    lines += _section("Slower steps", [f"- {o.recipe}: {s}" for o in outcomes for s in o.slower])
    lines += _section(
        "Could not run here",
        [f"- {o.recipe}: {o.verdict}: {o.reason}" for o in outcomes if o.unsupported or o.infra],
    )
    return "\n".join(lines)


def _details(o: Outcome) -> str:
    parts = [f"verdict {o.verdict}" + (f" ({o.reason})" if o.reason else "")]
    if o.verdict_change:
        parts.append(f"verdict change {o.verdict_change}")
    parts += [f"moved: {m}" for m in o.moves] + [f"slower: {s}" for s in o.slower]
    if o.change == "fix":
        parts.append("fixed")
    return "\n".join(parts)


def junit(outcomes: list[Outcome], timestamp: str, hostname: str) -> bytes:
    counts = {
        "tests": str(len(outcomes)),
        "failures": str(sum(o.regression and not o.infra for o in outcomes)),
        "errors": str(sum(o.infra for o in outcomes)),
        "skipped": str(sum(o.unsupported for o in outcomes)),
        "time": f"{sum(o.seconds for o in outcomes):.3f}",
    }
    suites = ET.Element("testsuites", {"name": "kiln replay", **counts})
    suite = ET.SubElement(
        suites,
        "testsuite",
        {"name": "kiln replay", "timestamp": timestamp, "hostname": hostname, **counts},
    )
    for o in outcomes:
        case = ET.SubElement(
            suite,
            "testcase",
            {"classname": "kiln.replay", "name": o.recipe, "time": f"{o.seconds:.3f}"},
        )
        if o.infra:
            ET.SubElement(
                case, "error", {"type": "infrastructure", "message": o.reason}
            ).text = _details(o)
        elif o.regression:
            message = o.reason if o.change == "new failure" else "; ".join(o.worse)
            ET.SubElement(
                case, "failure", {"type": "regression", "message": message}
            ).text = _details(o)
        elif o.unsupported:
            ET.SubElement(case, "skipped", {"message": f"unsupported-here: {o.reason}"})
        ET.SubElement(case, "system-out").text = _details(o)
    ET.indent(suites)
    data: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return data + b"\n"


def write(folder: Path, outcomes: list[Outcome], header: dict[str, str], hostname: str) -> Path:
    """report.md, junit.xml and replay.json in `folder`; returns the Markdown path."""
    md = markdown(outcomes, header)
    atomic_write(folder / "report.md", md.encode())
    atomic_write(folder / "junit.xml", junit(outcomes, header.get("started", ""), hostname))
    data = {"exit": exit_code(outcomes), **header, "recipes": [as_dict(o) for o in outcomes]}
    atomic_write(folder / "replay.json", pretty(data))
    return folder / "report.md"

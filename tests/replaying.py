"""Helpers for replay tests: a private copy of a built world, and reading its reports."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from conftest import World


def copy_world(src: World, base: Path) -> World:
    """A private copy of a built world: its catalog, manifests and store."""
    shutil.copytree(src.root, base / "catalog", ignore=shutil.ignore_patterns(".kiln", "_site"))
    shutil.copytree(src.store, base / "store", symlinks=True)
    return World(root=base / "catalog", hub=src.hub, store=base / "store")


def report(world: World) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((world.root / ".kiln/replay/replay.json").read_text())
    return data


def recipes(world: World) -> dict[str, dict[str, Any]]:
    return {r["recipe"]: r for r in report(world)["recipes"]}


def junit(world: World) -> ET.Element:
    root = ET.parse(world.root / ".kiln/replay/junit.xml").getroot()
    assert root.tag == "testsuites"
    (suite,) = root
    assert suite.tag == "testsuite"
    cases = suite.findall("testcase")
    for attr, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
        assert int(suite.get(attr, "-1")) == sum(len(c.findall(tag)) for c in cases), attr
        assert root.get(attr) == suite.get(attr)
    assert int(suite.get("tests", "-1")) == len(cases)
    for case in cases:
        assert case.get("classname") and case.get("name") and float(case.get("time", "x")) >= 0
    return suite


def outcome(suite: ET.Element, recipe: str) -> str:
    case = next(c for c in suite.findall("testcase") if c.get("name") == recipe)
    kinds = [child.tag for child in case if child.tag != "system-out"]
    return kinds[0] if kinds else "passed"

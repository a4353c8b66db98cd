"""The core stays light: checking, planning and listing never import heavy libraries,
and the runtime never imports builders."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import BANNED, ROOT


def imported_modules(*args: str) -> set[str]:
    """Every module Python imports while running `args` (via -X importtime)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    assert names, "importtime printed nothing; the test would prove nothing"
    return names


def heavy_in(names: set[str]) -> set[str]:
    return {n for n in names if n.split(".")[0] in BANNED}


def test_importing_the_core_imports_nothing_heavy() -> None:
    names = imported_modules(
        "-c",
        "import kiln, kiln.catalog, kiln.plan, kiln.store, kiln.evidence.manifest, kiln.evidence.gates, "
        "kiln.site, kiln.site.serve, kiln.catalog.yaml, kiln.schema, kiln.commands.schema, tasks, dodo, "
        "kiln.replay.driver, kiln.replay.chain, kiln.replay.step, kiln.replay.ray_executor",
    )
    assert "kiln.plan" in names and "tasks" in names and "kiln.replay.ray_executor" in names
    assert heavy_in(names) == set()
    # Ray is imported by the Ray executor's run() only, never by importing kiln.
    assert {n for n in names if n.split(".")[0] == "ray"} == set()


def test_doit_list_and_check_import_nothing_heavy() -> None:
    for command in ("list", "check"):
        names = imported_modules("-m", "doit", command)
        assert "kiln.catalog" in names
        assert heavy_in(names) == set(), command


def test_doit_plan_imports_nothing_heavy() -> None:
    names = imported_modules("-m", "doit", "plan", "recipe=tiny-llama")
    assert "kiln.plan" in names
    assert heavy_in(names) == set()


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_runtime_never_imports_builders() -> None:
    files = sorted((ROOT / "runtime").rglob("*.py"))
    assert files
    for path in files:
        bad = {m for m in _imports(path) if m.split(".")[0] in ("builders", "kiln", "tasks")}
        assert bad == set(), f"{path} imports {bad}"


def test_core_never_imports_heavy_modules_anywhere_in_source() -> None:
    """Not even inside functions: the core delegates to builders and runtime."""
    for path in sorted((ROOT / "kiln").rglob("*.py")):
        heavy = {m for m in _imports(path) if m.split(".")[0] in BANNED}
        assert heavy == set(), f"{path} imports {heavy}"

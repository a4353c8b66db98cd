"""Hostile recipes (issue 7): every one fails in under 1 s and 200 MB, with a
file:line error and no traceback, both in the loader and through `doit check`.

The small cases are committed in tests/hostile/; the big ones (10 MB, 10,000 deep,
tens of thousands of keys or aliases) and the ones git cannot hold (a FIFO, a
symlink to /dev/zero) are made here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, make_world

CORPUS = ROOT / "tests" / "hostile"
GOOD = (ROOT / "recipes" / "tiny-llama.yaml").read_text()
PWNED = Path("/tmp/kiln-pwned")  # what the python-object cases would create


def generated(folder: Path) -> list[Path]:
    cases = {
        "gen-deep-flow-sequence": "x: " + "[" * 10_000 + "]" * 10_000 + "\n",
        "gen-deep-flow-mapping": "x: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n",
        "gen-deep-block-sequence": "x:\n" + "- " * 10_000 + "1\n",
        # 10,000 levels of block indentation would be 100 MB; this is the deepest under 1 MB
        "gen-deep-block-mapping": "".join(" " * i + f"k{i}:\n" for i in range(1400)) + "v: 1\n",
        "gen-10mb": GOOD.replace("description: >-", "description: >-\n  " + "lorem " * 1_800_000),
        "gen-just-over-limit": GOOD + "#" * ((1 << 20) - len(GOOD)) + "\n",
        "gen-60k-unknown-keys": GOOD.replace(
            "build:\n", "build:\n" + "".join(f"  k{i}: {i}\n" for i in range(60_000))
        ),
        "gen-80k-aliases": "a: &a x\n" + "".join(f"k{i}: *a\n" for i in range(80_000)),
        "gen-1mb-line": GOOD.replace("description: >-", "description: " + "a" * 1_000_000 + "\nx:"),
        "gen-50k-documents": "---\na: 1\n" * 50_000,
    }
    paths = []
    for name, text in cases.items():
        path = folder / f"{name}.yaml"
        path.write_text(text)
        paths.append(path)
    links = {"gen-symlink-dev-zero": "/dev/zero", "gen-symlink-out": "/etc/passwd"}
    for name, target in links.items():
        (folder / f"{name}.yaml").symlink_to(target)
        paths.append(folder / f"{name}.yaml")
    os.mkfifo(folder / "gen-fifo.yaml")
    paths.append(folder / "gen-fifo.yaml")
    return paths


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("hostile")
    committed = sorted(CORPUS.glob("*.yaml"))
    for path in committed:
        (folder / path.name).write_bytes(path.read_bytes())
    return [folder / p.name for p in committed] + generated(folder)


def test_the_corpus_covers_what_the_issue_lists(corpus: list[Path]) -> None:
    names = {p.stem for p in corpus}
    assert len(names) >= 40
    for must in (
        "python-object-apply",
        "billion-laughs",
        "gen-deep-flow-sequence",
        "gen-10mb",
        "duplicate-top-key",
        "bool-yes-repo",
        "bool-off-revision",
        "conflict-markers",
        "nul-byte",
        "invalid-utf8",
        "utf8-bom",
    ):
        assert must in names, must
    assert (CORPUS.parent / "hostile").is_dir()
    assert max(p.stat().st_size for p in corpus if p.is_file()) > 10_000_000


def test_every_hostile_recipe_fails_fast_small_and_located(corpus: list[Path]) -> None:
    PWNED.unlink(missing_ok=True)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "hostile_probe.py"), *map(str, corpus)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(corpus)
    slow, fat, bad = [], [], []
    for r in results:
        first = r["message"].splitlines()[0] if r["message"] else ""
        if r["outcome"] != "error" or not re.match(rf"recipes/{re.escape(r['file'])}:\d+", first):
            bad.append((r["file"], r["outcome"], r["message"][:300]))
        if r["seconds"] >= 1.0:
            slow.append((r["file"], r["seconds"]))
        if r["rss_mb"] >= 200:
            fat.append((r["file"], r["rss_mb"]))
    print(
        f"\nhostile: {len(results)} cases, max {max(r['seconds'] for r in results):.3f} s, "
        f"max {max(r['rss_mb'] for r in results):.0f} MB RSS"
    )
    assert bad == [] and slow == [] and fat == []
    assert not PWNED.exists()


def test_doit_check_reports_every_hostile_recipe_with_its_line(
    tmp_path: Path, corpus: list[Path]
) -> None:
    world = make_world(tmp_path, tmp_path / "no-hub", ("tiny-llama",))
    for path in corpus:
        target = world.root / "recipes" / path.name
        if path.is_symlink():
            target.symlink_to(os.readlink(path))
        elif path.is_fifo():
            os.mkfifo(target)
        else:
            target.write_bytes(path.read_bytes())
    proc = world.doit("check")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "Traceback" not in out
    missing = [p.name for p in corpus if not re.search(rf"recipes/{re.escape(p.name)}:\d+", out)]
    assert missing == []
    assert "recipes/tiny-llama.yaml" not in out  # the good recipe next to them still loads

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
from conftest import ROOT, SLOW, make_world

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
        # issue 14: the deepest that fit under the event scan's 2 KB (libyaml's own
        # 1,000-level cap, then 33 levels of mappings), each from the guard that counts levels
        "gen-short-block-sequence": "x:\n" + "- " * 1020 + "a\n",
        "gen-short-block-mapping": "".join(" " * i + f"k{i}:\n" for i in range(33)) + "v: 1\n",
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
        "nested-block-sequences",  # issue 14: under 2 KB, no bracket: no event scan
        "nested-block-mappings",
        "nested-block-mixed",
        "gen-short-block-sequence",
        "gen-short-block-mapping",
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
        timeout=SLOW,
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
        # A blow-up guard, not a speed test: the child's own CPU time (no load makes a
        # case slow), 200 times what the slowest case takes (0.05 s); a parse that
        # blows up (billion laughs, deep nesting) runs for minutes.
        if r["cpu_seconds"] >= 10.0:
            slow.append((r["file"], r["cpu_seconds"]))
        if r["rss_mb"] >= 200:
            fat.append((r["file"], r["rss_mb"]))
    print(
        f"\nhostile: {len(results)} cases, max {max(r['cpu_seconds'] for r in results):.3f} s CPU, "
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


# ---------------------------------------------------------------- manifests (issue 14)

MANIFEST_CASES = {
    # name -> the line its error must point at
    "deep-arrays": 1,  # json.loads: RecursionError
    "deep-objects": 1,
    "nested-40": 2,  # parses, but deeper than the cap
    "fifo": 1,  # check and verify waited forever
    "dev-zero": 1,  # read until memory ran out
}


def hostile_manifests(folder: Path) -> None:
    (folder / "deep-arrays.json").write_text("[" * 100_000 + "]" * 100_000)
    (folder / "deep-objects.json").write_text('{"a": ' * 50_000 + "1" + "}" * 50_000)
    (folder / "nested-40.json").write_text(
        '{"schema_version": 1,\n "lock": ' + "[" * 40 + "]" * 40 + "}\n"
    )
    os.mkfifo(folder / "fifo.json")
    (folder / "dev-zero.json").symlink_to("/dev/zero")


def test_hostile_manifests_give_located_errors_never_a_hang(tmp_path: Path) -> None:
    """The guarded JSON reader, in-process: each case is a KilnError naming the file
    and line. Run in a child with a timeout, so a FIFO that blocks fails the test
    instead of hanging it."""
    folder = tmp_path / "manifests"
    folder.mkdir()
    hostile_manifests(folder)
    probe = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from kiln.errors import KilnError\n"
        "from kiln.evidence import manifest\n"
        "for name in sys.argv[1:]:\n"
        "    path = Path(sys.argv[0]).parent / 'manifests' / f'{name}.json'\n"
        "    try:\n"
        "        manifest.read(path, f'manifests/{name}.json')\n"
        "        print(json.dumps([name, 'loaded']))\n"
        "    except KilnError as exc:\n"
        "        print(json.dumps([name, str(exc)]))\n"
    )
    script = tmp_path / "probe.py"
    script.write_text(probe)
    proc = subprocess.run(
        [sys.executable, str(script), *MANIFEST_CASES],
        capture_output=True,
        text=True,
        timeout=SLOW,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    got = dict(json.loads(line) for line in proc.stdout.splitlines())
    for name, line in MANIFEST_CASES.items():
        assert re.match(rf"manifests/{name}\.json:{line}\b", got[name]), (name, got[name])
    assert "nesting depth over 32 levels" in got["deep-arrays"]
    assert "nesting depth over 32 levels" in got["nested-40"]
    assert "is not a regular file" in got["fifo"]
    assert "symbolic link" in got["dev-zero"]


@pytest.mark.parametrize("command", [("check",), ("verify",), ("plan", "recipe=tiny-llama")])
def test_doit_reports_hostile_manifests_without_a_traceback_or_a_hang(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    world = make_world(tmp_path, tmp_path / "no-hub", ("tiny-llama",))
    hostile_manifests(world.root / "manifests")
    # plan reads the manifest of the recipe it plans: make that one hostile too
    (world.root / "manifests" / "tiny-llama.json").write_text("[" * 100_000 + "]" * 100_000)
    proc = subprocess.run(
        world.argv(*command), env=world.env, capture_output=True, text=True, timeout=SLOW
    )
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "RecursionError" not in out, out[-3000:]
    if command[0] == "plan":  # a manifest that does not parse is one to rebuild
        assert proc.returncode == 0 and "will run" in out
        return
    assert proc.returncode != 0
    for name, line in {**MANIFEST_CASES, "tiny-llama": 1}.items():
        assert re.search(rf"manifests/{name}\.json:{line}\b", out), (name, out[-3000:])

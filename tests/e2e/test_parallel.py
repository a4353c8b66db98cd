"""`doit -n 2` with doit's process runner and the standard pickle (issue 13, item 7).

doit pickles a task created at execution time (every `build:*` step, `site`) to send
it to a worker process, with cloudpickle when it can import it. cloudpickle arrives
with Ray (the replay extra), so without it every `-n` used to abort before building
anything. Here it is made unimportable: a `cloudpickle` module that raises
ImportError comes first on PYTHONPATH, and doit falls back to pickle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from conftest import ROOT, SLOW, World, copy_catalog, heavy, make_world

BLOCKER = 'raise ImportError("cloudpickle is made unimportable by tests/e2e/test_parallel.py")\n'


def without_cloudpickle(world: World, tmp_path: Path) -> dict[str, str]:
    """The world's environment, with cloudpickle unimportable in doit and its workers."""
    blocker = tmp_path / "no-cloudpickle"
    blocker.mkdir()
    (blocker / "cloudpickle.py").write_text(BLOCKER)
    path = [str(blocker), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**world.env, "PYTHONPATH": os.pathsep.join(path)}
    probe = subprocess.run(
        [sys.executable, "-c", "import doit.runner as r; print(r.pickle_dumps.__module__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() in ("pickle", "_pickle"), probe.stdout  # doit fell back
    return env


def doit(world: World, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "doit", "-f", str(ROOT / "dodo.py"), "-d", str(world.root), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=SLOW,
    )


def test_a_parallel_site_pickles_without_cloudpickle(tmp_path: Path) -> None:
    """`site` is created when it runs, so the process runner pickles all of it."""
    world = copy_catalog(tmp_path)
    env = without_cloudpickle(world, tmp_path)
    proc = doit(world, env, "-n", "2", "-P", "process", "site", "check")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "can not be pickled" not in out and "Traceback" not in out
    assert (world.root / "_site" / "index.html").is_file()


@heavy
def test_doit_n_2_builds_independent_recipes_each_step_once(tmp_path: Path, hub: Path) -> None:
    world = make_world(tmp_path, hub, ("tiny-llama", "tiny-qwen3"))
    data = world.recipe("tiny-llama")
    data["build"]["max_batch_size"] = 2  # shares fetch, reference, export and onnx
    world.write_recipe("tiny-llama-b2", data)
    names = ("tiny-llama", "tiny-llama-b2", "tiny-qwen3")
    env = without_cloudpickle(world, tmp_path)

    proc = doit(world, env, "-n", "2", "build")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "can not be pickled" not in out and "Traceback" not in out

    keys: Counter[str] = Counter()
    for name in names:
        m = world.manifest(name)
        assert m["evidence"][-1]["verdict"] == "pass", (name, m["evidence"][-1])
        keys.update({s["key"] for s in m["lock"]["steps"]})
    shared = {k for k, n in keys.items() if n > 1}
    assert len(shared) == 4  # fetch, reference, export and onnx of tiny-llama
    journal = [json.loads(line) for line in (world.store / "log" / "builds.jsonl").open()]
    runs = Counter(entry["key"] for entry in journal)
    assert runs == Counter(set(keys)), runs  # every step built once, shared ones too
    assert len({entry["pid"] for entry in journal}) == 2  # by both worker processes

    again = doit(world, env, "-n", "2", "build")
    assert again.returncode == 0, again.stdout + again.stderr
    assert (world.store / "log" / "builds.jsonl").read_text().count("\n") == len(journal)
    assert world.doit("verify").returncode == 0

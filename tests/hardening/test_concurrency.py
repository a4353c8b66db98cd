"""Four `doit build` processes on one store at once (issue 7): each step runs exactly
once, the others wait on its lock, say whom they wait for, and reuse the result.

Executions are counted twice, from real traces: the store's build journal (one line
per artifact built, appended under the key's lock) and the builders' own
"done in" lines in the four outputs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from conftest import ROOT, SLOW, World, heavy, make_world

pytestmark = heavy

DOIT = [sys.executable, "-m", "doit", "-f", str(ROOT / "dodo.py")]
DONE = re.compile(r"^   (\w+): done in [\d.]+ s -> ([0-9a-f]{12})", re.MULTILINE)
WAITING = re.compile(r"^waiting for (.+?): lock (\S+) is held by pid (\d+) on (\S+)", re.MULTILINE)


def test_four_concurrent_builds_run_each_step_once(tmp_path: Path, hub: Path, built: World) -> None:
    world = make_world(tmp_path, hub, ("tiny-llama",))
    procs = [
        subprocess.Popen(
            [*DOIT, "-d", str(world.root), "build", "recipe=tiny-llama"],
            env={**world.env, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=SLOW)[0] for p in procs]
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out
        assert "Traceback" not in out

    keys = [s["key"] for s in built.manifest("tiny-llama")["lock"]["steps"]]
    journal = [json.loads(line) for line in (world.store / "log" / "builds.jsonl").open()]
    runs = Counter(entry["key"] for entry in journal)
    assert runs == Counter(keys), runs  # every step once, nothing else
    done = Counter(key for out in outputs for _kind, key in DONE.findall(out))
    assert done == Counter(k[:12] for k in keys)

    waits = [m for out in outputs for m in WAITING.findall(out)]
    pids = {str(p.pid) for p in procs}
    assert waits, "no build waited: the four did not overlap"
    assert all(pid in pids and lock.endswith(".lock") for _what, lock, pid, _host in waits)

    m = world.manifest("tiny-llama")
    assert m["lock"] == built.manifest("tiny-llama")["lock"]
    assert len(m["evidence"]) == 1  # one run, recorded once
    verify = world.doit("verify")
    assert verify.returncode == 0, verify.stdout
    duplicates = sum(runs.values()) - len(keys)
    print(
        f"\nconcurrency: 4 builds, {len(keys)} steps, {sum(runs.values())} executions, "
        f"{duplicates} duplicates, {len(waits)} waits reported with the holder's pid"
    )

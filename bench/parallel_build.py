"""`doit -n 2 build` against `doit build` on 4 independent tiny recipes, empty store
(target: >= 1.6x on 2 cores). Needs the build extra.

    .venv/bin/python bench/parallel_build.py [--jobs 2] [--timeline] [recipes ...]

The recipes share no step (four checkpoints), so two worker processes can build
two chains at once. Each run gets a fresh catalog copy, store and doit DB; the hub
mirror is written once before timing, so both runs only build, and the heavy
libraries are read from disk once before either run. Prints wall and CPU
(user + sys) seconds and the speed-up, measured in this one run, with the load of
the machine: on a shared machine the other work takes cores from both runs.

Each run's phases come from the store's build journal (one line per step, with its
wall and CPU seconds, kiln/store/execute.py): the start-up before the first step
(doit, the catalog, planning), then the steps by kind, summed over the workers. The
first step of a process that needs torch also imports torch and transformers
(about 8.5 s of single-threaded CPU): a serial build pays that in its first step;
under `-n` the parent imports it once before it forks the workers
(kiln.store.workers.preload), so it is in the start-up there. `doit -n N` gives each
worker its share of the cores (OMP_NUM_THREADS and the like,
kiln.store.workers.share_cores); the threads line says what they ran with.
`--timeline` prints each run's steps per process, from the journal: start and end
(seconds from the command's start), wall and CPU, so idle gaps show.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _process import ROOT, catalog_copy

sys.path.insert(0, str(ROOT))
from kiln.store.workers import cores

RECIPES = ("tiny-llama", "tiny-qwen3", "tiny-mistral", "tiny-qwen2")


@dataclass
class Run:
    wall: float
    cpu: float
    journal: list[dict[str, Any]]
    start: float  # when the command started (time.time(), the journal's clock)

    def phases(self) -> str:
        """Start-up, then wall (cpu) seconds per step kind, summed over the workers."""
        first = min(e["time"] - e["seconds"] for e in self.journal) - self.start
        wall: dict[str, float] = defaultdict(float)
        cpu: dict[str, float] = defaultdict(float)
        for e in self.journal:
            wall[e["kind"]] += e["seconds"]
            cpu[e["kind"]] += e.get("cpu_seconds", 0.0)
        kinds = "  ".join(f"{k} {wall[k]:.1f} ({cpu[k]:.1f})" for k in wall)
        workers = len({e["pid"] for e in self.journal})
        return f"start-up {first:.1f} s; {workers} process(es); steps: {kinds}"

    def timeline(self) -> str:
        """One line per step, by start: the process (w0, w1, ...), start -> end, wall
        and CPU seconds; then the end of the last step and of the command."""
        pids = sorted({e["pid"] for e in self.journal})
        lines = []
        for e in sorted(self.journal, key=lambda e: e["time"] - e["seconds"]):
            begin, end = e["time"] - e["seconds"] - self.start, e["time"] - self.start
            lines.append(
                f"    w{pids.index(e['pid'])} {begin:6.2f} -> {end:6.2f}  {e['name'][:44]:44}"
                f" {e['seconds']:5.2f} s ({e.get('cpu_seconds', 0.0):.2f} cpu)"
            )
        last = max(e["time"] for e in self.journal) - self.start
        lines.append(f"    last step ends at {last:.2f} s; the command at {self.wall:.2f} s")
        return "\n".join(lines)


def build(base: Path, hub: Path, names: list[str], jobs: list[str]) -> Run:
    root = catalog_copy(base, names)
    env = dict(os.environ, KILN_ROOT=str(root), KILN_STORE=str(base / "store"))
    env.update(KILN_HUB_CACHE=str(hub), KILN_SITE=str(base / "_site"))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # time a normal install, with bytecode
    args = [sys.executable, "-m", "doit", "-f", str(ROOT / "dodo.py"), "-d", str(root)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began, start = time.time(), time.perf_counter()
    proc = subprocess.run([*args, *jobs, "build"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 or len(re.findall(r"^   \S+: pass ", out, re.MULTILINE)) != len(names):
        sys.exit(f"doit {' '.join(jobs)} build failed:\n{out}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    log = (base / "store" / "log" / "builds.jsonl").read_text().splitlines()
    return Run(wall, cpu, [json.loads(line) for line in log], began)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeline", action="store_true", help="print each run's steps")
    parser.add_argument("recipes", nargs="*", default=list(RECIPES))
    args = parser.parse_args()
    import tinyhub

    with tempfile.TemporaryDirectory() as tmp:
        hub = Path(tmp) / "hub"
        tinyhub.write_mirror(hub)
        # Both runs import torch and transformers: read them from disk once first, so
        # the run that goes first does not pay for the page cache alone.
        warm = "import onnx, onnxruntime, torch, transformers"
        subprocess.run([sys.executable, "-c", warm], check=True, capture_output=True)
        load = os.getloadavg()
        serial = build(Path(tmp) / "serial", hub, args.recipes, [])
        parallel = build(Path(tmp) / "parallel", hub, args.recipes, ["-n", str(args.jobs)])
        load = max(load, os.getloadavg())
    print(
        f"{len(args.recipes)} independent recipes ({', '.join(args.recipes)}), empty store; "
        f"load average {load[0]:.1f} on {os.cpu_count()} cores"
    )
    threads = max(1, cores() // args.jobs)
    print(f"  doit build        {serial.wall:6.1f} s wall  {serial.cpu:6.1f} s cpu")
    print(f"                    {serial.phases()}")
    if args.timeline:
        print(serial.timeline())
    print(f"  doit -n {args.jobs} build   {parallel.wall:6.1f} s wall  {parallel.cpu:6.1f} s cpu")
    print(f"                    {parallel.phases()}")
    if args.timeline:
        print(parallel.timeline())
    print(
        f"  threads           serial: the libraries' default ({cores()} cores); "
        f"-n {args.jobs}: {threads} per worker"
    )
    print(f"  speed-up          {serial.wall / parallel.wall:.2f}x (target >= 1.6x on 2 cores)")


if __name__ == "__main__":
    main()

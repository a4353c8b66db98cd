"""Replaying the tiny catalog: the local executor against Ray, on this machine.

    .venv/bin/python bench/replay.py [--recipes tiny-llama,tiny-qwen3 | --recipes tiny]

Four replays of the chosen recipes (default: the spine's two tiny recipes; `tiny`:
every tiny-* recipe), in a scratch copy of the catalog so no evidence lands in the
committed manifests, each with `doit replay`:

* local, cold: empty store (every step builds) and warm (only validate re-measures);
* Ray, cold and warm, on a local cluster of a head and one worker node (1 CPU
  each, as in tests/e2e/test_replay_ray.py); cluster start-up is timed apart.

It also prints the peak resident memory of everything this script started
(sampled every 0.2 s). Timings on shared machines are noisy: printed, never
asserted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _rss_of_tree(root: int) -> int:
    """Resident bytes of `root` and all its descendants."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat[1])
        rss[int(entry.name)] = int(stat[21]) * os.sysconf("SC_PAGE_SIZE")
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo.extend(p for p, pp in parents.items() if pp == pid)
    return total


class Peak(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.peak = max(self.peak, _rss_of_tree(os.getpid()))


def replay(env: dict[str, str], *args: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "doit",
            "-f",
            str(ROOT / "dodo.py"),
            "-d",
            env["KILN_ROOT"],
            "replay",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # 1: regressions, e.g. a recipe failing here
        what = f"doit replay {' '.join(args)} failed ({proc.returncode})"
        sys.exit(f"{what}:\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def scratch(tmp: Path, name: str) -> dict[str, str]:
    root = tmp / name
    for folder in ("recipes", "thresholds", "prompts", "manifests"):
        shutil.copytree(ROOT / folder, root / folder)
    return dict(
        os.environ,
        KILN_ROOT=str(root),
        KILN_STORE=str(tmp / f"{name}-store"),
        KILN_HUB_CACHE=str(tmp / "hub"),
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
    )


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipes", default="tiny-llama,tiny-qwen3")
    args = parser.parse_args()
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # api_facts.md section 3
    if args.recipes == "tiny":
        recipes = sorted(p.stem for p in (ROOT / "recipes").glob("tiny-*.yaml"))
    else:
        recipes = args.recipes.split(",")
    which = f"recipes={','.join(recipes)}"
    # Warm the page cache first, so the first cold replay does not pay for reading
    # torch and transformers from disk and the second one not (order bias).
    subprocess.run([sys.executable, "-c", "import torch, transformers, onnxruntime"], check=True)
    peak = Peak()
    peak.start()
    with tempfile.TemporaryDirectory() as tmp:
        env = scratch(Path(tmp), "local")
        local_cold = replay(env, which)
        local_warm = replay(env, which)
        local_peak = peak.peak

        import ray
        from ray.cluster_utils import Cluster

        ip = "127.0.0.1"
        start = time.perf_counter()
        cluster = Cluster(
            initialize_head=True,
            head_node_args={"num_cpus": 1, "include_dashboard": False, "node_ip_address": ip},
        )
        cluster.add_node(num_cpus=1, node_ip_address=ip)
        cluster.wait_for_nodes()
        up = time.perf_counter() - start
        try:
            env = scratch(Path(tmp), "ray")
            ray_cold = replay(env, which, "executor=ray", f"address={cluster.address}")
            ray_warm = replay(env, which, "executor=ray", f"address={cluster.address}")
        finally:
            ray.shutdown()
            cluster.shutdown()
    peak.stop.set()
    names = ", ".join(recipes) if len(recipes) < 5 else f"{recipes[0]} .. {recipes[-1]}"
    print(f"replayed: {len(recipes)} recipes ({names}), {os.cpu_count()} cores")
    print(f"local, cold store:   {local_cold:6.1f} s")
    print(f"local, warm store:   {local_warm:6.1f} s   (validate re-measured only)")
    print(f"ray cluster start:   {up:6.1f} s   (head + 1 worker node, 1 CPU each)")
    print(f"ray, cold store:     {ray_cold:6.1f} s   ({ray_cold / local_cold:.2f}x local)")
    print(f"ray, warm store:     {ray_warm:6.1f} s   ({ray_warm / local_warm:.2f}x local)")
    print(f"peak RSS, local:     {local_peak / 2**30:6.2f} GiB (this script and its children)")
    print(f"peak RSS, with ray:  {peak.peak / 2**30:6.2f} GiB")


if __name__ == "__main__":
    main()

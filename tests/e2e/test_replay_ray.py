"""`doit replay executor=ray` on a real local Ray cluster (head + worker on 127.0.0.1).

Marked `ray`: about a minute and 1-1.5 GB RAM on 2 cores. The cluster follows the
recipe that works in this sandbox (api_facts.md section 3): ray.cluster_utils.Cluster
with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, and a timeout on everything.

The head offers no CPU, so every chain runs on the worker node, one at a time. The
test kills that node (no graceful shutdown) while a chain runs on it, then adds a
new node, as an autoscaler would: Ray retries the lost task there, and the replay
completes with correct results, the retried recipe's evidence saying attempt >= 2.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import SLOW, World, heavy
from replaying import copy_world, junit, outcome, recipes

pytestmark = [heavy, pytest.mark.ray]

VARIANTS = {  # two small variations: they need their own engine, bundle and validate
    "tiny-llama-ray-b3": ("tiny-llama", {"max_batch_size": 3}),
    "tiny-qwen3-ray-s192": ("tiny-qwen3", {"max_seq_len": 192}),
}


LOOPBACK = "127.0.0.1"


@pytest.fixture
def cluster() -> Iterator[Any]:
    pytest.importorskip("ray", reason="needs the replay extra")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "include_dashboard": False, "node_ip_address": LOOPBACK},
    )
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def _artifact_times(store: Path) -> dict[str, float]:
    out = {}
    for record in store.glob("objects/*/*/.kiln-artifact.json"):
        data = json.loads(record.read_text())
        out[data["key"]] = data["created"]
    return out


def _running(store: Path) -> tuple[str, int] | None:
    """(recipe, pid of the Ray worker process) of the first chain that started: the
    chain writes "<node> <pid>" into its attempt file (kiln/replay/chain.py)."""
    for marker in sorted(store.glob("replay/*/attempts/*")):
        text = marker.read_text().split()
        if len(text) == 2:
            return marker.name.rsplit(".", 1)[0], int(text[1])
    return None


def test_ray_replay_survives_a_killed_worker(tmp_path: Path, built: World, cluster: Any) -> None:
    w = copy_world(built, tmp_path)
    for name, (parent, build) in VARIANTS.items():
        w.write_recipe(
            name,
            {
                "schema_version": 1,
                "extends": parent,
                "description": f"{parent} with {build}",
                "build": build,
            },
        )
    assert not any((w.root / "manifests" / f"{n}.json").exists() for n in VARIANTS)
    before = _artifact_times(w.store)
    previous = {n: w.manifest(n)["evidence"][-1] for n in ("tiny-llama", "tiny-qwen3")}
    worker = cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK)
    cluster.wait_for_nodes()

    env = {**w.env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    driver = subprocess.Popen(
        w.argv("replay", "executor=ray", f"address={cluster.address}", f"ray_timeout={SLOW}"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + SLOW
    while not _running(w.store) and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    running = _running(w.store)
    assert running, "no chain ever started on the worker"
    victim, pid = running
    # The node dies as a machine does: its raylet and the worker process running the
    # chain at once (a worker notices its raylet's death only up to a second later,
    # time enough to finish a tiny chain). The chain's step child dies with it.
    os.kill(pid, signal.SIGKILL)
    cluster.remove_node(worker, allow_graceful=False)
    cluster.add_node(num_cpus=1, node_ip_address=LOOPBACK)  # what an autoscaler brings
    out, _ = driver.communicate(timeout=SLOW)
    assert driver.returncode == 0, out

    r = recipes(w)
    assert set(r) >= {"tiny-llama", "tiny-qwen3", *VARIANTS}
    assert all(x["verdict"] == "pass" for x in r.values()), r
    assert r[victim]["attempt"] >= 2, (victim, r)  # Ray ran it again elsewhere
    assert all(x["attempt"] == 1 for n, x in r.items() if n != victim)
    # Correct results: the same numbers the local build measured for the same bundles.
    for name, old in previous.items():
        record = w.manifest(name)["evidence"][-1]
        assert record["metrics"]["max_abs_logit_diff"] == old["metrics"]["max_abs_logit_diff"]
        assert record["metrics"]["token_match_rate"] == 1.0
    for name in VARIANTS:
        m = w.manifest(name)
        assert len(m["evidence"]) == 1, "a retried chain appends one record, not two"
        assert m["evidence"][0]["metrics"]["token_match_rate"] == 1.0
    # Steps already in the shared store were rebuilt nowhere; the variants built
    # exactly their own engine and bundle on the cluster.
    after = _artifact_times(w.store)
    validate = {
        s["key"] for n in r for s in w.manifest(n)["lock"]["steps"] if s["kind"] == "validate"
    }
    assert {k: after[k] for k in before if k not in validate} == {
        k: t for k, t in before.items() if k not in validate
    }
    assert {n: x["built"] for n, x in r.items() if n in VARIANTS} == {
        n: ["engine", "bundle", "validate"] for n in VARIANTS
    }
    md = (w.root / ".kiln/replay/report.md").read_text()
    assert f"executor: ray at {LOOPBACK}:" in md
    print(md)  # a sample report, shown with `pytest -rP`
    suite = junit(w)
    assert all(outcome(suite, n) == "passed" for n in r)

"""Fan a replay out to a Ray cluster: one Ray task per recipe's chain.

Ray is imported inside `run` only: the core stays light, and Ray is an optional
extra (`pip install -e '.[replay]'`).

Each task asks for what its recipe needs (`Job.resources`): 1 CPU for a cpu
recipe; for a GPU target, `tensor_parallel` GPUs and as many units of the custom
resource named after the target architecture (start GPU nodes with
`ray start --resources='{"sm90": 8}'` on an 8-GPU H200). A task no node can ever
host would stay pending forever (api_facts.md section 3), so it is reported as
unsupported-here before anything is submitted.

Workers read and write the same store (and hub mirror) as the driver, at the same
path, and import kiln from the same checkout (PYTHONPATH in the job's runtime_env);
chain.py refuses to build when a worker's toolchain differs from the driver's.
Only results come back; the driver writes manifests and the report. A task whose
worker or node dies is retried by Ray (`max_retries`), and counts as a new attempt.
"""

from __future__ import annotations

import os
import time
from typing import Any

from kiln.errors import KilnError
from kiln.replay.chain import RunSpec, run_chain
from kiln.replay.jobs import Job

MAX_RETRIES = 3  # Ray's default for tasks; a lost node costs one retry


def _missing(needs: dict[str, float], offered: dict[str, float]) -> str:
    short = {k: v for k, v in needs.items() if offered.get(k, 0.0) < v}
    return ", ".join(f"{k}={v:g}" for k, v in sorted(short.items()))


def run(
    jobs: list[Job], spec: RunSpec, address: str | None, deadline_s: float
) -> list[dict[str, Any]]:
    """Run every job's chain on the cluster at `address`; results in `jobs` order."""
    import ray  # optional and heavy-ish: only when executor=ray
    from ray.exceptions import GetTimeoutError, RayError

    env = {"PYTHONPATH": spec.pythonpath}
    env.update({k: v for k, v in os.environ.items() if k.startswith(("KILN_", "HF_"))})
    try:
        ray.init(address=address, runtime_env={"env_vars": env}, log_to_driver=True)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise KilnError.one(
            f"cannot reach the Ray cluster at {address or 'auto'}: {exc}",
            None,
            "start it with `ray start --head` and pass address=HOST:6379",
        ) from None
    try:
        cluster = ray.cluster_resources()  # type: ignore[no-untyped-call]
        offered = {k: float(v) for k, v in cluster.items()}
        chain = ray.remote(run_chain)
        results: dict[int, dict[str, Any]] = {}
        pending: dict[Any, int] = {}
        for i, job in enumerate(jobs):
            needs = job.resources.as_ray()
            short = _missing(needs, offered)
            if short:
                results[i] = _failed(job, "unsupported", f"no node in the cluster offers {short}")
                continue
            ref = chain.options(
                num_cpus=job.resources.cpus,
                num_gpus=job.resources.gpus,
                resources=job.resources.custom or None,
                max_retries=MAX_RETRIES,
                retry_exceptions=False,  # a recipe's failure comes back as a result
            ).remote(job.recipe, job.steps, job.contexts, spec)
            pending[ref] = i
        _collect(ray, pending, results, jobs, deadline_s, (GetTimeoutError, RayError))
        return [results[i] for i in range(len(jobs))]
    finally:
        ray.shutdown()


def _collect(
    ray: Any,
    pending: dict[Any, int],
    results: dict[int, dict[str, Any]],
    jobs: list[Job],
    deadline_s: float,
    errors: tuple[type[BaseException], ...],
) -> None:
    """Gather results as they finish; whatever is still running at the deadline, or
    was lost for good (retries spent), is an infrastructure failure of that recipe."""
    end = time.monotonic() + deadline_s
    while pending and time.monotonic() < end:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.1, end - time.monotonic()))
        for ref in done:
            i = pending.pop(ref)
            try:
                results[i] = ray.get(ref, timeout=60)
            except errors as exc:
                results[i] = _failed(jobs[i], "infra-fail", f"ray: {type(exc).__name__}: {exc}")
    for ref, i in pending.items():
        ray.cancel(ref, force=True)
        results[i] = _failed(jobs[i], "infra-fail", f"not done after {deadline_s:g} s on Ray")


def _failed(job: Job, status: str, message: str) -> dict[str, Any]:
    return {
        "recipe": job.recipe,
        "status": status,
        "message": message,
        "attempt": 1,
        "built": [],
        "reused": [],
        "host": {},
        "seconds": 0.0,
    }

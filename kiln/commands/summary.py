"""What one `doit build` did, said once at its end (issue 43): per recipe the verdict,
the steps run and reused, the seconds its steps took, and where its bundle is; then
the build's wall time. A recipe none of whose steps ran is one count ("12 recipes up
to date"), so a no-op build of the catalog reads nothing to say so.

tasks.py's reporter tells a Summary each task's outcome as doit reports it (in the
main process, whatever `-n` is); the summary reads the manifests and artifact
records of the recipes that ran, and nothing else.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kiln.errors import KilnError
from kiln.paths import Paths
from kiln.plan.step import Plan, Step
from kiln.store import Store


def task_name(step: Step) -> str:
    """The doit task of a step (`build:<this>`): steps of one key are one task."""
    return f"{step.kind}-{step.key[:12]}"


@dataclass
class Summary:
    plans: list[Plan]
    started: float = field(default_factory=time.monotonic)
    outcome: dict[str, str] = field(default_factory=dict)  # task -> ran, reused, failed

    def saw(self, task: str, outcome: str) -> None:
        self.outcome[task.removeprefix("build:")] = outcome

    def render(self) -> str:
        lines, quiet = [], 0
        for p in self.plans:
            tasks = [task_name(s) for s in p.steps] + [f"manifest-{p.recipe}"]
            seen = [self.outcome.get(t, "not run") for t in tasks]
            if all(o == "reused" for o in seen):
                quiet += 1
                continue
            lines.append(_line(p, seen[:-1]))
        if quiet:
            lines.append(f"  {_count(quiet, 'recipe')} up to date")
        wall = time.monotonic() - self.started
        return "\n".join(
            [f"summary: {_count(len(self.plans), 'recipe')} in {_seconds(wall)}", *lines]
        )


def _line(p: Plan, seen: list[str]) -> str:
    from kiln.commands.workspace import store

    artifacts = store()
    ran = [s for s, o in zip(p.steps, seen, strict=True) if o == "ran"]
    seconds = sum(_recorded_seconds(artifacts, s) for s in ran)
    counts = [f"{len(ran)} run ({_seconds(seconds)})", f"{seen.count('reused')} reused"]
    counts += [f"{seen.count(o)} {o}" for o in ("failed", "not run") if o in seen]
    bundle = p.step("bundle")
    where = (
        Paths.from_env().rel(artifacts.get(bundle.key).path)
        if artifacts.has(bundle.key)
        else "no bundle"
    )
    return f"  {p.recipe}: {_verdict(p)}; steps {', '.join(counts)}; bundle {where}"


def _recorded_seconds(artifacts: Store, step: Step) -> float:
    try:
        seconds = artifacts.get(step.key).record().get("seconds", 0.0)
    except (ValueError, KilnError):
        return 0.0
    return float(seconds) if isinstance(seconds, int | float) else 0.0


def _verdict(p: Plan) -> str:
    """The manifest's verdict for this plan's validation, or what kept it from one."""
    from kiln.evidence import manifest

    try:
        found = manifest.known(Paths.from_env(), p.recipe)
    except KilnError:
        return "manifest unreadable"
    key = p.step("validate").key
    record = (
        next((e for e in reversed(found.evidence) if e.step_key == key), None) if found else None
    )
    return record.verdict if record is not None else "not validated"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 60 else f"{int(s // 60)} min {s % 60:.0f} s"

"""A replay job: one recipe's steps, their contexts, and the resources its chain needs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kiln.plan.step import Step
from kiln.schema import Recipe


@dataclass(frozen=True)
class Resources:
    """What one chain needs from the machine that runs it."""

    cpus: float = 1.0
    gpus: int = 0
    custom: dict[str, float] = field(default_factory=dict)  # e.g. {"sm90": 2}

    def as_ray(self) -> dict[str, float]:
        """In the names Ray's cluster_resources() uses."""
        out = {"CPU": self.cpus, **self.custom}
        if self.gpus:
            out["GPU"] = float(self.gpus)
        return out


def resources(recipe: Recipe) -> Resources:
    """cpu recipes: one CPU. GPU targets: one GPU per tensor-parallel rank, and as many
    units of the architecture's custom resource (a node advertises one per GPU), so a
    sm90 recipe never lands on an sm80 node."""
    if recipe.build.target == "cpu":
        return Resources()
    tp = recipe.build.tensor_parallel
    return Resources(cpus=1.0, gpus=tp, custom={recipe.build.target: float(tp)})


@dataclass(frozen=True)
class Job:
    recipe: str
    steps: list[Step]
    contexts: dict[str, dict[str, Any]]  # step key -> context (JSON-able)
    resources: Resources

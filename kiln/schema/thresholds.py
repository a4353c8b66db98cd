"""thresholds/<name>.yaml and prompts/<name>.yaml: the statistical gates a verdict is
judged by (kiln/evidence/gates.py), and the prompt sets a validation runs."""

from typing import Annotated, Literal

from pydantic import (
    Field,
    StringConstraints,
    model_validator,
)

from kiln.schema.vocabulary import METRICS, SAMPLE_SIZE, SchemaVersion, Strict

# ---------------------------------------------------------------- thresholds

# Which kind of checkpoint a recipe judges (kiln.schema.recipe.family): a reference
# measured on one says nothing about the other (issue 44).
Family = Literal["tiny", "real"]
FAMILIES: dict[str, str] = {
    "tiny": "kiln's tiny models (seeded random weights, kiln-tiny/*)",
    "real": "real checkpoints (trained weights)",
}


def _no_reasons() -> dict[Family, str]:
    return {}


class Gate(Strict):
    """A bound on one metric: given outright (`threshold`), or derived by the one-sided
    z-test of TensorRT-LLM's accuracy suite from `reference`, `n`, `sigma` and `alpha`
    (kiln/evidence/gates.py)."""

    metric: Literal[tuple(METRICS)] = Field(  # type: ignore[valid-type]
        description="The measured metric this gate judges."
    )
    direction: Literal["higher", "lower"] = Field(
        description="Which way is better: 'higher' passes at or above the threshold, "
        "'lower' at or below it."
    )
    threshold: float | None = Field(
        None,
        description="The bound the metric must meet. Leave it out of a statistical gate: "
        "there it is derived from reference, n, sigma and alpha.",
    )
    reference: float | None = Field(
        None, description="Statistical gate: the reference model's value of the metric."
    )
    n: int | None = Field(
        None, ge=1, description="Statistical gate: samples the metric is averaged over."
    )
    sigma: float | None = Field(
        None, gt=0, description="Statistical gate: standard deviation of one sample's score."
    )
    alpha: float | None = Field(
        None,
        gt=0,
        lt=0.5,
        description="Statistical gate: false-failure rate of this gate (type I error); "
        "default 0.05, or the thresholds file's family_alpha split over its gates.",
    )
    beta: float = Field(
        0.2,
        gt=0,
        lt=0.5,
        description="Statistical gate: miss rate (type II error) at the reported minimum "
        "detectable effect theta.",
    )
    why: str = Field(
        "",
        max_length=500,
        description="Why this bound, for reviewers and the site: what holds for every "
        "model the file judges.",
    )
    why_by_family: dict[Family, str] = Field(
        default_factory=_no_reasons,
        description="Why this bound for one model family, where the reasoning differs "
        "(a reference measured on one family says nothing about another): 'tiny' for "
        "kiln's seeded tiny models (kiln-tiny/*), 'real' for real checkpoints. A recipe's "
        "page shows `why` and its own family's text, never another family's.",
    )

    @property
    def statistical(self) -> bool:
        return self.reference is not None

    def rationale(self, family: Family) -> str:
        """Why this bound, for a recipe of `family`."""
        mine = self.why_by_family.get(family, "")
        return " ".join(part for part in (self.why, mine) if part)

    @model_validator(mode="after")
    def _one_kind(self) -> "Gate":
        stats = {"reference": self.reference, "n": self.n, "sigma": self.sigma}
        given = [k for k, v in stats.items() if v is not None]
        if self.threshold is not None and (given or self.alpha is not None):
            raise ValueError(
                "give either threshold, or reference, n and sigma (the threshold is then "
                "derived); not both"
            )
        if self.threshold is None and len(given) != 3:
            missing = ", ".join(k for k in stats if k not in given)
            raise ValueError(f"a gate needs a threshold, or reference, n and sigma ({missing})")
        if self.n is not None and self.metric not in SAMPLE_SIZE:
            raise ValueError(
                f"{self.metric} has no sample size; statistical gates judge "
                f"{', '.join(SAMPLE_SIZE)}"
            )
        return self


class Thresholds(Strict):
    schema_version: SchemaVersion = Field(
        description="Thresholds schema version; this is version 1."
    )
    description: str = Field(max_length=2000, description="What these gates are for.")
    family_alpha: float | None = Field(
        None,
        gt=0,
        lt=0.5,
        description="False-failure rate of all statistical gates together (Bonferroni: "
        "each of the k statistical gates runs at family_alpha / k). Excludes per-gate alpha.",
    )
    gates: list[Gate] = Field(min_length=1, description="All gates must pass for 'pass'.")

    @model_validator(mode="after")
    def _family(self) -> "Thresholds":
        if self.family_alpha is not None and any(g.alpha is not None for g in self.gates):
            raise ValueError("family_alpha splits the error rate over the gates; remove alpha")
        return self


class PromptSet(Strict):
    schema_version: SchemaVersion = Field(
        description="Prompt set schema version; this is version 1."
    )
    description: str = Field(max_length=2000, description="What the prompts exercise.")
    prompts: list[Annotated[str, StringConstraints(min_length=1, max_length=2000)]] = Field(
        min_length=8, description="Fixed prompts; at least 8."
    )

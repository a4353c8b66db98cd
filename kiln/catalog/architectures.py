"""catalog/architectures.yaml: every architecture of the reference support matrix, with
its tiny recipe and real recipes or the exact reason it has none; and the CI subset.

The CI subset's rule: for each architecture family (dense, moe, mla, sliding-window,
recurrent, encoder, encoder-decoder), the family's first tiny recipe in table order,
plus tiny-llama and tiny-qwen3 (the spine's recipes, which the test session builds
anyway). So every kind of cache and every verdict path (pass, unsupported-here) is
exercised on every change, and adding an architecture of a new family adds it to CI
by construction; the nightly job builds all of them. tests/builds/test_breadth.py
checks the rule's coverage.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from kiln.schema import TASKS, Strict

if TYPE_CHECKING:
    from kiln.catalog import Catalog

FILE = Path("catalog") / "architectures.yaml"
ALWAYS = ("tiny-llama", "tiny-qwen3")


class Architecture(Strict):
    name: str = Field(description="Architecture class name, as the support matrix spells it.")
    family: str = Field("", description="What is special about it (dense, moe, mla, ...).")
    tiny: str | None = Field(None, description="The tiny recipe that builds it here.")
    real: list[str] = Field(default_factory=list, description="Real-checkpoint recipes.")
    status: Literal["not-in-release", "not-built"] | None = Field(
        None, description="Why there is no tiny recipe: the release lacks it, or not built."
    )
    companion_in: str | None = Field(
        None,
        description="For a checkpoint that is no standalone model (an MTP assistant): the "
        "execution-variant recipe that builds it as a companion of its target.",
    )
    reason: str = Field("", description="The exact reason, for status entries.")
    task: Literal[TASKS] | None = Field(  # type: ignore[valid-type]
        None,
        description="For an entry with no recipe: the task a recipe of it would have "
        "(image-text-to-text for the image-input architectures); with recipes, theirs.",
    )
    in_matrix: bool = Field(
        True,
        description="Listed in the reference support matrix; false for an architecture "
        "kiln builds beyond it (BertModel sentence embeddings).",
    )


class Architectures(Strict):
    schema_version: Literal[1] = Field(description="Schema version; this is version 1.")
    architectures: list[Architecture] = Field(description="One entry per architecture.")


def load(root: Path) -> Architectures:
    """The table, read with the catalog's guarded loader (located errors, size caps)."""
    from kiln.catalog.yaml import load_yaml_model

    return load_yaml_model(Architectures, root / FILE, FILE.as_posix())


def ci_subset(cat: Catalog) -> list[str]:
    """The tiny recipes every CI run builds (the rule above)."""
    chosen: dict[str, str] = {}
    for a in load(cat.paths.root).architectures:
        if a.tiny and a.family and a.family not in chosen:
            chosen[a.family] = a.tiny
    return sorted({*ALWAYS, *chosen.values()} & set(cat.recipes))

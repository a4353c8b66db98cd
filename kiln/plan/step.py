"""Step and Plan: what a recipe expands to. A step's key is computed from its material."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kiln.canonical import key_of


@dataclass(frozen=True)
class Step:
    kind: str
    name: str  # for people: "export kiln-tiny/llama@86b0c01"
    options: dict[str, Any]
    inputs: dict[str, str]  # role -> key of the step that produces it
    material: dict[str, Any] = field(repr=False)  # exactly what the key hashes
    origin: tuple[str, ...] = ()  # the recipe key it comes from, for error locations
    role: str = "model"  # whose checkpoint: "model", or a companion role ("draft", ...)
    key: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", key_of(self.material))


@dataclass(frozen=True)
class Plan:
    recipe: str
    steps: tuple[Step, ...]  # in dependency order

    def step(self, kind: str, role: str = "model") -> Step:
        for s in self.steps:
            if s.kind == kind and s.role == role:
                return s
        raise KeyError(kind)

    def by_key(self) -> dict[str, Step]:
        return {s.key: s for s in self.steps}

"""Errors a user can act on: a location, a cause and a fix.

Every failure caused by a user's input is a KilnError. Commands print it and exit
non-zero; nobody sees a traceback for their own mistake.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Location:
    file: str
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based
    key_path: tuple[str | int, ...] = ()
    snippet: str = ""

    def __str__(self) -> str:
        parts = [self.file]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input."""

    cause: str
    location: Location | None = None
    fix: str = ""

    def render(self) -> str:
        head = f"{self.location}: " if self.location else ""
        path = ""
        if self.location and self.location.key_path:
            path = " -> ".join(str(p) for p in self.location.key_path) + ": "
        text = f"{head}{path}{self.cause}"
        if self.fix:
            text += f"; {self.fix}"
        if self.location and self.location.snippet:
            text += "\n" + self.location.snippet
        return text


@dataclass
class KilnError(Exception):
    """One or more problems, reported together."""

    problems: list[Problem] = field(default_factory=list)

    @classmethod
    def one(cls, cause: str, location: Location | None = None, fix: str = "") -> KilnError:
        return cls([Problem(cause, location, fix)])

    def __str__(self) -> str:
        body = "\n".join(p.render() for p in self.problems)
        if len(self.problems) > 1:
            body += f"\n{len(self.problems)} errors"
        return body


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


def one_of(choices: Sequence[str]) -> str:
    return ", ".join(choices)


class Unsupported(Exception):
    """This host cannot run a step (no TensorRT, no CUDA for NVFP4 calibration, ...).

    Not a failure of the recipe and never a pass: the build records the verdict
    `unsupported-here` with `reason`, publishes nothing for the step or anything
    downstream of it, and goes on with other recipes."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

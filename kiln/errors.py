"""Errors a user can act on: a location, a cause and a fix.

Every failure caused by a user's input is a KilnError. Commands print it and exit
non-zero; nobody sees a traceback for their own mistake.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# What must never reach a terminal raw: C0 and C1 controls (an escape sequence can
# rewrite what a reviewer sees), and the bidirectional overrides of "Trojan Source".
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every control character and bidi override written as an escape."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


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
        text = printable(text.replace("\n", " "))
        if self.location and self.location.snippet:
            text += "\n" + "\n".join(map(printable, self.location.snippet.split("\n")))
        return text

    def as_dict(self) -> dict[str, Any]:
        """The problem for `format=json`: the same fields, nothing rendered."""
        where = self.location
        return {
            "file": where.file if where else None,
            "line": where.line if where else None,
            "column": where.column if where else None,
            "key_path": [str(p) for p in where.key_path] if where else [],
            "cause": self.cause,
            "fix": self.fix,
        }


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


# Hostile input (issue 7): 80,000 aliases gave 80,000 problems, each with a snippet cut
# from the whole text, and took 257 s. Report the first ones and say how many more.
MAX_PROBLEMS = 50


def capped(problems: list[Problem], file: str) -> list[Problem]:
    if len(problems) <= MAX_PROBLEMS:
        return problems
    more = Problem(
        f"and more problems after these {MAX_PROBLEMS}", Location(file), "fix these first"
    )
    return [*problems[:MAX_PROBLEMS], more]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


def one_of(choices: Sequence[str]) -> str:
    return ", ".join(choices)
